package diagnose_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/testclock"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/baseline"
	"github.com/servescope/servescope/internal/diagnose"
)

// scenario is one column of docs/measurements.md's Four workloads table: per-request averages and
// sampled maxima measured on Qwen2.5-7B-Instruct-AWQ on one RTX 3060.
type scenario struct {
	name                       string
	rate                       float64 // requests per second
	in, out, cached            float64 // tokens per request
	queue, prefill, ttft, tpot float64 // seconds
	decode, e2e                float64 // seconds
	running, waiting, kv       float64 // maxima over the 0.5 s samples; kv is a fraction
	maxTokens                  uint32
}

var (
	normal     = scenario{"normal", 2, 44, 128, 0, 0, 0.036, 0.051, 0.016, 2.02, 2.07, 12, 0, 0.014, 128}
	overload   = scenario{"overload", 14, 44, 128, 0, 0.472, 0.288, 0.853, 0.147, 18.61, 19.46, 256, 44, 0.280, 128}
	longPrompt = scenario{"long prompt", 1, 2905, 64, 2880, 0, 0.082, 0.120, 0.017, 1.06, 1.18, 4, 0, 0.041, 64}
	longOutput = scenario{"long output", 1, 44, 1024, 0, 0, 0.062, 0.083, 0.026, 26.54, 26.62, 33, 0, 0.261, 1024}
	// contention is the slow-E2E case of docs/measurements.md, From symptom to quantity: E2E up
	// several-fold with TTFT, queue and the running count normal and the same outputs — the time
	// between tokens is what grew.
	contention = scenario{"contention", 2, 44, 128, 0, 0, 0.036, 0.051, 0.098, 12.45, 12.50, 12, 0, 0.014, 128}
)

// rowOpts says how a scenario's rows are written.
type rowOpts struct {
	// engineTimingsInSamplesOnly leaves queue/prefill/decode out of the request rows, so that
	// they can only come from the engine_samples histograms (the fallback path).
	engineTimingsInSamplesOnly bool
	// restartAt, when > 0, resets the engine's cumulative histograms at that sample index.
	restartAt int
	status    func(i int) uint16
	embedding string
	index     string
	topScore  float64
	wrongOf   int // every wrongOf-th answer has foreign-script letters (0: no checks recorded)
	model     string
}

type db struct {
	t    *testing.T
	ctx  context.Context
	conn driver.Conn
}

func newDB(t *testing.T) *db {
	t.Helper()
	conn, _ := testenv.ClickHouse(t)
	// One context for every write and diagnosis of the test (TestScenarios' eleven cases share it):
	// it catches a hang, and leaves room for a machine loaded by other test runs.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return &db{t: t, ctx: ctx, conn: conn}
}

// jitter spreads a value ±10% around its mean over consecutive requests (a zero-mean pattern over
// every 4 requests), so the window's mean stays the measured one and p95 differs from p50.
func jitter(v float64, i int) float64 { return v * (1 + 0.1*[]float64{-1, 1, -0.5, 0.5}[i%4]) }

func f64(v float64) *float64 { return &v }
func u32(v float64) *uint32  { n := uint32(math.Round(v)); return &n }

