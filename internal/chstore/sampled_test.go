package chstore_test

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
)

// sampledHistory writes n requests arriving 20 ms apart from base, generated inside ClickHouse:
// the gateway's rows carry no queue wait, so every request's queue_s comes from its engine span
// (0.4 s for every fifth request, 0 otherwise), which shows the sample is the same on both sides
// of the join. Every third request has an application record by its request_id (app "by-id"),
// every seventh of the rest a trace id whose only record is the trace's (app "by-trace").
func sampledHistory(t *testing.T, ctx context.Context, conn driver.Conn, base time.Time, n int) {
	t.Helper()
	params := chstore.WithParams(ctx, map[string]string{"base": chTime(base)})
	for _, q := range []string{
		`INSERT INTO requests (event_id, request_id, trace_id, ts, arrival_ts, finished_ts, model, endpoint, status_code)
		 SELECT concat('e-', toString(number)), concat('r-', toString(number)),
		        if(number % 7 = 0 AND number % 3 != 0, concat('t-', toString(number)), ''),
		        arrival + INTERVAL 1 SECOND, arrival, arrival + INTERVAL 1 SECOND, 'm', '/v1/chat/completions', 200
		 FROM (SELECT number, toDateTime64({base:String}, 6, 'UTC') + toIntervalMicrosecond(number * 20000) AS arrival
		       FROM numbers(` + strconv.Itoa(n) + `))`,
		`INSERT INTO engine_spans (event_id, request_id, engine_request_id, trace_id, ts, engine, queue_s, prefill_s, decode_s, e2e_s)
		 SELECT concat('s-', toString(number)), concat('r-', toString(number)), concat('chatcmpl-r-', toString(number)),
		        if(number % 7 = 0 AND number % 3 != 0, concat('t-', toString(number)), ''),
		        toDateTime64({base:String}, 6, 'UTC') + toIntervalMicrosecond(number * 20000 + 1000000),
		        'vllm-0', if(number % 5 = 0, 0.4, 0), 0.1, 0.5, 1.0
		 FROM numbers(` + strconv.Itoa(n) + `)`,
		`INSERT INTO app_records (event_id, request_id, trace_id, ts, app)
		 SELECT concat('a-', toString(number)),
		        if(number % 3 = 0, concat('r-', toString(number)), concat('otel-', toString(number))),
		        if(number % 3 = 0, '', concat('t-', toString(number))),
		        toDateTime64({base:String}, 6, 'UTC') + toIntervalMicrosecond(number * 20000 + 500000),
		        if(number % 3 = 0, 'by-id', 'by-trace')
		 FROM numbers(` + strconv.Itoa(n) + `) WHERE number % 3 = 0 OR number % 7 = 0`,
	} {
		if err := conn.Exec(params, q); err != nil {
			t.Fatalf("generate rows: %v", err)
		}
	}
}

