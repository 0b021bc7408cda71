package synth_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/servescope/servescope/services/detector/synth"
	"github.com/servescope/servescope/services/internal/testenv"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// Generated events are valid schema events, so the end-to-end tests can publish them through NATS.
func TestEventsAreValidAndOrdered(t *testing.T) {
	g := synth.New(1)
	s := synth.NormalShape()
	s.Status5xxProb, s.Status4xxProb, s.UnfinishedProb, s.QueueProb, s.QueueS = 0.1, 0.1, 0.1, 0.5, 0.4
	tr := g.Requests(t0, t0.Add(10*time.Minute), synth.Constant(2), s)
	tr.Add(g.Samples(t0, t0.Add(10*time.Minute), synth.NormalEngine(synth.Constant(2), 2)))
	events := tr.Events()
	if len(events) != tr.Len() || len(events) < 2000 {
		t.Fatalf("%d events", len(events))
	}
	type validator interface{ ValidateAt(time.Time) error }
	for i, e := range events {
		if err := e.(validator).ValidateAt(t0.Add(time.Hour)); err != nil {
			t.Fatalf("event %d (%s): %v", i, e.Kind(), err)
		}
		if i > 0 && e.Head().TS.Before(events[i-1].Head().TS) {
			t.Fatalf("event %d out of order", i)
		}
	}
	if len(tr.Finished) >= len(tr.Started) || len(tr.Apps) != len(tr.Finished) {
		t.Fatalf("started %d finished %d apps %d: want some unfinished and one app record per finished request",
			len(tr.Started), len(tr.Finished), len(tr.Apps))
	}
}

func TestDailySeasonality(t *testing.T) {
	r := synth.Daily(1, 0.6)
	peak, trough := r(time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)), r(time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC))
	if math.Abs(peak-1.6) > 1e-9 || math.Abs(trough-0.4) > 1e-9 {
		t.Fatalf("peak %v trough %v, want 1.6 and 0.4", peak, trough)
	}
	g := synth.New(2)
	n := len(g.Requests(t0, t0.Add(24*time.Hour), r, synth.NormalShape()).Started)
	if n < 80_000 || n > 92_800 {
		t.Fatalf("%d requests in a day at mean 1/s", n)
	}
}

// Insert lands every event as one row in its table, with the fields the rules read.
func TestInsert(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	g := synth.New(3)
	tr := g.Requests(t0, t0.Add(5*time.Minute), synth.Constant(1), synth.NormalShape())
	tr.Add(g.Samples(t0, t0.Add(5*time.Minute), synth.NormalEngine(synth.Constant(1), 2)))
	ctx := context.Background()
	if err := synth.Insert(ctx, conn, tr); err != nil {
		t.Fatal(err)
	}
	for table, want := range map[string]int{"requests_started": len(tr.Started), "requests": len(tr.Finished),
		"app_records": len(tr.Apps), "engine_samples": len(tr.Samples)} {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if int(n) != want {
			t.Errorf("%s: %d rows, want %d", table, n, want)
		}
	}
	var top float64
	if err := conn.QueryRow(ctx, "SELECT median(retrieval_top_score) FROM app_records").Scan(&top); err != nil {
		t.Fatal(err)
	}
	if math.Abs(top-0.88) > 0.02 {
		t.Errorf("median top score %v, want ≈0.88", top)
	}
}
