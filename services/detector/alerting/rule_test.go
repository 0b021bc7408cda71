package alerting

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/servescope/servescope/services/detector/rules"
)

// scripted is a rules.Rule whose rows at each evaluation time are given in advance: the state
// machine is tested on its own here; the SQL rules are tested on real ClickHouse in service.
type scripted struct {
	rows map[time.Time][]rules.Sample
	fail map[time.Time]bool
}

func (s scripted) Name() string { return "r" }

func (s scripted) Eval(_ context.Context, ts time.Time) ([]rules.Sample, error) {
	if s.fail[ts] {
		return nil, errors.New("query failed")
	}
	return s.rows[ts], nil
}

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func tick(i int) time.Time { return t0.Add(time.Duration(i) * 30 * time.Second) }

func def(hold time.Duration) *rules.Definition {
	d, err := rules.Parse("r.yaml", []byte("name: r\nseverity: critical\nwindow: 5m\nfor: "+hold.String()+
		"\nsummary: 'value {{f .Value}}'\nquery: SELECT 1\n"))
	if err != nil {
		panic(err)
	}
	return d
}

func firingRow(v float64, labels map[string]string) rules.Sample {
	return rules.Sample{Labels: labels, Value: v, Baseline: 1, Threshold: 2, Firing: true, BaselineOK: true}
}

func TestLifecycle(t *testing.T) {
	app := map[string]string{"app": "a"}
	cases := []struct {
		name   string
		hold   time.Duration
		firing []bool // per tick
		fail   []int  // ticks whose query fails
		want   []string
	}{
		{"fires after the hold", time.Minute, []bool{true, true, true, true}, nil,
			[]string{"pending", "pending", "firing", "firing"}},
		{"no hold fires at once", 0, []bool{true}, nil, []string{"firing"}},
		{"pending that stops is dropped", time.Minute, []bool{true, false, true}, nil,
			[]string{"pending", "gone", "pending"}},
		{"firing that stops resolves", 0, []bool{true, false, false}, nil,
			[]string{"firing", "resolved", "resolved"}},
		{"resolved fires again as new", 0, []bool{true, false, true}, nil,
			[]string{"firing", "resolved", "firing"}},
		{"query error keeps the state", 0, []bool{true, false, false}, []int{1},
			[]string{"firing", "firing", "resolved"}},
		{"non-firing rows do not alert", 0, []bool{false}, nil, []string{"gone"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := scripted{rows: map[time.Time][]rules.Sample{}, fail: map[time.Time]bool{}}
			for i, f := range tc.firing {
				row := firingRow(float64(i), app)
				row.Firing = f
				s.rows[tick(i)] = []rules.Sample{row}
			}
			for _, i := range tc.fail {
				s.fail[tick(i)] = true
			}
			r := NewRule(def(tc.hold), s)
			for i := range tc.firing {
				_, err := r.Eval(context.Background(), tick(i))
				if (err != nil) != s.fail[tick(i)] {
					t.Fatalf("tick %d: error %v", i, err)
				}
				got := "gone"
				if as := r.Alerts(); len(as) == 1 {
					got = as[0].StateName()
				} else if len(as) > 1 {
					t.Fatalf("tick %d: %d alerts, want at most 1", i, len(as))
				}
				if got != tc.want[i] {
					t.Fatalf("tick %d: state %s, want %s", i, got, tc.want[i])
				}
			}
		})
	}
}

