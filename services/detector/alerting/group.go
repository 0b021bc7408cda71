package alerting

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"time"
)

// NotifyFunc hands alerts to the notifier. It must not block on receivers. The alerts' state
// (LastSentAt = ts) is already saved when it is called.
type NotifyFunc func(ctx context.Context, ts time.Time, alerts []*Alert)

// Store persists alert state; see [CHStore].
type Store interface {
	// Save records the alerts' current state as of ts, one row each.
	Save(ctx context.Context, ts time.Time, alerts []*Alert) error
	// Load returns the latest recorded state of every alert that is pending, firing or resolved.
	Load(ctx context.Context) ([]*Alert, error)
}

// Group evaluates its rules at explicit timestamps: every Interval when run, or at given times for
// replay and tests. Nothing in a group reads the wall clock except Run's ticker.
type Group struct {
	Interval time.Duration
	// Repeat is how often a still-firing alert is sent again (zero: never).
	Repeat time.Duration
	Rules  []*Rule
	// Store, Notify, Resend and Metrics are optional (replay uses none of them).
	Store  Store
	Notify NotifyFunc
	// Resend, unlike Notify, is handed after every evaluation every firing alert and every alert
	// resolved within the last 15 minutes, due or not: Alertmanager, as Prometheus feeds it,
	// takes a firing alert that is not sent again before its endsAt for resolved, and a
	// resolution lost on the way is delivered by the next evaluation. Its alerts' state is saved
	// as for Notify; it must not block on receivers either.
	Resend  NotifyFunc
	Metrics *Metrics
	Log     *slog.Logger
	// Concurrency is how many of the group's rules are evaluated at once (0 or 1: one after the
	// other). The rules are independent queries, so a slow one need not hold back the others'
	// alerts by its whole duration, nor a loaded server stretch a tick past the interval as the
	// sum of every query's time (Prometheus's concurrent rule evaluation, its
	// --rules.max-concurrent-evals, does the same for rules without dependencies). Results are
	// saved and handed to the notifier in rule order once all have run.
	Concurrency int
}

// Eval evaluates every rule at ts, persists changed and due alerts, then hands the due alerts to
// the notifier.
// Rule errors are logged and counted; the first is returned after all rules ran.
func (g *Group) Eval(ctx context.Context, ts time.Time) error {
	start := time.Now()
	results := g.evalRules(ctx, ts)
	for _, res := range results {
		if res.err != nil && ctx.Err() != nil {
			// Stopping: evaluations were cut short, not failed; neither logged nor counted.
			return ctx.Err()
		}
	}
	var errs []error
	for i, r := range g.Rules {
		changed, err := results[i].changed, results[i].err
		g.Metrics.observeEval(r.Name(), results[i].took, err)
		if err != nil {
			g.logger().Error("rule evaluation failed", "rule", r.Name(), "ts", ts, "err", err)
			errs = append(errs, err)
			continue
		}
		if err := g.record(ctx, ts, r, changed); err != nil {
			errs = append(errs, err)
		}
	}
	g.Metrics.setAlerts(g.Rules)
	g.Metrics.observeGroup(g.Interval, time.Since(start))
	return errors.Join(errs...)
}

// ruleResult is one rule's evaluation: the alerts it changed, its error and how long it took.
type ruleResult struct {
	changed []*Alert
	err     error
	took    time.Duration
}

// evalRules evaluates every rule at ts, at most Concurrency at once, and returns their results
// in rule order.
func (g *Group) evalRules(ctx context.Context, ts time.Time) []ruleResult {
	results := make([]ruleResult, len(g.Rules))
	eval := func(i int) {
		start := time.Now()
		changed, err := g.Rules[i].Eval(ctx, ts)
		results[i] = ruleResult{changed: changed, err: err, took: time.Since(start)}
	}
	if g.Concurrency <= 1 {
		for i := range g.Rules {
			eval(i)
		}
		return results
	}
	sem := make(chan struct{}, g.Concurrency)
	var wg sync.WaitGroup
	for i := range g.Rules {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			eval(i)
		})
	}
	wg.Wait()
	return results
}

