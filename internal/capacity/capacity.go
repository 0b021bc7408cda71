// Package capacity reads how much more load each engine takes before requests queue, and which
// of its limits comes first, from the view capacity_window (migrations/000041), and writes the
// arithmetic out as `servescope diagnose` and the post-mortem do: every figure with where it came
// from, so that an operator can redo the sum.
//
// The reading, per engine over a window: the arrival rate λ (requests the engine finished, a
// second) and the time a request holds a slot T (the engine's prefill plus decode) give by
// Little's law the running count λ·T, checked against the running gauge's mean. The engine
// stops admitting requests at its slot limit S (max_num_seqs) or when its KV cache fills, at
// about running ÷ KV share running requests (each keeping the share it holds now): the smaller
// of the two, C, is where requests start to queue. A larger batch makes every step slower: the
// step time against the tokens a step computes is a line fitted through the engine's scrape
// intervals of the last day (its inter-token latency and iteration_tokens_total histograms); at C
// a step computes C decode tokens plus the prompts arriving meanwhile, C × (1 + prompt ÷ output
// tokens), and a request takes T + output tokens × (step at C − step now). Requests start to
// queue at λ* = C ÷ T(C); the headroom is λ* − λ. When the day's steps span too few token counts
// to fit a slope, the step is taken as flat and λ* is an upper bound, and the report says so.
package capacity

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
)

// Engine is one engine's reading over a window (capacity_window's row). Pointers are nil when the
// window cannot tell (no finished request, no KV gauge, no slot limit known).
type Engine struct {
	Engine string `json:"engine"`
	Model  string `json:"model"`
	// Finished is the requests the engine finished in the window; ArrivalRPS the same a second.
	Finished   *float64 `json:"finished,omitempty"`
	ArrivalRPS *float64 `json:"arrival_rps,omitempty"`
	// E2ES, QueueS and InferenceS are the engine's per-request means (seconds); OutputTokens
	// the mean generated tokens; ITLS the mean time between tokens.
	E2ES         *float64 `json:"e2e_s,omitempty"`
	QueueS       *float64 `json:"queue_s,omitempty"`
	InferenceS   *float64 `json:"inference_s,omitempty"`
	OutputTokens *float64 `json:"output_tokens,omitempty"`
	ITLS         *float64 `json:"itl_s,omitempty"`
	// TokensPerStep is the engine's mean tokens a step (prefill and decode); PromptTokens the
	// mean prompt tokens of a request.
	TokensPerStep *float64 `json:"tokens_per_step,omitempty"`
	PromptTokens  *float64 `json:"prompt_tokens,omitempty"`
	// RunningMean, RunningMax and WaitingMax are the gauges'; KVMean the KV cache share at
	// RunningMean (0..1); LittleRunning is ArrivalRPS × InferenceS.
	RunningMean   *float64 `json:"running_mean,omitempty"`
	RunningMax    *float64 `json:"running_max,omitempty"`
	WaitingMax    *float64 `json:"waiting_max,omitempty"`
	KVMean        *float64 `json:"kv_mean,omitempty"`
	LittleRunning *float64 `json:"little_running,omitempty"`
	// SlotLimit is max_num_seqs and SlotLimitSource where it came from ("engine_config
	// (engine)", "engine log", ...); KVFullRunning the running count at which the KV cache fills.
	SlotLimit       *uint32  `json:"slot_limit,omitempty"`
	SlotLimitSource string   `json:"slot_limit_source,omitempty"`
	KVFullRunning   *float64 `json:"kv_full_running,omitempty"`
	// LimitRunning is the smaller of the two and Limit which it is: "slots" or "kv".
	LimitRunning *float64 `json:"limit_running,omitempty"`
	Limit        string   `json:"limit,omitempty"`
	// The step-time line against the tokens a step computes: Fit is "line" (fitted over
	// FitIntervals scrape intervals whose tokens per step span FitTokensMin..FitTokensMax) or
	// "flat" (too narrow a span: no slope). TokensAtLimit is a step's tokens at LimitRunning.
	Fit           string   `json:"fit"`
	FitIntervals  uint64   `json:"fit_intervals"`
	FitTokensMin  *float64 `json:"fit_tokens_min,omitempty"`
	FitTokensMax  *float64 `json:"fit_tokens_max,omitempty"`
	ITLInterceptS *float64 `json:"itl_intercept_s,omitempty"`
	ITLSlopeS     *float64 `json:"itl_slope_s,omitempty"`
	TokensAtLimit *float64 `json:"tokens_at_limit,omitempty"`
	ITLAtLimitS   *float64 `json:"itl_at_limit_s,omitempty"`
	ITLNowFitS    *float64 `json:"itl_now_fit_s,omitempty"`
	// InferenceAtLimitS is a request's time in a slot at LimitRunning; QueueAtRPS the arrival
	// rate at which requests start to queue; HeadroomRPS that minus ArrivalRPS.
	InferenceAtLimitS *float64 `json:"inference_at_limit_s,omitempty"`
	QueueAtRPS        *float64 `json:"queue_at_rps,omitempty"`
	HeadroomRPS       *float64 `json:"headroom_rps,omitempty"`
}

