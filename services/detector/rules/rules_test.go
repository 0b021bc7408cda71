package rules_test

import (
	"context"
	"strings"
	"testing"
	"time"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/internal/testenv"
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
		{"bad summary", valid + "summary: '{{.Value'\n", "summary template"},
		{"slice of a day", valid + "baseline: {days: 7, slice: 24h}\n", "shorter than a day"},
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
	want := map[string]string{
		"now": "2026-11-30 12:00:00.000000", "window_start": "2026-11-30 11:50:00.000000",
		"baseline_start": "2026-11-29 11:00:00.000000", "baseline_end": "2026-11-30 11:00:00.000000",
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
	if len(defs) != 10 {
		t.Fatalf("built-in rules: %d, want 10", len(defs))
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