// write inserts the scenario's requests (rate × length of r, evenly spread) and engine samples
// every 0.5 s over r.
func (d *db) write(sc scenario, r diagnose.Range, o rowOpts) {
	d.t.Helper()
	n := int(math.Round(sc.rate * r.Seconds()))
	model := o.model
	if model == "" {
		model = "Qwen/Qwen2.5-7B-Instruct-AWQ"
	}
	b, err := d.conn.PrepareBatch(d.ctx, `INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, stream,
		status_code, queue_s, prefill_s, decode_s, ttft_s, tpot_s, e2e_s, prompt_tokens, completion_tokens, cached_tokens,
		finish_reason, max_tokens, output_script_violation, embedding_model_version, index_version, prompt_version)`)
	if err != nil {
		d.t.Fatal(err)
	}
	step := r.To.Sub(r.From) / time.Duration(n)
	for i := range n {
		arrival := r.From.Add(time.Duration(i) * step)
		e2e := jitter(sc.e2e, i)
		id := fmt.Sprintf("%s-%s-%d-%d", model, strings.ReplaceAll(sc.name, " ", "-"), r.From.Unix(), i)
		var queue, prefill, decode *float64
		if !o.engineTimingsInSamplesOnly {
			queue, prefill, decode = f64(jitter(sc.queue, i)), f64(jitter(sc.prefill, i)), f64(jitter(sc.decode, i))
		}
		var cached *uint32
		if sc.cached > 0 {
			cached = u32(sc.cached)
		}
		var wrong *bool
		if o.wrongOf > 0 {
			v := i%o.wrongOf == 0
			wrong = &v
		}
		status := uint16(200)
		if o.status != nil {
			status = o.status(i)
		}
		if err := b.Append(id+"-ev", id, arrival.Add(time.Duration(e2e*float64(time.Second))), arrival,
			arrival.Add(time.Duration(e2e*float64(time.Second))), model, "/v1/chat/completions", true,
			status, queue, prefill, decode, f64(jitter(sc.ttft, i)), f64(jitter(sc.tpot, i)), &e2e,
			u32(sc.in), u32(sc.out), cached, "length", &sc.maxTokens, wrong, o.embedding, o.index, "prompt-v1"); err != nil {
			d.t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		d.t.Fatalf("insert %d %s requests: %v", n, sc.name, err)
	}
	if o.topScore > 0 {
		d.writeApp(sc, r, n, model, o)
	}
	d.writeSamples(sc, r, o)
}

func (d *db) writeApp(sc scenario, r diagnose.Range, n int, model string, o rowOpts) {
	d.t.Helper()
	b, err := d.conn.PrepareBatch(d.ctx, `INSERT INTO app_records (event_id, request_id, ts, app, retrieval_top_score, embedding_model_version, index_version)`)
	if err != nil {
		d.t.Fatal(err)
	}
	step := r.To.Sub(r.From) / time.Duration(n)
	for i := range n {
		id := fmt.Sprintf("%s-%s-%d-%d", model, strings.ReplaceAll(sc.name, " ", "-"), r.From.Unix(), i)
		if err := b.Append(id+"-app", id, r.From.Add(time.Duration(i)*step), "ragdemo", jitter(o.topScore, i), o.embedding, o.index); err != nil {
			d.t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		d.t.Fatalf("insert app records: %v", err)
	}
}

// writeSamples writes one scrape every 0.5 s: the gauges ramp up to the scenario's maxima and the
// cumulative histograms grow by the requests finished since the last scrape.
func (d *db) writeSamples(sc scenario, r diagnose.Range, o rowOpts) {
	d.t.Helper()
	b, err := d.conn.PrepareBatch(d.ctx, `INSERT INTO engine_samples (event_id, ts, engine, model, up, num_requests_running,
		num_requests_waiting, kv_cache_usage_perc, histogram_sum, histogram_count)`)
	if err != nil {
		d.t.Fatal(err)
	}
	n := int(r.Seconds() * 2)
	perScrape := sc.rate / 2
	metrics := map[string]float64{
		"request_queue_time_seconds":   sc.queue,
		"request_prefill_time_seconds": sc.prefill,
		"request_decode_time_seconds":  sc.decode,
		"time_to_first_token_seconds":  sc.ttft,
		"inter_token_latency_seconds":  sc.tpot,
		"e2e_request_latency_seconds":  sc.e2e,
	}
	var done float64 = 1000 // the engine has served requests before the window
	for i := range n {
		if o.restartAt > 0 && i == o.restartAt {
			done = 0
		}
		done += perScrape
		sums, counts := map[string]float64{}, map[string]float64{}
		for k, v := range metrics {
			sums[k], counts[k] = v*done, done
		}
		ramp := math.Min(1, float64(i+1)/float64(n/2))
		if err := b.Append(fmt.Sprintf("s-%d-%d", r.From.Unix(), i), r.From.Add(time.Duration(i)*500*time.Millisecond),
			"http://vllm:8000/metrics", "Qwen/Qwen2.5-7B-Instruct-AWQ", true,
			f64(math.Round(sc.running*ramp)), f64(math.Round(sc.waiting*ramp)), f64(sc.kv*ramp), sums, counts); err != nil {
			d.t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		d.t.Fatalf("insert engine samples: %v", err)
	}
}

func (d *db) exec(q string, args ...any) {
	d.t.Helper()
	if err := d.conn.Exec(d.ctx, q, args...); err != nil {
		d.t.Fatalf("%s: %v", q, err)
	}
}

// ranges returns a 60 s window starting at the evaluation time at and the 5 minutes before it as
// the baseline. A test takes at once, before its cases run: two cases reading the clock on either
// side of a whole hour would lay out overlapping slots. TestScenarios takes it from testclock, so
// that scripts/test also runs it with windows and baselines across midnight; the data of these
// tests do not follow the time of day.
func ranges(at time.Time) (diagnose.Range, diagnose.Range) { return slot(at, 0) }

// slot returns the i-th of a series of such windows, 10 minutes apart going back from at, so that
// the cases of one test can share a database: no case's rows fall in another case's window or
// baseline.
func slot(at time.Time, i int) (diagnose.Range, diagnose.Range) {
	from := at.Add(-time.Duration(i) * 10 * time.Minute)
	w := diagnose.Range{From: from, To: from.Add(time.Minute)}
	return w, diagnose.Range{From: from.Add(-5 * time.Minute), To: from}
}

func branch(t *testing.T, rep diagnose.Report, id string) diagnose.Branch {
	t.Helper()
	for _, b := range rep.Branches {
		if b.ID == id {
			return b
		}
	}
	t.Fatalf("branch %s not walked", id)
	return diagnose.Branch{}
}

func near(got *float64, want, tol float64) bool { return got != nil && math.Abs(*got-want) <= tol }

// TestScenarios writes each workload of docs/measurements.md (and its retrieval and output
// incidents) after a normal baseline, runs the diagnosis on the scenario's window and checks the branch it
// lands in and the numbers it names.
func TestScenarios(t *testing.T) {
	t.Parallel()
	at := testclock.EvalTime(t, 2*time.Hour)
	cases := []struct {
		name     string
		window   scenario
		wOpts    rowOpts
		bOpts    rowOpts
		findings []string
		after    func(d *db, w diagnose.Range) // extra rows for the window
		check    func(t *testing.T, rep diagnose.Report)
	}{
		{
			name: "normal", window: normal, findings: []string{},
			check: func(t *testing.T, rep diagnose.Report) {
				if q := branch(t, rep, diagnose.BranchQueueOverload); q.Status != diagnose.StatusClear || !strings.Contains(q.Conclusion, "less likely") {
					t.Errorf("queue branch = %+v", q)
				}
			},
		},
		{
			name: "overload", window: overload, findings: []string{diagnose.BranchQueueOverload, diagnose.BranchGenerationContention},
			// The gateway got no per-request engine metrics and the engine restarted mid-window: the
			// queue wait must come from the histograms, reset handled.
			wOpts: rowOpts{engineTimingsInSamplesOnly: true, restartAt: 50},
			check: func(t *testing.T, rep diagnose.Report) {
				c := rep.Current
				if !near(c.QueueMean, 0.472, 1e-9) || !strings.HasPrefix(c.Sources["queue_s_mean"], diagnose.SourceHistograms) {
					t.Errorf("queue mean = %v from %q, want 0.472 from histograms", deref(c.QueueMean), c.Sources["queue_s_mean"])
				}
				if !near(c.PrefillMean, 0.288, 1e-9) || !near(c.DecodeMean, 18.61, 1e-9) {
					t.Errorf("prefill, decode = %v, %v, want 0.288, 18.61", deref(c.PrefillMean), deref(c.DecodeMean))
				}
				if !near(c.RunningMax, 256, 0) || !near(c.WaitingMax, 44, 0) || !near(c.KVMax, 0.28, 1e-9) {
					t.Errorf("running, waiting, KV max = %v, %v, %v", deref(c.RunningMax), deref(c.WaitingMax), deref(c.KVMax))
				}
				q := branch(t, rep, diagnose.BranchQueueOverload)
				joined := strings.Join(q.Evidence, "\n")
				for _, want := range []string{"queue wait mean 0.472 s vs 0.000 s", "waiting max 44 vs 0", "running max 256 vs 12", "running stops at exactly 256", "KV cache max 28.0%: slots ran out, not KV memory", "14.00 req/s vs 2.00 req/s"} {
					if !strings.Contains(joined, want) {
						t.Errorf("overload evidence lacks %q:\n%s", want, joined)
					}
				}
				if q.NotRuledOut == "" {
					t.Error("overload names nothing it could not rule out")
				}
				g := branch(t, rep, diagnose.BranchGenerationContention)
				if !strings.Contains(strings.Join(g.Evidence, "\n"), "TPOT mean 0.147 s vs 0.016 s (×9.19)") {
					t.Errorf("contention evidence = %q", g.Evidence)
				}
			},
		},
		{
			name: "long prompt", window: longPrompt, findings: []string{diagnose.BranchLongPrompt},
			check: func(t *testing.T, rep diagnose.Report) {
				b := branch(t, rep, diagnose.BranchLongPrompt)
				if !strings.Contains(b.Evidence[0], "input tokens mean 2,905 vs 44 (×66.0)") {
					t.Errorf("long prompt evidence = %q", b.Evidence)
				}
				if !strings.Contains(b.NotRuledOut, "prefix cache served 99.1%") {
					t.Errorf("long prompt does not name the prefix cache it could not rule out: %q", b.NotRuledOut)
				}
			},
		},
		{
			name: "long output", window: longOutput, findings: []string{diagnose.BranchLongOutput},
			check: func(t *testing.T, rep diagnose.Report) {
				b := branch(t, rep, diagnose.BranchLongOutput)
				joined := strings.Join(b.Evidence, "\n")
				for _, want := range []string{"output tokens mean 1,024 vs 128 (×8.00)", "`length` stops 100.0% vs 100.0%", "E2E mean 26.62 s vs 2.070 s"} {
					if !strings.Contains(joined, want) {
						t.Errorf("long output evidence lacks %q:\n%s", want, joined)
					}
				}
				if !strings.Contains(b.Conclusion, "has to generate longer outputs") {
					t.Errorf("conclusion = %q", b.Conclusion)
				}
				// TPOT rose 0.016 → 0.026 s, but with the output length: not contention.
				if g := branch(t, rep, diagnose.BranchGenerationContention); g.Status != diagnose.StatusClear || !strings.Contains(g.Conclusion, "consequence of generating longer") {
					t.Errorf("contention = %+v", g)
				}
			},
		},
		{
			name: "generation contention", window: contention, findings: []string{diagnose.BranchGenerationContention},
			check: func(t *testing.T, rep diagnose.Report) {
				b := branch(t, rep, diagnose.BranchGenerationContention)
				if !strings.Contains(b.NotRuledOut, "the running count did not grow") {
					t.Errorf("contention not ruled out = %q", b.NotRuledOut)
				}
				if q := branch(t, rep, diagnose.BranchQueueOverload); !strings.Contains(q.Conclusion, "less likely") {
					t.Errorf("queue conclusion = %q", q.Conclusion)
				}
			},
		},
		{
			// E2E triples while every quantity the branches read stays normal: no finding, and a
			// note that says so.
			name: "unexplained latency", window: scenario{"slow app", 2, 44, 128, 0, 0, 0.036, 0.051, 0.016, 2.02, 6.2, 12, 0, 0.014, 128},
			findings: []string{},
			check: func(t *testing.T, rep diagnose.Report) {
				if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "E2E p95 rose 6.820 s vs 2.277 s (×3.00) with none of the signatures") {
					t.Errorf("notes = %q", rep.Notes)
				}
			},
		},
		{
			name: "retrieval drift", window: normal, findings: []string{diagnose.BranchRetrieval},
			bOpts: rowOpts{topScore: 0.878, embedding: "bge-small-en-v1.5", index: "docs-2026-09"},
			wOpts: rowOpts{topScore: 0.120, embedding: "bge-base-en-v1.5", index: "docs-2026-09"},
			check: func(t *testing.T, rep diagnose.Report) {
				b := branch(t, rep, diagnose.BranchRetrieval)
				joined := strings.Join(b.Evidence, "\n")
				for _, want := range []string{"top passage score p50 0.120 vs 0.878", "embedding_model_version bge-base-en-v1.5 (baseline bge-small-en-v1.5)"} {
					if !strings.Contains(joined, want) {
						t.Errorf("retrieval evidence lacks %q:\n%s", want, joined)
					}
				}
				if !strings.Contains(b.Conclusion, "version change") {
					t.Errorf("conclusion = %q", b.Conclusion)
				}
			},
		},
		{
			name: "wrong language", window: normal, findings: []string{diagnose.BranchWrongLanguage},
			bOpts: rowOpts{wrongOf: 1000},
			wOpts: rowOpts{wrongOf: 8}, // 4 of every 32 answers, as in docs/measurements.md
			check: func(t *testing.T, rep diagnose.Report) {
				if !near(rep.Current.WrongScriptShare, 0.125, 1e-9) {
					t.Errorf("wrong-script share = %v, want 0.125", deref(rep.Current.WrongScriptShare))
				}
			},
		},
		{
			name: "engine crash", window: normal, findings: []string{diagnose.BranchEngineCrash},
			wOpts: rowOpts{status: func(i int) uint16 {
				if i >= 60 {
					return 500
				}
				return 200
			}},
			check: func(t *testing.T, rep diagnose.Report) {
				b := branch(t, rep, diagnose.BranchEngineCrash)
				if !strings.Contains(strings.Join(b.Evidence, "\n"), "60 answers 5xx: 50.0% vs 0.0%") {
					t.Errorf("crash evidence = %q", b.Evidence)
				}
				if rep.Current.StatusCodes[500] != 60 {
					t.Errorf("status codes = %v", rep.Current.StatusCodes)
				}
			},
		},
		{
			name: "engine stops answering", window: normal, findings: []string{diagnose.BranchEngineCrash, diagnose.BranchEngineNotScraped},
			after: func(d *db, w diagnose.Range) {
				// The last three scrapes, after the window's last good one at To - 0.5 s.
				for i := range 3 {
					d.exec("INSERT INTO engine_samples (event_id, ts, engine, up, scrape_error) VALUES (?, fromUnixTimestamp64Micro(?, 'UTC'), 'http://vllm:8000/metrics', false, 'connection refused')",
						fmt.Sprint("down-", i), w.To.Add(-time.Duration(3-i)*100*time.Millisecond).UnixMicro())
				}
			},
			check: func(t *testing.T, rep diagnose.Report) {
				b := branch(t, rep, diagnose.BranchEngineCrash)
				if !strings.Contains(strings.Join(b.Evidence, "\n"), "3 of 123 scrapes failed (up = 0)") || !strings.Contains(b.Conclusion, "stopped answering") {
					t.Errorf("crash branch = %+v", b)
				}
				if !strings.HasPrefix(b.Action, "servescope postmortem --engine http://vllm:8000/metrics --at ") {
					t.Errorf("action = %q", b.Action)
				}
				// The engine branch names the engine its last scrape failed on, with the error.
				ns := branch(t, rep, diagnose.BranchEngineNotScraped)
				if !strings.Contains(ns.Conclusion, "engine http://vllm:8000/metrics cannot be scraped") ||
					!strings.Contains(strings.Join(ns.Evidence, "\n"), "(3 of 123 scrapes in the window): connection refused") {
					t.Errorf("engine_not_scraped branch = %+v", ns)
				}
			},
		},
		{
			// The engine sent spans in the baseline (its 5 minutes) and sends none while the
			// gateway records its model's requests.
			name: "engine spans stop", window: normal, findings: []string{diagnose.BranchSpansMissing},
			after: func(d *db, w diagnose.Range) {
				for i := range 30 {
					d.exec("INSERT INTO engine_spans (event_id, request_id, ts, engine, model) VALUES (?, ?, ?, 'http://vllm:8000/metrics', 'Qwen/Qwen2.5-7B-Instruct-AWQ')",
						fmt.Sprint("span-", w.From.Unix(), "-", i), fmt.Sprint("r-", i), w.From.Add(-time.Duration(i+1)*9*time.Second))
				}
			},
			check: func(t *testing.T, rep diagnose.Report) {
				b := branch(t, rep, diagnose.BranchSpansMissing)
				if !strings.Contains(b.Conclusion, "engine http://vllm:8000/metrics sends no spans") ||
					!strings.Contains(strings.Join(b.Evidence, "\n"), "0 spans in the window against 30 in the baseline") {
					t.Errorf("spans branch = %+v", b)
				}
			},
		},
		{
			// A second engine of the model sits idle holding 97% of its KV cache.
			name: "KV cache stuck with nothing running", window: normal, findings: []string{diagnose.BranchKVStuck},
			after: func(d *db, w diagnose.Range) {
				for i := range 10 {
					d.exec("INSERT INTO engine_samples (event_id, ts, engine, model, up, num_requests_running, num_requests_waiting, kv_cache_usage_perc) VALUES (?, ?, 'http://vllm-1:8000/metrics', 'Qwen/Qwen2.5-7B-Instruct-AWQ', true, 0, 2, 0.97)",
						fmt.Sprint("stuck-", w.From.Unix(), "-", i), w.From.Add(time.Duration(i)*time.Second))
				}
			},
			check: func(t *testing.T, rep diagnose.Report) {
				b := branch(t, rep, diagnose.BranchKVStuck)
				if !strings.Contains(b.Conclusion, "engine http://vllm-1:8000/metrics holds its KV cache with nothing running") ||
					!strings.Contains(strings.Join(b.Evidence, "\n"), "10 samples with nothing running, the KV cache never under 97.0% in them, up to 2 requests waiting") {
					t.Errorf("kv branch = %+v", b)
				}
				if nr := branch(t, rep, diagnose.BranchEngineNotScraped); nr.Status != diagnose.StatusClear {
					t.Errorf("engine_not_scraped = %+v, want clear", nr)
				}
			},
		},
	}
	shared := newDB(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := &db{t: t, ctx: shared.ctx, conn: shared.conn}
			w, base := slot(at, i)
			d.write(normal, base, tc.bOpts)
			d.write(tc.window, w, tc.wOpts)
			if tc.after != nil {
				tc.after(d, w)
			}
			rep, err := diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: w, Baseline: base})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.HasBaseline {
				t.Fatal("baseline not seen")
			}
			if !slices.Equal(rep.Findings, tc.findings) {
				var out bytes.Buffer
				_ = rep.WriteText(&out)
				t.Fatalf("findings = %v, want %v\n%s", rep.Findings, tc.findings, out.String())
			}
			for _, b := range rep.Branches {
				if b.Status == diagnose.StatusFinding && (len(b.Evidence) == 0 || b.NotRuledOut == "" || b.Action == "") {
					t.Errorf("finding %s lacks evidence, not-ruled-out or action: %+v", b.ID, b)
				}
			}
			tc.check(t, rep)
			var out bytes.Buffer
			if err := rep.WriteText(&out); err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + out.String())
			wantLast := "no finding"
			if len(tc.findings) > 0 {
				wantLast = "findings: " + strings.Join(tc.findings, ", ")
			}
			if !strings.Contains(out.String(), wantLast) {
				t.Errorf("text report lacks %q:\n%s", wantLast, out.String())
			}
			js, err := json.Marshal(rep)
			if err != nil {
				t.Fatal(err)
			}
			var back diagnose.Report
			if err := json.Unmarshal(js, &back); err != nil || !slices.Equal(back.Findings, tc.findings) {
				t.Errorf("JSON round trip: %v, findings %v", err, back.Findings)
			}
		})
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestNoBaseline runs a scenario with nothing recorded before it, as an end-to-end test of one
// scenario would: the branches fall back to their absolute floors.
func TestNoBaseline(t *testing.T) {
	t.Parallel()
	at := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Hour)
	shared := newDB(t)
	for i, tc := range []struct {
		sc       scenario
		findings []string
	}{
		{normal, []string{}},
		{overload, []string{diagnose.BranchQueueOverload}},
		{longPrompt, []string{diagnose.BranchLongPrompt}},
		{longOutput, []string{diagnose.BranchLongOutput}},
	} {
		t.Run(tc.sc.name, func(t *testing.T) {
			t.Parallel()
			d := &db{t: t, ctx: shared.ctx, conn: shared.conn}
			w, base := slot(at, i)
			d.write(tc.sc, w, rowOpts{})
			rep, err := diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: w, Baseline: base})
			if err != nil {
				t.Fatal(err)
			}
			if rep.HasBaseline {
				t.Error("baseline reported with no records before the window")
			}
			if !slices.Equal(rep.Findings, tc.findings) {
				var out bytes.Buffer
				_ = rep.WriteText(&out)
				t.Fatalf("findings = %v, want %v\n%s", rep.Findings, tc.findings, out.String())
			}
		})
	}
}

