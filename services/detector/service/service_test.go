package service_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/detector/service"
)

// DETECTOR_RULES_DIR adds rules and replaces built-in rules of the same name.
func TestLoadRulesFromUserDirectory(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"slot_limit.yaml": "name: slot_limit\nwindow: 1m\nparams: {max_num_seqs: 128}\nquery: SELECT 1\n",
		"my_rule.yml":     "name: my_rule\nwindow: 5m\nquery: SELECT 1\n",
		"notes.txt":       "not a rule",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	defs, err := service.LoadRules(dir)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	for i, d := range defs {
		byName[d.Name] = i
	}
	if len(defs) != 11 {
		t.Fatalf("%d rules, want 10 built-in + 1", len(defs))
	}
	if d := defs[byName["slot_limit"]]; d.Params["max_num_seqs"] != 128 {
		t.Fatalf("slot_limit not replaced: %+v", d.Params)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("name: Bad\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := service.LoadRules(dir); err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Fatalf("bad rule file: error %v, want one naming bad.yaml", err)
	}
}

func TestConfigFromEnvironment(t *testing.T) {
	cfg, err := config.LoadFrom[service.Config](map[string]string{
		"DETECTOR_WEBHOOK_URLS": "http://a/x,https://b/y", "DETECTOR_INTERVAL": "15s",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.WebhookURLs) != 2 || cfg.Interval != 15*time.Second || cfg.MetricsAddr != ":9102" ||
		cfg.ClickHouse.Database != "servescope" {
		t.Fatalf("config %+v", cfg)
	}
	for _, env := range []map[string]string{{"DETECTOR_INTERVAL": "10ms"}, {"DETECTOR_WEBHOOK_URLS": "ftp://x"}} {
		if _, err := config.LoadFrom[service.Config](env); err == nil {
			t.Errorf("%v accepted", env)
		}
	}
}

// /metrics shows evaluation durations and alerts by state; /healthz answers while ClickHouse does.
func TestMetricsAndHealth(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	at := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	s := synth.NormalShape()
	s.Status5xxProb = 0.5
	insert(t, conn, synth.New(5).Requests(at.Add(-5*time.Minute), at, synth.Constant(0.2), s))
	d := newDetector(t, testConfig(ch), conn)
	if err := d.Groups()[0].Eval(context.Background(), at); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	code, body := get("/metrics")
	for _, want := range []string{
		`servescope_detector_rule_evaluation_duration_seconds_count{rule="latency_p95"} 1`,
		`servescope_detector_rule_evaluation_failures_total{rule="server_errors"} 0`,
		`servescope_detector_alerts{rule="server_errors",state="firing"} 1`,
		`servescope_detector_alerts{rule="slot_limit",state="firing"} 0`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
