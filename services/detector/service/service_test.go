package service_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

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
	if len(defs) != 15 {
		t.Fatalf("%d rules, want 14 built-in + 1", len(defs))
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

// /metrics shows evaluation durations and alerts by state.
func TestMetrics(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	at := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	s := synth.NormalShape()
	s.Status5xxProb = 0.5
	insert(t, conn, synth.New(5).Requests(at.Add(-5*time.Minute), at, synth.Constant(0.2), s))
	defs, err := service.LoadRules("")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	d, err := service.New(testConfig(ch), conn, defs, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Groups()[0].Eval(context.Background(), at); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	code, body := get(t, srv.URL+"/metrics")
	for _, want := range []string{
		`servescope_detector_rule_evaluation_duration_seconds_count{rule="latency_p95"} 1`,
		`servescope_detector_rule_evaluation_failures_total{rule="server_errors"} 0`,
		`servescope_detector_alerts{rule="server_errors",state="firing"} 1`,
		`servescope_detector_alerts{rule="slot_limit",state="firing"} 0`,
		`servescope_detector_group_iterations_missed_total{interval="30s"} 0`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !regexp.MustCompile(`(?m)^servescope_detector_group_last_duration_seconds\{interval="30s"\} [0-9.e-]+$`).MatchString(body) ||
		strings.Contains(body, `servescope_detector_group_last_duration_seconds{interval="30s"} 0`+"\n") {
		t.Errorf("/metrics lacks the group's last evaluation time")
	}
}

// Serve answers /healthz, /readyz (ClickHouse answers: ready) and /metrics with the build
// information, and returns nil when its context ends.
func TestServe(t *testing.T) {
	t.Parallel()
	_, ch := testenv.ClickHouse(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	defs, err := service.LoadRules("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- service.Serve(ctx, testConfig(ch), defs, ln, slog.New(slog.DiscardHandler)) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := get(t, base+"/readyz")
		if code == 200 && strings.Contains(body, `"clickhouse":"ok"`) && strings.Contains(body, `"ready":true`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %s, want 200 with ClickHouse ok", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	code, body := get(t, base+"/metrics")
	for _, want := range []string{`program="detector"`, "go_build_info{", "go_goroutines "} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after its context ended: %v", err)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
