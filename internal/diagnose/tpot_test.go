package diagnose_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testclock"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/diagnose"
)

// answer is one finished request of a workload: its output tokens and its TPOT (vLLM's, decode
// time ÷ (tokens − 1); every interval between its tokens takes that long).
type answer struct {
	tokens int
	tpot   float64
}

func answers(n, tokens int, tpot float64) []answer {
	out := make([]answer, n)
	for i := range out {
		out[i] = answer{tokens, tpot}
	}
	return out
}

// mixed is the window of the mixed workload: 49 short answers (128 tokens at 16 ms), 10 answers of
// one token (a yes/no classification: no TPOT, vLLM observes 0), and one long answer (3,000
// tokens at 45 ms per token: its long context is slower to decode). No request's TPOT moved, but
// the long answer's 2,999 intervals outnumber all the short ones' together.
var mixed = slices.Concat(answers(49, 128, 0.016), answers(10, 1, 0), []answer{{3000, 0.045}})

// perRequestTPOT is vLLM's TPOT averaged over the requests that have one (two tokens or more);
// tokenWeighted is every interval between two tokens averaged.
func perRequestTPOT(as []answer) float64 {
	var sum float64
	var n int
	for _, a := range as {
		if a.tokens > 1 {
			sum, n = sum+a.tpot, n+1
		}
	}
	return sum / float64(n)
}

func tokenWeighted(as []answer) float64 {
	var sum, n float64
	for _, a := range as {
		sum += a.tpot * float64(a.tokens-1)
		n += float64(max(a.tokens-1, 0))
	}
	return sum / n
}

// engineShape is which vLLM release's histograms a sample carries.
type engineShape int

const (
	// shapeMain has vllm:request_time_per_output_token_seconds (vLLM PR #24015) and
	// vllm:inter_token_latency_seconds (0.11's name).
	shapeMain engineShape = iota
	// shape010 is 0.10.2: only vllm:time_per_output_token_seconds, one observation per decode
	// step and request, which the collector stores as inter_token_latency_seconds (promparse).
	shape010
)

// histogram is a cumulative Prometheus histogram as the collector stores it.
type histogram struct {
	sum, count float64
	les        []float64
	buckets    []float64
}

func newHistogram(les []float64) *histogram {
	return &histogram{les: les, buckets: make([]float64, len(les))}
}

func (h *histogram) observe(v float64, times float64) {
	h.sum += v * times
	h.count += times
	for i, le := range h.les {
		if v <= le {
			h.buckets[i] += times
		}
	}
}

func (h *histogram) stored() []map[string]any {
	out := make([]map[string]any, 0, len(h.les)+1)
	for i, le := range h.les {
		out = append(out, map[string]any{"le": le, "count": h.buckets[i]})
	}
	return append(out, map[string]any{"le": math.Inf(1), "count": h.count})
}

// writeEngineAnswers writes the /metrics samples a vLLM engine of that shape exposes while the
// answers finish over r: a scrape every 5 s from r.From, each later one holding the answers
// finished since, observed as vllm/v1/metrics/loggers.py PrometheusStatLogger.record observes a
// finished request (0.10.2 and main): request_generation_tokens (buckets 1, 2, 5, ... as
// build_1_2_5_buckets(max_model_len)), e2e_request_latency_seconds, on main
// request_time_per_output_token_seconds = mean_time_per_output_token (vllm/v1/metrics/stats.py:
// decode ÷ (tokens − 1), 0 for one token), and one inter-token interval per token after the first
// (main inter_token_latency_seconds, 0.10 time_per_output_token_seconds: IterationStats'
// per-step observations, one token per step without speculative decoding).
func (d *db) writeEngineAnswers(as []answer, r diagnose.Range, shape engineShape) {
	d.t.Helper()
	b, err := d.conn.PrepareBatch(d.ctx, `INSERT INTO engine_samples (event_id, ts, engine, model, up, num_requests_running,
		num_requests_waiting, kv_cache_usage_perc, histogram_sum, histogram_count, histogram_buckets)`)
	if err != nil {
		d.t.Fatal(err)
	}
	itlBuckets := []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	hs := map[string]*histogram{
		"request_generation_tokens":   newHistogram([]float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}),
		"e2e_request_latency_seconds": newHistogram([]float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0}),
		// The collector stores 0.10's time_per_output_token_seconds under this name (promparse).
		"inter_token_latency_seconds": newHistogram(itlBuckets),
	}
	if shape == shapeMain {
		hs["request_time_per_output_token_seconds"] = newHistogram(itlBuckets)
	}
	const every = 5 * time.Second
	scrapes := int(r.To.Sub(r.From)/every) - 1 // the last scrape stays inside the range
	for k := 0; k <= scrapes; k++ {
		if k > 0 {
			// The answers finishing in this interval: every scrapes-th, round robin.
			for i := k - 1; i < len(as); i += scrapes {
				a := as[i]
				tpot := 0.0
				if a.tokens > 1 {
					tpot = a.tpot
				}
				hs["request_generation_tokens"].observe(float64(a.tokens), 1)
				hs["e2e_request_latency_seconds"].observe(0.05+a.tpot*float64(max(a.tokens-1, 0)), 1)
				if h, ok := hs["request_time_per_output_token_seconds"]; ok {
					h.observe(tpot, 1)
				}
				if a.tokens > 1 {
					hs["inter_token_latency_seconds"].observe(a.tpot, float64(a.tokens-1))
				}
			}
		}
		sums, counts, buckets := map[string]float64{}, map[string]float64{}, map[string][]map[string]any{}
		for name, h := range hs {
			sums[name], counts[name], buckets[name] = h.sum, h.count, h.stored()
		}
		if err := b.Append(fmt.Sprintf("mix-%d-%d-%d", r.From.UnixNano(), shape, k), r.From.Add(time.Duration(k)*every),
			"http://vllm:8000/metrics", "Qwen/Qwen2.5-7B-Instruct-AWQ", true, f64(12), f64(0), f64(0.05), sums, counts, buckets); err != nil {
			d.t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		d.t.Fatalf("insert engine samples: %v", err)
	}
}

