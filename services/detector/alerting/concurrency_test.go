package alerting

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servescope/servescope/services/detector/rules"
)

// gated is a rule whose Eval counts the evaluations under way and, when gate is set, waits for it
// to open before answering with one firing row.
type gated struct {
	name     string
	inFlight *atomic.Int32
	maxSeen  *atomic.Int32
	arrived  func()
	gate     <-chan struct{}
}

func (g gated) Name() string { return g.name }

func (g gated) Eval(ctx context.Context, _ time.Time) ([]rules.Sample, error) {
	n := g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	for {
		m := g.maxSeen.Load()
		if n <= m || g.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if g.arrived != nil {
		g.arrived()
	}
	if g.gate != nil {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return []rules.Sample{firingRow(1, map[string]string{"rule": g.name})}, nil
}

func namedDef(name string) *rules.Definition {
	d, err := rules.Parse(name+".yaml", []byte("name: "+name+"\nseverity: warning\nwindow: 5m\nfor: 0s\nsummary: x\nquery: SELECT 1\n"))
	if err != nil {
		panic(err)
	}
	return d
}

// With Concurrency 3, three rules are evaluated at once: each waits until all three are inside
// Eval, which a one-after-the-other group never reaches (the test's deadline would end it).
func TestGroupEvaluatesRulesConcurrently(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var inFlight, maxSeen atomic.Int32
	gate := make(chan struct{})
	var arrivals sync.WaitGroup
	arrivals.Add(3)
	go func() { arrivals.Wait(); close(gate) }()
	var rs []*Rule
	for i := range 3 {
		name := fmt.Sprintf("r%d", i)
		rs = append(rs, NewRule(namedDef(name), gated{name: name, inFlight: &inFlight, maxSeen: &maxSeen, arrived: arrivals.Done, gate: gate}))
	}
	var notified []string
	g := &Group{Rules: rs, Concurrency: 3, Notify: func(_ context.Context, _ time.Time, alerts []*Alert) {
		for _, a := range alerts {
			notified = append(notified, a.Rule)
		}
	}}
	if err := g.Eval(ctx, t0); err != nil {
		t.Fatalf("Eval: %v (the rules did not run at once)", err)
	}
	if got := maxSeen.Load(); got != 3 {
		t.Fatalf("at most %d rules evaluated at once, want 3", got)
	}
	if fmt.Sprint(notified) != "[r0 r1 r2]" {
		t.Fatalf("notified %v, want the rules' order [r0 r1 r2]", notified)
	}
}

// Concurrency bounds the evaluations under way, and 1 keeps them one after the other.
func TestGroupConcurrencyIsBounded(t *testing.T) {
	for _, limit := range []int{1, 2} {
		var inFlight, maxSeen atomic.Int32
		var rs []*Rule
		for i := range 8 {
			name := fmt.Sprintf("r%d", i)
			rs = append(rs, NewRule(namedDef(name), gated{name: name, inFlight: &inFlight, maxSeen: &maxSeen}))
		}
		g := &Group{Rules: rs, Concurrency: limit}
		if err := g.Eval(context.Background(), t0); err != nil {
			t.Fatal(err)
		}
		if got := maxSeen.Load(); got > int32(limit) || got < 1 {
			t.Fatalf("Concurrency %d: %d evaluations under way at once", limit, got)
		}
		for _, r := range rs {
			if len(r.Alerts()) != 1 {
				t.Fatalf("Concurrency %d: rule %s has %d alerts, want 1", limit, r.Name(), len(r.Alerts()))
			}
		}
	}
}