// TestModelFilter keeps only the requested model's rows.
func TestModelFilter(t *testing.T) {
	t.Parallel()
	at := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Hour)
	d := newDB(t)
	w, base := ranges(at)
	d.write(normal, base, rowOpts{})
	d.write(normal, base, rowOpts{model: "other"})
	d.write(longPrompt, w, rowOpts{model: "other"})
	d.write(normal, w, rowOpts{})
	for model, want := range map[string][]string{"Qwen/Qwen2.5-7B-Instruct-AWQ": {}, "other": {diagnose.BranchLongPrompt}} {
		rep, err := diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: w, Baseline: base, Model: model})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rep.Findings, want) {
			t.Errorf("model %s: findings %v, want %v", model, rep.Findings, want)
		}
	}
}

// TestEmpty tells empty tables from an empty window, both as ErrNoData.
func TestEmpty(t *testing.T) {
	t.Parallel()
	at := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Hour)
	d := newDB(t)
	w, base := ranges(at)
	_, err := diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: w})
	if !errors.Is(err, diagnose.ErrNoData) || !strings.Contains(err.Error(), "every servescope table is empty") {
		t.Errorf("empty tables: %v", err)
	}
	d.write(normal, base, rowOpts{})
	_, err = diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: w})
	if !errors.Is(err, diagnose.ErrNoData) || !strings.Contains(err.Error(), "no records in window") || !strings.Contains(err.Error(), "the latest record is at") {
		t.Errorf("empty window: %v", err)
	}
}

