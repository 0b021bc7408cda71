package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/dev/testenv"
)

// An overload whose in-flight count rises, plateaus and rises again is one unfinished_rising
// alert: one firing and, once nothing is in flight, one resolution. Before hysteresis the plateau
// resolved it and the second rise fired it again.
//
// Traffic (no baseline, so the threshold is the floor of 20 in flight): one request a second
// arrives and never finishes in [at, at+3m) and [at+5m, at+7m); none arrives in between. Evaluated
// every 30 s from at to at+8m, then at at+40m, when those requests are past the rule's lookback.
func TestUnfinishedRisingDoesNotFlapOnAPlateau(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour)
	g := synth.New(5)
	shape := synth.NormalShape()
	shape.UnfinishedProb = 1
	tr := g.Requests(at, at.Add(3*time.Minute), synth.Constant(1), shape)
	tr.Add(g.Requests(at.Add(5*time.Minute), at.Add(7*time.Minute), synth.Constant(1), shape))
	insert(t, conn, tr)

	d := newDetector(t, testConfig(ch), conn, "unfinished_rising")
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var ticks []time.Time
	for ts := at.Add(30 * time.Second); !ts.After(at.Add(8 * time.Minute)); ts = ts.Add(30 * time.Second) {
		ticks = append(ticks, ts)
	}
	ticks = append(ticks, at.Add(40*time.Minute))
	firings, resolutions := map[time.Time]bool{}, map[time.Time]bool{}
	var states []string
	for _, ts := range ticks {
		if err := d.Groups()[0].Eval(ctx, ts); err != nil {
			t.Fatalf("evaluate at %s: %v", ts, err)
		}
		state := "none"
		for _, a := range d.Groups()[0].Rules[0].Alerts() {
			if a.Labels["kind"] != "in_flight" {
				t.Fatalf("alert %v at %s: want only kind=in_flight", a.Labels, ts)
			}
			state = a.StateName()
			if !a.FiredAt.IsZero() {
				firings[a.FiredAt] = true
			}
			if a.Resolved() {
				resolutions[a.ResolvedAt] = true
			}
		}
		states = append(states, ts.Sub(at).String()+"="+state)
	}
	if len(firings) != 1 || len(resolutions) != 1 {
		t.Fatalf("%d firings and %d resolutions, want one each; states: %v", len(firings), len(resolutions), states)
	}
	for r := range resolutions {
		if r.Before(at.Add(8 * time.Minute)) {
			t.Fatalf("resolved at %s while about 300 requests were in flight; states: %v", r.Sub(at), states)
		}
	}
	for f := range firings {
		if f.After(at.Add(3 * time.Minute)) {
			t.Fatalf("fired at %s, want during the first rise; states: %v", f.Sub(at), states)
		}
	}
}
