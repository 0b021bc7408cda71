package slo

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/services/detector/rules"
)

func TestBuiltinSLOsLoad(t *testing.T) {
	defs, err := LoadBuiltin(builtin.SLOs, builtin.SLOsDir, builtin.RepoDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) == 0 {
		t.Fatal("no built-in SLO")
	}
	for _, d := range defs {
		if !strings.HasPrefix(d.Source, "deploy/detector/slos/") {
			t.Errorf("%s: source %q", d.Name, d.Source)
		}
		rs, err := d.Rules()
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 2 || rs[0].Name != "slo_"+d.Name+"_page" || rs[1].Name != "slo_"+d.Name+"_ticket" {
			t.Fatalf("%s: rules %v", d.Name, rs)
		}
		if rs[0].Severity != "critical" || rs[1].Severity != "warning" || rs[0].Window.D() != 6*time.Hour || rs[1].Window.D() != 72*time.Hour {
			t.Errorf("%s: page %s over %s, ticket %s over %s", d.Name, rs[0].Severity, rs[0].Window.D(), rs[1].Severity, rs[1].Window.D())
		}
	}
}

// The rule a file prints is the rule that runs: its text loads through rules.Parse with the
// workbook's windows and factors as parameters.
func TestRuleFileIsWhatRuns(t *testing.T) {
	d, err := Parse("chat.yaml", []byte("name: chat\nobjectives:\n  ttft: {p95: 800ms}\n  availability: {target: 99.9%}\n"+
		"alerts:\n  page: [{long: 2h, short: 10m, factor: 10}]\n  ticket: []\n  min_bad: 1\n  interval: 1m\n  labels: {team: a}\n"))
	if err != nil {
		t.Fatal(err)
	}
	text, ok, err := d.RuleFile(KindPage)
	if err != nil || !ok {
		t.Fatalf("page rule: %v %v", ok, err)
	}
	r, err := rules.Parse("printed.yaml", text)
	if err != nil {
		t.Fatalf("the printed rule does not load: %v\n%s", err, text)
	}
	want := map[string]any{"slo": "chat", "min_bad": 1, "long_1_s": 7200, "short_1_s": 600, "factor_1": 10.0,
		"sel_model": "", "sel_app": "", "sel_endpoint": ""}
	for k, v := range want {
		if fmt.Sprint(r.Params[k]) != fmt.Sprint(v) {
			t.Errorf("param %s = %v (%T), want %v", k, r.Params[k], r.Params[k], v)
		}
	}
	if len(r.Params) != len(want) || r.Window.D() != 2*time.Hour || r.Interval.D() != time.Minute || r.Labels["team"] != "a" {
		t.Errorf("rule %+v", r)
	}
	if _, ok, _ := d.RuleFile(KindTicket); ok {
		t.Error("an empty ticket list generated a ticket rule")
	}
	if rs, _ := d.Rules(); len(rs) != 1 {
		t.Errorf("%d rules, want the page rule alone", len(rs))
	}
	if !strings.Contains(r.Query, "('ttft', toUInt8(ttft_judged)") || strings.Contains(r.Query, "'tpot'") {
		t.Errorf("the query judges other objectives than the SLO's:\n%s", r.Query)
	}
	o := d.Objectives.List()
	if len(o) != 2 || o[0].Name != ObjectiveAvailability || o[1].Threshold != 800*time.Millisecond || o[1].Target != 0.95 {
		t.Errorf("objectives %+v", o)
	}
	if b := o[0].Budget(); b < 0.000999 || b > 0.001001 {
		t.Errorf("availability budget %g, want 0.001", b)
	}
}