func TestRanges(t *testing.T) {
	now := time.Date(2026, 9, 11, 16, 0, 0, 0, time.UTC)
	from := time.Date(2026, 9, 11, 15, 53, 0, 0, time.UTC)
	to := time.Date(2026, 9, 11, 15, 54, 0, 0, time.UTC)
	hour := baseline.Spec{Length: time.Hour}
	for _, tc := range []struct {
		name     string
		since    time.Duration
		from, to time.Time
		baseline baseline.Spec
		want     diagnose.Range
		wantBase diagnose.Range
		err      string
	}{
		// The default: the 24 h ending 1 h before the window starts (the detector's baseline).
		{"since", 15 * time.Minute, time.Time{}, time.Time{}, baseline.Spec{}, diagnose.Range{From: now.Add(-15 * time.Minute), To: now}, diagnose.Range{From: now.Add(-15*time.Minute - 25*time.Hour), To: now.Add(-75 * time.Minute)}, ""},
		{"from to", 0, from, to, hour, diagnose.Range{From: from, To: to}, diagnose.Range{From: from.Add(-time.Hour), To: from}, ""},
		{"from only", 0, from, time.Time{}, hour, diagnose.Range{From: from, To: now}, diagnose.Range{From: from.Add(-time.Hour), To: from}, ""},
		{"offset", 0, from, to, baseline.Spec{Length: time.Hour, Offset: 30 * time.Minute}, diagnose.Range{From: from, To: to}, diagnose.Range{From: from.Add(-90 * time.Minute), To: from.Add(-30 * time.Minute)}, ""},
		{"both", time.Minute, from, to, baseline.Spec{}, diagnose.Range{}, diagnose.Range{}, "not both"},
		{"none", 0, time.Time{}, time.Time{}, baseline.Spec{}, diagnose.Range{}, diagnose.Range{}, "give the window"},
		{"reversed", 0, to, from, baseline.Spec{}, diagnose.Range{}, diagnose.Range{}, "--to must be after --from"},
		{"negative baseline", time.Minute, time.Time{}, time.Time{}, baseline.Spec{Length: -time.Hour}, diagnose.Range{}, diagnose.Range{}, "length must be positive"},
		{"negative offset", time.Minute, time.Time{}, time.Time{}, baseline.Spec{Length: time.Hour, Offset: -time.Hour}, diagnose.Range{}, diagnose.Range{}, "offset not negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, b, err := diagnose.Ranges(now, tc.since, tc.from, tc.to, tc.baseline)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || w != tc.want || b != tc.wantBase {
				t.Errorf("= %v, %v, %v; want %v, %v", w, b, err, tc.want, tc.wantBase)
			}
		})
	}
}

