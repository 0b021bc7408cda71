package capacity_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/capacity"
	"github.com/servescope/servescope/services/detector/slo"
)

// sample is one scrape of the engine: gauges and the cumulative histograms capacity_window reads.
type sample struct {
	at           time.Time
	running, kv  float64
	waiting      float64
	hsum, hcount map[string]float64
}

// history writes an engine's scrapes every 10 s from t0 − 10 s to t0 + 100 s: 2 requests finish in
// each interval (E2E 2.0 s, 1.9 s in a slot, 100 output and 50 prompt tokens each), and the
// engine's steps compute x tokens at a step time of 0.010 + 0.001·x s, x cycling through 2, 12 and
// 22 (10 steps an interval); running stays at 0.4 with 0.4 % of the KV cache.
func history(t *testing.T, conn driver.Conn, engine string, t0 time.Time) (tokensPerStep float64) {
	t.Helper()
	cum := map[string]float64{}
	cnt := map[string]float64{}
	var samples []sample
	xs := []float64{2, 12, 22}
	var windowSum, windowCount float64
	for k := -1; k <= 10; k++ {
		if k >= 0 {
			x := xs[k%3]
			add := func(m string, n, v float64) { cnt[m] += n; cum[m] += n * v }
			add("e2e_request_latency_seconds", 2, 2.0)
			add("request_inference_time_seconds", 2, 1.9)
			add("request_queue_time_seconds", 2, 0)
			add("request_generation_tokens", 2, 100)
			add("request_prompt_tokens", 2, 50)
			add("iteration_tokens_total", 10, x)
			add("inter_token_latency_seconds", 10*x, 0.010+0.001*x)
			if k >= 1 { // the window's intervals: from the sample at t0 on
				windowSum += 10 * x
				windowCount += 10
			}
		}
		s := sample{at: t0.Add(time.Duration(k) * 10 * time.Second), running: 0.4, kv: 0.004, hsum: map[string]float64{}, hcount: map[string]float64{}}
		for m := range cum {
			s.hsum[m], s.hcount[m] = cum[m], cnt[m]
		}
		samples = append(samples, s)
	}
	for i, s := range samples {
		if err := conn.Exec(context.Background(), `INSERT INTO engine_samples (event_id, ts, engine, model, up, num_requests_running,
				num_requests_waiting, kv_cache_usage_perc, histogram_sum, histogram_count)
			SELECT $1, fromUnixTimestamp64Micro($2, 'UTC'), $3, 'm', true, $4, $5, $6, $7, $8`,
			fmt.Sprintf("%s-%d", engine, i), s.at.UnixMicro(), engine, s.running, s.waiting, s.kv, s.hsum, s.hcount); err != nil {
			t.Fatal(err)
		}
	}
	return windowSum / windowCount
}

func near(t *testing.T, what string, got *float64, want float64) {
	t.Helper()
	if got == nil || math.Abs(*got-want) > 1e-6*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %g", what, deref(got), want)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// capacity_window's arithmetic on an engine whose figures are known: Little's law, the KV and
// slot limits (the slot limit from the engines file for one engine, from its start-up log line
// for another, unknown for a third, whose KV cache then comes first), the step-time line fitted
// through the scrape intervals, and the arrival rate at which requests start to queue.
func TestCapacityWindow(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	t0 := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	xNow := history(t, conn, "e-config", t0)
	history(t, conn, "e-log", t0)
	history(t, conn, "e-none", t0)
	seqs := uint32(64)
	if err := slo.SyncEngines(context.Background(), ch, conn, &slo.Engines{Currency: "USD",
		Engines: map[string]slo.EngineSetting{"e-config": {MaxNumSeqs: &seqs}}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(context.Background(), `INSERT INTO engine_logs (event_id, ts, engine, message)
		VALUES ('l1', now64(6) - INTERVAL 2 HOUR, 'e-log', 'non-default args: {''model'': ''m'', ''max_num_seqs'': 48}')`); err != nil {
		t.Fatal(err)
	}
	es, err := capacity.Read(context.Background(), conn, t0, t0.Add(100*time.Second), "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 {
		t.Fatalf("%d engines, want 3: %+v", len(es), es)
	}
	for _, c := range []struct {
		engine, source, limit string
		limitRunning          float64
	}{{"e-config", "engine_config (engine)", "slots", 64}, {"e-log", "engine log", "slots", 48}, {"e-none", "", "kv", 100}} {
		var e capacity.Engine
		for _, x := range es {
			if x.Engine == c.engine {
				e = x
			}
		}
		t.Run(c.engine, func(t *testing.T) {
			near(t, "arrival_rps", e.ArrivalRPS, 0.2)
			near(t, "inference_s", e.InferenceS, 1.9)
			near(t, "little_running", e.LittleRunning, 0.38)
			near(t, "kv_full_running", e.KVFullRunning, 100)
			if e.SlotLimitSource != c.source || e.Limit != c.limit {
				t.Errorf("slot limit from %q, limit %q; want %q, %q", e.SlotLimitSource, e.Limit, c.source, c.limit)
			}
			near(t, "limit_running", e.LimitRunning, c.limitRunning)
			// The intervals between the scrapes before to that carry both histograms: t0 to t0 + 90 s.
			if e.Fit != "line" || e.FitIntervals != 9 {
				t.Errorf("fit %s over %d intervals, want a line over 9", e.Fit, e.FitIntervals)
			}
			near(t, "itl_intercept_s", e.ITLInterceptS, 0.010)
			near(t, "itl_slope_s", e.ITLSlopeS, 0.001)
			near(t, "tokens_per_step", e.TokensPerStep, xNow)
			tokens := c.limitRunning * (1 + 50.0/100)
			near(t, "tokens_at_limit", e.TokensAtLimit, tokens)
			inference := 1.9 + 100*((0.010+0.001*tokens)-(0.010+0.001*xNow))
			near(t, "inference_at_limit_s", e.InferenceAtLimitS, inference)
			near(t, "queue_at_rps", e.QueueAtRPS, c.limitRunning/inference)
			near(t, "headroom_rps", e.HeadroomRPS, c.limitRunning/inference-0.2)
			var b bytes.Buffer
			if err := capacity.WriteText(&b, []capacity.Engine{e}); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{
				"Little's law: 0.20 req/s × 1.900 s = 0.4 running",
				fmt.Sprintf("requests start to queue at %.0f ÷ %.3f s = %.2f req/s", c.limitRunning, inference, c.limitRunning/inference),
			} {
				if !strings.Contains(b.String(), want) {
					t.Errorf("the text lacks %q:\n%s", want, b.String())
				}
			}
		})
	}
}

// An engine that finished nothing in the window cannot tell its capacity, and says so.
func TestCapacityCannotTell(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	t0 := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	if err := conn.Exec(context.Background(), `INSERT INTO engine_samples (event_id, ts, engine, model, up, num_requests_running)
		SELECT toString(number), fromUnixTimestamp64Micro($1, 'UTC') + toIntervalSecond(number * 10), 'idle', 'm', true, 0 FROM numbers(10)`,
		t0.UnixMicro()); err != nil {
		t.Fatal(err)
	}
	es, err := capacity.Read(context.Background(), conn, t0, t0.Add(100*time.Second), "")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	_ = capacity.WriteText(&b, es)
	if len(es) != 1 || es[0].QueueAtRPS != nil || !strings.Contains(b.String(), "cannot tell: no request finished in the window") {
		t.Errorf("engines %+v, text:\n%s", es, b.String())
	}
}
