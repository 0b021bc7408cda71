package service_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/alerting"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/detector/service"
)

// rowsRule is a rule evaluator that returns fixed rows: what a built-in rule's query returns
// for an incident, so that the alerts below carry the labels the detector gives them.
type rowsRule struct {
	name string
	rows []rules.Sample
}

func (r rowsRule) Name() string { return r.name }

func (r rowsRule) Eval(context.Context, time.Time) ([]rules.Sample, error) { return r.rows, nil }

// inhibitedAlert is the part of Alertmanager's GettableAlert an inhibit test reads.
type inhibitedAlert struct {
	Labels      map[string]string `json:"labels"`
	Fingerprint string            `json:"fingerprint"`
	Status      struct {
		State       string   `json:"state"`
		InhibitedBy []string `json:"inhibitedBy"`
	} `json:"status"`
}

// firingAlerts evaluates each built-in rule named in rows on its rows (every row firing, the
// rule's hold passed) and returns their alerts as the detector sends them to Alertmanager.
func firingAlerts(t *testing.T, rows map[string][]map[string]string) []*alerting.Alert {
	t.Helper()
	defs, err := service.LoadRules("")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*rules.Definition{}
	for _, d := range defs {
		byName[d.Name] = d
	}
	now := time.Now()
	var out []*alerting.Alert
	for name, rs := range rows {
		var samples []rules.Sample
		for _, l := range rs {
			samples = append(samples, rules.Sample{Labels: l, Value: 1, Baseline: 0.1, Threshold: 0.5, Firing: true, KeepFiring: true, BaselineOK: true})
		}
		r := alerting.NewRule(byName[name], rowsRule{name, samples})
		for _, ts := range []time.Time{now.Add(-time.Hour), now} {
			if _, err := r.Eval(context.Background(), ts); err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range r.Alerts() {
			if a.State != alerting.StateFiring {
				t.Fatalf("%s: alert %v is %s", name, a.Labels, a.StateName())
			}
			out = append(out, a)
		}
	}
	return out
}

// postAndRead posts the alerts to Alertmanager's API as the detector does, and returns what
// Alertmanager then says of each, by key of its labels, once settled: Alertmanager's API sets
// each alert's status (inhibited or not) as it answers, but its inhibitor learns of the source
// alerts from the store on its own goroutine, so the answers are read until suppressed holds
// every key that must be suppressed (up to a minute; after that the rest are read as they are).
func postAndRead(t *testing.T, am string, alerts []*alerting.Alert, key func(map[string]string) string, suppressed ...string) map[string]inhibitedAlert {
	t.Helper()
	now := time.Now()
	var body []any
	for _, a := range alerts {
		body = append(body, service.ToAlertmanager(a, service.Links{}, now, time.Hour))
	}
	amAPI(t, "POST", am+"/api/v2/alerts", body, nil)
	deadline := time.Now().Add(time.Minute)
	for {
		var got []inhibitedAlert
		amAPI(t, "GET", am+"/api/v2/alerts", nil, &got)
		out := map[string]inhibitedAlert{}
		for _, g := range got {
			out[key(g.Labels)] = g
		}
		settled := len(got) == len(alerts)
		for _, k := range suppressed {
			settled = settled && out[k].Status.State == "suppressed"
		}
		if settled || time.Now().After(deadline) {
			if len(got) != len(alerts) {
				t.Fatalf("Alertmanager holds %d alerts, want %d", len(got), len(alerts))
			}
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestShippedAlertmanagerInhibitRules loads deploy/alertmanager/alertmanager.yml, as shipped, into a
// real Alertmanager and posts it the alerts of concurrent incidents with the labels the detector
// gives them: an inhibit rule mutes only what it should. A retrieval critical does not mute the
// same app's wrong-language warning; an overload critical for model A mutes A's latency warning
// and not model B's; a dead engine mutes its own KV warning and not another engine's; a hung
// request on A mutes nothing. The same alerts without the scope labels, under the inhibit rule
// shipped before (critical mutes warning, equal: [model]), do mute the wrong-language warning:
// the test can tell.
func TestShippedAlertmanagerInhibitRules(t *testing.T) {
	t.Parallel()
	shipped, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "alertmanager", "alertmanager.yml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := firingAlerts(t, map[string][]map[string]string{
		"retrieval_score_drift":  {{"app": "docs-qa"}},
		"output_language_errors": {{"app": "docs-qa"}},
		"overload_queue":         {{"engine": "", "model": "model-a", "signal": "queue_s"}},
		"latency_p95":            {{"model": "model-a", "metric": "e2e_s"}, {"model": "model-b", "metric": "e2e_s"}},
		"engine_not_scraped":     {{"engine": "vllm-0", "model": "model-c"}},
		"kv_cache_pressure":      {{"engine": "vllm-0", "model": "model-c"}, {"engine": "vllm-1", "model": "model-c"}},
		"requests_hung":          {{"gateway": "gw-1", "model": "model-b", "app": "none"}},
		"slot_limit":             {{"engine": "vllm-2", "model": "model-b"}},
	})
	for _, a := range alerts {
		for _, k := range rules.ScopeLabels {
			if a.Labels[k] == "" {
				t.Fatalf("alert %v lacks scope label %s", a.Labels, k)
			}
		}
	}
	key := func(l map[string]string) string {
		return l["alertname"] + "/" + l["model"] + "/" + l["engine"] + "/" + l["app"]
	}
	am := testenv.StartAlertmanager(t, string(shipped))
	got := postAndRead(t, am.URL(), alerts, key, "latency_p95/model-a/all/all", "kv_cache_pressure/model-c/vllm-0/all")
	fp := func(k string) string { return got[k].Fingerprint }
	want := map[string][]string{ // alert → the alerts inhibiting it
		"retrieval_score_drift/all/all/docs-qa":  nil,
		"output_language_errors/all/all/docs-qa": nil,
		"overload_queue/model-a/all/all":         nil,
		"latency_p95/model-a/all/all":            {fp("overload_queue/model-a/all/all")},
		"latency_p95/model-b/all/all":            nil,
		"engine_not_scraped/model-c/vllm-0/all":  nil,
		"kv_cache_pressure/model-c/vllm-0/all":   {fp("engine_not_scraped/model-c/vllm-0/all")},
		"kv_cache_pressure/model-c/vllm-1/all":   nil,
		"requests_hung/model-b/all/none":         nil,
		"slot_limit/model-b/vllm-2/all":          nil,
	}
	for k, by := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: not in Alertmanager (it holds %v)", k, keys(got))
			continue
		}
		wantState := "active"
		if len(by) > 0 {
			wantState = "suppressed"
		}
		if g.Status.State != wantState || strings.Join(g.Status.InhibitedBy, ",") != strings.Join(by, ",") {
			t.Errorf("%s: %s, inhibited by %v; want %s, inhibited by %v", k, g.Status.State, g.Status.InhibitedBy, wantState, by)
		}
	}

	// The same incidents as alerts were labelled before the contract (empty scope labels left
	// out), under the inhibit rule shipped then: the retrieval critical mutes the wrong-language
	// warning, as an on-call engineer saw it do.
	old := `route: {receiver: "null", group_by: [alertname, model]}
inhibit_rules:
  - source_matchers: ['severity="critical"']
    target_matchers: ['severity="warning"']
    equal: [model]
receivers: [{name: "null"}]
`
	for _, a := range alerts {
		for _, k := range rules.ScopeLabels {
			if a.Labels[k] == rules.ScopeAll {
				delete(a.Labels, k)
			}
		}
	}
	before := testenv.StartAlertmanager(t, old)
	got = postAndRead(t, before.URL(), alerts, key, "output_language_errors///docs-qa")
	if g := got["output_language_errors///docs-qa"]; g.Status.State != "suppressed" {
		t.Errorf("without the scope labels, under the old rule, the wrong-language warning is %s: the test would not see the fault", g.Status.State)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