func TestParseTime(t *testing.T) {
	want := time.Date(2026, 9, 11, 15, 53, 0, 0, time.UTC)
	for _, s := range []string{"2026-09-11T15:53:00Z", "2026-09-11T17:53:00+02:00", "2026-09-11 15:53:00", "2026-09-11T15:53", "2026-09-11 15:53"} {
		if got, err := diagnose.ParseTime(s); err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "yesterday", "2026-13-01 00:00"} {
		if _, err := diagnose.ParseTime(s); err == nil {
			t.Errorf("ParseTime(%q) accepted", s)
		}
	}
}

// spanOpts says how writeSpans writes a scenario's spans.
type spanOpts struct {
	// children is the number of engine requests per API request (n > 1 or several prompts, each
	// its own span with the API request's id, as vLLM main sends them); 0 means 1.
	children int
	// engine and model are the spans' engine name and model attribute (vLLM's V1 spans have none).
	engine, model string
}

// writeSpans inserts the engine's per-request spans for the scenario over r, with request ids
// equal to the gateway's (as the collector matches them). With several children, each child
// produces an equal share of the output at the scenario's inter-token time, child c waiting
// 0.01·c s longer than child 0; so the request's queue wait and TTFT are child 0's, its output
// the scenario's and its TPOT (vLLM's, per child) the scenario's.
func (d *db) writeSpans(sc scenario, r diagnose.Range, o spanOpts) {
	d.t.Helper()
	if o.children == 0 {
		o.children = 1
	}
	if o.engine == "" {
		o.engine = "vllm-0"
	}
	n := int(math.Round(sc.rate * r.Seconds()))
	b, err := d.conn.PrepareBatch(d.ctx, `INSERT INTO engine_spans (event_id, request_id, engine_request_id, ts, start_ts, engine, model, queue_s,
		prefill_s, decode_s, ttft_s, e2e_s, prompt_tokens, completion_tokens, finish_reason)`)
	if err != nil {
		d.t.Fatal(err)
	}
	step := r.To.Sub(r.From) / time.Duration(n)
	out := math.Round(sc.out / float64(o.children))
	itl := sc.decode / (sc.out - 1)
	for i := range n {
		start := r.From.Add(time.Duration(i) * step)
		id := fmt.Sprintf("%s-%s-%d-%d", "Qwen/Qwen2.5-7B-Instruct-AWQ", strings.ReplaceAll(sc.name, " ", "-"), r.From.Unix(), i)
		for c := range o.children {
			wait := 0.01 * float64(c)
			decode := jitter(sc.decode, i)
			if o.children > 1 {
				decode = jitter(itl*(out-1), i)
			}
			e2e := jitter(sc.e2e, i) - jitter(sc.decode, i) + decode + wait
			if err := b.Append(fmt.Sprintf("%s-span-%d", id, c), id, "chatcmpl-"+id, start.Add(time.Duration(e2e*float64(time.Second))), start,
				o.engine, o.model, f64(jitter(sc.queue, i)+wait), f64(jitter(sc.prefill, i)), &decode, f64(jitter(sc.ttft, i)+wait), &e2e,
				u32(sc.in), u32(out), "length"); err != nil {
				d.t.Fatal(err)
			}
		}
	}
	if err := b.Send(); err != nil {
		d.t.Fatalf("insert spans: %v", err)
	}
}

