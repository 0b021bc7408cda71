package diagnose_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testclock"
	"github.com/servescope/servescope/internal/diagnose"
)

// writeKVSamples writes one engine's scrapes every 5 s over r: KV cache usage kv and
// vllm:num_preemptions_total (every release exposes it: vllm/v1/metrics/loggers.py,
// vllm/engine/metrics.py) rising from start by the given steps, one per scrape after the first;
// no counter at all when steps is nil (a server whose /metrics lacks it).
func (d *db) writeKVSamples(r diagnose.Range, engine string, kv float64, start float64, steps []float64) {
	d.t.Helper()
	b, err := d.conn.PrepareBatch(d.ctx, `INSERT INTO engine_samples (event_id, ts, engine, model, up, num_requests_running,
		num_requests_waiting, kv_cache_usage_perc, counters)`)
	if err != nil {
		d.t.Fatal(err)
	}
	c := start
	for k := 0; k < int(r.Seconds()/5); k++ {
		counters := map[string]float64{}
		if steps != nil {
			if k > 0 && k-1 < len(steps) {
				c += steps[k-1]
			}
			counters["num_preemptions_total"] = c
		}
		if err := b.Append(fmt.Sprintf("kv-%s-%d-%d", engine, r.From.UnixNano(), k), r.From.Add(time.Duration(k)*5*time.Second),
			engine, "Qwen/Qwen2.5-7B-Instruct-AWQ", true, f64(40), f64(0), f64(kv), counters); err != nil {
			d.t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		d.t.Fatal(err)
	}
}

// writeStatsLines writes main's periodic stats lines as the collector stores them: per engine
// ("Engine 000: ... Preemptions: 3, ...", printed only when the interval had any; engines 1), or
// aggregated ("2 Engines Aggregated: ...", the engines' preemptions summed; engines 2), every 10 s.
func (d *db) writeStatsLines(r diagnose.Range, engines uint16, preemptions []uint32) {
	d.t.Helper()
	b, err := d.conn.PrepareBatch(d.ctx, `INSERT INTO engine_logs (event_id, ts, engine, line, level, logger, engine_index, engines,
		message, running, waiting, kv_cache_usage_perc, preemptions)`)
	if err != nil {
		d.t.Fatal(err)
	}
	for k, p := range preemptions {
		prefix, index := "Engine 000: ", "0"
		if engines > 1 {
			prefix, index = fmt.Sprintf("%d Engines Aggregated: ", engines), ""
		}
		msg := prefix + "Avg prompt throughput: 900.0 tokens/s, Avg generation throughput: 4000.0 tokens/s, Running: 40 reqs, Waiting: 0 reqs, "
		var pp *uint32
		if p > 0 {
			msg += fmt.Sprintf("Preemptions: %d, ", p)
			pp = &p
		}
		msg += "GPU KV cache usage: 62.0%, Prefix cache hit rate: 30.1%"
		if err := b.Append(fmt.Sprintf("log-%d-%d", r.From.UnixNano(), k), r.From.Add(time.Duration(k)*10*time.Second), "vllm",
			"(APIServer pid=7) INFO 12-01 09:01:10 [v1/metrics/loggers.py:236] "+msg, "INFO", "v1/metrics/loggers.py:236", index, &engines,
			msg, u32(40), u32(0), f64(0.62), pp); err != nil {
			d.t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		d.t.Fatal(err)
	}
}

// TestPreemptionsAreKVPressure: preemptions are the direct sign that the KV cache ran out, whatever
// the usage samples show; diagnose reads them from vllm:num_preemptions_total (restarts handled),
// else from main's stats lines, names them, and says "cannot tell" rather than "clear" when
// neither recorded them.
func TestPreemptionsAreKVPressure(t *testing.T) {
	t.Parallel()
	at := testclock.EvalTime(t, 2*time.Hour)
	cases := []struct {
		name   string
		write  func(d *db, w, b diagnose.Range)
		status string
		want   *float64 // preemptions
		says   []string // in the branch's conclusion
	}{
		{"counter rises under a 62% gauge", func(d *db, w, b diagnose.Range) {
			d.writeKVSamples(b, "vllm-0", 0.30, 100, []float64{})
			// 100 → 103 → 103 → 110, and a second engine that restarted (7 → 0): 10 preemptions.
			d.writeKVSamples(w, "vllm-0", 0.62, 100, []float64{3, 0, 7})
			d.writeKVSamples(w, "vllm-1", 0.40, 7, []float64{-7})
		}, diagnose.StatusFinding, f64(10), []string{"preempted 10 running requests", "the usage samples (max 62.0%) missed"}},
		{"counter stands still", func(d *db, w, b diagnose.Range) {
			d.writeKVSamples(w, "vllm-0", 0.97, 900, []float64{0, 0})
		}, diagnose.StatusClear, f64(0), []string{"no preemption"}},
		{"stats lines only, per engine", func(d *db, w, b diagnose.Range) {
			d.writeStatsLines(w, 1, []uint32{0, 3, 0, 4})
		}, diagnose.StatusFinding, f64(7), []string{"preempted 7 running requests"}},
		{"stats lines only, aggregated", func(d *db, w, b diagnose.Range) {
			d.writeStatsLines(w, 2, []uint32{5, 0})
		}, diagnose.StatusFinding, f64(5), []string{"preempted 5 running requests"}},
		{"gauge only, near full", func(d *db, w, b diagnose.Range) {
			d.writeKVSamples(w, "vllm-0", 0.97, 0, nil)
		}, diagnose.StatusFinding, nil, []string{"97.0%", "cannot be told"}},
		{"gauge only, low", func(d *db, w, b diagnose.Range) {
			d.writeKVSamples(w, "vllm-0", 0.20, 0, nil)
		}, diagnose.StatusClear, nil, []string{"far from full (preemptions were not recorded)"}},
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
			br := branch(t, rep, diagnose.BranchKVPressure)
			if br.Status != tc.status || slices.Contains(rep.Findings, diagnose.BranchKVPressure) != (tc.status == diagnose.StatusFinding) {
				t.Errorf("kv_pressure %s (findings %v), want %s: %q", br.Status, rep.Findings, tc.status, br.Conclusion)
			}
			if (tc.want == nil) != (rep.Current.Preemptions == nil) || (tc.want != nil && *tc.want != *rep.Current.Preemptions) {
				t.Errorf("preemptions %v from %q, want %v", deref(rep.Current.Preemptions), rep.Current.PreemptionsSource, deref(tc.want))
			}
			for _, s := range tc.says {
				if !strings.Contains(br.Conclusion, s) {
					t.Errorf("conclusion %q lacks %q", br.Conclusion, s)
				}
			}
		})
	}
}
