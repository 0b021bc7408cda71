package demo

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const firing = `{"version":"4","status":"firing","receiver":"demo","alerts":[
 {"status":"firing","labels":{"alertname":"server_errors","severity":"critical","class":"5xx","model":"m"},
  "annotations":{"summary":"15 requests to m\n  failed with 5xx in the window."},
  "startsAt":"2026-11-30T12:00:00Z","endsAt":"0001-01-01T00:00:00Z","fingerprint":"f1"}]}`

const resolved = `{"version":"4","status":"resolved","receiver":"demo","alerts":[
 {"status":"resolved","labels":{"alertname":"server_errors","severity":"critical","class":"5xx","model":"m"},
  "annotations":{"summary":"0 requests"},
  "startsAt":"2026-11-30T12:00:00Z","endsAt":"2026-11-30T12:01:00Z","fingerprint":"f1"}]}`

func post(t *testing.T, r *Receiver, method, body string) int {
	t.Helper()
	req := httptest.NewRequest(method, "/alerts", strings.NewReader(body))
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	return w.Code
}

func TestReceiver(t *testing.T) {
	r := NewReceiver()
	before := time.Now()
	tests := []struct {
		method, body string
		code         int
	}{
		{http.MethodGet, "", http.StatusMethodNotAllowed},
		{http.MethodPost, "{not json", http.StatusBadRequest},
		{http.MethodPost, firing, http.StatusOK},
		{http.MethodPost, resolved, http.StatusOK},
	}
	for _, tc := range tests {
		if got := post(t, r, tc.method, tc.body); got != tc.code {
			t.Errorf("%s %.20q: status %d, want %d", tc.method, tc.body, got, tc.code)
		}
	}
	if n := len(r.Alerts()); n != 2 {
		t.Fatalf("%d alerts kept, want 2 (bad messages lose nothing and add nothing)", n)
	}
	rule, at, ok := r.Met(Expectation{Rules: []string{"overload_queue", "server_errors"}, Since: before})
	if !ok || rule != "server_errors" || at.Before(before) {
		t.Errorf("Met = %q %v %v, want server_errors after %v", rule, at, ok, before)
	}
	if _, _, ok := r.Met(Expectation{Rules: []string{"server_errors"}, Since: time.Now().Add(time.Minute)}); ok {
		t.Error("an alert from before Since counted")
	}
	if _, _, ok := r.Met(Expectation{Rules: []string{"output_language_errors"}, Since: before}); ok {
		t.Error("a rule that never fired counted")
	}
}

func TestEpisodesAndWriteAlerts(t *testing.T) {
	origin := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	start := origin.Add(-time.Hour)
	lab := func(rule string) map[string]string {
		return map[string]string{"alertname": rule, "severity": "critical", "app": "ragdemo", "empty": ""}
	}
	alerts := []Received{
		{At: origin.Add(50 * time.Second), Rule: "b", Status: "firing", Labels: lab("b"), Summary: "second", StartsAt: start, Fingerprint: "fb"},
		{At: origin.Add(10 * time.Second), Rule: "a", Status: "firing", Labels: lab("a"), Summary: "first\n  wrapped", StartsAt: start, Fingerprint: "fa"},
		{At: origin.Add(20 * time.Second), Rule: "a", Status: "firing", Labels: lab("a"), Summary: "repeat", StartsAt: start, Fingerprint: "fa"},
		{At: origin.Add(30 * time.Second), Rule: "a", Status: "resolved", Labels: lab("a"), StartsAt: start, Fingerprint: "fa"},
		// A resolution without its firing message (sent before the receiver listened) is no episode.
		{At: origin.Add(40 * time.Second), Rule: "c", Status: "resolved", Labels: lab("c"), StartsAt: start, Fingerprint: "fc"},
	}
	eps := Episodes(alerts)
	if len(eps) != 2 || eps[0].Rule != "a" || eps[1].Rule != "b" {
		t.Fatalf("episodes %+v, want a then b", eps)
	}
	if eps[0].Summary != "first wrapped" || !eps[0].ResolvedAt.Equal(origin.Add(30*time.Second)) || !eps[1].ResolvedAt.IsZero() {
		t.Errorf("episode a %+v, b %+v", eps[0], eps[1])
	}
	var buf bytes.Buffer
	WriteAlerts(&buf, alerts, origin)
	golden(t, "alerts.txt", buf.Bytes())

	buf.Reset()
	WriteAlerts(&buf, nil, origin)
	if !strings.Contains(buf.String(), "no alert received") {
		t.Errorf("empty list printed %q", buf.String())
	}
}