func TestAlertFieldsAndFingerprint(t *testing.T) {
	s := scripted{rows: map[time.Time][]rules.Sample{
		tick(0): {firingRow(5, map[string]string{"app": "a", "empty": ""}), firingRow(6, map[string]string{"app": "b"})},
		tick(1): {firingRow(7, map[string]string{"app": "a"})},
		tick(2): {},
	}}
	r := NewRule(def(30*time.Second), s)
	changed, _ := r.Eval(context.Background(), tick(0))
	if len(changed) != 2 {
		t.Fatalf("changed %d, want 2 new pending alerts", len(changed))
	}
	changed, _ = r.Eval(context.Background(), tick(1))
	// a fires; b stopped while pending and is dropped.
	if len(changed) != 2 {
		t.Fatalf("changed at tick 1: %d, want a firing and b dropped", len(changed))
	}
	as := r.Alerts()
	if len(as) != 1 {
		t.Fatalf("alerts %d, want 1", len(as))
	}
	a := as[0]
	// An empty row label is dropped; every scope label is there, "all" where the row names none.
	wantLabels := map[string]string{"alertname": "r", "severity": "critical", "app": "a", "model": "all", "engine": "all", "gateway": "all"}
	if !maps.Equal(a.Labels, wantLabels) {
		t.Fatalf("labels %v, want %v (empty labels dropped, scope labels all)", a.Labels, wantLabels)
	}
	if a.Fingerprint != Fingerprint(wantLabels) || !a.ActiveAt.Equal(tick(0)) || !a.FiredAt.Equal(tick(1)) ||
		a.Value != 7 || a.Annotations["summary"] != "value 7.000" || a.Annotations["baseline_note"] != "" {
		t.Fatalf("alert %+v", a)
	}
	r.Eval(context.Background(), tick(2))
	if a := r.Alerts()[0]; !a.Resolved() || !a.ResolvedAt.Equal(tick(2)) {
		t.Fatalf("after the row stopped: %+v, want resolved at tick 2", a)
	}
	// A resolved alert is forgotten once resolvedRetention has passed.
	r.Eval(context.Background(), tick(2).Add(resolvedRetention))
	if len(r.Alerts()) != 0 {
		t.Fatalf("resolved alert kept past retention")
	}
}

func TestFingerprintIsOrderIndependentAndDistinct(t *testing.T) {
	a := Fingerprint(map[string]string{"a": "1", "b": "2"})
	if a != Fingerprint(map[string]string{"b": "2", "a": "1"}) {
		t.Fatal("fingerprint depends on map order")
	}
	for _, other := range []map[string]string{{"a": "1", "b": "3"}, {"a": "12"}, {"a": "1b", "": "2"}} {
		if Fingerprint(other) == a {
			t.Fatalf("fingerprint collision with %v", other)
		}
	}
}