// TestEngineTimingSources: engine timings come from the spans when the gateway's rows lack them
// (joined on request_id), and everything comes from the spans when no gateway records requests.
func TestEngineTimingSources(t *testing.T) {
	t.Parallel()
	at := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Hour)
	t.Run("joined", func(t *testing.T) {
		t.Parallel()
		d := newDB(t)
		w, _ := ranges(at)
		d.write(overload, w, rowOpts{engineTimingsInSamplesOnly: true})
		d.writeSpans(overload, w, spanOpts{})
		rep, err := diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: w})
		if err != nil {
			t.Fatal(err)
		}
		c := rep.Current
		if !near(c.QueueMean, 0.472, 1e-9) || c.Sources["queue_s_mean"] != diagnose.SourceRequests || c.QueueP95 == nil || !near(c.DecodeMean, 18.61, 1e-9) {
			t.Errorf("queue mean %v p95 %v from %q, decode %v", deref(c.QueueMean), deref(c.QueueP95), c.Sources["queue_s_mean"], deref(c.DecodeMean))
		}
	})
	t.Run("spans only", func(t *testing.T) {
		t.Parallel()
		d := newDB(t)
		w, _ := ranges(at)
		d.writeSpans(longOutput, w, spanOpts{})
		rep, err := diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: w})
		if err != nil {
			t.Fatal(err)
		}
		c := rep.Current
		if c.Requests != 60 || c.Sources["completion_tokens_mean"] != diagnose.SourceSpans || !near(c.CompletionTokensMean, 1024, 0) {
			t.Errorf("requests %d, output tokens %v from %q", c.Requests, deref(c.CompletionTokensMean), c.Sources["completion_tokens_mean"])
		}
		// vLLM's TPOT: decode time ÷ (output tokens − 1).
		if !near(c.TPOTMean, 26.54/1023, 1e-9) {
			t.Errorf("TPOT = %v, want %v", deref(c.TPOTMean), 26.54/1023)
		}
		if !slices.Equal(rep.Findings, []string{diagnose.BranchLongOutput}) {
			t.Errorf("findings = %v", rep.Findings)
		}
	})
}

