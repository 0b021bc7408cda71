package service_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/services/detector/notify"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/detector/service"
)

// chatSLO is a user's SLO file: chat streams of model m, the first token within 1 s for 99 %.
const chatSLO = `name: chat
selector: {model: m, stream: true}
objectives:
  ttft: {p99: 1s}
alerts:
  labels: {team: serving}
`

// insertStreams writes n streamed answers of model m every `every` from start, each with its
// first token after ttft seconds and 128 tokens over 2 s more.
func insertStreams(t *testing.T, conn driver.Conn, start time.Time, every time.Duration, n int, ttft float64, prefix string) {
	t.Helper()
	ctx := chstore.WithParams(context.Background(), map[string]string{
		"start_us": strconv.FormatInt(start.UnixMicro(), 10), "every_us": strconv.FormatInt(every.Microseconds(), 10),
		"n": strconv.Itoa(n), "ttft": strconv.FormatFloat(ttft, 'g', -1, 64), "prefix": prefix,
	})
	if err := conn.Exec(ctx, `INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, stream,
			status_code, ttft_s, e2e_s, completion_tokens, finish_reasons)
		SELECT concat({prefix:String}, toString(number)) AS id, id, t, t, t, 'm', '/v1/chat/completions', true, 200,
		       {ttft:Float64}, {ttft:Float64} + 2, 128, ['stop']
		FROM (SELECT number, fromUnixTimestamp64Micro({start_us:Int64} + number * {every_us:Int64}, 'UTC') AS t
		      FROM numbers({n:UInt64}))`); err != nil {
		t.Fatal(err)
	}
}

// An SLO file's page rule goes the built-in rules' way: loaded with them (service.Load), its
// objectives written into ClickHouse (WriteConfig), evaluated by the same engine, and sent to a
// real Alertmanager, which routes it by its labels (alertname, severity, the SLO's own) and is
// sent its resolution once the burst has left the page rule's windows.
func TestSLOPageThroughAlertmanager(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	oncall, fallback := startAMReceiver(t), startAMReceiver(t)
	am := testenv.StartAlertmanager(t, strings.ReplaceAll(amConfig(oncall.srv.URL+"/oncall", fallback.srv.URL+"/fallback"),
		`'alertname="server_errors"'`, `'alertname="slo_chat_page"', 'team="serving"'`))

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "chat.yaml"), []byte(chatSLO), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(ch)
	cfg.SLOsDir = dir
	cfg.AlertmanagerURLs, cfg.AlertmanagerTimeout = []string{am.URL()}, 10*time.Second
	l, err := service.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var page []*rules.Definition
	for _, r := range l.Rules {
		if r.Name == "slo_chat_page" {
			page = append(page, r)
		}
	}
	if len(page) != 1 {
		t.Fatalf("service.Load gave no rule slo_chat_page among %d rules", len(l.Rules))
	}
	d, err := service.New(cfg, conn, page, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := d.WriteConfig(ctx, l); err != nil {
		t.Fatal(err)
	}
	go d.Alertmanagers().Run(ctx)

	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour)
	insertStreams(t, conn, at.Add(-59*time.Minute), 30*time.Second, 118, 0.1, "good-")
	insertStreams(t, conn, at.Add(-3*time.Minute), 5*time.Second, 30, 2.5, "slow-")
	eval := func(ts time.Time) {
		t.Helper()
		if err := d.Groups()[0].Eval(ctx, ts); err != nil {
			t.Fatalf("evaluate at %s: %v", ts, err)
		}
	}
	isChat := func(status string) func(notify.Message) bool {
		return func(m notify.Message) bool {
			for _, a := range m.Alerts {
				if a.Labels["alertname"] == "slo_chat_page" && a.Status == status {
					return true
				}
			}
			return false
		}
	}
	eval(at)
	i := oncall.waitFor(0, "slo_chat_page firing", isChat("firing"))
	m := oncall.messages()[i]
	a := m.Alerts[0]
	if m.Receiver != "oncall" || a.Labels["slo"] != "chat" || a.Labels["objective"] != "ttft" || a.Labels["model"] != "m" ||
		a.Labels["severity"] != "critical" || a.Labels["team"] != "serving" {
		t.Fatalf("message to %s with labels %v", m.Receiver, a.Labels)
	}
	if !strings.Contains(a.Annotations["summary"], "SLO chat: the ttft error budget burns 20.270×") {
		t.Errorf("summary %q", a.Annotations["summary"])
	}
	// The 6h/30m pair holds the burst until its last slow answer (at -35 s) is 30 minutes old.
	from := len(oncall.messages())
	for ts := at.Add(5 * time.Minute); !ts.After(at.Add(30 * time.Minute)); ts = ts.Add(5 * time.Minute) {
		eval(ts)
	}
	oncall.waitFor(from, "slo_chat_page resolved", isChat("resolved"))
	if n := len(fallback.messages()); n != 0 {
		t.Errorf("the fallback receiver got %d messages:%s", n, describe(fallback.messages()))
	}
}

// A rule file may not take the name of an SLO's generated rule: the SLO file is where it changes.
func TestRuleFileNamedLikeAnSLORuleIsRefused(t *testing.T) {
	t.Parallel()
	rulesDir, slosDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(slosDir, "chat.yaml"), []byte(chatSLO), 0o644); err != nil {
		t.Fatal(err)
	}
	rule := "name: slo_chat_page\nwindow: 5m\nquery: SELECT map() AS labels, 1 AS value, NULL AS baseline, 1 AS threshold, 1 AS firing, 1 AS baseline_ok\n"
	if err := os.WriteFile(filepath.Join(rulesDir, "mine.yaml"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := service.Load(service.Config{RulesDir: rulesDir, SLOsDir: slosDir})
	if err == nil || !strings.Contains(err.Error(), "rule slo_chat_page is generated from SLO chat") {
		t.Fatalf("Load: %v", err)
	}
}