// Read returns capacity_window's rows for [from, to), by engine (model: only that model's
// engines, "" all).
func Read(ctx context.Context, conn driver.Conn, from, to time.Time, model string) ([]Engine, error) {
	qctx := chstore.WithParams(ctx, map[string]string{
		"from": chTime(from), "to": chTime(to), "model": chstore.StringParam(model)})
	rows, err := conn.Query(qctx, `SELECT engine, model, finished, arrival_rps, e2e_s, queue_s, inference_s, output_tokens, itl_s,
			tokens_per_step, prompt_tokens, running_mean, running_max, waiting_max, kv_mean, little_running, slot_limit,
			slot_limit_source, kv_full_running, limit_running, limit, fit, fit_intervals, fit_tokens_min, fit_tokens_max,
			itl_intercept_s, itl_slope_s, tokens_at_limit, itl_at_limit_s, itl_now_fit_s, inference_at_limit_s, queue_at_rps, headroom_rps
		FROM capacity_window(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')})
		WHERE {model:String} = '' OR model = {model:String}
		ORDER BY engine`)
	if err != nil {
		return nil, fmt.Errorf("read capacity_window: %w", err)
	}
	defer rows.Close()
	var out []Engine
	for rows.Next() {
		var e Engine
		if err := rows.Scan(&e.Engine, &e.Model, &e.Finished, &e.ArrivalRPS, &e.E2ES, &e.QueueS, &e.InferenceS, &e.OutputTokens, &e.ITLS,
			&e.TokensPerStep, &e.PromptTokens, &e.RunningMean, &e.RunningMax, &e.WaitingMax, &e.KVMean, &e.LittleRunning, &e.SlotLimit,
			&e.SlotLimitSource, &e.KVFullRunning, &e.LimitRunning, &e.Limit, &e.Fit, &e.FitIntervals, &e.FitTokensMin, &e.FitTokensMax,
			&e.ITLInterceptS, &e.ITLSlopeS, &e.TokensAtLimit, &e.ITLAtLimitS, &e.ITLNowFitS, &e.InferenceAtLimitS, &e.QueueAtRPS, &e.HeadroomRPS); err != nil {
			return nil, fmt.Errorf("read capacity_window: %w", err)
		}
		e.clean()
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read capacity_window: %w", err)
	}
	return out, nil
}

// clean drops values that are not numbers (a division by zero in the view).
func (e *Engine) clean() {
	for _, p := range []**float64{&e.Finished, &e.ArrivalRPS, &e.E2ES, &e.QueueS, &e.InferenceS, &e.OutputTokens, &e.ITLS,
		&e.TokensPerStep, &e.PromptTokens, &e.RunningMean, &e.RunningMax, &e.WaitingMax, &e.KVMean, &e.LittleRunning, &e.KVFullRunning,
		&e.LimitRunning, &e.FitTokensMin, &e.FitTokensMax, &e.ITLInterceptS, &e.ITLSlopeS, &e.TokensAtLimit, &e.ITLAtLimitS,
		&e.ITLNowFitS, &e.InferenceAtLimitS, &e.QueueAtRPS, &e.HeadroomRPS} {
		if *p != nil && (math.IsNaN(**p) || math.IsInf(**p, 0)) {
			*p = nil
		}
	}
}

func chTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }

