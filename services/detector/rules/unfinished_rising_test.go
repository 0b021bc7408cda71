package rules_test

import (
	"context"
	"testing"
	"time"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/rules"
)

// unfinished_rising's in_flight row fires while requests in flight rise and, once they plateau
// (arrivals stopped, none finishing), no longer fires but keeps firing: the alert resolves only
// when in flight falls under resolve_ratio x the threshold, not when it merely stops rising.
//
// Traffic: from at-8m to at-4m one request a second arrives and none finishes (about 240 in
// flight, under timeout_s so none counts as stuck); no baseline, so the threshold is the floor.
func TestUnfinishedRisingResolvesUnderTheLimitNotWhenFlat(t *testing.T) {
	t.Parallel()
	defs, err := rules.Load(builtin.Rules, builtin.RulesDir)
	if err != nil {
		t.Fatal(err)
	}
	var def *rules.Definition
	for _, d := range defs {
		if d.Name == "unfinished_rising" {
			def = d
		}
	}
	if def == nil || !def.Hysteresis {
		t.Fatalf("built-in unfinished_rising: %+v, want one with hysteresis", def)
	}
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The evaluation time is explicit; two hours ago keeps the rows inside the tables' TTL.
	at := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Minute)
	shape := synth.NormalShape()
	shape.UnfinishedProb = 1
	if err := synth.Insert(ctx, conn, synth.New(7).Requests(at.Add(-8*time.Minute), at.Add(-4*time.Minute), synth.Constant(1), shape)); err != nil {
		t.Fatal(err)
	}
	r, err := rules.NewSQLRule(def, conn)
	if err != nil {
		t.Fatal(err)
	}
	inFlight := func(ts time.Time) rules.Sample {
		t.Helper()
		samples, err := r.Eval(ctx, ts)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range samples {
			if s.Labels["kind"] == "in_flight" {
				return s
			}
		}
		t.Fatalf("no in_flight row at %s: %+v", ts, samples)
		return rules.Sample{}
	}
	if s := inFlight(at.Add(-5 * time.Minute)); !s.Firing || !s.KeepFiring {
		t.Errorf("rising: %+v, want firing and keep_firing", s)
	}
	flat := inFlight(at)
	if flat.Firing || !flat.KeepFiring || flat.Value < 200 {
		t.Errorf("flat at about 240 in flight: %+v, want keep_firing without firing", flat)
	}
	// Once the plateau's requests leave lookback_s, nothing is in flight: neither column holds.
	if s := inFlight(at.Add(time.Hour)); s.Firing || s.KeepFiring {
		t.Errorf("nothing in flight: %+v, want neither firing nor keep_firing", s)
	}
}
