package service_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/notify"
	"github.com/servescope/servescope/services/detector/service"
)

// hookConfig routes every alert to one webhook receiver of Alertmanager's, resolutions included.
func hookConfig(url string) string {
	return `route:
  receiver: hook
  group_by: [alertname]
  group_wait: 100ms
  group_interval: 200ms
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: ` + url + `
        send_resolved: true
`
}

// count is how many alerts of rule with status the messages carry.
func count(msgs []notify.Message, rule, status string) int {
	n := 0
	for _, m := range msgs {
		for _, a := range m.Alerts {
			if a.Labels["alertname"] == rule && a.Status == status {
				n++
			}
		}
	}
	return n
}

// storedState is the latest state of rule's alerts in the alerts table ("" without a row).
func storedState(t *testing.T, conn driver.Conn, rule string) string {
	t.Helper()
	var state string
	err := conn.QueryRow(context.Background(),
		"SELECT argMax(state, ts) FROM alerts WHERE rule = ? GROUP BY rule", rule).Scan(&state)
	if err != nil {
		return ""
	}
	return state
}

// serveDetector runs Serve with cfg until the returned stop is called (or the test ends), when it
// must return without error.
func serveDetector(t *testing.T, cfg service.Config) (metricsURL string, stop func()) {
	t.Helper()
	defs, err := service.LoadRules(cfg.RulesDir)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- service.Serve(ctx, cfg, defs, ln, slog.New(slog.DiscardHandler)) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return "http://" + ln.Addr().String() + "/metrics", stop
}

// A rule removed by a reload is never evaluated again: its firing alert is resolved at the
// reload, saved as resolved in the alerts table, and its resolution reaches the direct webhook
// receiver and, through a real Alertmanager, Alertmanager's receiver, once. A rule that stays
// keeps firing and is not notified again.
func TestReloadResolvesTheAlertsOfARemovedRule(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	insert5xx(t, conn, time.Now().Add(-30*time.Second), 3)
	hook := startReceiver(t, []byte("retire-secret"))
	amHook := startAMReceiver(t)
	am := testenv.StartAlertmanager(t, hookConfig(amHook.srv.URL+"/hook"))
	dir := t.TempDir()
	writeRule(t, dir, "gone.yaml", reloadRule("reload_gone", 1, ""))
	writeRule(t, dir, "stays.yaml", reloadRule("reload_stays", 1, ""))
	cfg := testConfig(ch)
	cfg.RulesDir, cfg.WebhookURLs, cfg.WebhookSecret, cfg.EvalDelay = dir, []string{hook.URL()}, "retire-secret", 0
	cfg.AlertmanagerURLs, cfg.AlertmanagerTimeout = []string{am.URL()}, 10*time.Second
	// The built-in rules' first evaluation is at the next whole hour: this test sees the user rules.
	cfg.Interval = time.Hour
	metricsURL, _ := serveDetector(t, cfg)

	waitUntil(t, "both rules firing at the webhook receiver", func() bool {
		m := hook.messages()
		return count(m, "reload_gone", "firing") == 1 && count(m, "reload_stays", "firing") == 1
	})
	amHook.waitFor(0, "reload_gone firing through Alertmanager", func(m notify.Message) bool { return count([]notify.Message{m}, "reload_gone", "firing") > 0 })

	removedAt := time.Now()
	if err := os.Remove(filepath.Join(dir, "gone.yaml")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the resolution of reload_gone at the webhook receiver", func() bool {
		return count(hook.messages(), "reload_gone", "resolved") == 1
	})
	amHook.waitFor(0, "reload_gone resolved through Alertmanager", func(m notify.Message) bool { return count([]notify.Message{m}, "reload_gone", "resolved") > 0 })
	for _, m := range hook.messages() {
		for _, a := range m.Alerts {
			if a.Labels["alertname"] == "reload_gone" && a.Status == "resolved" &&
				(a.EndsAt.Before(removedAt.Add(-time.Second)) || !a.EndsAt.After(a.StartsAt)) {
				t.Errorf("resolution of reload_gone: startsAt %s, endsAt %s; want endsAt at the reload (after %s)", a.StartsAt, a.EndsAt, removedAt)
			}
		}
	}
	if got := storedState(t, conn, "reload_gone"); got != "resolved" {
		t.Errorf("alerts table: reload_gone's latest state %q, want resolved", got)
	}

	// Later evaluations of the rule that stays neither resolve reload_gone again nor repeat anything.
	evals := func() float64 {
		return metric(t, metricsURL, `servescope_detector_rule_evaluation_duration_seconds_count{rule="reload_stays"}`)
	}
	n := evals()
	waitUntil(t, "three more evaluations of reload_stays", func() bool { return evals() >= n+3 })
	m := hook.messages()
	if r, f := count(m, "reload_gone", "resolved"), count(m, "reload_stays", "firing"); r != 1 || f != 1 || count(m, "reload_stays", "resolved") != 0 {
		t.Errorf("webhook receiver: reload_gone resolved %d times, reload_stays fired %d times and resolved %d; want 1, 1, 0",
			r, f, count(m, "reload_stays", "resolved"))
	}
	if got := count(amHook.messages(), "reload_gone", "resolved"); got != 1 {
		t.Errorf("Alertmanager's receiver got reload_gone resolved %d times, want 1", got)
	}
}

