package rules_test

import (
	"context"
	"strings"
	"testing"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/rules"
)

// Every built-in rule has a runbook and no description of its own: the alerts' description is the
// runbook's action for the alert's labels (a case's when one matches), so the two cannot differ.
func TestBuiltinDescriptionIsTheRunbookAction(t *testing.T) {
	defs, err := rules.Load(builtin.Rules, builtin.RulesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if d.Runbook == nil || d.Description != "" || d.ResolvedSummary == "" {
			t.Errorf("%s: runbook %v, description %q, resolved_summary %q: every built-in rule has a runbook, no description and a resolved summary",
				d.Name, d.Runbook != nil, d.Description, d.ResolvedSummary)
			continue
		}
		labels := []map[string]string{{"model": "m"}}
		for _, c := range d.Runbook.Cases {
			labels = append(labels, c.Labels)
		}
		for _, l := range labels {
			_, desc, err := d.Render(rules.Sample{Labels: l, Value: 1, Threshold: 1, Firing: true, BaselineOK: true})
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.Join(strings.Fields(d.Runbook.ActionFor(l)), " "); desc != want {
				t.Errorf("%s with labels %v: description %q, the runbook's action %q", d.Name, l, desc, want)
			}
		}
		md := rules.Markdown(d)
		for _, section := range []string{"## What fired", "## Confirm", "```sql", "## What to do", "## What not to do"} {
			if !strings.Contains(md, section) {
				t.Errorf("%s: the runbook page lacks %q", d.Name, section)
			}
		}
	}
}

// Every built-in runbook's confirming query runs as written on servescope's schema (empty tables):
// the one query an on-call engineer pastes must not fail.
func TestRunbookQueriesRun(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	defs, err := rules.Load(builtin.Rules, builtin.RulesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		rows, err := conn.Query(context.Background(), d.Runbook.Query)
		if err != nil {
			t.Errorf("%s's runbook query: %v", d.Name, err)
			continue
		}
		for rows.Next() {
		}
		if err := rows.Err(); err != nil {
			t.Errorf("%s's runbook query: %v", d.Name, err)
		}
		rows.Close()
	}
}
