package load

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// Latency summarizes one client-side latency over successful requests, in simulated seconds
// (wall seconds × time scale).
type Latency struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_s"`
	P50   float64 `json:"p50_s"`
	P95   float64 `json:"p95_s"`
	P99   float64 `json:"p99_s"`
}

// EngineReport holds the figures of docs/measurements.md's Four workloads table read from the
// engine's /metrics: per-request averages over the run (histogram sum and count deltas between the
// scrapes before and after; nil when the engine observed nothing) and maxima of the gauges sampled
// every 0.5 s.
type EngineReport struct {
	Requests            float64  `json:"requests"`
	PromptTokens        *float64 `json:"prompt_tokens_mean"`
	GenerationTokens    *float64 `json:"generation_tokens_mean"`
	QueueSeconds        *float64 `json:"queue_s"`
	PrefillSeconds      *float64 `json:"prefill_s"`
	TTFTSeconds         *float64 `json:"ttft_s"`
	InterTokenSeconds   *float64 `json:"inter_token_s"`
	DecodeSeconds       *float64 `json:"decode_s"`
	E2ESeconds          *float64 `json:"e2e_s"`
	MaxRunning          float64  `json:"max_running"`
	MaxWaiting          float64  `json:"max_waiting"`
	MaxKVCacheUsagePerc float64  `json:"max_kv_cache_usage_perc"`
	Samples             int      `json:"samples"`
}

// Report is the outcome of one run. Client-side figures come from loadgen's own measurements;
// Engine from the server's /metrics.
type Report struct {
	Scenario string `json:"scenario"`
	Target   string `json:"target"`
	Model    string `json:"model"`
	Endpoint string `json:"endpoint"`
	// Stream is true when every request asked for a stream; StreamShare is the share that did
	// (Config.StreamShare) and Streamed the number of sent requests that did. Client-side TTFT and
	// TPOT come from the streamed requests only; E2E from all.
	Stream             bool    `json:"stream"`
	StreamShare        float64 `json:"stream_share"`
	Streamed           int     `json:"streamed"`
	TimeScale          float64 `json:"time_scale"`
	RateRPS            float64 `json:"rate_rps"`
	Arrival            string  `json:"arrival"`
	PromptTokensTarget int     `json:"prompt_tokens_target"`
	MaxTokens          int     `json:"max_tokens"`
	Planned            int     `json:"planned"`
	Sent               int     `json:"sent"`
	Succeeded          int     `json:"succeeded"`
	Failed             int     `json:"failed"`
	// Errors counts failed requests by HTTP status code ("400", "500") or failure kind
	// (connection, timeout, stream_error, stream_truncated, bad_response).
	Errors               map[string]int `json:"errors_by_code"`
	ErrorSamples         []string       `json:"error_samples,omitempty"`
	FinishReasons        map[string]int `json:"finish_reasons"`
	TTFT                 *Latency       `json:"ttft"`
	TPOT                 *Latency       `json:"tpot"`
	E2E                  *Latency       `json:"e2e"`
	PromptTokens         int            `json:"prompt_tokens"`
	CompletionTokens     int            `json:"completion_tokens"`
	PromptTokensMean     float64        `json:"prompt_tokens_mean"`
	CompletionTokensMean float64        `json:"completion_tokens_mean"`
	WallSeconds          float64        `json:"wall_seconds"`
	TokenizeCalls        int            `json:"tokenize_calls"`
	Engine               *EngineReport  `json:"engine,omitempty"`
	EngineError          string         `json:"engine_error,omitempty"`
}

func f3(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *p)
}

func f2(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *p)
}

// WriteText prints the report as docs/measurements.md's Four workloads table plus the client-side
// summary.
func (rep *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, a ...any) { fmt.Fprintf(tw, format, a...) }
	p("scenario\t%s (%s, %g req/s, %d-token prompt, max_tokens %d, time scale %g)\n", rep.Scenario, rep.Target, rep.RateRPS, rep.PromptTokensTarget, rep.MaxTokens, rep.TimeScale)
	p("requests\tsent %d, succeeded %d, failed %d\n", rep.Sent, rep.Succeeded, rep.Failed)
	if rep.StreamShare < 1 {
		p("streaming\t%d of %d sent (share %g); TTFT and TPOT below are the streamed ones\n", rep.Streamed, rep.Sent, rep.StreamShare)
	}
	if len(rep.Errors) > 0 {
		keys := make([]string, 0, len(rep.Errors))
		for k := range rep.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s=%d", k, rep.Errors[k])
		}
		p("errors\t%s\n", strings.Join(parts, " "))
	}
	if len(rep.FinishReasons) > 0 {
		p("finish reasons\t%v\n", rep.FinishReasons)
	}
	p("tokens in / out\t%.0f / %.0f (mean per request)\n", rep.PromptTokensMean, rep.CompletionTokensMean)
	p("\nclient-side (s)\tp50\tp95\tp99\n")
	for _, l := range []struct {
		name string
		v    *Latency
	}{{"TTFT", rep.TTFT}, {"TPOT", rep.TPOT}, {"E2E", rep.E2E}} {
		if l.v == nil {
			p("%s\t-\t-\t-\n", l.name)
			continue
		}
		p("%s\t%.3f\t%.3f\t%.3f\n", l.name, l.v.P50, l.v.P95, l.v.P99)
	}
	if e := rep.Engine; e != nil {
		p("\nengine /metrics (averages per request)\t\n")
		p("Tokens in / out\t%s / %s\n", f2(e.PromptTokens), f2(e.GenerationTokens))
		p("Queue wait (s)\t%s\n", f3(e.QueueSeconds))
		p("Prompt prefill (s)\t%s\n", f3(e.PrefillSeconds))
		p("TTFT (s)\t%s\n", f3(e.TTFTSeconds))
		p("Between two tokens (s)\t%s\n", f3(e.InterTokenSeconds))
		p("Token generation (s)\t%s\n", f2(e.DecodeSeconds))
		p("E2E (s)\t%s\n", f2(e.E2ESeconds))
		p("Running - maximum\t%.0f\n", e.MaxRunning)
		p("Waiting - maximum\t%.0f\n", e.MaxWaiting)
		p("KV cache - maximum\t%.1f%%\n", e.MaxKVCacheUsagePerc)
	} else if rep.EngineError != "" {
		p("\nengine /metrics unavailable\t%s\n", rep.EngineError)
	}
	p("wall time\t%.1f s\n", rep.WallSeconds)
	return tw.Flush()
}
