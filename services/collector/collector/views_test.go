package collector

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/testclock"
	"github.com/servescope/servescope/dev/testenv"
)

// sampleRow is one engine_samples row as the consumer writes it.
type sampleRow struct {
	id        string
	at        time.Duration // after the test's base time
	engine    string
	up        bool
	running   *float64
	startTime float64
	hist      map[string][2]float64 // name → (sum, count)
}

func insertSamples(t *testing.T, conn driver.Conn, base time.Time, rows []sampleRow) {
	t.Helper()
	ctx := context.Background()
	b, err := conn.PrepareBatch(ctx, "INSERT INTO engine_samples (event_id, ts, engine, model, up, scrape_error, num_requests_running, num_requests_waiting, kv_cache_usage_perc, gauges, counters, histogram_sum, histogram_count)")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		sums, counts := map[string]float64{}, map[string]float64{}
		for name, sc := range r.hist {
			sums[name], counts[name] = sc[0], sc[1]
		}
		gauges := map[string]float64{}
		if r.startTime != 0 {
			gauges["process_start_time_seconds"] = r.startTime
		}
		scrapeErr := ""
		var waiting, kv *float64
		if !r.up {
			scrapeErr = "connection refused"
		} else {
			w, k := 1.0, 0.25
			waiting, kv = &w, &k
		}
		if err := b.Append(r.id, base.Add(r.at), r.engine, "m", r.up, scrapeErr, r.running, waiting, kv, gauges, map[string]float64{}, sums, counts); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

func f(v float64) *float64 { return &v }

type windowRow struct {
	Engine         string   `ch:"engine"`
	Requests       *float64 `ch:"requests"`
	QueueSeconds   *float64 `ch:"queue_s"`
	PrefillSeconds *float64 `ch:"prefill_s"`
	TTFTSeconds    *float64 `ch:"ttft_s"`
	ITLSeconds     *float64 `ch:"itl_s"`
	DecodeSeconds  *float64 `ch:"decode_s"`
	E2ESeconds     *float64 `ch:"e2e_s"`
	PromptTokens   *float64 `ch:"prompt_tokens"`
	GenTokens      *float64 `ch:"generation_tokens"`
	Restarts       uint32   `ch:"restarts"`
	MaxRunning     *float64 `ch:"max_running"`
	Samples        uint64   `ch:"samples"`
	FailedScrapes  uint64   `ch:"failed_scrapes"`
	MaxKV          *float64 `ch:"max_kv_cache_usage_perc"`
	MaxWaiting     *float64 `ch:"max_waiting"`
}

// TestEngineViews checks the migration 000003 views against real ClickHouse with rows inserted
// the way the consumer writes them.
func TestEngineViews(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	// Recent timestamps (engine_samples has a 14-day TTL) from testclock: pinned at 23:59:30 the
	// samples straddle midnight and so two daily partitions.
	base := testclock.EvalTime(t, time.Hour)
	e2e := "e2e_request_latency_seconds"

	// Engine "a" restarts between 20 s and 30 s (count drops, process start time changes); one
	// failed scrape and one duplicated row (a re-delivered event) sit inside the window.
	restart := []struct {
		at         time.Duration
		count, sum float64
		start      float64
	}{{0, 100, 200, 1000}, {10 * time.Second, 110, 220, 1000}, {20 * time.Second, 130, 270, 1000},
		{30 * time.Second, 5, 10, 2000}, {40 * time.Second, 25, 60, 2000}, {50 * time.Second, 40, 90, 2000}}
	var rows []sampleRow
	for i, p := range restart {
		rows = append(rows, sampleRow{id: "a" + string(rune('0'+i)), at: p.at, engine: "a", up: true, running: f(float64(10 * i)), startTime: p.start,
			hist: map[string][2]float64{e2e: {p.sum, p.count}}})
	}
	dup := rows[2]
	// dup keeps the event_id: the consumer wrote the same event twice.
	rows = append(rows, dup, sampleRow{id: "a-down", at: 15 * time.Second, engine: "a", up: false})

	// Engine "c": every per-request histogram of the overload workload (docs/measurements.md,
	// Four workloads); 10 requests per 10 s with known means, and a baseline
	// sample 5 s before the window.
	means := map[string]float64{
		"request_queue_time_seconds": 0.472, "request_prefill_time_seconds": 0.288, "time_to_first_token_seconds": 0.853,
		"request_decode_time_seconds": 18.61, e2e: 19.46, "request_prompt_tokens": 44, "request_generation_tokens": 128,
	}
	for i := 0; i <= 5; i++ {
		h := map[string][2]float64{}
		n := float64(1000 + 10*i) // cumulative since an earlier start
		for name, m := range means {
			h[name] = [2]float64{n * m, n}
		}
		// Inter-token latency is observed per token: 127 observations per request.
		h["inter_token_latency_seconds"] = [2]float64{n * 127 * 0.147, n * 127}
		rows = append(rows, sampleRow{id: "c" + string(rune('0'+i)), at: 5*time.Second + time.Duration(i)*10*time.Second, engine: "c", up: true, running: f(256), startTime: 500, hist: h})
	}
	insertSamples(t, conn, base, rows)

	ctx := clickhouse.Context(context.Background(), clickhouse.WithParameters(clickhouse.Parameters{
		"from": base.Add(10 * time.Second).Format("2006-01-02 15:04:05.000000"),
		"to":   base.Add(40 * time.Second).Format("2006-01-02 15:04:05.000000"),
	}))
	var got []windowRow
	err := conn.Select(ctx, &got, "SELECT engine, requests, queue_s, prefill_s, ttft_s, itl_s, decode_s, e2e_s, prompt_tokens, generation_tokens, restarts, max_running, samples, failed_scrapes, max_kv_cache_usage_perc, max_waiting FROM engine_window_averages(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')}) ORDER BY engine")
	if err != nil {
		t.Fatalf("query engine_window_averages: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("%d rows, want engines a and c: %+v", len(got), got)
	}
	a, c := got[0], got[1]
	approx := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || math.Abs(*got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %g", name, deref(got), want)
		}
	}
	// a: increases 20, then 5 across the restart (the new value itself), then 20.
	approx("a requests", a.Requests, 45)
	approx("a e2e_s", a.E2ESeconds, 110.0/45)
	if a.Restarts != 1 || a.FailedScrapes != 1 || a.Samples != 4 {
		t.Errorf("a restarts %d failed %d samples %d, want 1, 1, 4 (the duplicate row counted once)", a.Restarts, a.FailedScrapes, a.Samples)
	}
	approx("a max_running", a.MaxRunning, 40)
	if a.QueueSeconds != nil {
		t.Errorf("a queue_s %v, want NULL (no such histogram)", *a.QueueSeconds)
	}
	// c: the window [10 s, 40 s] starts from the sample at 5 s and ends at the one at 35 s:
	// three intervals of 10 requests.
	approx("c requests", c.Requests, 30)
	for name, want := range map[string]*float64{"request_queue_time_seconds": c.QueueSeconds, "request_prefill_time_seconds": c.PrefillSeconds,
		"time_to_first_token_seconds": c.TTFTSeconds, "request_decode_time_seconds": c.DecodeSeconds, e2e: c.E2ESeconds,
		"request_prompt_tokens": c.PromptTokens, "request_generation_tokens": c.GenTokens} {
		approx("c "+name, want, means[name])
	}
	approx("c itl_s", c.ITLSeconds, 0.147)
	approx("c max_running", c.MaxRunning, 256)
	approx("c max_kv", c.MaxKV, 0.25)

	// The long form has the same numbers per histogram.
	var inc struct {
		Count float64  `ch:"count_increase"`
		Sum   float64  `ch:"sum_increase"`
		Avg   *float64 `ch:"average"`
	}
	if err := conn.QueryRow(ctx, "SELECT count_increase, sum_increase, average FROM engine_window_histograms(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')}) WHERE engine = 'a' AND metric = 'e2e_request_latency_seconds'").ScanStruct(&inc); err != nil {
		t.Fatalf("query engine_window_histograms: %v", err)
	}
	if inc.Count != 45 || inc.Sum != 110 {
		t.Errorf("a e2e increase count %g sum %g, want 45 and 110", inc.Count, inc.Sum)
	}

	// The timeline: every scrape of a in time order, the failed one with its error, the
	// re-delivered row once.
	var tl []struct {
		TS      time.Time `ch:"ts"`
		Up      bool      `ch:"up"`
		Running *float64  `ch:"running"`
		Err     string    `ch:"scrape_error"`
	}
	if err := conn.Select(ctx, &tl, "SELECT ts, up, running, scrape_error FROM engine_timeline WHERE engine = 'a' ORDER BY ts"); err != nil {
		t.Fatalf("query engine_timeline: %v", err)
	}
	if len(tl) != 7 || tl[2].Up || tl[2].Err != "connection refused" || *tl[6].Running != 50 {
		t.Errorf("timeline of a: %+v", tl)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
