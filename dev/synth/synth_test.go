package synth_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/dev/testenv"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// Generated events are valid schema events, so the end-to-end tests can publish them through NATS.
func TestEventsAreValidAndOrdered(t *testing.T) {
	g := synth.New(1)
	s := synth.NormalShape()
	s.Status5xxProb, s.Status4xxProb, s.UnfinishedProb, s.QueueProb, s.QueueSeconds = 0.1, 0.1, 0.1, 0.5, 0.4
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
	// Near now, not at t0: ClickHouse drops rows past a table's TTL already at insert (14 days for
	// engine_samples), so a fixed date would empty the tables some weeks after it.
	from := time.Now().UTC().Add(-time.Hour).Truncate(time.Minute)
	g := synth.New(3)
	tr := g.Requests(from, from.Add(5*time.Minute), synth.Constant(1), synth.NormalShape())
	tr.Add(g.Samples(from, from.Add(5*time.Minute), synth.NormalEngine(synth.Constant(1), 2)))
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

// Requests leaves out a request that would still run at the end of its period, so the traffic of
// [from, to) has every event in it.
func TestRequestsStayInTheirPeriod(t *testing.T) {
	g := synth.New(4)
	s := synth.NormalShape()
	s.UnfinishedProb = 0.1
	// Long answers (about 2 s) at 5 requests/s: many would straddle each end of a period.
	for p := range 20 {
		from := t0.Add(time.Duration(p) * time.Minute)
		to := from.Add(time.Minute)
		tr := g.Requests(from, to, synth.Constant(5), s)
		if len(tr.Started) < 200 {
			t.Fatalf("period %d: %d requests, want about 300", p, len(tr.Started))
		}
		for _, e := range tr.Events() {
			if ts := e.Head().TS; ts.Before(from) || !ts.Before(to) {
				t.Fatalf("period %d [%s, %s): %s event at %s", p, from.Format(time.TimeOnly), to.Format(time.TimeOnly), e.Kind(), ts.Format(time.StampMicro))
			}
		}
		if len(tr.Finished) == len(tr.Started) {
			t.Errorf("period %d: every request finished, want the unfinished ones kept", p)
		}
	}
}

// TestIncidentsAloneInTheirWindowAtEveryHour is the reproducer of the detector's incident test that
// failed between 18:00 and 19:00 UTC: the normal traffic before an incident, whose rate follows the
// time of day, put its last answers into the incident's window (4 wrong-script answers of 34 instead
// of 32). At every quarter hour of the day, normal traffic up to an incident's start has no event
// after it, and the language incident's window holds its 32 answers.
func TestIncidentsAloneInTheirWindowAtEveryHour(t *testing.T) {
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var language synth.Incident
	for _, in := range synth.Incidents() {
		if in.Rule == "output_language_errors" {
			language = in
		}
	}
	for q := range 24 * 4 {
		from := day.Add(time.Duration(q) * 15 * time.Minute)
		// Ten minutes of normal traffic at the day's rate: answers take about 2 s.
		for _, e := range synth.New(uint64(q)).Normal(from.Add(-10*time.Minute), from).Events() {
			if !e.Head().TS.Before(from) {
				t.Fatalf("normal traffic up to %s has a %s event at %s", from.Format(time.RFC3339), e.Kind(), e.Head().TS.Format(time.RFC3339Nano))
			}
		}
		inc := language.Generate(synth.New(uint64(q)), from, from.Add(language.Duration))
		bad := 0
		for _, f := range inc.Finished {
			if *f.OutputScriptViolation {
				bad++
			}
		}
		if len(inc.Finished) != 32 || len(inc.Apps) != 32 || bad != 4 {
			t.Fatalf("from %s: %d answers, %d app records, %d in a wrong script; want 4 of 32", from.Format(time.RFC3339), len(inc.Finished), len(inc.Apps), bad)
		}
	}
}
