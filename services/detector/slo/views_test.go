package slo_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/slo"
)

// slo_requests_window judges each kind of request as docs/slo.md says, under an SLO with every
// objective (TTFT ≤ 1 s, TPOT ≤ 50 ms, E2E ≤ 10 s, availability), and slo_goodput counts them.
func TestRequestJudgement(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	ctx := context.Background()
	d, err := slo.Parse("all.yaml", []byte("name: all\nselector: {model: m}\nobjectives:\n  ttft: {under: 1s, target: 99%}\n"+
		"  tpot: {under: 50ms, target: 99%}\n  e2e: {under: 10s, target: 99%}\n  availability: {target: 99.5%}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := slo.Sync(ctx, ch, conn, []*slo.Definition{d}, time.Now()); err != nil {
		t.Fatal(err)
	}
	type flags struct{ judged, good, availBad, ttftJudged, ttftBad, tpotBad, e2eBad uint8 }
	cases := []struct {
		id, model string
		stream    bool
		status    int
		layer     string
		ttft, e2e *float64
		tokens    *uint32
		finishes  []string
		want      flags
		wantTPOT  float64
	}{
		// (3.0 - 0.5) / (51 - 1) = 0.05: on the threshold, met.
		{"fast-stream", "m", true, 200, "", f(0.5), f(3.0), u(51), []string{"stop"}, flags{1, 1, 0, 1, 0, 0, 0}, 0.05},
		{"slow-first-token", "m", true, 200, "", f(1.2), f(3.0), u(51), []string{"stop"}, flags{1, 0, 0, 1, 1, 0, 0}, 0.036},
		{"slow-tokens", "m", true, 200, "", f(0.5), f(8.0), u(51), []string{"stop"}, flags{1, 0, 0, 1, 0, 1, 0}, 0.15},
		// Two choices of 26 tokens each: (3.0 - 0.5) / (26 - 1) = 0.1 between a choice's tokens.
		{"two-choices", "m", true, 200, "", f(0.5), f(3.0), u(52), []string{"stop", "stop"}, flags{1, 0, 0, 1, 0, 1, 0}, 0.1},
		{"one-token", "m", true, 200, "", f(0.5), f(0.5), u(1), []string{"stop"}, flags{1, 1, 0, 1, 0, 0, 0}, 0},
		// A body's first token is its E2E; its TPOT is 0 (vllm bench serve's non-streaming functions).
		{"body-fast", "m", false, 200, "", nil, f(0.9), u(20), []string{"stop"}, flags{1, 1, 0, 1, 0, 0, 0}, 0},
		{"body-slow", "m", false, 200, "", nil, f(2.0), u(20), []string{"stop"}, flags{1, 0, 0, 1, 1, 0, 0}, 0},
		{"too-long", "m", true, 200, "", f(0.5), f(12), u(201), []string{"length"}, flags{1, 0, 0, 1, 0, 1, 1}, 0.0575},
		{"server-error", "m", true, 503, "upstream", nil, f(0.1), nil, nil, flags{1, 0, 1, 0, 0, 0, 0}, 0},
		{"rate-limited", "m", false, 429, "upstream", nil, f(0.1), nil, nil, flags{1, 0, 1, 0, 0, 0, 0}, 0},
		{"broken-stream", "m", true, 200, "upstream", f(0.3), f(2.0), u(10), []string{""}, flags{1, 0, 1, 0, 0, 0, 0}, 1.7 / 9},
		{"client-error", "m", false, 400, "upstream", nil, f(0.01), nil, nil, flags{0, 0, 0, 0, 0, 0, 0}, 0},
		{"left-early", "m", true, 499, "client", nil, f(0.4), nil, nil, flags{0, 0, 0, 0, 0, 0, 0}, 0},
		{"left-waiting", "m", true, 499, "client", nil, f(5), nil, nil, flags{1, 0, 0, 1, 1, 0, 0}, 0},
		{"left-after-first-token", "m", true, 499, "client", f(0.2), f(4), u(30), nil, flags{0, 0, 0, 1, 0, 0, 0}, 3.8 / 29},
		{"other-model", "x", true, 200, "", f(0.5), f(3.0), u(51), []string{"stop"}, flags{}, 0},
	}
	at := time.Now().UTC().Add(-time.Hour)
	for _, c := range cases {
		if err := conn.Exec(ctx, `INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, stream,
				status_code, error_layer, ttft_s, e2e_s, completion_tokens, finish_reasons)
			SELECT $1, $1, t, t, t, $2, '/v1/chat/completions', $3, $4, $5, $6, $7, $8, $9
			FROM (SELECT fromUnixTimestamp64Micro($10, 'UTC') AS t)`,
			c.id, c.model, c.stream, c.status, c.layer, c.ttft, c.e2e, c.tokens, c.finishes, at.UnixMicro()); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := conn.Query(ctx, `SELECT request_id, judged, good, availability_bad, ttft_judged, ttft_bad, tpot_bad, e2e_bad, slo_tpot_s
		FROM slo_requests_window(from = fromUnixTimestamp64Micro($1, 'UTC'), to = fromUnixTimestamp64Micro($2, 'UTC'))`,
		at.Add(-time.Minute).UnixMicro(), at.Add(time.Minute).UnixMicro())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]flags{}
	tpot := map[string]float64{}
	for rows.Next() {
		var id string
		var g flags
		var tp float64
		if err := rows.Scan(&id, &g.judged, &g.good, &g.availBad, &g.ttftJudged, &g.ttftBad, &g.tpotBad, &g.e2eBad, &tp); err != nil {
			t.Fatal(err)
		}
		got[id], tpot[id] = g, tp
	}
	rows.Close()
	var judged, good uint64
	for _, c := range cases {
		g, ok := got[c.id]
		switch {
		case c.model != "m" && ok:
			t.Errorf("%s: judged by SLO all, whose selector is model m", c.id)
		case c.model != "m":
		case !ok:
			t.Errorf("%s: not in slo_requests_window", c.id)
		case g != c.want || math.Abs(tpot[c.id]-c.wantTPOT) > 1e-9:
			t.Errorf("%s: %+v with TPOT %g, want %+v with TPOT %g", c.id, g, tpot[c.id], c.want, c.wantTPOT)
		}
		judged += uint64(c.want.judged)
		good += uint64(c.want.good)
	}
	var gj, gg uint64
	var share float64
	if err := conn.QueryRow(ctx, `SELECT judged, good, goodput FROM slo_goodput(from = fromUnixTimestamp64Micro($1, 'UTC'), to = fromUnixTimestamp64Micro($2, 'UTC'))`,
		at.Add(-time.Minute).UnixMicro(), at.Add(time.Minute).UnixMicro()).Scan(&gj, &gg, &share); err != nil {
		t.Fatal(err)
	}
	if gj != judged || gg != good || math.Abs(share-float64(good)/float64(judged)) > 1e-12 {
		t.Errorf("slo_goodput: %d good of %d judged (%g), want %d of %d", gg, gj, share, good, judged)
	}
}

// cost_window shares each model's busy engine cost among its apps by the time their requests held
// a slot, shows the idle engines' cost on a row of its own, and leaves a cost unknown (NULL)
// where an engine has no price.
func TestCostWindow(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	ctx := context.Background()
	two, one := 2.0, 1.0
	if err := slo.SyncEngines(ctx, ch, conn, &slo.Engines{Currency: "EUR",
		Engines: map[string]slo.EngineSetting{"e1": {PricePerHour: &two}},
		Models:  map[string]slo.EngineSetting{"m": {PricePerHour: &one}}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	// e1 (model m, 2 EUR an hour): the whole hour, running in its first half. e2 (model m, its
	// model's 1 EUR): the first half hour, running. e3 (model other, no price): a quarter, idle.
	for _, e := range []struct {
		engine, model string
		seconds, busy int
	}{{"e1", "m", 3600, 1800}, {"e2", "m", 1800, 1800}, {"e3", "other", 900, 0}} {
		if err := conn.Exec(ctx, `INSERT INTO engine_samples (event_id, ts, engine, model, up, num_requests_running, num_requests_waiting)
			SELECT concat($1, toString(number)), fromUnixTimestamp64Micro($2, 'UTC') + toIntervalSecond(number * 5), $1, $3, true,
			       if(number * 5 < $5, 3, 0), 0
			FROM numbers(intDiv($4, 5))`, e.engine, t0.UnixMicro(), e.model, e.seconds, e.busy); err != nil {
			t.Fatal(err)
		}
	}
	// App a: three requests of 10 s in a slot, 100 tokens each; app b: one of 30 s with 10 s queued, 500 tokens.
	for i, r := range []struct {
		app        string
		e2e, queue float64
		tokens     uint32
	}{{"a", 10, 0, 100}, {"a", 10, 0, 100}, {"a", 10, 0, 100}, {"b", 30, 10, 500}} {
		if err := conn.Exec(ctx, `INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, app, status_code, e2e_s, queue_s, completion_tokens)
			SELECT $1, $1, t, t, t, 'm', $2, 200, $3, $4, $5 FROM (SELECT fromUnixTimestamp64Micro($6, 'UTC') AS t)`,
			fmt.Sprint("r", i), r.app, r.e2e, r.queue, r.tokens, t0.Add(time.Minute).UnixMicro()); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := conn.Query(ctx, `SELECT model, app, kind, currency, requests, output_tokens, engine_hours, idle_hours, unpriced_engine_hours,
			cost, cost_per_request, cost_per_mtok
		FROM cost_window(from = fromUnixTimestamp64Micro($1, 'UTC'), to = fromUnixTimestamp64Micro($2, 'UTC'))
		ORDER BY model, kind, app`, t0.UnixMicro(), t0.Add(time.Hour).UnixMicro())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type row struct {
		model, app, kind, currency string
		requests, tokens           uint64
		hours, idle, unpriced      float64
		cost, perReq, perMtok      *float64
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.model, &r.app, &r.kind, &r.currency, &r.requests, &r.tokens, &r.hours, &r.idle, &r.unpriced,
			&r.cost, &r.perReq, &r.perMtok); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	want := []row{
		// Model m: 1.5 engine-hours costing 2 × 1 + 1 × 0.5 = 2.5, of which e1's idle half hour 1.0;
		// the busy 1.5 shared 30 : 20 slot-seconds between a and b.
		{"m", "", "idle", "EUR", 0, 0, 1.5, 0.5, 0, f(1.0), nil, nil},
		{"m", "a", "requests", "EUR", 3, 300, 1.5, 0.5, 0, f(0.9), f(0.3), f(3000)},
		{"m", "b", "requests", "EUR", 1, 500, 1.5, 0.5, 0, f(0.6), f(0.6), f(1200)},
		{"other", "", "idle", "EUR", 0, 0, 0.25, 0.25, 0.25, nil, nil, nil},
		{"other", "", "unattributed", "EUR", 0, 0, 0.25, 0.25, 0.25, nil, nil, nil},
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(got), len(want), got)
	}
	eq := func(a, b *float64) bool {
		return (a == nil) == (b == nil) && (a == nil || math.Abs(*a-*b) < 1e-9*math.Max(1, math.Abs(*b)))
	}
	for i, w := range want {
		g := got[i]
		if g.model != w.model || g.app != w.app || g.kind != w.kind || g.currency != w.currency || g.requests != w.requests ||
			g.tokens != w.tokens || math.Abs(g.hours-w.hours) > 1e-9 || math.Abs(g.idle-w.idle) > 1e-9 ||
			math.Abs(g.unpriced-w.unpriced) > 1e-9 || !eq(g.cost, w.cost) || !eq(g.perReq, w.perReq) || !eq(g.perMtok, w.perMtok) {
			t.Errorf("row %d: %+v (cost %v, per request %v, per Mtok %v)\nwant %+v (cost %v, per request %v, per Mtok %v)",
				i, g, val(g.cost), val(g.perReq), val(g.perMtok), w, val(w.cost), val(w.perReq), val(w.perMtok))
		}
	}
}

func f(v float64) *float64 { return &v }

func u(v uint32) *uint32 { return &v }

func val(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
