package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/alerting"
	"github.com/servescope/servescope/services/detector/notify"
	"github.com/servescope/servescope/services/detector/service"
)

// amReceiver is a webhook receiver of Alertmanager's (webhook_configs): it keeps every message.
type amReceiver struct {
	t   *testing.T
	srv *httptest.Server

	mu   sync.Mutex
	msgs []notify.Message
}

func startAMReceiver(t *testing.T) *amReceiver {
	r := &amReceiver{t: t}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var m notify.Message
		if err := json.NewDecoder(req.Body).Decode(&m); err != nil {
			t.Errorf("alertmanager sent a body that is not a webhook message: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.msgs = append(r.msgs, m)
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *amReceiver) messages() []notify.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// waitFor returns the index of the first message from index from on that satisfies ok, waiting
// up to a minute for it (a bound on a hang: Alertmanager flushes a group every 200 ms here).
func (r *amReceiver) waitFor(from int, what string, ok func(notify.Message) bool) int {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		msgs := r.messages()
		for i := from; i < len(msgs); i++ {
			if ok(msgs[i]) {
				return i
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("no message with %s arrived; got %s", what, describe(msgs))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func describe(msgs []notify.Message) string {
	var b strings.Builder
	for i, m := range msgs {
		fmt.Fprintf(&b, "\n  %d: receiver %s:", i, m.Receiver)
		for _, a := range m.Alerts {
			fmt.Fprintf(&b, " %s/%s=%s", a.Labels["alertname"], a.Labels["model"], a.Status)
		}
	}
	return b.String()
}

// alertOf returns the message's alert for model, if any.
func alertOf(m notify.Message, model string) (notify.Alert, bool) {
	for _, a := range m.Alerts {
		if a.Labels["model"] == model {
			return a, true
		}
	}
	return notify.Alert{}, false
}

func hasAlert(model, status string) func(notify.Message) bool {
	return func(m notify.Message) bool {
		a, ok := alertOf(m, model)
		return ok && a.Status == status
	}
}

// amConfig routes critical server_errors alerts to oncall and everything else to fallback.
func amConfig(oncall, fallback string) string {
	return `route:
  receiver: fallback
  group_by: [alertname]
  group_wait: 100ms
  group_interval: 200ms
  repeat_interval: 1h
  routes:
    - matchers: ['alertname="server_errors"', 'severity="critical"']
      receiver: oncall
receivers:
  - name: fallback
    webhook_configs:
      - url: ` + fallback + `
  - name: oncall
    webhook_configs:
      - url: ` + oncall + `
        send_resolved: true
`
}

// amAPI calls Alertmanager's API v2 and decodes its JSON answer into out (when not nil).
func amAPI(t *testing.T, method, rawURL string, in, out any) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, rawURL, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s: %s", method, rawURL, resp.Status, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: answer %s: %v", method, rawURL, raw, err)
		}
	}
}

// gettableAlert is the part of Alertmanager's models.GettableAlert the test reads.
type gettableAlert struct {
	Labels map[string]string `json:"labels"`
	EndsAt time.Time         `json:"endsAt"`
	Status struct {
		State      string   `json:"state"`
		SilencedBy []string `json:"silencedBy"`
	} `json:"status"`
}

// An incident's alert goes through a real Alertmanager: routed by its labels to the receiver its
// route names, muted by a silence created through Alertmanager's API while another alert of the
// same group still reaches the receiver, and its resolution delivered once the incident is over
// (the silence expired by then).
//
// Traffic: model-a answers 30% 5xx in [at-5m, at), model-b in [at+1m, at+4m), both normal
// otherwise; server_errors reads a 5-minute window.
func TestAlertmanagerRoutesSilencesAndResolves(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	oncall, fallback := startAMReceiver(t), startAMReceiver(t)
	am := testenv.StartAlertmanager(t, amConfig(oncall.srv.URL+"/oncall", fallback.srv.URL+"/fallback"))

	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour)
	g := synth.New(16)
	shape := func(model string, p5xx float64) synth.Shape {
		s := synth.NormalShape()
		s.Model, s.Status5xxProb = model, p5xx
		return s
	}
	rate := synth.Constant(0.2)
	tr := g.Requests(at.Add(-5*time.Minute), at, rate, shape("model-a", 0.3))
	tr.Add(g.Requests(at, at.Add(15*time.Minute), rate, shape("model-a", 0)))
	tr.Add(g.Requests(at.Add(-5*time.Minute), at.Add(time.Minute), rate, shape("model-b", 0)))
	tr.Add(g.Requests(at.Add(time.Minute), at.Add(4*time.Minute), rate, shape("model-b", 0.3)))
	tr.Add(g.Requests(at.Add(4*time.Minute), at.Add(15*time.Minute), rate, shape("model-b", 0)))
	insert(t, conn, tr)

	cfg := testConfig(ch)
	cfg.AlertmanagerURLs, cfg.AlertmanagerTimeout = []string{am.URL()}, 10*time.Second
	cfg.ConsoleURL = "http://console.example:9104"
	d := newDetector(t, cfg, conn, "server_errors")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	go d.Alertmanagers().Run(ctx)
	eval := func(ts time.Time) {
		t.Helper()
		if err := d.Groups()[0].Eval(ctx, ts); err != nil {
			t.Fatalf("evaluate at %s: %v", ts, err)
		}
	}

	// 1. model-a's 5xx fire; the route on alertname and severity takes the alert to oncall.
	eval(at)
	i := oncall.waitFor(0, "model-a firing", hasAlert("model-a", "firing"))
	m := oncall.messages()[i]
	a, _ := alertOf(m, "model-a")
	if m.Receiver != "oncall" || a.Labels["alertname"] != "server_errors" || a.Labels["severity"] != "critical" ||
		a.Labels["class"] != "5xx" {
		t.Fatalf("first message: receiver %q, labels %v", m.Receiver, a.Labels)
	}
	if a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
		t.Errorf("annotations %v: want summary and description", a.Annotations)
	}
	if want := cfg.ConsoleURL + "/alerts?from=" + url.QueryEscape(at.Add(-15*time.Minute).Format(time.RFC3339)) + "&rule=server_errors"; a.GeneratorURL != want {
		t.Errorf("generatorURL %q, want %q", a.GeneratorURL, want)
	}
	if a.Annotations["runbook_url"] != cfg.ConsoleURL+"/runbooks/server_errors" {
		t.Errorf("runbook_url %q", a.Annotations["runbook_url"])
	}
	for _, k := range []string{"model", "app", "engine", "gateway"} {
		if a.Labels[k] == "" {
			t.Errorf("label %s missing from %v: the label contract wants every scope label", k, a.Labels)
		}
	}
	if !a.StartsAt.Equal(at) {
		t.Errorf("startsAt %s, want the evaluation that fired it, %s", a.StartsAt, at)
	}
	// Alertmanager holds the alert as firing until the endsAt the detector sent: four intervals
	// past the send, by the wall clock.
	var held []gettableAlert
	amAPI(t, http.MethodGet, am.URL()+"/api/v2/alerts?filter="+url.QueryEscape(`model="model-a"`), nil, &held)
	if len(held) != 1 || !held[0].EndsAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("alertmanager holds %+v: want model-a's alert with endsAt about 2 minutes ahead", held)
	}

	// 2. A silence on model-a's alert, created through Alertmanager's API.
	var created struct {
		SilenceID string `json:"silenceID"`
	}
	now := time.Now().UTC()
	amAPI(t, http.MethodPost, am.URL()+"/api/v2/silences", map[string]any{
		"matchers": []map[string]any{
			{"name": "alertname", "value": "server_errors", "isRegex": false, "isEqual": true},
			{"name": "model", "value": "model-a", "isRegex": false, "isEqual": true},
		},
		"startsAt": now, "endsAt": now.Add(time.Hour), "createdBy": "servescope test", "comment": "muted by the test",
	}, &created)
	if created.SilenceID == "" {
		t.Fatal("alertmanager returned no silenceID")
	}

	// 3. model-b's 5xx fire too (model-a's are still in the window): the group's next message
	// carries model-b alone, model-a's alert muted by the silence.
	from := len(oncall.messages())
	eval(at.Add(3 * time.Minute))
	i = oncall.waitFor(from, "model-b firing", hasAlert("model-b", "firing"))
	for j, m := range oncall.messages()[from : i+1] {
		if _, ok := alertOf(m, "model-a"); ok {
			t.Fatalf("message %d after the silence carries model-a's alert:%s", from+j, describe(oncall.messages()))
		}
	}
	amAPI(t, http.MethodGet, am.URL()+"/api/v2/alerts?filter="+url.QueryEscape(`model="model-a"`), nil, &held)
	if len(held) != 1 || held[0].Status.State != "suppressed" || !slices.Contains(held[0].Status.SilencedBy, created.SilenceID) {
		t.Fatalf("alertmanager holds %+v: want model-a's alert suppressed by silence %s", held, created.SilenceID)
	}

	// 4. The silence expires; model-a's incident is over at at+6m (model-b's still in the window):
	// model-a's resolution arrives with endsAt at that evaluation.
	amAPI(t, http.MethodDelete, am.URL()+"/api/v2/silence/"+created.SilenceID, nil, nil)
	from = len(oncall.messages())
	resolvedAt := at.Add(6 * time.Minute)
	eval(resolvedAt)
	i = oncall.waitFor(from, "model-a resolved", hasAlert("model-a", "resolved"))
	if a, _ := alertOf(oncall.messages()[i], "model-a"); !a.EndsAt.Equal(resolvedAt) {
		t.Errorf("model-a resolved with endsAt %s, want %s", a.EndsAt, resolvedAt)
	}

	// 5. model-b's incident ends at at+9m: its resolution arrives too.
	eval(at.Add(9 * time.Minute))
	oncall.waitFor(from, "model-b resolved", hasAlert("model-b", "resolved"))

	if got := fallback.messages(); len(got) != 0 {
		t.Errorf("the fallback route received messages:%s", describe(got))
	}
}

