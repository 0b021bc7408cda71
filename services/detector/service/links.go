package service

import (
	"net/url"
	"strings"
	"time"

	"github.com/servescope/servescope/services/detector/alerting"
	"github.com/servescope/servescope/services/detector/rules"
)

// Links makes the URLs every alert carries to pages of the console (DETECTOR_CONSOLE_URL), each of
// which opens:
//
//   - generatorURL: the console's alerts page at the rule and the moment,
//     /alerts?rule=<rule>&from=<RFC 3339>[&to=<RFC 3339>]: from the alert's activation less the
//     lead (the rule's window, at least 15 minutes, so the page shows what led to it), to its
//     resolution plus the lead; a firing alert's page runs to the moment it is opened (no to).
//   - annotation runbook_url: the console's runbook page of a rule with a runbook,
//     /runbooks/<rule> (served without a login: it holds the rule file's text, no data), unless
//     the rule file names its own runbook_url.
//   - annotation request_url: the console's page of the request an alert names in its
//     request_id annotation (requests_hung: the oldest hung request), /request/<id>.
//
// Without a console URL, alerts carry none of these.
type Links struct {
	// Console is the console's base URL, without a trailing slash.
	Console string
	// rules holds the definitions by name, for windows and runbooks.
	rules map[string]*rules.Definition
}

// NewLinks returns the links to the console at consoleURL for the rules defs.
func NewLinks(consoleURL string, defs []*rules.Definition) Links {
	l := Links{Console: strings.TrimRight(consoleURL, "/"), rules: map[string]*rules.Definition{}}
	for _, d := range defs {
		l.rules[d.Name] = d
	}
	return l
}

// minLead is the least a generatorURL's range shows before an alert became active.
const minLead = 15 * time.Minute

// maxRange is the longest range the console's alerts page shows (31 days), less a day's margin.
const maxRange = 30 * 24 * time.Hour

// GeneratorURL is the console's alerts page at a's rule and moment, as sent at now; "" without a
// console URL.
func (l Links) GeneratorURL(a *alerting.Alert, now time.Time) string {
	if l.Console == "" {
		return ""
	}
	lead := minLead
	if d := l.rules[a.Rule]; d != nil && d.Window.D() > lead {
		lead = d.Window.D()
	}
	from := a.ActiveAt.Add(-lead)
	q := url.Values{"rule": {a.Rule}}
	if a.Resolved() {
		to := a.ResolvedAt.Add(lead)
		if to.Sub(from) > maxRange {
			from = to.Add(-maxRange)
		}
		q.Set("to", to.UTC().Format(time.RFC3339))
	} else if now.Sub(from) > maxRange {
		from = now.Add(-maxRange)
	}
	q.Set("from", from.UTC().Truncate(time.Second).Format(time.RFC3339))
	return l.Console + "/alerts?" + q.Encode()
}

// Annotations returns a's annotations with the console's runbook_url and request_url added (a
// copy; a's are left as they are).
func (l Links) Annotations(a *alerting.Alert) map[string]string {
	out := make(map[string]string, len(a.Annotations)+2)
	for k, v := range a.Annotations {
		out[k] = v
	}
	if l.Console == "" {
		return out
	}
	if d := l.rules[a.Rule]; out["runbook_url"] == "" && d != nil && d.Runbook != nil {
		out["runbook_url"] = l.Console + "/runbooks/" + url.PathEscape(a.Rule)
	}
	if id := out["request_id"]; id != "" {
		out["request_url"] = l.Console + "/request/" + url.PathEscape(id)
	}
	return out
}
