package history_test

import (
	"context"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/history"
	"github.com/servescope/servescope/dev/testenv"
)

// spec is a small day: 4,800 requests, two engines scraped every 10 minutes, so a test's INSERTs
// stay in seconds on a loaded machine while the daily cycle and every table are there.
func spec() history.Spec {
	s := history.Normal(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), 24*time.Hour, 4800)
	s.Engines = 2
	s.SampleInterval, s.StatsLogInterval = 10*time.Minute, 10*time.Minute
	return s
}

func generate(t *testing.T, s history.Spec, opt history.Options) (driver.Conn, history.Counts) {
	t.Helper()
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := history.ExtendRetention(ctx, conn, s); err != nil {
		t.Fatal(err)
	}
	counts, err := s.Generate(ctx, conn, opt)
	if err != nil {
		t.Fatal(err)
	}
	return conn, counts
}

func query[T any](t *testing.T, conn driver.Conn, q string, args ...any) T {
	t.Helper()
	var v T
	if err := conn.QueryRow(context.Background(), q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func TestGenerateFillsEveryTableWithTheNormalDaysShape(t *testing.T) {
	s := spec()
	conn, counts := generate(t, s, history.Options{ChunkRequests: 1500})

	// Every table's count, from the spec: samples and log lines per engine and step; spans for
	// the requests that succeeded (99% of them), as the engine reports no span for a 400.
	for table, want := range map[string]uint64{
		"requests_started": 4800, "requests": 4800, "app_records": 4800,
		"engine_samples": 144 * 2, "engine_logs": 144 * 2,
	} {
		if counts[table] != want {
			t.Errorf("counts[%s] = %d, want %d", table, counts[table], want)
		}
		if got := query[uint64](t, conn, "SELECT count() FROM "+table+" FINAL"); got != want {
			t.Errorf("%s holds %d rows, want %d", table, got, want)
		}
	}
	ok := query[uint64](t, conn, "SELECT countIf(status_code = 200) FROM requests")
	if counts["engine_spans"] != ok || ok < 4700 || ok > 4790 {
		t.Errorf("engine_spans %d, requests with status 200 %d: want equal, about 99%% of 4800", counts["engine_spans"], ok)
	}

	// Ids are unique and shaped like the real ones.
	if n := query[uint64](t, conn, "SELECT uniqExact(request_id) FROM requests"); n != 4800 {
		t.Errorf("%d distinct request ids, want 4800", n)
	}
	if bad := query[uint64](t, conn, "SELECT countIf(length(request_id) != 27 OR length(trace_id) != 32 OR NOT match(trace_id, '^[0-9a-f]+$')) FROM requests"); bad != 0 {
		t.Errorf("%d requests with an id not shaped as a KSUID or a trace id", bad)
	}

	// The daily cycle: the 14:00 hour carries (1+0.6)/(1−0.6) = 4× the 02:00 hour's arrivals.
	peak := query[uint64](t, conn, "SELECT count() FROM requests WHERE toHour(arrival_ts) = 14")
	trough := query[uint64](t, conn, "SELECT count() FROM requests WHERE toHour(arrival_ts) = 2")
	if trough == 0 || float64(peak)/float64(trough) < 3 || float64(peak)/float64(trough) > 5 {
		t.Errorf("arrivals at 14:00 %d, at 02:00 %d: want a ratio near 4", peak, trough)
	}
	if first := query[time.Time](t, conn, "SELECT min(arrival_ts) FROM requests"); first.Before(s.Start()) {
		t.Errorf("first arrival %v is before the history's start %v", first, s.Start())
	}
	if last := query[time.Time](t, conn, "SELECT max(arrival_ts) FROM requests"); !last.Before(s.End) {
		t.Errorf("last arrival %v is not before the history's end %v", last, s.End)
	}

	// The views the detector and the CLI read see the rows with the drawn distributions: TTFT
	// log-normal around 0.05 s, 2% of answers cut at max_tokens, one app record per request.
	ttft := query[float64](t, conn, "SELECT quantile(0.5)(ttft_s) FROM request_facts_window(from = {from:String}, to = {to:String}) WHERE status_code = 200",
		clickhouse.Named("from", s.Start().Format("2006-01-02 15:04:05")), clickhouse.Named("to", s.End.Add(time.Hour).Format("2006-01-02 15:04:05")))
	if ttft < 0.045 || ttft > 0.055 {
		t.Errorf("median ttft_s %.4f, want about 0.05", ttft)
	}
	if cut := query[float64](t, conn, "SELECT countIf(finish_reason = 'length') / count() FROM requests WHERE status_code = 200"); cut < 0.01 || cut > 0.03 {
		t.Errorf("share cut at max_tokens %.3f, want about 0.02", cut)
	}
	if n := query[uint64](t, conn, "SELECT countIf(app_records = 1) FROM request_facts"); n != 4800 {
		t.Errorf("%d requests with their one app record in request_facts, want 4800", n)
	}

	// Engine samples carry vLLM's histograms with counts rising as the day's requests do.
	rise := query[bool](t, conn, `SELECT argMax(histogram_count['e2e_request_latency_seconds'], ts) > argMin(histogram_count['e2e_request_latency_seconds'], ts)
		AND length(argMax(histogram_buckets['e2e_request_latency_seconds'], ts)) > 5 FROM engine_samples WHERE engine = 'vllm-0'`)
	if !rise {
		t.Error("engine_samples: vllm-0's e2e_request_latency_seconds histogram does not rise over the day or has no buckets")
	}
}

// A generation from a later time holds exactly the whole history's rows there, so a database of
// one day and one of a month compare the same newest day.
func TestGenerateFromAWindowHoldsTheWholeHistorysRowsThere(t *testing.T) {
	s := spec()
	from := s.End.Add(-6 * time.Hour)
	whole, _ := generate(t, s, history.Options{})
	part, _ := generate(t, s, history.Options{From: from})
	sum := func(conn driver.Conn, q string) uint64 {
		return query[uint64](t, conn, q, clickhouse.Named("from", from.Format("2006-01-02 15:04:05")))
	}
	for _, q := range []string{
		"SELECT groupBitXor(cityHash64(request_id, ttft_s, e2e_s, status_code, completion_tokens)) FROM requests WHERE arrival_ts >= {from:DateTime64(6)}",
		"SELECT groupBitXor(cityHash64(request_id, retrieval_top_score, passage_ids)) FROM app_records WHERE ts >= {from:DateTime64(6)} + INTERVAL 1 MINUTE",
		"SELECT groupBitXor(cityHash64(event_id, ts, histogram_count)) FROM engine_samples WHERE ts >= {from:DateTime64(6)}",
		"SELECT groupBitXor(cityHash64(event_id, line)) FROM engine_logs WHERE ts >= {from:DateTime64(6)}",
		"SELECT count() FROM requests WHERE arrival_ts >= {from:DateTime64(6)}",
	} {
		if w, p := sum(whole, q), sum(part, q); w != p || w == 0 {
			t.Errorf("%s: whole history %d, generated from %v %d", q, w, from, p)
		}
	}
}

// Chunks only bound the INSERTs: any chunk size, and the engine-major order the samples are
// numbered in, give the same rows.
func TestGenerateGivesTheSameRowsForAnyChunkSize(t *testing.T) {
	s := spec()
	small, _ := generate(t, s, history.Options{ChunkRequests: 700})
	large, _ := generate(t, s, history.Options{ChunkRequests: 1_000_000})
	for _, q := range []string{
		"SELECT groupBitXor(cityHash64(request_id, event_id, ttft_s, e2e_s, status_code)) FROM requests",
		"SELECT groupBitXor(cityHash64(event_id, request_id, span_id, queue_s)) FROM engine_spans",
		"SELECT groupBitXor(cityHash64(event_id, engine, ts, histogram_count, num_requests_running)) FROM engine_samples",
		"SELECT groupBitXor(cityHash64(event_id, engine, offset, line)) FROM engine_logs",
	} {
		if a, b := query[uint64](t, small, q), query[uint64](t, large, q); a != b || a == 0 {
			t.Errorf("%s: chunks of 700 requests %d, of 1,000,000 %d", q, a, b)
		}
	}
	// Each engine's step is one sample of its own time.
	if dup := query[int64](t, small, "SELECT toInt64(count()) - toInt64(uniqExact(engine, ts)) FROM engine_samples"); dup != 0 {
		t.Errorf("%d engine samples share an engine and a time with another", dup)
	}
}

// Two windows that meet, each generated with its tables apart, hold the whole history's rows
// once; generations side by side in one database (requests beside samples) keep apart.
func TestGenerateWindowsThatMeetHoldEveryRowOnce(t *testing.T) {
	s := spec()
	at := s.End.Add(-7 * time.Hour)
	whole, _ := generate(t, s, history.Options{})
	parts, _ := generate(t, s, history.Options{From: at})
	ctx := context.Background()
	side := make(chan error, 1)
	go func() {
		_, err := s.Generate(ctx, parts, history.Options{To: at, Tables: []string{"engine_samples", "engine_logs"}})
		side <- err
	}()
	_, err := s.Generate(ctx, parts, history.Options{To: at, ChunkRequests: 500, Tables: []string{"requests_started", "requests", "app_records", "engine_spans"}})
	if serr := <-side; err != nil || serr != nil {
		t.Fatalf("requests: %v; samples beside them: %v", err, serr)
	}
	for _, table := range history.Tables {
		q := "SELECT count(), groupBitXor(cityHash64(event_id)) FROM " + table
		var wn, pn, wx, px uint64
		if err := whole.QueryRow(ctx, q).Scan(&wn, &wx); err != nil {
			t.Fatal(err)
		}
		if err := parts.QueryRow(ctx, q).Scan(&pn, &px); err != nil {
			t.Fatal(err)
		}
		if wn != pn || wx != px || wn == 0 {
			t.Errorf("%s: whole history %d rows (xor %x), two windows %d rows (xor %x)", table, wn, wx, pn, px)
		}
	}
	if _, err := s.Generate(ctx, parts, history.Options{Tables: []string{"request"}}); err == nil {
		t.Error("Generate accepted an unknown table")
	}
}

func TestValidateRejectsImpossibleSpecs(t *testing.T) {
	for name, mutate := range map[string]func(*history.Spec){
		"no requests":       func(s *history.Spec) { s.Requests = 0 },
		"no span":           func(s *history.Spec) { s.Span = 0 },
		"no engines":        func(s *history.Spec) { s.Engines = 0 },
		"amplitude of 1":    func(s *history.Spec) { s.Amplitude = 1 },
		"app share above 1": func(s *history.Spec) { s.AppShare = 1.5 },
		"zero interval":     func(s *history.Spec) { s.SampleInterval = 0 },
	} {
		s := spec()
		mutate(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, s)
		}
	}
	if err := spec().Validate(); err != nil {
		t.Errorf("the test spec: %v", err)
	}
}
