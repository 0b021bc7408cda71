package service_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/alerting"
	"github.com/servescope/servescope/services/detector/notify"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/detector/service"
)

// reloadRule is a user rule counting 5xx answers per model in an hour's window, evaluated every
// second; min is its threshold. The hour outlasts any of these tests on a loaded machine, so the
// answers inserted at their start never age out of it halfway through (and resolve an alert the
// test expects firing).
func reloadRule(name string, min int, extra string) string {
	return fmt.Sprintf(`name: %s
severity: critical
interval: 1s
window: 60m
labels: {team: serving}
params: {min: %d}
summary: '{{printf "%%.0f" .Value}} errors'
query: |
  SELECT map('model', model) AS labels, toFloat64(count()) AS value, NULL AS baseline,
         toFloat64({min:UInt64}) AS threshold, value >= threshold AS firing, true AS baseline_ok
  FROM requests WHERE {{window "arrival_ts"}} AND status_code >= 500 %s GROUP BY model
`, name, min, extra)
}

// insert5xx writes n answers with status 503 for model m that arrived at `at`.
func insert5xx(t *testing.T, conn driver.Conn, at time.Time, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, status_code)
		SELECT concat('e', toString(number)), concat('r', toString(number)), t, t, t, 'm', 503
		FROM numbers(%d) ARRAY JOIN [toDateTime64('%s', 6, 'UTC')] AS t`, n, at.UTC().Format("2006-01-02 15:04:05.000000")))
	if err != nil {
		t.Fatal(err)
	}
}

func writeRule(t *testing.T, dir, name, text string) {
	t.Helper()
	// As an editor saves: a new file renamed over the old one.
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// Reload without the running loop: a rule whose name, severity and labels stay keeps its firing
// alert (same fingerprint, fired at the same time, not due for sending again), a rule whose
// labels changed starts afresh, and a rule file with SQL ClickHouse refuses is refused with the
// rules before left in place.
func TestReloadKeepsStateOfUnchangedRules(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	at := time.Now().UTC().Truncate(time.Minute)
	insert5xx(t, conn, at.Add(-time.Minute), 3)
	parse := func(text string) []*rules.Definition {
		t.Helper()
		d, err := rules.Parse("user/reload.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return []*rules.Definition{d}
	}
	reg := prometheus.NewRegistry()
	d, err := service.New(testConfig(ch), conn, parse(reloadRule("reload_errors", 1, "")), reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Groups()[0].Eval(ctx, at); err != nil {
		t.Fatal(err)
	}
	before := onlyAlert(t, d)
	if before.State != alerting.StateFiring || !before.FiredAt.Equal(at) || !before.LastSentAt.Equal(at) {
		t.Fatalf("before the reload: %+v, want firing since %s and sent then", before, at)
	}

	// Another threshold and query, the same identity.
	if err := d.Reload(ctx, parse(reloadRule("reload_errors", 2, "AND model != ''"))); err != nil {
		t.Fatal(err)
	}
	if err := d.Groups()[0].Eval(ctx, at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	after := onlyAlert(t, d)
	if after.Fingerprint != before.Fingerprint || after.State != alerting.StateFiring || !after.FiredAt.Equal(at) ||
		!after.LastSentAt.Equal(at) || after.Threshold != 2 {
		t.Fatalf("after a reload of the same rule: %+v, want the alert of %s firing on, not sent again, threshold 2", after, at)
	}

	// SQL ClickHouse refuses: refused, naming the file and the query's line; the rule stays.
	err = d.Reload(ctx, parse(reloadRule("reload_errors", 2, "AND no_such_column = 1")))
	var fe *rules.FileError
	if !errors.As(err, &fe) || fe.File != "user/reload.yaml" || fe.Line != 8 || !strings.Contains(err.Error(), "no_such_column") {
		t.Fatalf("reload of a broken rule: %v, want an error at user/reload.yaml:8 naming no_such_column", err)
	}
	if a := onlyAlert(t, d); a.Threshold != 2 || a.State != alerting.StateFiring {
		t.Fatalf("after a refused reload: %+v", a)
	}

	// A new label is a new rule: its alert starts afresh (and is due for sending).
	if err := d.Reload(ctx, parse(strings.Replace(reloadRule("reload_errors", 1, ""), "team: serving", "team: platform", 1))); err != nil {
		t.Fatal(err)
	}
	if n := len(d.Rules()[0].Alerts()); n != 0 {
		t.Fatalf("a rule with other labels took %d alerts of the old one", n)
	}
	if err := d.Groups()[0].Eval(ctx, at.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if a := onlyAlert(t, d); a.Fingerprint == before.Fingerprint || !a.FiredAt.Equal(at.Add(2*time.Second)) {
		t.Fatalf("the relabelled rule's alert: %+v", a)
	}
}

func onlyAlert(t *testing.T, d *service.Detector) *alerting.Alert {
	t.Helper()
	rs := d.Rules()
	if len(rs) != 1 {
		t.Fatalf("%d rules, want 1", len(rs))
	}
	as := rs[0].Alerts()
	if len(as) != 1 {
		t.Fatalf("%d alerts, want 1", len(as))
	}
	return as[0]
}

// The running detector reloads its rules when a file of DETECTOR_RULES_DIR changes and on SIGHUP:
// a broken file is refused (logged, counted, the rules before keep being evaluated and their alert
// keeps firing); the fixed file and a new rule are taken, the new rule's alert arrives, and the
// alert that was firing all along is not notified a second time.
// It sends SIGHUP to the test process, which Serve has registered for.
func TestServeReloadsRules(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	insert5xx(t, conn, time.Now().Add(-30*time.Second), 3)
	recv := startReceiver(t, []byte("reload-secret"))
	dir := t.TempDir()
	writeRule(t, dir, "errors.yaml", reloadRule("reload_errors", 1, ""))
	cfg := testConfig(ch)
	cfg.RulesDir, cfg.WebhookURLs, cfg.WebhookSecret, cfg.EvalDelay = dir, []string{recv.URL()}, "reload-secret", 0
	// The built-in rules' first evaluation is at the next whole hour: this test sees the user rules.
	cfg.Interval = time.Hour
	defs, err := service.LoadRules(dir)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsURL := "http://" + ln.Addr().String() + "/metrics"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- service.Serve(ctx, cfg, defs, ln, slog.New(slog.DiscardHandler)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	firing := func(rule string) int {
		n := 0
		for _, m := range recv.messages() {
			for _, a := range m.Alerts {
				if a.Labels["alertname"] == rule && a.Status == "firing" {
					n++
				}
			}
		}
		return n
	}
	waitUntil(t, "the firing of reload_errors", func() bool { return firing("reload_errors") == 1 })

	// A broken file: refused, and reload_errors keeps being evaluated and firing.
	writeRule(t, dir, "errors.yaml", reloadRule("reload_errors", 1, "AND no_such_column = 1"))
	waitUntil(t, "the refused reload", func() bool {
		return metric(t, metricsURL, "servescope_detector_rule_reload_failures_total") == 1 &&
			metric(t, metricsURL, "servescope_detector_rule_last_reload_successful") == 0
	})
	evals := func() float64 {
		return metric(t, metricsURL, `servescope_detector_rule_evaluation_duration_seconds_count{rule="reload_errors"}`)
	}
	n := evals()
	waitUntil(t, "two more evaluations of the rule loaded before", func() bool { return evals() >= n+2 })
	if v := metric(t, metricsURL, `servescope_detector_alerts{rule="reload_errors",state="firing"}`); v != 1 {
		t.Errorf("after the refused reload reload_errors has %g firing alerts, want 1", v)
	}

	// Fixed (another threshold: the same rule) and a new rule beside it.
	writeRule(t, dir, "errors.yaml", reloadRule("reload_errors", 2, ""))
	writeRule(t, dir, "errors_b.yaml", reloadRule("reload_errors_b", 1, ""))
	waitUntil(t, "the firing of the new rule reload_errors_b", func() bool { return firing("reload_errors_b") == 1 })
	// 10 built-in rules, the built-in SLO's 2 burn-rate rules (a reload loads the SLOs too) and the 2 here.
	waitUntil(t, "a successful reload with 14 rules", func() bool {
		return metric(t, metricsURL, "servescope_detector_rule_last_reload_successful") == 1 &&
			metric(t, metricsURL, "servescope_detector_rules") == 14
	})
	n = evals()
	waitUntil(t, "two evaluations of the reloaded rule", func() bool { return evals() >= n+2 })
	if got := firing("reload_errors"); got != 1 {
		t.Errorf("the receiver got %d firing notifications of reload_errors, want 1 (state kept across reloads)", got)
	}

	// SIGHUP with no change: one more reload, nothing refused.
	reloads := metric(t, metricsURL, "servescope_detector_rule_reloads_total")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the reload on SIGHUP", func() bool {
		return metric(t, metricsURL, "servescope_detector_rule_reloads_total") >= reloads+1 &&
			metric(t, metricsURL, "servescope_detector_rule_last_reload_successful") == 1
	})
	if v := metric(t, metricsURL, "servescope_detector_rule_reload_failures_total"); v != 1 {
		t.Errorf("reload failures %g after SIGHUP, want still 1", v)
	}
	if got := firing("reload_errors") + firing("reload_errors_b"); got != 2 {
		t.Errorf("after SIGHUP the receiver holds %d firing notifications, want 2", got)
	}

	// The directory replaced (removed and created again, as a checkout or a deploy does): the new
	// one is watched, and its new rule loads without a SIGHUP.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	// The reload its removal sets off is refused (no directory), and the rules before run on.
	waitUntil(t, "the refused reload of the removed directory", func() bool {
		return metric(t, metricsURL, "servescope_detector_rule_reload_failures_total") == 2
	})
	// Written aside and renamed into place, as a deploy does: files written one by one into the
	// watched path could be loaded half-written (a reload between two files), and a rule missing
	// from that reload would have its firing alert resolved.
	staged := dir + ".new"
	if err := os.Mkdir(staged, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRule(t, staged, "errors.yaml", reloadRule("reload_errors", 2, ""))
	writeRule(t, staged, "errors_b.yaml", reloadRule("reload_errors_b", 1, ""))
	writeRule(t, staged, "errors_c.yaml", reloadRule("reload_errors_c", 1, ""))
	if err := os.Rename(staged, dir); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a successful reload of the directory created again, with 15 rules", func() bool {
		return metric(t, metricsURL, "servescope_detector_rule_last_reload_successful") == 1 &&
			metric(t, metricsURL, "servescope_detector_rules") == 15
	})
	waitUntil(t, "the firing of reload_errors_c", func() bool { return firing("reload_errors_c") == 1 })
	for _, m := range recv.messages() {
		for _, a := range m.Alerts {
			if a.Status != "firing" {
				t.Errorf("unexpected notification %+v", notify.Alert(a))
			}
		}
	}
}

// waitUntil polls cond until it holds; the bound only catches a hang on a loaded machine.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 2 minutes for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metric reads one series' value from /metrics (-1 when it is not there).
func metric(t *testing.T, url, series string) float64 {
	t.Helper()
	code, body := get(t, url)
	if code != 200 {
		t.Fatalf("GET %s: %d", url, code)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v
}