// TestSampledTimingsAboveTheBound: request_timings_sampled and request_phases_sampled
// (migrations/000016) give every request, exactly request_timings_window's and
// request_facts_window's rows, below 100,000 requests in the range; above it, a deterministic
// sample (the same on every read) of 50,000 to 100,000 with sample_factor the requests each row
// stands for, whose weighted count, share and app share estimate the whole range's.
func TestSampledTimingsAboveTheBound(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	base := time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Second)
	const total = 150_000 // 50 minutes at 20 ms
	sampledHistory(t, ctx, conn, base, total)

	type figures struct {
		rows, withQueue                uint64
		factorMin, factorMax, weighted float64
		queueShare, byID, byTrace      float64
	}
	// read gives a view's figures; request_timings_sampled has no app (0 for its shares).
	read := func(view string, to time.Time) figures {
		t.Helper()
		var f figures
		apps := `sumIf(sample_factor, app = 'by-id') / sum(sample_factor), sumIf(sample_factor, app = 'by-trace') / sum(sample_factor)`
		if view == "request_timings_sampled" {
			apps = "toFloat64(0), toFloat64(0)"
		}
		q := `SELECT count(), min(sample_factor), max(sample_factor), sum(sample_factor),
		             countIf(queue_s IS NOT NULL),
		             sumIf(sample_factor, queue_s > 0) / sum(sample_factor), ` + apps + `
		      FROM ` + view + `(from = {from:String}, to = {to:String})`
		if err := conn.QueryRow(chstore.WithParams(ctx, map[string]string{"from": chTime(base), "to": chTime(to)}), q).Scan(
			&f.rows, &f.factorMin, &f.factorMax, &f.weighted, &f.withQueue, &f.queueShare, &f.byID, &f.byTrace); err != nil {
			t.Fatalf("read %s: %v", view, err)
		}
		return f
	}
	// The whole range's shares, by construction: 1/5 queued, 1/3 by id, 1/7 of the other 2/3 by trace.
	wantQueue, wantByID, wantByTrace := 0.2, 1.0/3, 2.0/21

	// Above the bound: 150,000 requests, m = 2.
	all := base.Add(time.Hour)
	got := read("request_phases_sampled", all)
	if got.factorMin != 2 || got.factorMax != 2 {
		t.Errorf("150,000 requests: sample_factor %g..%g, want 2", got.factorMin, got.factorMax)
	}
	if got.rows < 70_000 || got.rows > 80_000 {
		t.Errorf("150,000 requests: the sample holds %d, want about 75,000", got.rows)
	}
	if got.withQueue != got.rows {
		t.Errorf("%d of %d sampled requests lack their engine span's queue_s: the spans were sampled apart from the requests", got.rows-got.withQueue, got.rows)
	}
	if math.Abs(got.weighted-total) > 0.02*total {
		t.Errorf("estimated count %g, want %d within 2%%", got.weighted, total)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"queue share", got.queueShare, wantQueue}, {"app by request_id", got.byID, wantByID}, {"app by trace_id", got.byTrace, wantByTrace}} {
		if math.Abs(c.got-c.want) > 0.01 {
			t.Errorf("sampled %s %.4f, want %.4f within 0.01", c.name, c.got, c.want)
		}
	}
	if again := read("request_phases_sampled", all); again != got {
		t.Errorf("the sample is not deterministic: %+v, then %+v", got, again)
	}
	timings := read("request_timings_sampled", all)
	if timings.rows != got.rows || timings.queueShare != got.queueShare {
		t.Errorf("request_timings_sampled %+v, request_phases_sampled %+v: not the same sample", timings, got)
	}

	// The sample reaches the spans' scan: ClickHouse pushes it below engine_requests' two GROUP BYs
	// into the read of engine_spans, as a PREWHERE (before FINAL's merge).
	var plan []string
	rows, err := conn.Query(chstore.WithParams(ctx, map[string]string{"from": chTime(base), "to": chTime(all)}),
		`EXPLAIN actions = 1 SELECT count() FROM request_timings_sampled(from = {from:String}, to = {to:String})`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	rows.Close()
	spans := -1
	for i, line := range plan {
		if strings.Contains(line, "ReadFromMergeTree") && strings.Contains(line, ".engine_spans)") {
			spans = i
		}
	}
	prewhere := false
	for i := spans + 1; spans >= 0 && i < len(plan) && !strings.Contains(plan[i], "ReadFromMergeTree"); i++ {
		prewhere = prewhere || strings.Contains(plan[i], "Prewhere filter column") && strings.Contains(plan[i], "xxh3(request_id)")
	}
	if !prewhere {
		t.Errorf("the spans' scan is not sampled by a PREWHERE on xxh3(request_id):\n%s", strings.Join(plan, "\n"))
	}

	// Below the bound: the first 99,999 requests, every one, the rows of the exact views.
	below := base.Add(99_999 * 20 * time.Millisecond)
	got = read("request_phases_sampled", below)
	if got.factorMin != 1 || got.factorMax != 1 || got.rows != 99_999 || got.withQueue != got.rows {
		t.Errorf("99,999 requests: %+v, want every request with sample_factor 1", got)
	}
	for _, c := range []struct{ sampled, exact, columns string }{
		{"request_timings_sampled", "request_timings_window",
			"request_id, arrival_ts, model, status_code, queue_s, prefill_s, decode_s, ttft_s, e2e_s, engine_e2e_s"},
		{"request_phases_sampled", "request_facts_window", "request_id, queue_s, prefill_s, decode_s, app, engine"},
	} {
		var differ uint64
		q := `SELECT count() FROM (
		        (SELECT ` + c.columns + ` FROM ` + c.sampled + `(from = {from:String}, to = {to:String})
		         EXCEPT SELECT ` + c.columns + ` FROM ` + c.exact + `(from = {from:String}, to = {to:String}))
		        UNION ALL
		        (SELECT ` + c.columns + ` FROM ` + c.exact + `(from = {from:String}, to = {to:String})
		         EXCEPT SELECT ` + c.columns + ` FROM ` + c.sampled + `(from = {from:String}, to = {to:String})))`
		if err := conn.QueryRow(chstore.WithParams(ctx, map[string]string{"from": chTime(base), "to": chTime(below)}), q).Scan(&differ); err != nil {
			t.Fatalf("compare %s with %s: %v", c.sampled, c.exact, err)
		}
		if differ != 0 {
			t.Errorf("below the bound %s and %s differ in %d rows", c.sampled, c.exact, differ)
		}
	}
}