// record logs the state changes of r's evaluation at ts, persists the changed and due alerts,
// then hands the due alerts to Notify and the current ones to Resend.
func (g *Group) record(ctx context.Context, ts time.Time, r *Rule, changed []*Alert) error {
	for _, a := range changed {
		g.logger().Info("alert state", "rule", a.Rule, "fingerprint", a.Fingerprint, "state", a.StateName(),
			"value", logNumber(a.Value), "baseline", logNumber(a.Baseline), "threshold", logNumber(a.Threshold), "ts", ts)
	}
	var due, current []*Alert
	for _, a := range r.Alerts() {
		if needsSending(a, ts, g.Repeat) {
			due = append(due, a)
		}
		if a.State == StateFiring || a.Resolved() {
			current = append(current, a)
		}
	}
	save := changed
	for _, a := range due {
		r.markSent(a.Fingerprint, ts)
		a.LastSentAt = ts
		save = replaceByFingerprint(save, a)
	}
	// The decision is saved before it is handed over: after a crash the next start finds it
	// in the alerts table and delivers whatever a receiver has not accepted (see Store). A
	// failed save still notifies, as delivering matters more than never delivering twice.
	var err error
	if g.Store != nil && len(save) > 0 {
		if err = g.Store.Save(ctx, ts, save); err != nil {
			g.logger().Error("save alert state", "rule", r.Name(), "err", err)
		}
	}
	if g.Notify != nil && len(due) > 0 {
		g.Notify(ctx, ts, due)
	}
	if g.Resend != nil && len(current) > 0 {
		g.Resend(ctx, ts, current)
	}
	return err
}

// Retire ends the alerts of rules a reload removed (see [Rule.Retire]) at ts, and saves and
// hands over their changes as an evaluation at ts would: each firing alert's resolution is
// saved, goes to Notify (whose receivers had its firing) and to Resend, once, since the rules
// are never evaluated again. The group's metrics are left alone: the rules are not its own.
func (g *Group) Retire(ctx context.Context, ts time.Time, rs ...*Rule) error {
	var errs []error
	for _, r := range rs {
		if err := g.record(ctx, ts, r, r.Retire(ts)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// replaceByFingerprint puts a into list, replacing an entry with the same fingerprint: the alerts
// table keeps one row per (rule, fingerprint, ts), so each alert is saved once per evaluation.
func replaceByFingerprint(list []*Alert, a *Alert) []*Alert {
	for i := range list {
		if list[i].Fingerprint == a.Fingerprint {
			list[i] = a
			return list
		}
	}
	return append(list, a)
}

// Restore loads persisted alerts from the store into the group's rules. Alerts of rules the group
// does not have are ignored.
func (g *Group) Restore(ctx context.Context, alerts []*Alert) error {
	byName := map[string]*Rule{}
	for _, r := range g.Rules {
		byName[r.Name()] = r
	}
	for _, a := range alerts {
		if r, ok := byName[a.Rule]; ok {
			if err := r.Restore(a); err != nil {
				return err
			}
		}
	}
	g.Metrics.setAlerts(g.Rules)
	return nil
}

// Run evaluates the group at every multiple of Interval (offset by delay behind the wall clock, so
// that events still in the pipeline are counted) until ctx ends.
func (g *Group) Run(ctx context.Context, delay time.Duration) { g.RunUntil(ctx, nil, delay) }

// RunUntil is Run that also returns once stop is closed; an evaluation under way when it closes
// finishes first (a rule reload replaces the group without cutting a query short).
func (g *Group) RunUntil(ctx context.Context, stop <-chan struct{}, delay time.Duration) {
	var last time.Time
	for {
		next := time.Now().Truncate(g.Interval).Add(g.Interval)
		if !last.IsZero() {
			// Ticks that passed while the previous evaluation ran are skipped, not caught up.
			g.Metrics.missedIterations(g.Interval, int(next.Sub(last)/g.Interval)-1)
		}
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-time.After(time.Until(next)):
		}
		last = next
		_ = g.Eval(ctx, next.Add(-delay))
	}
}

func (g *Group) logger() *slog.Logger {
	if g.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return g.Log
}

// ReplayTicks returns the evaluation times a rule with hold needs to reach its state at `at` when
// evaluated every interval: enough earlier ticks to cover the hold, ending at `at`.
func ReplayTicks(at time.Time, interval, hold time.Duration) []time.Time {
	n := int(math.Ceil(float64(hold)/float64(interval))) + 1
	ticks := make([]time.Time, 0, n+1)
	for k := n; k >= 0; k-- {
		ticks = append(ticks, at.Add(-time.Duration(k)*interval))
	}
	return ticks
}

// Replay evaluates fresh copies of the given rules as of at, including the earlier ticks each
// rule's hold needs, and returns the pending and firing alerts at `at`. It sends and saves nothing.
func Replay(ctx context.Context, at time.Time, defaultInterval time.Duration, rs []*Rule) ([]*Alert, error) {
	var out []*Alert
	for _, r := range rs {
		fresh := NewRule(r.def, r.eval)
		interval := r.def.Interval.D()
		if interval <= 0 {
			interval = defaultInterval
		}
		for _, ts := range ReplayTicks(at, interval, fresh.Hold()) {
			if _, err := fresh.Eval(ctx, ts); err != nil {
				return nil, err
			}
		}
		for _, a := range fresh.Alerts() {
			if a.State == StatePending || a.State == StateFiring {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// logNumber makes an unknown (NaN) figure a log null: JSON handlers cannot encode NaN and would
// print an error string in its place.
func logNumber(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return v
}