// TestEngineChildrenCountOnce feeds the span sets of n > 1 requests (one span per child, all with
// the request's id, as vLLM sends them): every request counts once, with its children combined
// (migrations/000009), where counting spans would have counted n requests of 1/n of the output.
func TestEngineChildrenCountOnce(t *testing.T) {
	t.Parallel()
	at := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Hour)
	t.Run("spans only", func(t *testing.T) {
		t.Parallel()
		d := newDB(t)
		w, _ := ranges(at)
		d.writeSpans(longOutput, w, spanOpts{children: 4})
		rep, err := diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: w})
		if err != nil {
			t.Fatal(err)
		}
		c := rep.Current
		if c.Requests != 60 || !near(c.CompletionTokensMean, 1024, 0) || !near(c.QueueMean, 0, 1e-9) || !near(c.TTFTMean, 0.083, 1e-9) {
			t.Errorf("requests %d (spans: 240), output tokens %v, queue %v, TTFT %v; want 60, 1024, 0, 0.083 (child 0's)",
				c.Requests, deref(c.CompletionTokensMean), deref(c.QueueMean), deref(c.TTFTMean))
		}
		// vLLM's TPOT per child (decode ÷ (256 − 1)), averaged over the children: the scenario's.
		if !near(c.TPOTMean, 26.54/1023, 1e-9) {
			t.Errorf("TPOT = %v, want %v", deref(c.TPOTMean), 26.54/1023)
		}
	})
	t.Run("joined", func(t *testing.T) {
		t.Parallel()
		d := newDB(t)
		w, _ := ranges(at)
		d.write(overload, w, rowOpts{engineTimingsInSamplesOnly: true})
		d.writeSpans(overload, w, spanOpts{children: 3})
		rep, err := diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: w})
		if err != nil {
			t.Fatal(err)
		}
		c := rep.Current
		if c.Requests != 840 || !near(c.QueueMean, 0.472, 1e-9) || c.Sources["queue_s_mean"] != diagnose.SourceRequests {
			t.Errorf("requests %d, queue mean %v from %q; want 840 and the first-scheduled child's 0.472 from requests",
				c.Requests, deref(c.QueueMean), c.Sources["queue_s_mean"])
		}
	})
	t.Run("spans only, --model", func(t *testing.T) {
		// vLLM's V1 spans name no model: --model keeps the requests of the engine that served it.
		t.Parallel()
		d := newDB(t)
		w, _ := ranges(at)
		d.writeSamples(longOutput, w, rowOpts{})
		d.writeSpans(longOutput, w, spanOpts{children: 2, engine: "http://vllm:8000/metrics"})
		for model, want := range map[string]uint64{"Qwen/Qwen2.5-7B-Instruct-AWQ": 60, "other": 0} {
			rep, err := diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: w, Model: model})
			if err != nil && !errors.Is(err, diagnose.ErrNoData) {
				t.Fatal(err)
			}
			if rep.Current.Requests != want {
				t.Errorf("--model %s: %d requests, want %d", model, rep.Current.Requests, want)
			}
		}
	})
}