func TestNeedsSending(t *testing.T) {
	repeat := time.Hour
	cases := []struct {
		name string
		a    Alert
		ts   time.Time
		want bool
	}{
		{"pending", Alert{State: StatePending}, t0, false},
		{"firing, never sent", Alert{State: StateFiring, FiredAt: t0}, t0, true},
		{"firing, sent", Alert{State: StateFiring, FiredAt: t0, LastSentAt: t0}, t0.Add(time.Minute), false},
		{"firing, repeat due", Alert{State: StateFiring, FiredAt: t0, LastSentAt: t0}, t0.Add(repeat), true},
		{"refired after an old send", Alert{State: StateFiring, FiredAt: t0, LastSentAt: t0.Add(-time.Minute)}, t0, true},
		{"resolved, firing was sent", Alert{ResolvedAt: t0, LastSentAt: t0.Add(-time.Minute)}, t0, true},
		{"resolved, resolution sent", Alert{ResolvedAt: t0, LastSentAt: t0}, t0.Add(time.Minute), false},
		{"resolved, firing never sent", Alert{ResolvedAt: t0}, t0, false},
	}
	for _, tc := range cases {
		if got := needsSending(&tc.a, tc.ts, repeat); got != tc.want {
			t.Errorf("%s: needsSending = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestReplayTicksCoverTheHold(t *testing.T) {
	ticks := ReplayTicks(t0, 30*time.Second, 2*time.Minute)
	if len(ticks) != 6 || !ticks[len(ticks)-1].Equal(t0) || t0.Sub(ticks[0]) < 2*time.Minute {
		t.Fatalf("ticks %v: want 30 s apart, ending at %s, starting at least 2 min before", ticks, t0)
	}
	// Replay of a row firing since long ago reaches firing at t0, as the live detector would.
	s := scripted{rows: map[time.Time][]rules.Sample{}}
	for _, ts := range ticks {
		s.rows[ts] = []rules.Sample{firingRow(1, nil)}
	}
	got, err := Replay(context.Background(), t0, 30*time.Second, []*Rule{NewRule(def(2*time.Minute), s)})
	if err != nil || len(got) != 1 || got[0].State != StateFiring {
		t.Fatalf("replay: %+v, %v; want one firing alert", got, err)
	}
}

// orderLog records the order of saves and notifications.
type orderLog struct{ calls []string }

func (o *orderLog) Save(_ context.Context, _ time.Time, alerts []*Alert) error {
	for _, a := range alerts {
		o.calls = append(o.calls, "save "+a.StateName()+" sent="+a.LastSentAt.Format("15:04:05"))
	}
	return nil
}

func (o *orderLog) Load(context.Context) ([]*Alert, error) { return nil, nil }

// A due alert is saved as due (LastSentAt = ts) before it is handed to the notifier, so a crash
// after the hand-over leaves the decision in the store for the next start to deliver.
func TestEvalSavesBeforeNotifying(t *testing.T) {
	s := scripted{rows: map[time.Time][]rules.Sample{tick(0): {firingRow(1, nil)}, tick(1): {}}}
	o := &orderLog{}
	g := &Group{Rules: []*Rule{NewRule(def(0), s)}, Store: o,
		Notify: func(_ context.Context, ts time.Time, alerts []*Alert) {
			for _, a := range alerts {
				o.calls = append(o.calls, "notify "+a.StateName()+" sent="+a.LastSentAt.Format("15:04:05"))
			}
		}}
	for i := range 2 {
		if err := g.Eval(context.Background(), tick(i)); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"save firing sent=09:00:00", "notify firing sent=09:00:00",
		"save resolved sent=09:00:30", "notify resolved sent=09:00:30"}
	if len(o.calls) != len(want) {
		t.Fatalf("calls %v, want %v", o.calls, want)
	}
	for i := range want {
		if o.calls[i] != want[i] {
			t.Fatalf("calls %v, want %v", o.calls, want)
		}
	}
}

// memStore keeps what a group saves, for the retirement test.
type memStore struct{ saved []*Alert }

func (m *memStore) Save(_ context.Context, _ time.Time, alerts []*Alert) error {
	m.saved = append(m.saved, alerts...)
	return nil
}

func (m *memStore) Load(context.Context) ([]*Alert, error) { return nil, nil }

// A rule retired by a reload: its firing alert is resolved at the retirement, saved, handed to
// Notify (whose receiver had the firing) and to Resend once; its pending alert ends without a
// notification.
func TestRetireResolvesFiringAlertsOnce(t *testing.T) {
	s := scripted{rows: map[time.Time][]rules.Sample{
		tick(0): {firingRow(5, map[string]string{"app": "a"})},
		tick(2): {firingRow(5, map[string]string{"app": "a"}), firingRow(5, map[string]string{"app": "b"})},
	}}
	r := NewRule(def(time.Minute), s)
	store := &memStore{}
	var notified, resent []*Alert
	g := &Group{Rules: []*Rule{r}, Store: store,
		Notify: func(_ context.Context, _ time.Time, as []*Alert) { notified = append(notified, as...) },
		Resend: func(_ context.Context, _ time.Time, as []*Alert) { resent = append(resent, as...) }}
	s.rows[tick(1)] = s.rows[tick(0)]
	for i := range 3 {
		if err := g.Eval(context.Background(), tick(i)); err != nil {
			t.Fatal(err)
		}
	}
	// a fired at tick 2 (held a minute); b is pending since tick 2.
	if len(notified) != 1 || notified[0].Labels["app"] != "a" || notified[0].State != StateFiring {
		t.Fatalf("before the retirement notified %+v, want a's firing", notified)
	}
	notified, resent, store.saved = nil, nil, nil

	at := tick(3)
	if err := (&Group{Store: store, Notify: g.Notify, Resend: g.Resend}).Retire(context.Background(), at, r); err != nil {
		t.Fatal(err)
	}
	if len(notified) != 1 || notified[0].Labels["app"] != "a" || !notified[0].Resolved() || !notified[0].ResolvedAt.Equal(at) {
		t.Errorf("notified at the retirement %+v, want a resolved at %s", notified, at)
	}
	if len(resent) != 1 || !resent[0].Resolved() {
		t.Errorf("resent at the retirement %+v, want a resolved", resent)
	}
	states := map[string]string{}
	for _, a := range store.saved {
		states[a.Labels["app"]] = a.StateName()
	}
	if states["a"] != "resolved" || states["b"] != "inactive" || len(states) != 2 {
		t.Errorf("saved at the retirement %v, want a resolved and b inactive", states)
	}
	// Nothing is due any more: a second retirement (or a late evaluation) notifies nothing.
	notified = nil
	if err := (&Group{Store: store, Notify: g.Notify}).Retire(context.Background(), tick(4), r); err != nil || len(notified) != 0 {
		t.Errorf("second retirement: %v, notified %+v; want nothing", err, notified)
	}
}
