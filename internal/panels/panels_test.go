package panels

import (
	"strings"
	"testing"

	"github.com/servescope/servescope/deploy/console"
	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/services/detector/rules"
)

func load(t *testing.T) []*Panel {
	t.Helper()
	defs, err := rules.Load(builtin.Rules, builtin.RulesDir)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Load(console.Panels, console.PanelsDir, defs)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// TestConsoleSQLBindsEverything checks that the console's SQL holds no Grafana macro and no value:
// every filter and rule parameter is a {name:Type} query parameter, and each is bound by Params.
func TestConsoleSQLBindsEverything(t *testing.T) {
	for _, p := range load(t) {
		for _, k := range []Kind{SeriesQuery, BaselineQuery, MarksQuery} {
			q, err := p.SQL(k, Console)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(q, "$") {
				t.Errorf("%s %s: console SQL holds a Grafana macro or variable:\n%s", p.Name, k, q)
			}
			params := p.Params(Request{Filters: map[string]string{"model": "x'; DROP TABLE requests --"}})
			for _, m := range paramRefRE.FindAllStringSubmatch(q, -1) {
				if _, ok := params[m[1]]; !ok {
					t.Errorf("%s %s: parameter %s is never bound", p.Name, k, m[1])
				}
			}
			if strings.Contains(q, "DROP TABLE") {
				t.Errorf("%s: a filter value reached the SQL text", p.Name)
			}
		}
	}
}

var paramRefRE = regexpMust(`\{([a-z_][a-z0-9_]*):[A-Za-z0-9(), ']+\}`)

// A panel a rule watches shows the rule's runbook action for its rule_labels, and may not write
// its own: the dashboard's action, the alerts' description and the runbook page are one text.
func TestPanelActionIsTheRulesRunbookAction(t *testing.T) {
	defs, err := rules.Load(builtin.Rules, builtin.RulesDir)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Load(console.Panels, console.PanelsDir, defs)
	if err != nil {
		t.Fatal(err)
	}
	watched := 0
	for _, p := range ps {
		if p.RuleDef == nil {
			if strings.TrimSpace(p.Action) == "" {
				t.Errorf("panel %s without a rule has no action", p.Name)
			}
			continue
		}
		watched++
		if want := p.RuleDef.Runbook.ActionFor(p.RuleLabels); p.Action != want {
			t.Errorf("panel %s: action %q, rule %s's runbook says %q", p.Name, p.Action, p.Rule, want)
		}
	}
	if watched < 11 {
		t.Errorf("%d panels watched by a rule, want 11", watched)
	}
	byName := map[string]*rules.Definition{}
	for _, d := range defs {
		byName[d.Name] = d
	}
	src := "name: x\nrow: r\ntitle: t\nunit: s\nrule: latency_p95\nalert_when: w\nwhy: y\naction: my own\n" +
		"series: [{column: v, label: v}]\nquery: 'SELECT 1'\nbaseline: [{column: b, label: b}]\nbaseline_query: 'SELECT 1'\n"
	if _, err := Parse("x.yaml", []byte(src), byName); err == nil || !strings.Contains(err.Error(), "the rule's runbook action") {
		t.Errorf("a watched panel with its own action: %v, want it refused", err)
	}
}
