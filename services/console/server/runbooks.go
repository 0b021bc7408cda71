package server

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/servescope/servescope/services/detector/rules"
)

// RunbookPage is a rule's runbook as the console shows it: the rule file's runbook section, the
// one source of the alerts' description and the dashboard panel's action (rules.Runbook).
type RunbookPage struct {
	Name, Severity, Source        string
	Window, For                   string
	Fired, Confirm, Query, Action string
	Avoid, FiredFirst             string
	Cases                         []RunbookCase
}

// RunbookCase is an action for alerts with particular labels.
type RunbookCase struct{ Labels, Action string }

func runbookPage(d *rules.Definition) *RunbookPage {
	rb := d.Runbook
	p := &RunbookPage{Name: d.Name, Severity: d.Severity, Source: d.Source, Window: rules.ShortDuration(d.Window.D()),
		Fired: oneLine(rb.Fired), Confirm: oneLine(rb.Confirm), Query: strings.TrimSpace(rb.Query),
		Action: oneLine(rb.Action), Avoid: oneLine(rb.Avoid)}
	if d.For > 0 {
		p.For = rules.ShortDuration(d.For.D())
	}
	p.FiredFirst = p.Fired
	if i := strings.Index(p.Fired, ". "); i > 0 {
		p.FiredFirst = p.Fired[:i+1]
	}
	for _, c := range rb.Cases {
		var l []string
		for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
			l = append(l, k+"="+c.Labels[k])
		}
		p.Cases = append(p.Cases, RunbookCase{Labels: strings.Join(l, " "), Action: oneLine(c.Action)})
	}
	return p
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// runbookFor returns the rule named name when it has a runbook.
func (s *Server) runbookFor(name string) *rules.Definition {
	for _, d := range s.rules {
		if d.Name == name && d.Runbook != nil {
			return d
		}
	}
	return nil
}

// runbookPage serves GET /runbooks/{rule}: the rule's runbook. It needs no login: an alert's
// runbook_url is opened from a pager or a chat message, often on a device without a console
// session, and a runbook holds the rule file's text, no data. Unknown rules are 404.
func (s *Server) runbookPage(w http.ResponseWriter, r *http.Request) {
	d := s.runbookFor(r.PathValue("rule"))
	if d == nil {
		http.Error(w, fmt.Sprintf("no runbook for rule %q: see /runbooks", r.PathValue("rule")), http.StatusNotFound)
		return
	}
	data := pageData{Title: "Runbook " + d.Name, Nav: "runbook", Runbook: runbookPage(d)}
	s.pages.render(w, "runbook", data)
}

// runbooksIndex serves GET /runbooks: every rule with a runbook, without login as its pages.
func (s *Server) runbooksIndex(w http.ResponseWriter, r *http.Request) {
	data := pageData{Title: "Runbooks", Nav: "runbook"}
	for _, d := range s.rules {
		if d.Runbook != nil {
			data.Runbooks = append(data.Runbooks, runbookPage(d))
		}
	}
	s.pages.render(w, "runbook", data)
}
