package rulestest_test

import (
	"context"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/detector/rulestest"
	"github.com/servescope/servescope/services/detector/slo"
)

// options are the runner's settings on the shared ClickHouse server; the test ends as an
// unreachable server does when it does not answer.
func options(t *testing.T) rulestest.Options {
	t.Helper()
	// The runner makes its own databases; this one only proves the server answers.
	_, cfg := testenv.ClickHouse(t)
	defs, err := rules.Load(builtin.Rules, builtin.RulesDir)
	if err != nil {
		t.Fatal(err)
	}
	slos, err := slo.LoadBuiltin(builtin.SLOs, builtin.SLOsDir, builtin.RepoDir)
	if err != nil {
		t.Fatal(err)
	}
	return rulestest.Options{ClickHouse: cfg, Builtin: defs, BuiltinSLOs: slos, Time0: time.Now().UTC().Truncate(time.Minute)}
}

func builtinTest(t *testing.T, rule string) *rulestest.File {
	t.Helper()
	name := path.Join(builtin.TestsDir, rule+".yaml")
	data, err := fs.ReadFile(builtin.Tests, name)
	if err != nil {
		t.Fatalf("built-in rule %s has no test file %s: %v", rule, name, err)
	}
	f, err := rulestest.Parse(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Every built-in rule has a test file that sees it fire and resolve, and the file passes.
func TestBuiltinRulesPassTheirTests(t *testing.T) {
	t.Parallel()
	opts := options(t)
	for _, d := range opts.Builtin {
		t.Run(d.Name, func(t *testing.T) {
			// The time goes into ClickHouse's queries, which overlap well.
			t.Parallel()
			f := builtinTest(t, d.Name)
			states := map[string]bool{}
			for _, c := range f.Tests {
				for _, e := range c.Alerts {
					if e.Rule != d.Name {
						continue
					}
					for _, a := range e.Expect {
						states[a.State] = true
					}
				}
			}
			if !states["firing"] || !states["resolved"] {
				t.Errorf("%s: the tests expect states %v; want a firing and a resolved case", f.Path, states)
			}
			res, err := rulestest.Run(context.Background(), f, opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, msg := range res.Failures {
				t.Error(msg)
			}
			if res.Checks == 0 {
				t.Errorf("%s compared nothing", f.Path)
			}
		})
	}
}

// Every built-in SLO has a test file, tests/slo_<name>.yaml, that sees each of its burn-rate
// rules (page and ticket) fire and resolve, and the file passes.
func TestBuiltinSLOsPassTheirTests(t *testing.T) {
	t.Parallel()
	opts := options(t)
	if len(opts.BuiltinSLOs) == 0 {
		t.Fatal("no built-in SLO")
	}
	for _, d := range opts.BuiltinSLOs {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			f := builtinTest(t, "slo_"+d.Name)
			rs, err := d.Rules()
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				states := map[string]bool{}
				for _, c := range f.Tests {
					for _, e := range c.Alerts {
						for _, a := range e.Expect {
							if e.Rule == r.Name {
								states[a.State] = true
							}
						}
					}
				}
				if !states["firing"] || !states["resolved"] {
					t.Errorf("%s: the tests expect states %v of %s; want a firing and a resolved case", f.Path, states, r.Name)
				}
			}
			res, err := rulestest.Run(context.Background(), f, opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, msg := range res.Failures {
				t.Error(msg)
			}
			if res.Checks == 0 {
				t.Errorf("%s compared nothing", f.Path)
			}
		})
	}
}

// A generated burn-rate rule meets its tests through the same runner: an expectation of the
// built-in SLO's test that is wrong (the 5xx burst paging for TTFT instead of availability)
// fails with the difference.
func TestWrongSLOExpectationFails(t *testing.T) {
	t.Parallel()
	opts := options(t)
	data, err := fs.ReadFile(builtin.Tests, path.Join(builtin.TestsDir, "slo_streams.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "  - name: 5xx answers burn the availability budget")
	end := strings.Index(text, "  - name: a client that left")
	if start < 0 || end < start {
		t.Fatal("slo_streams.yaml has no 5xx case")
	}
	head := text[:strings.Index(text, "tests:\n")+len("tests:\n")]
	wrong := head + strings.Replace(text[start:end], "- {state: firing, labels: {slo: streams, objective: availability, severity: critical}}",
		"- {state: firing, labels: {slo: streams, objective: ttft, severity: critical}}", 1)
	f, err := rulestest.Parse("wrong.yaml", []byte(wrong))
	if err != nil {
		t.Fatal(err)
	}
	res, err := rulestest.Run(context.Background(), f, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failures) != 1 || res.Checks != 2 {
		t.Fatalf("%d failures of %d checks, want 1 of 2: %q", len(res.Failures), res.Checks, res.Failures)
	}
	for _, want := range []string{
		"rule slo_streams_page at 0s",
		"expected, not there:\n    firing {objective=\"ttft\", severity=\"critical\", slo=\"streams\"}",
		"there, not expected:\n    firing {objective=\"availability\", severity=\"critical\", slo=\"streams\"}",
	} {
		if !strings.Contains(res.Failures[0], want) {
			t.Errorf("failure message lacks %q:\n%s", want, res.Failures[0])
		}
	}
}

// A wrong expectation fails, and the message says where (file, line, test, rule, time) and how the
// alerts differ from the expected ones.
func TestWrongExpectationFailsWithADiff(t *testing.T) {
	t.Parallel()
	opts := options(t)
	data, err := fs.ReadFile(builtin.Tests, path.Join(builtin.TestsDir, "server_errors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The 5xx alert resolves at 4m30s; expect it still firing, with another model.
	text := string(data)
	i := strings.Index(text, "      - at: 4m30s")
	if i < 0 {
		t.Fatal("server_errors.yaml has no expectation at 4m30s")
	}
	wrong := text[:i] + strings.Replace(text[i:], "{state: resolved, labels: {class: 5xx, model: m, severity: critical}}",
		"{state: firing, labels: {class: 5xx, model: other, severity: critical}}", 1)
	line := strings.Count(text[:i], "\n") + 1
	f, err := rulestest.Parse("wrong.yaml", []byte(wrong))
	if err != nil {
		t.Fatal(err)
	}
	res, err := rulestest.Run(context.Background(), f, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failures) != 1 {
		t.Fatalf("%d failures, want 1: %q", len(res.Failures), res.Failures)
	}
	msg := res.Failures[0]
	for _, want := range []string{
		"wrong.yaml:" + strconv.Itoa(line) + ": test \"two 5xx fire at once",
		"rule server_errors at 4m30s",
		"expected, not there:\n    firing {class=\"5xx\", model=\"other\", severity=\"critical\"}",
		"there, not expected:\n    resolved {class=\"5xx\", model=\"m\", severity=\"critical\"}",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure message lacks %q:\n%s", want, msg)
		}
	}
}

// A user's test file names its rule files relative to itself; a wrong annotation fails.
func TestUserRuleFileAndAnnotations(t *testing.T) {
	t.Parallel()
	opts := options(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("rules/slow.yaml", `name: slow_answers
severity: page
window: 1m
for: 1m
labels: {team: serving}
summary: '{{printf "%.0f" .Value}} slow answers'
query: |
  SELECT map('model', model) AS labels, toFloat64(count()) AS value, NULL AS baseline, 2 AS threshold,
         value >= threshold AS firing, true AS baseline_ok
  FROM requests WHERE {{window "arrival_ts"}} AND e2e_s > 10 GROUP BY model
`)
	p := write("tests/slow_test.yaml", `rule_files: [../rules/slow.yaml]
evaluation_interval: 20s
tests:
  - name: three slow answers
    inputs:
      - {table: requests, at: -50s, every: 20s, count: 3, row: {model: m, e2e_s: 12}}
    alerts:
      - {at: 0s, rule: slow_answers, expect: [{state: pending, labels: {model: m, severity: page, team: serving}}]}
      - at: 1m
        rule: slow_answers
        expect: [{state: firing, labels: {model: m, severity: page, team: serving}, annotations: {summary: 2 slow answers}}]
`)
	f, err := rulestest.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	res, err := rulestest.Run(context.Background(), f, opts)
	if err != nil {
		t.Fatal(err)
	}
	// At 1m the window (0s, 1m] holds no slow answer: the alert resolved at 20s, so the
	// expectation fails twice over (state and annotation are not those of a firing alert).
	if len(res.Failures) != 1 || !strings.Contains(res.Failures[0], "expected, not there:\n    firing {model=\"m\", severity=\"page\", team=\"serving\"}") {
		t.Fatalf("failures %q", res.Failures)
	}

	// Rows every 10 s keep two in the window: pending at 0s, firing from 1m with its summary.
	p = write("tests/slow_test.yaml", strings.Replace(mustRead(t, p), "at: -50s, every: 20s, count: 3", "at: -50s, every: 10s, count: 12", 1))
	if f, err = rulestest.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	if res, err = rulestest.Run(context.Background(), f, opts); err != nil {
		t.Fatal(err)
	}
	if len(res.Failures) != 1 || !strings.Contains(res.Failures[0], `annotation summary is "6 slow answers", want "2 slow answers"`) {
		t.Fatalf("failures %q", res.Failures)
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Test files and inputs that cannot run are errors naming the file and the line.
func TestBadTestFiles(t *testing.T) {
	head := "tests:\n  - name: t\n    inputs:\n      - {table: requests, row: {model: m}}\n    alerts:\n"
	cases := []struct{ name, text, want string }{
		{"unknown key", head + "      - {at: 0s, rule: server_errors, expct: []}\n", "field expct not found"},
		{"bad state", head + "      - {at: 0s, rule: server_errors, expect: [{state: fired}]}\n", "wrong.yaml:6: test \"t\": state \"fired\""},
		{"negative time", head + "      - {at: -1m, rule: server_errors, expect: []}\n", "wrong.yaml:6: test \"t\": at -1m0s"},
		{"no tests", "tests: []\n", "no tests"},
		{"alertname label", head + "      - {at: 0s, rule: r, expect: [{state: firing, labels: {alertname: r}}]}\n", "leave it out"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rulestest.Parse("wrong.yaml", []byte(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "wrong.yaml") {
				t.Fatalf("Parse = %v, want an error naming wrong.yaml and %q", err, tc.want)
			}
		})
	}

	opts := options(t)
	runCases := []struct{ name, text, want string }{
		{"unknown rule", head + "      - {at: 0s, rule: no_such_rule, expect: []}\n", "wrong.yaml:6: test \"t\": no rule named no_such_rule"},
		{"time between evaluations", head + "      - {at: 45s, rule: server_errors, expect: []}\n", "at 45s is not an evaluation of rule server_errors (every 30s"},
		{"unknown column", strings.Replace(head, "model: m", "modle: m", 1) + "      - {at: 0s, rule: server_errors, expect: []}\n", "input at line 4: table requests has no column modle"},
		{"unknown table", strings.Replace(head, "table: requests", "table: request", 1) + "      - {at: 0s, rule: server_errors, expect: []}\n", "no table request"},
		{"bad value", strings.Replace(head, "model: m", "status_code: lots", 1) + "      - {at: 0s, rule: server_errors, expect: []}\n", "insert into requests"},
	}
	for _, tc := range runCases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := rulestest.Parse("wrong.yaml", []byte(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			_, err = rulestest.Run(context.Background(), f, opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "wrong.yaml") {
				t.Fatalf("Run = %v, want an error naming wrong.yaml and %q", err, tc.want)
			}
		})
	}
}