// WriteText writes each engine's reading with its arithmetic.
func WriteText(w io.Writer, engines []Engine) error {
	var b strings.Builder
	if len(engines) == 0 {
		b.WriteString("capacity: no engine sample in the window (the collector scrapes each engine's /metrics)\n")
	}
	for _, e := range engines {
		e.write(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (e Engine) write(b *strings.Builder) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	model := e.Model
	if model == "" {
		model = "model unknown"
	}
	p("capacity of engine %s (%s):\n", e.Engine, model)
	if e.ArrivalRPS == nil || e.InferenceS == nil || e.Finished == nil || *e.Finished == 0 {
		p("  cannot tell: no request finished in the window (the engine's e2e_request_latency_seconds did not move)\n")
		return
	}
	p("  arrival %.2f req/s (%.0f requests finished); a request holds a slot %.3f s (prefill and decode; E2E %s, queue %s)\n",
		*e.ArrivalRPS, *e.Finished, *e.InferenceS, secs(e.E2ES), secs(e.QueueS))
	p("  Little's law: %.2f req/s × %.3f s = %.1f running (the running gauge's mean: %s, maximum %s, waiting at most %s)\n",
		*e.ArrivalRPS, *e.InferenceS, deref(e.LittleRunning), num(e.RunningMean, 1), num(e.RunningMax, 0), num(e.WaitingMax, 0))
	switch {
	case e.SlotLimit != nil:
		p("  slot limit %d (max_num_seqs, from %s)", *e.SlotLimit, e.SlotLimitSource)
	default:
		p("  slot limit unknown (neither DETECTOR_ENGINES_FILE nor the engine's start-up log gives max_num_seqs)")
	}
	if e.KVFullRunning != nil && e.KVMean != nil && e.RunningMean != nil {
		p("; KV cache %.2f%% at %.1f running → full at %.1f ÷ %.4f = %.0f running\n",
			100**e.KVMean, *e.RunningMean, *e.RunningMean, *e.KVMean, *e.KVFullRunning)
	} else {
		p("; KV cache: cannot tell (no KV gauge while requests ran)\n")
	}
	if e.LimitRunning == nil {
		p("  cannot tell where requests start to queue: neither limit is known\n")
		return
	}
	p("  the %s come%s first: requests queue past %.0f running\n", map[string]string{"slots": "slots", "kv": "KV cache"}[e.Limit],
		map[string]string{"slots": "", "kv": "s"}[e.Limit], *e.LimitRunning)
	p("  a step at %.0f running computes %.0f × (1 + %s prompt ÷ %s output tokens) = %.0f tokens (now %s a step)\n",
		*e.LimitRunning, *e.LimitRunning, num(e.PromptTokens, 0), num(e.OutputTokens, 0), deref(e.TokensAtLimit), num(e.TokensPerStep, 1))
	if e.Fit == "line" && e.ITLInterceptS != nil && e.ITLSlopeS != nil {
		p("  step time = %.4f s + %.6f s × tokens, fitted on %d scrape intervals of the last day (%.0f to %.0f tokens a step): %.4f s now, %.4f s at the limit",
			*e.ITLInterceptS, *e.ITLSlopeS, e.FitIntervals, deref(e.FitTokensMin), deref(e.FitTokensMax), deref(e.ITLNowFitS), deref(e.ITLAtLimitS))
		if e.FitTokensMax != nil && e.TokensAtLimit != nil && *e.TokensAtLimit > *e.FitTokensMax {
			p(" (extrapolated past the steps seen)")
		}
		p("\n")
	} else {
		p("  step time taken as flat (%s s): the last day's steps (%s to %s tokens) span too little to fit how a larger batch slows each step, so what follows is an upper bound\n",
			num(e.ITLS, 4), num(e.FitTokensMin, 0), num(e.FitTokensMax, 0))
	}
	if e.InferenceAtLimitS == nil || e.QueueAtRPS == nil {
		p("  cannot tell the arrival rate at the limit\n")
		return
	}
	p("  a request at %.0f running holds its slot %.3f + %.0f × (%.4f − %.4f) = %.3f s\n",
		*e.LimitRunning, *e.InferenceS, deref(e.OutputTokens), deref(e.ITLAtLimitS), deref(e.ITLNowFitS), *e.InferenceAtLimitS)
	p("  requests start to queue at %.0f ÷ %.3f s = %.2f req/s: headroom %+.2f req/s over the %.2f req/s now\n",
		*e.LimitRunning, *e.InferenceAtLimitS, *e.QueueAtRPS, deref(e.HeadroomRPS), *e.ArrivalRPS)
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func secs(p *float64) string {
	if p == nil {
		return "unknown"
	}
	return fmt.Sprintf("%.3f s", *p)
}

func num(p *float64, decimals int) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.*f", decimals, *p)
}
