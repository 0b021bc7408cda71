package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servescope/servescope/dev/testenv"
)

// TestRulesCheck runs `rules check` as an operator would on a directory of rule files: one good,
// four broken (SQL ClickHouse refuses, a parameter the rule does not set, a template field that
// does not exist, a result without the rule contract's firing column). It prints each file's first
// error with file and line (the contract's item named) and exits 1; the built-in rules pass. It
// sets the process environment, so it does not run in parallel.
func TestRulesCheck(t *testing.T) {
	_, cfg := testenv.ClickHouse(t)
	t.Setenv("SERVESCOPE_CLICKHOUSE_DATABASE", cfg.Database)
	t.Setenv("SERVESCOPE_CLICKHOUSE_ADDR", strings.Join(cfg.Addr, ","))
	t.Setenv("DETECTOR_RULES_DIR", "")

	good := "name: %s\nwindow: 5m\nparams: {floor: 2}\nsummary: '{{f .Value}} errors'\nquery: |\n" +
		"  SELECT map('model', model) AS labels, toFloat64(count()) AS value, NULL AS baseline,\n" +
		"         {floor:Float64} AS threshold, value >= threshold AS firing, true AS baseline_ok\n" +
		"  FROM requests WHERE {{window \"arrival_ts\"}} AND status_code >= 500 GROUP BY model\n"
	files := map[string]string{
		"good.yaml":        strings.Replace(good, "%s", "good", 1),
		"bad_sql.yaml":     strings.Replace(strings.Replace(good, "%s", "bad_sql", 1), "status_code >= 500", "status >= 500", 1),
		"no_param.yaml":    strings.Replace(strings.Replace(good, "%s", "no_param", 1), "params: {floor: 2}", "params: {flor: 2}", 1),
		"bad_summary.yaml": strings.Replace(strings.Replace(good, "%s", "bad_summary", 1), "{{f .Value}}", "{{f .Valu}}", 1),
		"no_firing.yaml":   strings.Replace(strings.Replace(good, "%s", "no_firing", 1), "AS firing", "AS fires", 1),
		// A user rule named like a built-in one replaces it in the detector: the check says so.
		"override.yaml": strings.Replace(good, "%s", "server_errors", 1),
	}
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, code, err := run(t, "rules", "check", dir)
	if code != 1 || err == nil || !strings.Contains(err.Error(), "4 of 6 rule files have errors") {
		t.Errorf("rules check: exit %d, %v", code, err)
	}
	for _, want := range []string{
		"ok   " + filepath.Join(dir, "good.yaml") + " (rule good)\n",
		"ok   " + filepath.Join(dir, "override.yaml") + " (rule server_errors, replaces the built-in rule)\n",
		"FAIL rule file " + filepath.Join(dir, "bad_sql.yaml") + ":5: query: rule bad_sql: ClickHouse refused the query: ",
		// Found before ClickHouse: on the query's line that names it.
		"FAIL rule file " + filepath.Join(dir, "no_param.yaml") + ":7: query: rule no_param: {floor:Float64} names no parameter: add floor to params (set: flor)",
		"FAIL rule file " + filepath.Join(dir, "no_firing.yaml") + ":6: query: rule no_firing: rule contract (firing): the query's result has no column firing",
		"FAIL rule file " + filepath.Join(dir, "bad_summary.yaml") + ":4: summary: rule bad_summary: render summary: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rules check printed no line starting %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "`status`") {
		t.Errorf("the SQL error does not name the unknown column:\n%s", out)
	}

	out, code, err = run(t, "rules", "check")
	if code != 0 || strings.Count(out, "\nok   deploy/detector/rules/")+1 != 14 {
		t.Errorf("rules check of the built-in rules: exit %d, %v:\n%s", code, err, out)
	}
}

// TestRulesTest runs `rules test` on a built-in rule's test file (passes, exit 0) and on a copy
// with a wrong expectation (exit 1, the difference printed).
func TestRulesTest(t *testing.T) {
	cfg := testenv.ClickHouseConfig(t)
	t.Setenv("SERVESCOPE_CLICKHOUSE_ADDR", strings.Join(cfg.Addr, ","))
	file := "../../deploy/detector/tests/slot_limit.yaml"
	out, code, err := run(t, "rules", "test", file)
	if code != 0 || !strings.HasPrefix(out, "ok   "+file+" (2 tests, 6 expectations, ") {
		t.Fatalf("rules test %s: exit %d, %v:\n%s", file, code, err, out)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(t.TempDir(), "slot_limit.yaml")
	text := strings.Replace(string(data), "- {at: 1m, rule: slot_limit, expect: []}",
		"- {at: 1m, rule: slot_limit, expect: [{state: firing, labels: {engine: vllm-0, model: m, severity: warning}}]}", 1)
	if err := os.WriteFile(wrong, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code, err = run(t, "rules", "test", wrong)
	if code != 1 || err == nil || !strings.Contains(err.Error(), "1 test file failed") ||
		!strings.Contains(out, "FAIL "+wrong+" (1 of 6 expectations failed)") ||
		!strings.Contains(out, "rule slot_limit at 1m0s:\n    expected, not there:\n      firing {app=\"all\", engine=\"vllm-0\", gateway=\"all\", model=\"m\", severity=\"warning\"}") {
		t.Errorf("rules test with a wrong expectation: exit %d, %v:\n%s", code, err, out)
	}
}

// TestRunbookPagesAreCurrent: docs/operations/runbooks holds exactly what `servescope rules
// runbooks` writes from the rule files' runbook sections, so the pages cannot drift from the
// rules (nor from the alerts' descriptions and the console's pages, made from the same sections).
func TestRunbookPagesAreCurrent(t *testing.T) {
	dir := filepath.Join("..", "..", "docs", "operations", "runbooks")
	out := t.TempDir()
	if _, code, err := run(t, "rules", "runbooks", "--out", out); code != 0 {
		t.Fatalf("rules runbooks: exit %d, %v", code, err)
	}
	want, _ := filepath.Glob(filepath.Join(out, "*.md"))
	have, _ := filepath.Glob(filepath.Join(dir, "*.md"))
	if len(want) != 17 || len(have) != len(want) {
		t.Errorf("%d pages written (want the 14 built-in rules', the built-in SLO's 2 and the index), %d in %s", len(want), len(have), dir)
	}
	for _, p := range want {
		w, _ := os.ReadFile(p)
		h, err := os.ReadFile(filepath.Join(dir, filepath.Base(p)))
		if err != nil || string(h) != string(w) {
			t.Errorf("%s differs from what the rules give (%v): run go run ./services/servescope rules runbooks from the repository root",
				filepath.Join(dir, filepath.Base(p)), err)
		}
	}
}