// writeGatewayAnswers writes the gateway's records of the answers arriving over r: the gateway
// measures TPOT on the stream, (last − first token chunk) ÷ (tokens − 1), and has none for an
// answer of one token.
func (d *db) writeGatewayAnswers(as []answer, r diagnose.Range) {
	d.t.Helper()
	b, err := d.conn.PrepareBatch(d.ctx, `INSERT INTO requests (event_id, request_id, trace_id, span_id, ts, arrival_ts, finished_ts,
		model, endpoint, stream, status_code, ttft_s, tpot_s, e2e_s, prompt_tokens, completion_tokens, finish_reason)`)
	if err != nil {
		d.t.Fatal(err)
	}
	step := r.To.Sub(r.From) / time.Duration(len(as))
	for i, a := range as {
		id, arrival := mixID(r, i), r.From.Add(time.Duration(i)*step)
		var tpot *float64
		if a.tokens > 1 {
			tpot = f64(a.tpot)
		}
		e2e := 0.05 + a.tpot*float64(max(a.tokens-1, 0))
		if err := b.Append(id+"-ev", id, mixTrace(r, i), mixSpan(i), arrival, arrival, arrival.Add(time.Duration(e2e*float64(time.Second))),
			"Qwen/Qwen2.5-7B-Instruct-AWQ", "/v1/chat/completions", true, uint16(200), f64(0.05), tpot, f64(e2e),
			u32(44), u32(float64(a.tokens)), "stop"); err != nil {
			d.t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		d.t.Fatalf("insert requests: %v", err)
	}
}

// writeSpanAnswers writes vLLM's llm_request span of each answer (decode time = TPOT × (tokens −
// 1)), children of the gateway's span as the gateway sends it.
func (d *db) writeSpanAnswers(as []answer, r diagnose.Range) {
	d.t.Helper()
	b, err := d.conn.PrepareBatch(d.ctx, `INSERT INTO engine_spans (event_id, request_id, engine_request_id, trace_id, parent_span_id,
		ts, start_ts, engine, queue_s, prefill_s, decode_s, ttft_s, e2e_s, prompt_tokens, completion_tokens, finish_reason)`)
	if err != nil {
		d.t.Fatal(err)
	}
	step := r.To.Sub(r.From) / time.Duration(len(as))
	for i, a := range as {
		id, start := mixID(r, i), r.From.Add(time.Duration(i)*step)
		decode := a.tpot * float64(max(a.tokens-1, 0))
		e2e := 0.05 + decode
		if err := b.Append(id+"-span", id, "chatcmpl-"+id, mixTrace(r, i), mixSpan(i), start.Add(time.Duration(e2e*float64(time.Second))), start,
			"vllm-0", 0.001, 0.049, decode, 0.05, e2e, uint32(44), uint32(a.tokens), "stop"); err != nil {
			d.t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		d.t.Fatalf("insert spans: %v", err)
	}
}

func mixID(r diagnose.Range, i int) string { return fmt.Sprintf("mix-%d-%d", r.From.Unix(), i) }
func mixTrace(r diagnose.Range, i int) string {
	return fmt.Sprintf("%016x%016x", r.From.Unix(), i+1)
}
func mixSpan(i int) string { return fmt.Sprintf("%016x", i+1) }

// TestMixedWorkloadTPOT: one mixed workload (one long answer, many short ones, some of one token)
// after a baseline of short answers gives the same TPOT from the gateway's records, from vLLM's
// spans and from the engine's /metrics alone (main's per-request histogram), and none of them is
// a "generation contention" finding. vLLM's token-weighted inter-token latency rises ×1.59 over
// the same window; it is shown under its own name, and where a release exposes nothing else
// (0.10), diagnose says TPOT is unknown instead of reading it as TPOT (which was a false
// contention finding).
func TestMixedWorkloadTPOT(t *testing.T) {
	t.Parallel()
	at := testclock.EvalTime(t, 2*time.Hour)
	base := answers(300, 128, 0.016)
	wantTPOT, wantITL := perRequestTPOT(mixed), tokenWeighted(mixed)
	if r := wantITL / 0.016; r < diagnose.RiseRatio {
		t.Fatalf("the workload's token-weighted latency rises ×%.2f, under the rise ratio: it would not show the false finding", r)
	}
	cases := []struct {
		name   string
		write  func(d *db, w, b diagnose.Range)
		source string // prefix of Sources["tpot_s_mean"]; "" for no TPOT
	}{
		{"gateway records", func(d *db, w, b diagnose.Range) {
			d.writeGatewayAnswers(mixed, w)
			d.writeGatewayAnswers(base, b)
			d.writeEngineAnswers(mixed, w, shapeMain)
			d.writeEngineAnswers(base, b, shapeMain)
		}, diagnose.SourceRequests},
		{"engine spans alone", func(d *db, w, b diagnose.Range) {
			d.writeSpanAnswers(mixed, w)
			d.writeSpanAnswers(base, b)
		}, diagnose.SourceSpans},
		{"engine metrics alone, main", func(d *db, w, b diagnose.Range) {
			d.writeEngineAnswers(mixed, w, shapeMain)
			d.writeEngineAnswers(base, b, shapeMain)
		}, diagnose.SourceHistograms + " (request_time_per_output_token_seconds)"},
		{"engine metrics alone, 0.10", func(d *db, w, b diagnose.Range) {
			d.writeEngineAnswers(mixed, w, shape010)
			d.writeEngineAnswers(base, b, shape010)
		}, ""},
	}
	d := newDB(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, b := slot(at, i)
			d.t = t
			tc.write(d, w, b)
			rep, err := diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: w, Baseline: b})
			if err != nil {
				t.Fatal(err)
			}
			c := rep.Current
			g := branch(t, rep, diagnose.BranchGenerationContention)
			if slices.Contains(rep.Findings, diagnose.BranchGenerationContention) || g.Status == diagnose.StatusFinding {
				t.Errorf("false generation contention: %+v", g)
			}
			if tc.source == "" {
				// No per-request TPOT in 0.10's /metrics: unknown, said so, never the ITL.
				if c.TPOTMean != nil || g.Status != diagnose.StatusNoData || !strings.Contains(g.Conclusion, "token-weighted") ||
					!strings.Contains(g.Conclusion, "not TPOT") {
					t.Errorf("TPOT %v, branch %s: %q; want no TPOT and a branch that says why", deref(c.TPOTMean), g.Status, g.Conclusion)
				}
			} else {
				if !near(c.TPOTMean, wantTPOT, 1e-12) || !strings.HasPrefix(c.Sources["tpot_s_mean"], tc.source) {
					t.Errorf("TPOT %v from %q, want %v from %q", deref(c.TPOTMean), c.Sources["tpot_s_mean"], wantTPOT, tc.source)
				}
				if g.Status != diagnose.StatusClear {
					t.Errorf("contention branch %s: %q, want clear", g.Status, g.Conclusion)
				}
			}
			if strings.HasPrefix(tc.name, "engine metrics alone") {
				// The ready view for ad-hoc SQL reads the same histograms the same way
				// (migrations/000022): tpot_s per request (NULL without the histogram), itl_s
				// token-weighted.
				var tpot, itl *float64
				if err := d.conn.QueryRow(chstore.WithParams(d.ctx, map[string]string{"from": chTime(w.From), "to": chTime(w.To)}),
					`SELECT tpot_s, itl_s FROM engine_window_averages(from = {from:String}, to = {to:String})`).Scan(&tpot, &itl); err != nil {
					t.Fatal(err)
				}
				if (tc.source == "" && tpot != nil) || (tc.source != "" && !near(tpot, wantTPOT, 1e-12)) || !near(itl, wantITL, 1e-12) {
					t.Errorf("engine_window_averages: tpot_s %v itl_s %v, want %v and %v", deref(tpot), deref(itl), wantTPOT, wantITL)
				}
			}
			if tc.name != "engine spans alone" {
				// The token-weighted latency is kept, under its own name.
				if !near(c.ITLMean, wantITL, 1e-12) {
					t.Errorf("token-weighted ITL %v, want %v", deref(c.ITLMean), wantITL)
				}
				var row *diagnose.Row
				for i := range rep.Rows {
					if rep.Rows[i].Key == "itl_s_mean" {
						row = &rep.Rows[i]
					}
				}
				if row == nil || !strings.Contains(row.Label, "token-weighted") || row.Window == nil {
					t.Errorf("no token-weighted ITL row: %+v", row)
				}
			}
		})
	}
}

// chTime formats t as a ClickHouse DateTime64 literal.
func chTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }
