package e2e

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/servescope/servescope/sim/loadgen/load"
	"github.com/servescope/servescope/sim/vllmsim/engine"
)

// TestWindowAveragesMatchLoadgen: under an overload-shaped run (more arrivals than the
// engine's slots can serve), the per-window averages that engine_window_averages reads from the
// cumulative histograms the collector scraped agree within 10% with the figures loadgen reported
// from the same engine's /metrics, and the samples show the queue and the slot limit.
func TestWindowAveragesMatchLoadgen(t *testing.T) {
	t.Parallel()
	const slots, maxTokens = 8, 256
	ecfg := engine.DefaultConfig()
	ecfg.MaxNumSeqs = slots
	p := startPipeline(t, pipelineOptions{Engine: ecfg})
	rep, w := p.load(t, load.Config{Scenario: "overload", Requests: 48, Rate: 8, PromptTokens: 44, MaxTokens: maxTokens})
	eng := rep.Engine
	if eng == nil {
		t.Fatalf("loadgen has no engine figures: %s", rep.EngineError)
	}

	var row struct {
		Requests       *float64 `ch:"requests"`
		QueueSeconds   *float64 `ch:"queue_s"`
		PrefillSeconds *float64 `ch:"prefill_s"`
		TTFTSeconds    *float64 `ch:"ttft_s"`
		ITLSeconds     *float64 `ch:"itl_s"`
		DecodeSeconds  *float64 `ch:"decode_s"`
		E2ESeconds     *float64 `ch:"e2e_s"`
		Prompt         *float64 `ch:"prompt_tokens"`
		Generation     *float64 `ch:"generation_tokens"`
		MaxRunning     *float64 `ch:"max_running"`
		MaxWaiting     *float64 `ch:"max_waiting"`
	}
	waitFor(t, 60*time.Second, "the window's histograms in ClickHouse", func(ctx context.Context) (bool, string, error) {
		err := p.Conn.QueryRow(ctx, `
			SELECT requests, queue_s, prefill_s, ttft_s, itl_s, decode_s, e2e_s, prompt_tokens, generation_tokens, max_running, max_waiting
			FROM engine_window_averages(from = fromUnixTimestamp64Micro($1, 'UTC'), to = fromUnixTimestamp64Micro($2, 'UTC'))
			WHERE engine = $3`, w.From.UnixMicro(), w.To.UnixMicro(), engineName).ScanStruct(&row)
		return err == nil && row.Requests != nil && *row.Requests == eng.Requests, fmt.Sprintf("requests %v of %g", deref(row.Requests), eng.Requests), err
	})

	cases := []struct {
		name     string
		view     *float64
		loadgen  *float64
		optional bool // compared only when loadgen saw it above zero
	}{
		{"queue_s", row.QueueSeconds, eng.QueueSeconds, true},
		{"prefill_s", row.PrefillSeconds, eng.PrefillSeconds, false},
		{"ttft_s", row.TTFTSeconds, eng.TTFTSeconds, false},
		{"inter_token_s", row.ITLSeconds, eng.InterTokenSeconds, false},
		{"decode_s", row.DecodeSeconds, eng.DecodeSeconds, false},
		{"e2e_s", row.E2ESeconds, eng.E2ESeconds, false},
		{"prompt_tokens", row.Prompt, eng.PromptTokens, false},
		{"generation_tokens", row.Generation, eng.GenerationTokens, false},
	}
	for _, c := range cases {
		if c.loadgen == nil {
			t.Errorf("%s: loadgen reported nothing", c.name)
			continue
		}
		if c.optional && *c.loadgen == 0 {
			continue
		}
		if c.view == nil || math.Abs(*c.view-*c.loadgen) > 0.1**c.loadgen {
			t.Errorf("%s: window average %v, loadgen %g (want within 10%%)", c.name, deref(c.view), *c.loadgen)
			continue
		}
		t.Logf("%-17s window average %.4g, loadgen %.4g", c.name, *c.view, *c.loadgen)
	}
	// loadgen's client-side means are wall time through the gateway × the time scale: they carry
	// the client's and the gateway's overhead multiplied by the scale (a millisecond of wall time
	// under -race on a busy machine is 20 ms of simulated time here, more than a token's step), so
	// TTFT and E2E bracket the engine's figures from above and only from above: a client cannot
	// see a stream's first token, or its end, sooner than the engine produced them. The time
	// between tokens has no such bound: it is (E2E − TTFT)/(tokens − 1), a difference of two
	// delays, and a first chunk held longer than the last (a CI run saw the client's TTFT 6.5 s
	// behind the engine's, its E2E 6.0 s behind) makes the client's mean smaller than the
	// engine's. What it must be is loadgen's own arithmetic: every request here streams exactly
	// MaxTokens tokens, so the mean of the per-request ratios is the ratio of the means.
	if rep.TTFT == nil || rep.TPOT == nil || rep.E2E == nil {
		t.Fatalf("loadgen client-side latencies: ttft %v tpot %v e2e %v", rep.TTFT, rep.TPOT, rep.E2E)
	}
	for _, c := range []struct {
		name       string
		view       *float64
		clientMean float64
	}{{"ttft_s", row.TTFTSeconds, rep.TTFT.Mean}, {"e2e_s", row.E2ESeconds, rep.E2E.Mean}} {
		if v := deref(c.view); !(c.clientMean >= 0.9*v) {
			t.Errorf("%s: loadgen's client-side mean %g is below the engine's window average %g", c.name, c.clientMean, v)
		}
	}
	if rep.Succeeded != rep.Sent || rep.CompletionTokens != rep.Succeeded*maxTokens || rep.TPOT.Count != rep.Succeeded || rep.E2E.Count != rep.Succeeded {
		t.Errorf("loadgen: %d of %d succeeded, %d completion tokens (want %d each), %d TPOT and %d E2E figures",
			rep.Succeeded, rep.Sent, rep.CompletionTokens, maxTokens, rep.TPOT.Count, rep.E2E.Count)
	} else if want := (rep.E2E.Mean - rep.TTFT.Mean) / (maxTokens - 1); math.Abs(rep.TPOT.Mean-want) > 1e-9*want {
		t.Errorf("loadgen's client-side TPOT mean %g, want (E2E − TTFT)/(%d − 1) = %g", rep.TPOT.Mean, maxTokens, want)
	}
	t.Logf("client-side means: ttft %.4g, tpot %.4g, e2e %.4g", rep.TTFT.Mean, rep.TPOT.Mean, rep.E2E.Mean)
	// An overload: the requests beyond the slots waited, so queue wait is part of the check.
	if eng.QueueSeconds == nil || *eng.QueueSeconds <= 0 {
		t.Errorf("loadgen queue wait %v: the run did not overload the engine", deref(eng.QueueSeconds))
	}

	// The samples themselves: running stops at the slot limit and the excess waits.
	var maxRunning, maxWaiting float64
	var samples uint64
	err := p.Conn.QueryRow(t.Context(), `
		SELECT max(num_requests_running), max(num_requests_waiting), count()
		FROM engine_samples FINAL
		WHERE engine = $1 AND up AND ts >= fromUnixTimestamp64Micro($2, 'UTC') AND ts < fromUnixTimestamp64Micro($3, 'UTC')`,
		engineName, w.From.UnixMicro(), w.To.UnixMicro()).Scan(&maxRunning, &maxWaiting, &samples)
	if err != nil {
		t.Fatalf("read engine_samples: %v", err)
	}
	t.Logf("%d samples: max running %g, max waiting %g; loadgen saw running %g, waiting %g", samples, maxRunning, maxWaiting, eng.MaxRunning, eng.MaxWaiting)
	if maxRunning != slots || maxWaiting == 0 {
		t.Errorf("engine_samples: max running %g (want the %d slots), max waiting %g (want > 0)", maxRunning, slots, maxWaiting)
	}
	if deref(row.MaxRunning) != slots || deref(row.MaxWaiting) != maxWaiting {
		t.Errorf("engine_window_averages: max running %v, max waiting %v; want %d and %g", deref(row.MaxRunning), deref(row.MaxWaiting), slots, maxWaiting)
	}
}

// deref reads an optional figure for a message (NaN when absent).
func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}
