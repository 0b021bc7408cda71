package rules_test

import (
	"strings"
	"testing"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/services/detector/rules"
)

// TestBuiltinTextsWithMissingLabels renders every built-in rule's summary and description for a
// row whose labels are empty (a request without an app, an engine without a model): the text
// must read as a sentence, with no "<no value>" and no hole where a label would be.
func TestBuiltinTextsWithMissingLabels(t *testing.T) {
	defs, err := rules.Load(builtin.Rules, "rules")
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) < 10 {
		t.Fatalf("loaded %d built-in rules, want at least 10", len(defs))
	}
	for _, d := range defs {
		for _, labels := range []map[string]string{{}, {"app": "", "model": "", "engine": ""}} {
			summary, description, err := d.Render(rules.Sample{Labels: labels, Value: 0.125, Baseline: 0.01, Threshold: 0.05, Firing: true, BaselineOK: true})
			if err != nil {
				t.Errorf("%s: %v", d.Name, err)
				continue
			}
			for _, text := range []string{summary, description} {
				if strings.Contains(text, "<no value>") || strings.Contains(text, "  ") {
					t.Errorf("%s with labels %v renders a hole: %q", d.Name, labels, text)
				}
			}
		}
	}
}