// A firing alert is sent with startsAt at its firing and endsAt validFor past the send (by the wall
// clock given); a resolved one with endsAt at its resolution.
func TestToAlertmanager(t *testing.T) {
	fired := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	now := fired.Add(2 * time.Hour)
	a := &alerting.Alert{Rule: "server_errors", Fingerprint: "f", State: alerting.StateFiring,
		Labels:      map[string]string{"alertname": "server_errors", "severity": "critical"},
		Annotations: map[string]string{"summary": "s", "runbook_url": "https://runbooks.example/server_errors"},
		ActiveAt:    fired.Add(-time.Minute), FiredAt: fired}
	defs, err := service.LoadRules("")
	if err != nil {
		t.Fatal(err)
	}
	links := service.NewLinks("http://console:9104/", defs)
	p := service.ToAlertmanager(a, links, now, 2*time.Minute)
	if !p.StartsAt.Equal(fired) || !p.EndsAt.Equal(now.Add(2*time.Minute)) ||
		p.GeneratorURL != "http://console:9104/alerts?from=2026-11-30T08%3A44%3A00Z&rule=server_errors" || p.Fingerprint != "f" ||
		p.Annotations["runbook_url"] != "https://runbooks.example/server_errors" || p.Labels["severity"] != "critical" {
		t.Fatalf("firing: %+v", p)
	}
	a.State, a.ResolvedAt = alerting.StateInactive, fired.Add(10*time.Minute)
	p = service.ToAlertmanager(a, service.Links{}, now, 2*time.Minute)
	if !p.StartsAt.Equal(fired) || !p.EndsAt.Equal(a.ResolvedAt) || p.GeneratorURL != "" {
		t.Fatalf("resolved: %+v", p)
	}
	// Resolved, the page runs to the resolution plus the lead; a rule's runbook and a request's
	// page are the console's.
	delete(a.Annotations, "runbook_url")
	a.Annotations["request_id"] = "req/1 x"
	p = service.ToAlertmanager(a, links, now, 2*time.Minute)
	if p.GeneratorURL != "http://console:9104/alerts?from=2026-11-30T08%3A44%3A00Z&rule=server_errors&to=2026-11-30T09%3A25%3A00Z" ||
		p.Annotations["runbook_url"] != "http://console:9104/runbooks/server_errors" ||
		p.Annotations["request_url"] != "http://console:9104/request/req%2F1%20x" {
		t.Fatalf("resolved with links: %+v", p)
	}
	if _, ok := a.Annotations["request_url"]; ok {
		t.Errorf("the alert's own annotations were changed: %v", a.Annotations)
	}
}

func TestConfigRejectsBadAlertmanagerURLs(t *testing.T) {
	cfg := service.Config{Interval: 30 * time.Second, AlertmanagerTimeout: 10 * time.Second,
		AlertmanagerURLs: []string{"alertmanager:9093"}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "DETECTOR_ALERTMANAGER_URLS") {
		t.Fatalf("Validate = %v, want an error naming DETECTOR_ALERTMANAGER_URLS", err)
	}
	cfg.AlertmanagerURLs, cfg.AlertmanagerTimeout = []string{"http://alertmanager:9093"}, 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "DETECTOR_ALERTMANAGER_TIMEOUT") {
		t.Fatalf("Validate = %v, want an error naming DETECTOR_ALERTMANAGER_TIMEOUT", err)
	}
}
