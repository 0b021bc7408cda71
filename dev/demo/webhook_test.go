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
