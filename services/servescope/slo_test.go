package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/detector/slo"
)

// TestSLOCommands: `slo rules` prints the rule files the detector runs (each loads as a rule
// file), `rules check` checks SLO files beside rule files and names the line of an error, and
// `slo status` prints each objective's error budget. It sets the process environment, so it does
// not run in parallel.
func TestSLOCommands(t *testing.T) {
	conn, cfg := testenv.ClickHouse(t)
	t.Setenv("SERVESCOPE_CLICKHOUSE_DATABASE", cfg.Database)
	t.Setenv("SERVESCOPE_CLICKHOUSE_ADDR", strings.Join(cfg.Addr, ","))
	t.Setenv("DETECTOR_SLOS_DIR", "")
	t.Setenv("DETECTOR_RULES_DIR", "")

	out, code, err := run(t, "slo", "rules")
	if code != 0 {
		t.Fatalf("slo rules: exit %d, %v", code, err)
	}
	parts := strings.Split(out, "\n---\n")
	if len(parts) != 2 {
		t.Fatalf("slo rules printed %d rule files, want the built-in SLO's page and ticket:\n%s", len(parts), out)
	}
	for i, want := range []string{"slo_streams_page", "slo_streams_ticket"} {
		r, err := rules.Parse("printed.yaml", []byte(parts[i]))
		if err != nil || r.Name != want {
			t.Errorf("printed rule %d: %v, name %q, want %s:\n%s", i, err, r.Name, want, parts[i])
		}
	}

	dir := t.TempDir()
	files := map[string]string{
		"chat.yaml":   "name: chat\nselector: {app: docs-qa}\nobjectives:\n  e2e: {p99: 30s}\nalerts:\n  ticket: []\n",
		"broken.yaml": "name: broken\nobjectives:\n  ttft: {p95: 1s}\nalerts:\n  page: [{long: 5m, short: 1h, factor: 2}]\n",
		"rule.yaml": "name: mine\nwindow: 5m\nquery: |\n  SELECT map() AS labels, 1 AS value, NULL AS baseline, 1 AS threshold,\n" +
			"         true AS firing, true AS baseline_ok FROM requests WHERE {{window \"arrival_ts\"}}\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, code, err = run(t, "rules", "check", dir)
	if code != 1 || err == nil || !strings.Contains(err.Error(), "1 of 3 rule files have errors") {
		t.Errorf("rules check: exit %d, %v\n%s", code, err, out)
	}
	for _, want := range []string{
		"ok   " + filepath.Join(dir, "chat.yaml") + " (slo chat: rules slo_chat_page)\n",
		"ok   " + filepath.Join(dir, "rule.yaml") + " (rule mine)\n",
		"FAIL rule file " + filepath.Join(dir, "broken.yaml") + ":4: alerts: slo broken: window pair 5m/1h: want 0 < short < long",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rules check printed no %q:\n%s", want, out)
		}
	}
	out, code, err = run(t, "slo", "rules", "--kind", "page", filepath.Join(dir, "chat.yaml"))
	if code != 0 || !strings.Contains(out, "name: slo_chat_page\n") || !strings.Contains(out, "sel_app: docs-qa") || strings.Contains(out, "---") {
		t.Errorf("slo rules --kind page chat.yaml: exit %d, %v\n%s", code, err, out)
	}

	// slo status: the built-in SLO over an hour with one slow first token in four.
	defs, err := sloDefinitions(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := slo.Sync(ctx, cfg, conn, defs, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, `INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, stream, status_code,
			ttft_s, e2e_s, completion_tokens, finish_reasons)
		SELECT toString(number), toString(number), t, t, t, 'm', '/v1/chat/completions', true, 200,
		       if(number % 4 = 0, 2.5, 0.1), 3, 100, ['stop']
		FROM (SELECT number, now64(6) - toIntervalSecond(number * 30) AS t FROM numbers(100))`); err != nil {
		t.Fatal(err)
	}
	out, code, err = run(t, "slo", "status")
	if code != 0 {
		t.Fatalf("slo status: exit %d, %v", code, err)
	}
	// 25 of 100 answers (all in the last hour) miss a 1 % budget: 25× the budget spent, burning 25×.
	words := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"streams ttft 99% 28d 100 25 -2400.0% 25.00× spent", "streams availability 99.5% 28d 100 0 100.0% 0.00× -"} {
		if !strings.Contains(words, want) {
			t.Errorf("slo status printed no %q:\n%s", want, out)
		}
	}
}
