package alerting

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/services/detector/rules"
)

// parseDef parses a rule file made of the lines given after the common header.
func parseDef(t *testing.T, lines ...string) *rules.Definition {
	t.Helper()
	d, err := rules.Parse("r.yaml", []byte("name: r\nseverity: critical\nwindow: 5m\nsummary: 'value {{f .Value}}'\nquery: SELECT 1\n"+
		strings.Join(lines, "\n")+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// states evaluates a rule whose single row fires at the ticks where firing[i] is true and returns
// the alert's state name after each tick ("gone" when the rule holds no alert) and its startsAt
// (FiredAt) after each.
func states(t *testing.T, d *rules.Definition, firing []bool) ([]string, []time.Time) {
	t.Helper()
	s := scripted{rows: map[time.Time][]rules.Sample{}}
	for i, f := range firing {
		row := firingRow(float64(i), map[string]string{"app": "a"})
		row.Firing = f
		s.rows[tick(i)] = []rules.Sample{row}
	}
	r := NewRule(d, s)
	var got []string
	var fired []time.Time
	for i := range firing {
		if _, err := r.Eval(context.Background(), tick(i)); err != nil {
			t.Fatal(err)
		}
		as := r.Alerts()
		switch len(as) {
		case 0:
			got, fired = append(got, "gone"), append(fired, time.Time{})
		case 1:
			got, fired = append(got, as[0].StateName()), append(fired, as[0].FiredAt)
		default:
			t.Fatalf("tick %d: %d alerts", i, len(as))
		}
	}
	return got, fired
}

// keep_firing_for as Prometheus defines it: a firing alert whose row stops stays firing until
// keep_firing_for has passed since the first evaluation without the row; a row back within it
// continues the same alert (same startsAt, no new notification), and the hold does not apply to
// pending alerts.
func TestKeepFiringFor(t *testing.T) {
	T, F := true, false
	cases := []struct {
		name   string
		lines  []string
		firing []bool
		want   []string
	}{
		{"without it a gap resolves and re-fires", nil,
			[]bool{T, F, T, F, F}, []string{"firing", "resolved", "firing", "resolved", "resolved"}},
		{"a gap shorter than keep_firing_for is bridged", []string{"keep_firing_for: 1m"},
			[]bool{T, F, T, F, F, F, F}, []string{"firing", "firing", "firing", "firing", "firing", "resolved", "resolved"}},
		{"resolves keep_firing_for after the last row", []string{"keep_firing_for: 30s"},
			[]bool{T, F, F}, []string{"firing", "firing", "resolved"}},
		{"pending is not kept", []string{"for: 1m", "keep_firing_for: 5m"},
			[]bool{T, F, T}, []string{"pending", "gone", "pending"}},
		{"for and keep_firing_for together", []string{"for: 30s", "keep_firing_for: 30s"},
			[]bool{T, T, F, T, F, F}, []string{"pending", "firing", "firing", "firing", "firing", "resolved"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, fired := states(t, parseDef(t, tc.lines...), tc.firing)
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("states %v, want %v", got, tc.want)
			}
			// While kept firing the alert is the same episode: its startsAt does not move.
			for i := 1; i < len(got); i++ {
				if got[i] == "firing" && got[i-1] == "firing" && !fired[i].Equal(fired[i-1]) {
					t.Fatalf("tick %d: startsAt moved from %s to %s while firing", i, fired[i-1], fired[i])
				}
			}
		})
	}
}

// A rule's labels join the row's (and win over them), alertname and severity win over both, the
// scope labels the row leaves out are "all", and runbook_url becomes an annotation.
func TestRuleLabelsAndRunbook(t *testing.T) {
	d := parseDef(t, "labels: {team: serving, app: fixed}", "runbook_url: https://runbooks.example/r")
	s := scripted{rows: map[time.Time][]rules.Sample{
		tick(0): {firingRow(1, map[string]string{"app": "a", "model": "m", "alertname": "x", "severity": "low"})},
	}}
	r := NewRule(d, s)
	if _, err := r.Eval(context.Background(), tick(0)); err != nil {
		t.Fatal(err)
	}
	a := r.Alerts()[0]
	want := map[string]string{"alertname": "r", "severity": "critical", "team": "serving", "app": "fixed", "model": "m",
		"engine": "all", "gateway": "all"}
	if len(a.Labels) != len(want) {
		t.Fatalf("labels %v, want %v", a.Labels, want)
	}
	for k, v := range want {
		if a.Labels[k] != v {
			t.Fatalf("labels %v, want %v", a.Labels, want)
		}
	}
	if a.Annotations["runbook_url"] != "https://runbooks.example/r" {
		t.Fatalf("annotations %v: want runbook_url", a.Annotations)
	}
}

// Resend gets every firing alert and every retained resolved one at every evaluation, due or not;
// Notify only what is due.
func TestResendEveryEvaluation(t *testing.T) {
	s := scripted{rows: map[time.Time][]rules.Sample{}}
	for i := range 3 {
		s.rows[tick(i)] = []rules.Sample{firingRow(1, nil)}
	}
	var notified, resent []string
	record := func(to *[]string) NotifyFunc {
		return func(_ context.Context, ts time.Time, alerts []*Alert) {
			for _, a := range alerts {
				*to = append(*to, ts.Format("15:04:05")+" "+a.StateName())
			}
		}
	}
	g := &Group{Repeat: time.Hour, Rules: []*Rule{NewRule(def(30*time.Second), s)},
		Notify: record(&notified), Resend: record(&resent)}
	for i := range 6 {
		if err := g.Eval(context.Background(), tick(i)); err != nil {
			t.Fatal(err)
		}
	}
	g.Eval(context.Background(), tick(3).Add(resolvedRetention))
	// tick 0 pending (sent to neither), ticks 1-2 firing, 3-5 resolved, then forgotten.
	wantNotified := "09:00:30 firing|09:01:30 resolved"
	wantResent := "09:00:30 firing|09:01:00 firing|09:01:30 resolved|09:02:00 resolved|09:02:30 resolved"
	if got := strings.Join(notified, "|"); got != wantNotified {
		t.Errorf("notified %s, want %s", got, wantNotified)
	}
	if got := strings.Join(resent, "|"); got != wantResent {
		t.Errorf("resent %s, want %s", got, wantResent)
	}
}

// With hysteresis a firing alert stays firing while its row keeps firing (in flight still above
// the resolve limit though no longer rising), and resolves once the row does neither; keep_firing
// alone never starts an alert nor advances a pending one.
func TestHysteresisHoldsOnlyFiringAlerts(t *testing.T) {
	type row struct{ firing, keep bool }
	cases := []struct {
		name string
		hold time.Duration
		rows []row
		want []string
	}{
		{"held while above the resolve limit", 0,
			[]row{{true, true}, {false, true}, {false, true}, {false, false}, {false, true}},
			[]string{"firing", "firing", "firing", "resolved", "resolved"}},
		{"keep_firing starts nothing", 0,
			[]row{{false, true}, {false, true}}, []string{"gone", "gone"}},
		{"keep_firing does not advance a pending alert", time.Minute,
			[]row{{true, true}, {false, true}, {true, true}}, []string{"pending", "gone", "pending"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := scripted{rows: map[time.Time][]rules.Sample{}}
			for i, r := range tc.rows {
				smp := firingRow(float64(i), map[string]string{"kind": "in_flight"})
				smp.Firing, smp.KeepFiring = r.firing, r.keep
				s.rows[tick(i)] = []rules.Sample{smp}
			}
			r := NewRule(def(tc.hold), s)
			var got []string
			for i := range tc.rows {
				if _, err := r.Eval(context.Background(), tick(i)); err != nil {
					t.Fatal(err)
				}
				st := "gone"
				if as := r.Alerts(); len(as) == 1 {
					st = as[0].StateName()
				}
				got = append(got, st)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("states %v, want %v", got, tc.want)
			}
		})
	}
}

// A resolved alert says what its value came back to (the rule's row at the resolving evaluation,
// when the rule still returns it) or that the row is gone, beside the value it last fired with,
// not the firing text; a row's details become annotations that do not change its identity.
func TestResolvedSaysWhatTheValueCameBackTo(t *testing.T) {
	d := parseDef(t, "resolved_summary: '{{if .HasValue}}back to {{f .Value}} (threshold {{f .Threshold}}){{else}}no data{{end}}, fired at {{f .FiredValue}}'")
	row := func(v float64, firing bool, details map[string]string) rules.Sample {
		return rules.Sample{Labels: map[string]string{"model": "m"}, Value: v, Baseline: 1, Threshold: 2, Firing: firing,
			KeepFiring: firing, BaselineOK: true, Details: details}
	}
	s := scripted{rows: map[time.Time][]rules.Sample{
		tick(0): {row(5, true, map[string]string{"request_id": "r1", "summary": "not this"})},
		tick(1): {row(6, true, map[string]string{"request_id": "r2"})},
		tick(2): {row(0.5, false, nil)},
		tick(3): {row(7, true, nil)},
		tick(4): {},
	}}
	r := NewRule(d, s)
	var fp string
	for i := range 5 {
		changed, err := r.Eval(context.Background(), tick(i))
		if err != nil {
			t.Fatal(err)
		}
		a := r.Alerts()[0]
		switch i {
		case 0:
			fp = a.Fingerprint
			if a.Annotations["request_id"] != "r1" || a.Annotations["summary"] != "value 5.000" {
				t.Errorf("firing annotations %v: want the row's request_id, and the detector's summary", a.Annotations)
			}
		case 1:
			if a.Fingerprint != fp || a.Annotations["request_id"] != "r2" {
				t.Errorf("tick 1: fingerprint %s (was %s), annotations %v", a.Fingerprint, fp, a.Annotations)
			}
		case 2:
			if len(changed) != 1 || !changed[0].Resolved() {
				t.Fatalf("tick 2: changed %+v, want the resolution", changed)
			}
			if got := changed[0].Annotations; got["summary"] != "back to 0.500 (threshold 2.000), fired at 6.000" ||
				got["value"] != "0.5" || got["fired_value"] != "6" || got["request_id"] != "" || got["description"] != "" {
				t.Errorf("resolved annotations %v", got)
			}
		case 4:
			if got := changed[0].Annotations; got["summary"] != "no data, fired at 7.000" || got["value"] != "unknown" {
				t.Errorf("resolved with the row gone: %v", got)
			}
		}
	}
	// The default text names the labels and both values.
	d = parseDef(t)
	r = NewRule(d, scripted{rows: map[time.Time][]rules.Sample{tick(0): {row(5, true, nil)}, tick(1): {row(1, false, nil)}}})
	r.Eval(context.Background(), tick(0))
	changed, _ := r.Eval(context.Background(), tick(1))
	want := "Resolved: r app=all engine=all gateway=all model=m is back to 1.000 (threshold 2.000); it was 5.000 when it last fired."
	if len(changed) != 1 || changed[0].Annotations["summary"] != want {
		t.Errorf("default resolved summary %q, want %q", changed[0].Annotations["summary"], want)
	}
}
