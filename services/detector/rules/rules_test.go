package rules_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/rules"
)

func TestParseRejectsBadFiles(t *testing.T) {
	valid := "name: r\nwindow: 5m\nquery: SELECT 1\n"
	cases := []struct {
		name, file, want string
	}{
		{"bad name", strings.Replace(valid, "name: r", "name: Bad-Name", 1), "name"},
		{"no window", "name: r\nquery: SELECT 1\n", "window must be positive"},
		{"bad duration", strings.Replace(valid, "5m", "five", 1), "invalid duration"},
		{"unknown field", valid + "thresholdz: 1\n", "thresholdz"},
		{"empty query", "name: r\nwindow: 5m\n", "query is empty"},
		{"reserved param", valid + "params: {now: 1}\n", "not allowed"},
		{"bad param type", valid + "params: {x: [1, 2]}\n", "want a number"},
		{"bad macro column", "name: r\nwindow: 5m\nquery: 'SELECT 1 WHERE {{window \"ts; DROP\"}}'\n", "not a column name"},
		{"bad poisson_tail argument", "name: r\nwindow: 5m\nquery: 'SELECT {{poisson_tail \"k\" \"1) OR (1\"}}'\n", "not a column name"},
		{"bad summary", valid + "summary: '{{.Value'\n", "summary template"},
		{"slice of a day", valid + "baseline: {days: 7, slice: 24h}\n", "shorter than a day"},
		{"negative keep_firing_for", valid + "keep_firing_for: -1m\n", "must not be negative"},
		{"bad label name", valid + "labels: {team-name: x}\n", "label name"},
		{"reserved label name", valid + "labels: {__name__: x}\n", "label name"},
		{"severity as a label", valid + "labels: {severity: page}\n", "set from the rule's name and severity"},
		{"relative runbook_url", valid + "runbook_url: runbooks/r.md\n", "want an absolute URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rules.Parse("test.yaml", []byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v, want one containing %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "test.yaml") {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

func TestDefaultsAndParams(t *testing.T) {
	d, err := rules.Parse("r.yaml", []byte("name: r\nwindow: 10m\nparams: {ratio: 2, floor: 0.5, on: true, app: x}\nquery: 'SELECT 1 WHERE {{baseline \"ts\"}}'\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Baseline.Length.D() != 24*time.Hour || d.Baseline.Offset.D() != time.Hour || d.Severity != "warning" {
		t.Fatalf("defaults: baseline %+v severity %q", d.Baseline, d.Severity)
	}
	r, err := rules.NewSQLRule(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	p := r.Params(ts)
	// The baseline is the 24 h ending 1 h before the window (11:50–12:00) starts.
	want := map[string]string{
		"now": "2026-11-30 12:00:00.000000", "window_start": "2026-11-30 11:50:00.000000",
		"baseline_start": "2026-11-29 10:50:00.000000", "baseline_end": "2026-11-30 10:50:00.000000",
		"baseline_s": "86400", "window_s": "600", "ratio": "2", "floor": "0.5", "on": "1", "app": "x",
	}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("param %s = %q, want %q", k, p[k], v)
		}
	}
	if strings.Contains(r.Query(), "2026") {
		t.Errorf("query text contains a bound value: %s", r.Query())
	}
}

func TestSameHourBaseline(t *testing.T) {
	d, err := rules.Parse("r.yaml", []byte("name: r\nwindow: 10m\nbaseline: {days: 7, slice: 1h}\nquery: 'SELECT 1 WHERE {{baseline \"ts\"}}'\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := rules.NewSQLRule(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := r.Params(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	if p["baseline_start"] != "2026-11-23 11:00:00.000000" || p["baseline_end"] != "2026-11-29 12:00:00.000000" || p["baseline_s"] != "25200" {
		t.Fatalf("same-hour baseline params: %v", p)
	}
	if !strings.Contains(r.Query(), "modulo(dateDiff('second', ts") {
		t.Fatalf("same-hour baseline does not select slices: %s", r.Query())
	}
}

// Every built-in rule's SQL runs on the real schema, on empty tables and at any time.
func TestBuiltinRulesRunOnEmptyTables(t *testing.T) {
	t.Parallel()
	defs, err := rules.Load(builtin.Rules, builtin.RulesDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) != 14 {
		t.Fatalf("built-in rules: %d, want 14", len(defs))
	}
	conn, _ := testenv.ClickHouse(t)
	ctx := context.Background()
	for _, d := range defs {
		// Each rule also runs with the same-time-of-day baseline (the last 7 days).
		sameHour := *d
		sameHour.Baseline = rules.Baseline{Days: 7, Slice: d.Window}
		for _, def := range []*rules.Definition{d, &sameHour} {
			r, err := rules.NewSQLRule(def, conn)
			if err != nil {
				t.Fatal(err)
			}
			samples, err := r.Eval(ctx, time.Now())
			if err != nil {
				t.Fatalf("%s (baseline %+v): %v", d.Name, def.Baseline, err)
			}
			for _, s := range samples {
				if s.Firing {
					t.Errorf("%s fires on empty tables: %+v", d.Name, s)
				}
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	entries, _ := builtin.Rules.ReadDir(builtin.RulesDir)
	for _, e := range entries {
		data, _ := builtin.Rules.ReadFile(builtin.RulesDir + "/" + e.Name())
		f.Add(data)
	}
	f.Add([]byte("name: r\nwindow: 5m\nquery: SELECT 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := rules.Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		if d.Name == "" || d.Window <= 0 || d.Query == "" {
			t.Fatalf("accepted an invalid rule: %+v", d)
		}
		if _, err := rules.NewSQLRule(d, nil); err != nil {
			t.Fatalf("parsed rule does not prepare: %v", err)
		}
	})
}

// Every built-in summary and description renders without template errors or missing values.
func TestBuiltinTemplatesRender(t *testing.T) {
	defs, err := rules.Load(builtin.Rules, builtin.RulesDir)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "docs-qa", "model": "m", "engine": "http://vllm-0:8000", "kind": "in_flight",
		"class": "5xx", "metric": "e2e_s", "version": "v2", "signal": "queue_s"}
	for _, d := range defs {
		for _, ok := range []bool{true, false} {
			sum, desc, err := d.Render(rules.Sample{Labels: labels, Value: 0.5, Baseline: 0.1, Threshold: 0.2, Firing: true, BaselineOK: ok})
			if err != nil {
				t.Fatalf("%s: %v", d.Name, err)
			}
			for _, text := range []string{sum, desc} {
				if text == "" || strings.Contains(text, "%!") || strings.Contains(text, "<no value>") {
					t.Errorf("%s renders %q", d.Name, text)
				}
			}
		}
	}
}

// poisson_tail is P(X >= k) for a Poisson X of mean lambda, evaluated by ClickHouse: checked against
// the sum computed here, from k = 0 (certain) to tails far below any p_max, with lambda 0 and large.
func TestPoissonTailMacro(t *testing.T) {
	t.Parallel()
	cases := []struct{ k, lambda float64 }{{0, 1.5}, {1, 0}, {3, 0}, {5, 1.52}, {6, 1.52}, {9, 1.52}, {24, 1.2}, {4, 0.032}, {500, 400}, {30, 31}}
	var pairs []string
	for _, c := range cases {
		pairs = append(pairs, fmt.Sprintf("(%g, %g)", c.k, c.lambda))
	}
	def, err := rules.Parse("tail.yaml", []byte(`name: tail
window: 5m
query: |
  SELECT map('k', toString(k), 'lambda', toString(lambda)) AS labels, {{poisson_tail "k" "lambda"}} AS value,
         NULL AS baseline, 0 AS threshold, false AS firing, true AS baseline_ok
  FROM (SELECT arrayJoin([`+strings.Join(pairs, ", ")+`]) AS t, toUInt64(t.1) AS k, toFloat64(t.2) AS lambda)
`))
	if err != nil {
		t.Fatal(err)
	}
	conn, _ := testenv.ClickHouse(t)
	r, err := rules.NewSQLRule(def, conn)
	if err != nil {
		t.Fatal(err)
	}
	samples, err := r.Eval(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != len(cases) {
		t.Fatalf("%d rows, want %d", len(samples), len(cases))
	}
	for i, s := range samples {
		c := cases[i]
		// 1 − P(X < k), the terms summed in log space.
		below := 0.0
		for j := 0; j < int(c.k); j++ {
			lg, _ := math.Lgamma(float64(j + 1))
			below += math.Exp(float64(j)*math.Log(math.Max(c.lambda, 1e-300)) - c.lambda - lg)
		}
		want := 1 - below
		if math.Abs(s.Value-want) > 1e-12 {
			t.Errorf("P(X >= %g | lambda %g) = %g, want %g", c.k, c.lambda, s.Value, want)
		}
	}
	// The values that decide latency_p95 on a quiet window: 5 or 6 long answers where 1.52 are
	// expected are common, 9 are not.
	if v := samples[3].Value; v < 0.01 || v > 0.03 {
		t.Errorf("P(X >= 5 | 1.52) = %g, want about 0.02", v)
	}
	if v := samples[5].Value; v > 1e-4 {
		t.Errorf("P(X >= 9 | 1.52) = %g, want below p_max 1e-4", v)
	}
}
