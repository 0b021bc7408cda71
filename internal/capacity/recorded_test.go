package capacity_test

import (
	"bytes"
	"context"
	"math"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/capacity"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/services/detector/slo"
)

// The demo's recorded run (scripts/demo, vllmsim at real time, 256 slots): its engine's scrapes
// from before its first workload to just after its overload first queued, and the overload's
// arrivals through the gateway. The workloads ran long prompt, long output, normal (08:44:28 to
// 08:44:50 UTC), then the overload (14 requests a second) from 08:44:50.
var (
	demoNormalFrom = time.Date(2026, 12, 6, 8, 44, 28, 0, time.UTC)
	demoNormalTo   = time.Date(2026, 12, 6, 8, 44, 50, 0, time.UTC)
	demoEnd        = time.Date(2026, 12, 6, 8, 45, 40, 0, time.UTC)
)

// loadRecorded writes the recorded run into conn's database, every time moved by shift (the run
// ends an hour before the test, inside every table's TTL).
func loadRecorded(t *testing.T, conn driver.Conn, shift time.Duration) {
	t.Helper()
	for _, f := range []struct{ file, table, structure, columns string }{
		{"testdata/demo_engine_samples.jsonl", "engine_samples",
			"event_id String, ts DateTime64(6, 'UTC'), engine String, model String, up Bool, num_requests_running Nullable(Float64), " +
				"num_requests_waiting Nullable(Float64), kv_cache_usage_perc Nullable(Float64), histogram_sum Map(String, Float64), " +
				"histogram_count Map(String, Float64), counters Map(String, Float64)",
			"event_id, ts + toIntervalMicrosecond({shift_us:Int64}), engine, model, up, num_requests_running, num_requests_waiting, " +
				"kv_cache_usage_perc, histogram_sum, histogram_count, counters"},
		{"testdata/demo_overload_arrivals.jsonl", "requests", "request_id String, arrival_ts DateTime64(6, 'UTC')",
			"request_id, request_id, arrival_ts + toIntervalMicrosecond({shift_us:Int64}), arrival_ts + toIntervalMicrosecond({shift_us:Int64}), " +
				"arrival_ts + toIntervalMicrosecond({shift_us:Int64}), 'servescope/sim-7b', 200"},
	} {
		data, err := os.ReadFile(f.file)
		if err != nil {
			t.Fatal(err)
		}
		into := "(event_id, ts, engine, model, up, num_requests_running, num_requests_waiting, kv_cache_usage_perc, histogram_sum, histogram_count, counters)"
		if f.table == "requests" {
			into = "(event_id, request_id, arrival_ts, finished_ts, ts, model, status_code)"
		}
		ctx := chstore.WithParams(context.Background(), map[string]string{
			"structure": chstore.StringParam(f.structure), "data": chstore.StringParam(string(data)),
			"shift_us": strconv.FormatInt(shift.Microseconds(), 10)})
		if err := conn.Exec(ctx, "INSERT INTO "+f.table+" "+into+" SELECT "+f.columns+
			" FROM format(JSONEachRow, {structure:String}, {data:String})"); err != nil {
			t.Fatalf("load %s: %v", f.file, err)
		}
	}
}

// On the demo's recorded run, the capacity read in its normal workload (2 requests a second, the
// overload's own mix at a seventh of its rate) predicts the arrival rate at which the overload
// first queued within 30 %: the engine's first scrape with a request waiting, and the requests that
// arrived in the 20 s before it.
func TestRecordedDemoRunPredictsTheQueueingRate(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	shift := time.Now().UTC().Add(-time.Hour).Sub(demoEnd).Truncate(time.Second)
	loadRecorded(t, conn, shift)
	seqs, price := uint32(256), 0.25
	if err := slo.SyncEngines(context.Background(), ch, conn, &slo.Engines{Currency: "USD",
		Engines: map[string]slo.EngineSetting{"vllmsim": {MaxNumSeqs: &seqs, PricePerHour: &price}}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	es, err := capacity.Read(context.Background(), conn, demoNormalFrom.Add(shift), demoNormalTo.Add(shift), "")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	_ = capacity.WriteText(&b, es)
	t.Logf("the reading in the normal workload:\n%s", b.String())
	if len(es) != 1 || es[0].QueueAtRPS == nil || es[0].Limit != "slots" || es[0].Fit != "line" {
		t.Fatalf("capacity: %+v", es)
	}

	var firstQueue time.Time
	if err := conn.QueryRow(context.Background(), `SELECT minIf(ts, num_requests_waiting > 0) FROM engine_samples
		WHERE ts >= fromUnixTimestamp64Micro($1, 'UTC')`, demoNormalTo.Add(shift).UnixMicro()).Scan(&firstQueue); err != nil {
		t.Fatal(err)
	}
	var arrived uint64
	if err := conn.QueryRow(context.Background(), `SELECT count() FROM requests
		WHERE arrival_ts >= fromUnixTimestamp64Micro($1, 'UTC') AND arrival_ts < fromUnixTimestamp64Micro($2, 'UTC')`,
		firstQueue.Add(-20*time.Second).UnixMicro(), firstQueue.UnixMicro()).Scan(&arrived); err != nil {
		t.Fatal(err)
	}
	queued := float64(arrived) / 20
	predicted := *es[0].QueueAtRPS
	miss := math.Abs(predicted-queued) / queued
	t.Logf("predicted queueing at %.2f requests a second; the overload first queued %.1f s into it, at %.2f (%.0f%% off)",
		predicted, firstQueue.Sub(demoNormalTo.Add(shift)).Seconds(), queued, 100*miss)
	if queued < 10 || miss > 0.30 {
		t.Errorf("predicted %.2f requests a second, the overload first queued at %.2f: %.0f%% off (30%% allowed)", predicted, queued, 100*miss)
	}
}