// TestFlaps counts firings per alert identity and phase on a recorded sequence shaped like the
// run the flap count was made for: unfinished_rising fired, resolved and fired again within one
// overload (a flap), a firing message sent twice for one episode (not a flap), the same alert
// firing again in a later incident (not a flap), and another identity of the same rule (its own).
func TestFlaps(t *testing.T) {
	origin := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return origin.Add(time.Duration(s) * time.Second) }
	rec := func(s int, status, fp string, start int, labels ...string) Received {
		l := map[string]string{"alertname": "unfinished_rising", "severity": "critical"}
		for i := 0; i+1 < len(labels); i += 2 {
			l[labels[i]] = labels[i+1]
		}
		return Received{At: at(s), Rule: "unfinished_rising", Status: status, Labels: l, StartsAt: at(start), Fingerprint: fp}
	}
	phases := []Phase{{Name: "Overload", Start: at(30)}, {Name: "Normal", Start: at(0)}, {Name: "Engine crash", Start: at(200)}}
	alerts := []Received{
		rec(71, "firing", "f1", 70, "kind", "in_flight"),
		rec(72, "firing", "f1", 70, "kind", "in_flight"), // the same episode sent again
		rec(73, "resolved", "f1", 70, "kind", "in_flight"),
		rec(77, "firing", "f1", 76, "kind", "in_flight"), // fired again in the same overload
		rec(90, "resolved", "f1", 76, "kind", "in_flight"),
		rec(95, "firing", "f2", 94, "kind", "waiting"), // another identity
		rec(210, "firing", "f1", 209, "kind", "in_flight"),
		rec(240, "resolved", "f1", 209, "kind", "in_flight"),
	}
	flaps, total := Flaps(alerts, phases)
	if total != 1 || len(flaps) != 1 || flaps[0] != (Flap{Phase: "Overload", Rule: "unfinished_rising", Labels: "kind=in_flight", Firings: 2}) {
		t.Fatalf("Flaps = %+v, %d; want unfinished_rising kind=in_flight twice during Overload, 1 flap", flaps, total)
	}
	var out bytes.Buffer
	WriteFlaps(&out, flaps, total)
	if !strings.Contains(out.String(), "flaps: 1 ") || !strings.Contains(out.String(), "unfinished_rising kind=in_flight fired 2 times during Overload") {
		t.Errorf("WriteFlaps printed:\n%s", out.String())
	}

	// A run in which each incident gives one firing and one resolution per identity has none.
	clean := []Received{alerts[0], alerts[2], alerts[5], alerts[6], alerts[7]}
	if flaps, total := Flaps(clean, phases); total != 0 || len(flaps) != 0 {
		t.Fatalf("Flaps of a clean run = %+v, %d; want none", flaps, total)
	}
	out.Reset()
	WriteFlaps(&out, nil, 0)
	if !strings.HasPrefix(out.String(), "  flaps: 0 ") {
		t.Errorf("WriteFlaps of a clean run printed %q", out.String())
	}
	// Firings before the first phase count in a phase of their own.
	early := []Received{rec(-20, "firing", "f1", -21), rec(-10, "resolved", "f1", -21), rec(-5, "firing", "f1", -6)}
	if flaps, total := Flaps(early, phases); total != 1 || flaps[0].Phase != "before the scenarios" {
		t.Fatalf("Flaps before the first phase = %+v, %d", flaps, total)
	}
}

// An alert is unexpected unless the phase in which it fired, or the one before it (its window
// reaches back), explains its rule: the demo's truncated_outputs of the normal workload, the fault
// this catches, is unexpected; the overload's latency alert firing early in the next phase is not.
func TestUnexpected(t *testing.T) {
	origin := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return origin.Add(time.Duration(s) * time.Second) }
	rec := func(s int, rule, fp string) Received {
		return Received{At: at(s), Rule: rule, Status: "firing", Labels: map[string]string{"alertname": rule, "model": "m", "app": "all"},
			StartsAt: at(s), Fingerprint: fp, Summary: rule + " summary"}
	}
	phases := []Phase{
		{Name: "Normal", Start: at(0)},
		{Name: "Overload", Start: at(30), Rules: PhaseRules["overload"]},
		{Name: "Long prompt", Start: at(90), Rules: PhaseRules["long-prompt"]},
		{Name: "Long output", Start: at(120), Rules: PhaseRules["long-output"]},
	}
	alerts := []Received{
		rec(-5, "server_errors", "a"),      // before any phase
		rec(20, "truncated_outputs", "b"),  // normal explains nothing
		rec(40, "overload_queue", "c"),     // the overload's
		rec(95, "slot_limit", "d"),         // the overload's, fired early in the next phase
		rec(125, "slot_limit", "e"),        // two phases after the overload: not explained
		rec(130, "truncated_outputs", "f"), // long output's
	}
	got := Unexpected(alerts, phases)
	var rules []string
	for _, e := range got {
		rules = append(rules, e.Rule+"/"+e.Fingerprint)
	}
	if strings.Join(rules, " ") != "server_errors/a truncated_outputs/b slot_limit/e" {
		t.Fatalf("unexpected: %v, want server_errors/a truncated_outputs/b slot_limit/e", rules)
	}
	var out bytes.Buffer
	WriteUnexpected(&out, got, phases)
	if !strings.HasPrefix(out.String(), "  3 unexpected alerts") || !strings.Contains(out.String(), "truncated_outputs model=m fired during Normal") {
		t.Errorf("WriteUnexpected printed:\n%s", out.String())
	}
	out.Reset()
	WriteUnexpected(&out, nil, phases)
	if !strings.HasPrefix(out.String(), "  0 unexpected alerts") {
		t.Errorf("WriteUnexpected of a clean run printed %q", out.String())
	}
}