func TestParseErrorsNameTheLine(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"bad name", "name: Chat\nobjectives:\n  ttft: {p95: 1s}\n", "x.yaml:1: name: "},
		{"no objective", "name: c\nobjectives: {}\n", "x.yaml:2: objectives: slo c: no objective"},
		{"hours period", "name: c\nperiod: 36h\nobjectives:\n  ttft: {p95: 1s}\n", "x.yaml:2: period: slo c: period 36h: want whole days"},
		{"target 100 %", "name: c\nobjectives:\n  availability: {target: 100%}\n", "line 3: target: \"100%\": a target is above 0 and below 100%"},
		{"both forms", "name: c\nobjectives:\n  ttft: {p95: 1s, under: 2s, target: 90%}\n", "line 3: one quantile or one under/target pair"},
		{"no threshold", "name: c\nobjectives:\n  ttft: {target: 90%}\n", "line 3: want {under: 1s, target: 95%} or {p95: 1s}"},
		{"short not shorter", "name: c\nobjectives:\n  ttft: {p95: 1s}\nalerts:\n  page: [{long: 5m, short: 5m, factor: 2}]\n", "x.yaml:4: alerts: slo c: window pair 5m/5m"},
		{"window past the period", "name: c\nperiod: 1d\nobjectives:\n  ttft: {p95: 1s}\n", "window 3d is longer than the period 1d"},
		{"reserved label", "name: c\nobjectives:\n  ttft: {p95: 1s}\nalerts:\n  labels: {objective: x}\n", "x.yaml:5: alerts.labels: slo c: label objective is set by the generated rules"},
		{"unknown key", "name: c\nobjective:\n  ttft: {p95: 1s}\n", "x.yaml:2: yaml: unmarshal errors:\n  line 2: field objective not found"},
		{"min_bad 0", "name: c\nobjectives:\n  ttft: {p95: 1s}\nalerts:\n  min_bad: 0\n", "x.yaml:5: alerts.min_bad: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(c.text))
			var fe *FileError
			if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse: %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestSpan(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		out  string
	}{{"28d", 28 * 24 * time.Hour, "28d"}, {"5m", 5 * time.Minute, "5m"}, {"1h", time.Hour, "1h"}, {"90s", 90 * time.Second, "1m30s"}, {"24h", 24 * time.Hour, "1d"}} {
		s, err := ParseSpan(c.in)
		if err != nil || s.D() != c.want || s.String() != c.out {
			t.Errorf("ParseSpan(%q) = %v (%s), %v; want %v (%s)", c.in, s.D(), s, err, c.want, c.out)
		}
	}
	for _, bad := range []string{"1d12h", "d", "-", "99999d"} {
		if _, err := ParseSpan(bad); err == nil {
			t.Errorf("ParseSpan(%q) accepted", bad)
		}
	}
}

func TestIsSLOFile(t *testing.T) {
	if !IsSLOFile([]byte("name: c\nobjectives:\n  ttft: {p95: 1s}\n")) || IsSLOFile([]byte("name: r\nwindow: 5m\nquery: SELECT 1\n")) || IsSLOFile([]byte("{")) {
		t.Error("IsSLOFile tells SLO files from rule files by their objectives key")
	}
}

func TestEnginesFile(t *testing.T) {
	e, err := ParseEngines("e.yaml", []byte("default: {price_per_hour: 1.2}\nmodels:\n  m: {max_num_seqs: 128}\nengines:\n  vllm-0: {price_per_hour: 0.4, max_num_seqs: 64}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Currency != "USD" || *e.Default.PricePerHour != 1.2 || *e.Models["m"].MaxNumSeqs != 128 || *e.Engines["vllm-0"].PricePerHour != 0.4 {
		t.Errorf("engines %+v", e)
	}
	for _, bad := range []string{"default: {price_per_hour: -1}\n", "engines:\n  e: {max_num_seqs: 0}\n", "engine:\n  e: {}\n", "models:\n  '': {}\n"} {
		if _, err := ParseEngines("e.yaml", []byte(bad)); err == nil {
			t.Errorf("ParseEngines accepted %q", bad)
		}
	}
}
