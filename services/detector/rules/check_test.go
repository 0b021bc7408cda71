package rules_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/rules"
)

// A rule that ClickHouse's analyzer refuses, or whose parameters do not cover its query, is found
// by Check with the file and the line of its query key; every built-in rule passes.
func TestCheckFindsBrokenSQL(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx := context.Background()
	head := "# a user rule\nname: r\nwindow: 5m\nparams:\n  floor: 2\nquery: |\n"
	row := "  SELECT map() AS labels, toFloat64(count()) AS value, NULL AS baseline, {floor:Float64} AS threshold,\n" +
		"         value > threshold AS firing, true AS baseline_ok\n"
	cases := []struct {
		name, query, want string
	}{
		{"unknown column", row + "  FROM requests WHERE {{window \"arrival_ts\"}} AND no_such_column > 0\n", "no_such_column"},
		{"unknown table", row + "  FROM no_such_table WHERE {{window \"ts\"}}\n", "no_such_table"},
		{"unknown function", row + "  FROM requests WHERE {{window \"arrival_ts\"}} AND no_such_function(e2e_s) > 0\n", "no_such_function"},
		{"missing parameter", row + "  FROM requests WHERE {{window \"arrival_ts\"}} AND e2e_s > {ceiling:Float64}\n", "ceiling"},
		{"parameter of the wrong type", strings.Replace(row, "{floor:Float64}", "{floor:Date}", 1) + "  FROM requests WHERE {{window \"arrival_ts\"}}\n", "floor"},
		{"result without firing", strings.Replace(row, "AS firing", "AS fires", 1) + "  FROM requests WHERE {{window \"arrival_ts\"}}\n", "firing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := rules.Parse("user/r.yaml", []byte(head+tc.query))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			err = rules.Check(ctx, conn, d)
			var fe *rules.FileError
			if !errors.As(err, &fe) || !rules.IsServerVerdict(err) {
				t.Fatalf("Check = %v, want a FileError", err)
			}
			if fe.File != "user/r.yaml" || fe.Line != 6 || fe.Key != "query" {
				t.Errorf("error at %s:%d key %q, want user/r.yaml:6 key query", fe.File, fe.Line, fe.Key)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "rule file user/r.yaml:6: query: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q: want it to start with the file and line and name %q", msg, tc.want)
			}
		})
	}

	defs, err := rules.Load(builtin.Rules, builtin.RulesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if err := rules.Check(ctx, conn, d); err != nil {
			t.Errorf("built-in rule %s: %v", d.Name, err)
		}
	}
}

// Parse errors say the file and the line of the key at fault; templates are rendered, so a field
// that does not exist is found when the file is read, not when the alert first fires.
func TestParseErrorsNameFileAndLine(t *testing.T) {
	valid := "name: r\nwindow: 5m\nsummary: 'value {{f .Value}}'\ndescription: ok\nquery: SELECT 1\n"
	cases := []struct {
		name, file, want string
		line             int
	}{
		{"template field", strings.Replace(valid, ".Value", ".Valeu", 1), "summary: rule r: render summary", 3},
		{"template syntax", strings.Replace(valid, "description: ok", "description: '{{if}}'", 1), "description: rule r: description template", 4},
		{"template function", strings.Replace(valid, "{{f .Value}}", "{{pct}}", 1), "summary: rule r: render summary", 3},
		{"parameter", valid + "params:\n  ok: 1\n  bad: [1]\n", "params.bad: rule r: parameter bad", 8},
		{"runbook", valid + "runbook_url: /relative\n", "runbook_url: rule r", 6},
		{"yaml", valid + "window: [\n", "yaml", 6},
		{"unknown key", valid + "thresholdz: 3\n", "thresholdz", 6},
		{"window", strings.Replace(valid, "window: 5m", "window: 0s", 1), "window: rule r: window must be positive", 2},
		{"macro", strings.Replace(valid, "query: SELECT 1", "query: 'SELECT {{window \"a b\"}}'", 1), "query: ", 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rules.Parse("dir/r.yaml", []byte(tc.file))
			var fe *rules.FileError
			if !errors.As(err, &fe) {
				t.Fatalf("Parse = %v, want a FileError", err)
			}
			if fe.File != "dir/r.yaml" || fe.Line != tc.line || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q (line %d): want line %d and %q", err, fe.Line, tc.line, tc.want)
			}
		})
	}
}