// A rule removed while the detector was stopped: the next start finds its alert firing in the
// alerts table with no rule to evaluate it, resolves it, saves that and notifies the receiver.
func TestStartResolvesTheAlertsOfARuleRemovedWhileStopped(t *testing.T) {
	t.Parallel()
	conn, cfg, hook, stop := goneRuleFiring(t)
	stop()
	if got := storedState(t, conn, "reload_gone"); got != "firing" {
		t.Fatalf("alerts table after the stop: reload_gone's latest state %q, want firing", got)
	}

	if err := os.Remove(filepath.Join(cfg.RulesDir, "gone.yaml")); err != nil {
		t.Fatal(err)
	}
	serveDetector(t, cfg)
	waitUntil(t, "the resolution of reload_gone at the webhook receiver", func() bool {
		return count(hook.messages(), "reload_gone", "resolved") == 1
	})
	if got := storedState(t, conn, "reload_gone"); got != "resolved" {
		t.Errorf("alerts table after the start: reload_gone's latest state %q, want resolved", got)
	}
}

// The resolution of a removed rule's alert that no receiver accepted before the detector stopped
// is delivered by the next start, as any other undelivered state change: the rule being gone does
// not make its last decision undeliverable (a fresh user found it lost).
func TestRemovedRulesResolutionSurvivesRestart(t *testing.T) {
	t.Parallel()
	conn, cfg, hook, stop := goneRuleFiring(t)
	hook.down()
	if err := os.Remove(filepath.Join(cfg.RulesDir, "gone.yaml")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "reload_gone resolved in the alerts table", func() bool { return storedState(t, conn, "reload_gone") == "resolved" })
	stop()

	hook.up()
	serveDetector(t, cfg)
	waitUntil(t, "the resolution of reload_gone at the webhook receiver after the restart", func() bool {
		return count(hook.messages(), "reload_gone", "resolved") == 1
	})
}

// goneRuleFiring serves a detector whose rules directory holds gone.yaml (rule reload_gone, firing
// on the 5xx rows it inserts) until its alert has reached the webhook receiver; stop stops it.
func goneRuleFiring(t *testing.T) (driver.Conn, service.Config, *webhookReceiver, func()) {
	t.Helper()
	conn, ch := testenv.ClickHouse(t)
	insert5xx(t, conn, time.Now().Add(-30*time.Second), 3)
	hook := startReceiver(t, []byte("retire-secret"))
	dir := t.TempDir()
	writeRule(t, dir, "gone.yaml", reloadRule("reload_gone", 1, ""))
	cfg := testConfig(ch)
	cfg.RulesDir, cfg.WebhookURLs, cfg.WebhookSecret, cfg.EvalDelay = dir, []string{hook.URL()}, "retire-secret", 0
	cfg.Interval = time.Hour
	_, stop := serveDetector(t, cfg)
	waitUntil(t, "reload_gone firing at the webhook receiver", func() bool { return count(hook.messages(), "reload_gone", "firing") == 1 })
	return conn, cfg, hook, stop
}