// TestTTFTFromArrival: a request's TTFT is from arrival whatever measured it — the gateway for a
// stream, the engine's span, or queue wait + scheduled-to-first-token from vLLM's timing object —
// never vLLM's time_to_first_token_ms alone, which starts at scheduling (a whole answer that
// waited 0.8 s in the queue had a TTFT of 0.05 s).
func TestTTFTFromArrival(t *testing.T) {
	t.Parallel()
	at := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Hour)
	d := newDB(t)
	w, _ := ranges(at)
	b, err := d.conn.PrepareBatch(d.ctx, `INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, stream,
		status_code, ttft_s, queue_s, scheduled_to_first_token_s)`)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		id                     string
		stream                 bool
		ttft, queue, scheduled *float64
	}{
		{"stream", true, f64(0.9), f64(0.8), f64(0.05)},
		{"whole-with-span", false, nil, f64(0.8), f64(0.06)},
		{"whole-timing-only", false, nil, f64(0.8), f64(0.05)},
	} {
		arrival := w.From.Add(10 * time.Second)
		if err := b.Append(r.id, r.id, arrival.Add(2*time.Second), arrival, arrival.Add(2*time.Second), "m", "/v1/chat/completions", r.stream,
			uint16(200), r.ttft, r.queue, r.scheduled); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	d.exec(`INSERT INTO engine_spans (event_id, request_id, engine_request_id, ts, start_ts, engine, queue_s, ttft_s, e2e_s)
		VALUES ('s', 'whole-with-span', 'chatcmpl-whole-with-span', ?, ?, 'vllm-0', 0.8, 0.86, 2)`, w.From.Add(12*time.Second), w.From.Add(10*time.Second))
	rep, err := diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: w})
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Current; c.Requests != 3 || !near(c.TTFTMean, (0.9+0.86+0.85)/3, 1e-9) {
		t.Errorf("requests %d, TTFT mean %v; want 3 and %v (from arrival for every request)", c.Requests, deref(c.TTFTMean), (0.9+0.86+0.85)/3)
	}
}

// FuzzParseTime: any accepted text is a UTC time that round-trips through RFC 3339.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-09-11T15:53:00Z", "2026-09-11 15:53", "2026-09-11T17:53:00.5+02:00", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := diagnose.ParseTime(s)
		if err != nil {
			return
		}
		if got.Location() != time.UTC {
			t.Fatalf("ParseTime(%q) = %v, not UTC", s, got)
		}
		back, err := diagnose.ParseTime(got.Format(time.RFC3339Nano))
		if err != nil || !back.Equal(got) {
			t.Fatalf("round trip of %q: %v, %v", s, back, err)
		}
	})
}

// TestSampledWindowCountsEveryRequest: a window of more than 100,000 requests is read through a
// sample (migrations/000016), yet its request count is exact (it reads requests alone) and its
// means and shares are the whole window's within the sample's error; the same requests split into
// windows under the bound give the exact figures.
func TestSampledWindowCountsEveryRequest(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	from := time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Second)
	const total = 150_000 // 20 ms apart: 50 minutes
	// Every fifth request waited 0.4 s in the queue; every fourth was cut at max_tokens.
	d.exec(`INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, status_code,
	            queue_s, e2e_s, finish_reason)
	        SELECT concat('e-', toString(number)), concat('r-', toString(number)), arrival + INTERVAL 1 SECOND, arrival,
	               arrival + INTERVAL 1 SECOND, 'm', '/v1/chat/completions', 200,
	               if(number % 5 = 0, 0.4, 0), 1.0, if(number % 4 = 0, 'length', 'stop')
	        FROM (SELECT number, toDateTime64(?, 6, 'UTC') + toIntervalMicrosecond(number * 20000) AS arrival
	              FROM numbers(150000))`, from.Format("2006-01-02 15:04:05.000000"))
	w := diagnose.Range{From: from, To: from.Add(time.Hour)}
	rep, err := diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: w, Baseline: diagnose.Range{From: from.Add(-time.Hour), To: from}})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Current
	if s.Requests != total {
		t.Errorf("requests %d, want every one of %d", s.Requests, total)
	}
	if !near(s.QueueMean, 0.08, 0.004) || !near(s.LengthShare, 0.25, 0.01) || !near(s.E2EMean, 1.0, 1e-9) {
		t.Errorf("sampled queue mean %v (want 0.08), length share %v (want 0.25), e2e mean %v (want 1.0)",
			deref(s.QueueMean), deref(s.LengthShare), deref(s.E2EMean))
	}
	// Counts read from the sample (models here) are scaled, marked as estimates in JSON and text.
	if s.SampleFactor < 2 || s.Versions["model"]["m"] < total*9/10 || s.Versions["model"]["m"] > total*11/10 {
		t.Errorf("sample factor %d, model count %d: want a factor above 1 and about %d", s.SampleFactor, s.Versions["model"]["m"], total)
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if text := out.String(); !strings.Contains(text, "model: window m (≈") || !strings.Contains(text, "≈: estimated from") {
		t.Errorf("the text does not mark the estimated counts:\n%s", text)
	}
	// Under the bound: the first 90,000 requests (30 minutes), every one.
	w = diagnose.Range{From: from, To: from.Add(30 * time.Minute)}
	rep, err = diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: w, Baseline: diagnose.Range{From: from.Add(-time.Hour), To: from}})
	if err != nil {
		t.Fatal(err)
	}
	s = rep.Current
	if s.SampleFactor != 0 || s.Versions["model"]["m"] != 90_000 {
		t.Errorf("90,000 requests: sample factor %d, model count %d; want exact (no factor) and 90000", s.SampleFactor, s.Versions["model"]["m"])
	}
	if s.Requests != 90_000 || !near(s.QueueMean, 0.08, 1e-9) || !near(s.LengthShare, 0.25, 1e-12) {
		t.Errorf("90,000 requests: %d, queue mean %v, length share %v; want 90000, 0.08 and 0.25 exactly",
			s.Requests, deref(s.QueueMean), deref(s.LengthShare))
	}
}
