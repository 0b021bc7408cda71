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
