package rules_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/rules"
)

// A rule that ClickHouse's analyzer refuses is found by Check with the file and the line of its
// query key; a result without a column of the rule contract is found before ClickHouse sees the
// query, on the line of its SELECT, naming the contract item; a {name:Type} that no parameter sets
// is found by Parse on its own line of the query. Every built-in rule passes.
func TestCheckFindsBrokenSQL(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx := context.Background()
	head := "# a user rule\nname: r\nwindow: 5m\nparams:\n  floor: 2\nquery: |\n"
	row := "  SELECT map() AS labels, toFloat64(count()) AS value, NULL AS baseline, {floor:Float64} AS threshold,\n" +
		"         value > threshold AS firing, true AS baseline_ok\n"
	cases := []struct {
		name, query, want string
		line              int  // the line at fault
		parse             bool // Parse finds it, before anything reaches ClickHouse
	}{
		{"unknown column", row + "  FROM requests WHERE {{window \"arrival_ts\"}} AND no_such_column > 0\n", "no_such_column", 6, false},
		{"unknown table", row + "  FROM no_such_table WHERE {{window \"ts\"}}\n", "no_such_table", 6, false},
		{"unknown function", row + "  FROM requests WHERE {{window \"arrival_ts\"}} AND no_such_function(e2e_s) > 0\n", "no_such_function", 6, false},
		{"missing parameter", row + "  FROM requests WHERE {{window \"arrival_ts\"}} AND e2e_s > {ceiling:Float64}\n", "{ceiling:Float64} names no parameter", 9, true},
		{"parameter of the wrong type", strings.Replace(row, "{floor:Float64}", "{floor:Date}", 1) + "  FROM requests WHERE {{window \"arrival_ts\"}}\n", "floor", 6, false},
		{"result without firing", strings.Replace(row, "AS firing", "AS fires", 1) + "  FROM requests WHERE {{window \"arrival_ts\"}}\n",
			"rule contract (firing): the query's result has no column firing", 7, false},
		// ClickHouse names a UNION's columns after its first SELECT.
		{"first SELECT of a UNION without labels", "  SELECT map() AS l, 1 AS value, NULL AS baseline, 1 AS threshold, 0 AS firing, 1 AS baseline_ok\n" +
			"  UNION ALL\n" + row + "  FROM requests\n", "rule contract (labels)", 7, false},
		{"UNION of different widths", row + "  FROM requests\n  UNION ALL\n  SELECT map() AS labels, 1 AS value\n",
			"rule contract (columns): SELECT 2 of the UNION gives 2 columns, the first gives 6", 11, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := rules.Parse("user/r.yaml", []byte(head+tc.query))
			if err == nil {
				if tc.parse {
					t.Fatalf("Parse accepted it, want the error %q", tc.want)
				}
				err = rules.Check(ctx, conn, d)
			} else if !tc.parse {
				t.Fatalf("Parse: %v", err)
			}
			var fe *rules.FileError
			if !errors.As(err, &fe) || !rules.IsServerVerdict(err) {
				t.Fatalf("Check = %v, want a FileError", err)
			}
			if fe.File != "user/r.yaml" || fe.Line != tc.line || fe.Key != "query" {
				t.Errorf("error at %s:%d key %q, want user/r.yaml:%d key query", fe.File, fe.Line, fe.Key, tc.line)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, fmt.Sprintf("rule file user/r.yaml:%d: query: ", tc.line)) || !strings.Contains(msg, tc.want) {
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
		{"yaml", valid + "window: [\n", "YAML", 6},
		{"unknown key", valid + "thresholdz: 3\n", "thresholdz", 6},
		// go-yaml names the line before these; the error names the line at fault and quotes it.
		{"unclosed bracket", "name: r\nwindow: 5m\nparams:\n  a: [1, 2\nquery: SELECT 1\n", `"  a: [1, 2"`, 4},
		{"tab", "name: r\nwindow: 5m\n\tfor: 1m\nquery: SELECT 1\n", "tab", 3},
		{"block scalar indentation", "name: r\nwindow: 5m\nquery: |\n  SELECT 1\n bad: 2\n", `" bad: 2"`, 5},
		{"value of the wrong type", "name: r\nwindow: 5m\nlabels:\n  team: [a]\nquery: SELECT 1\n", "labels.team: cannot unmarshal", 4},
		// A parameter the query reads as a number is refused on its own line, not the query's.
		{"parameter type", "name: r\nwindow: 5m\nparams:\n  floor: abc\nquery: 'SELECT {floor:Float64}'\n",
			"params.floor: rule r: parameter floor is abc, but the query reads it as Float64 (its line 5): want a number", 4},
		{"description beside a runbook", valid + "runbook: {fired: a, confirm: b, query: c, action: d, avoid: e}\n",
			"description: rule r: the description is the runbook's action", 4},
		{"runbook without avoid", strings.Replace(valid, "description: ok\n", "", 1) + "runbook: {fired: a, confirm: b, query: c, action: d}\n",
			"runbook.avoid", 5},
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
