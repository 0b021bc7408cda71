package diagnose

import (
	"fmt"
	"strings"
	"time"
)

// Complaint is one row of docs/measurements.md's From symptom to quantity: what users say, where
// to look first, and the hypotheses (branches) its verdict rests on. The console's complaint pages,
// `servescope diagnose --complaint` and scripts/demo give the same Verdict for it.
type Complaint struct {
	ID, Says, LookAt, Hypothesis string
	// Branches are the hypotheses the complaint is read by, in order.
	Branches []string
}

// Complaints are the rows of docs/measurements.md (From symptom to quantity), in its order.
var Complaints = []Complaint{
	{"first-word", "It takes ages for the first word to appear", "Queue wait, then input tokens",
		"Overload → limit load or add machines. Long prompt → shorten it, prefix cache",
		[]string{BranchQueueOverload, BranchLongPrompt}},
	{"slow-text", "The text appears slowly", "Between two tokens, running count",
		"Batch too large",
		[]string{BranchGenerationContention}},
	{"answers-long", "Answers take long, but text appears immediately", "Output tokens, stop reason",
		"Long answers - check max_tokens and the prompt",
		[]string{BranchLongOutput, BranchGenerationContention}},
	{"hangs", "It hangs when lots of people use it", "Waiting, queue wait over time",
		"Capacity exceeded",
		[]string{BranchQueueOverload, BranchUnfinished}},
	{"server-500", "The server threw 500 and then vanished", "Log: running, KV, bytes requested",
		"Type one memory limit: read the crash page",
		[]string{BranchEngineCrash}},
	{"off-topic", "Off-topic answers, no errors", "Top passage retrieval score",
		"Retrieval pipeline, index, corpus or question distribution changed or incompatible",
		[]string{BranchRetrieval}},
	{"mixed-language", "Answers mixed with Chinese", "Characters outside the alphabet",
		"Output content error - check the model, prompt, decoding and add a dedicated rule",
		[]string{BranchWrongLanguage}},
}

// ComplaintByID returns the complaint with that ID.
func ComplaintByID(id string) (Complaint, bool) {
	for _, c := range Complaints {
		if c.ID == id {
			return c, true
		}
	}
	return Complaint{}, false
}

// Bearing ties a detector rule's alerts (those whose labels hold Labels) to what they bear on.
type Bearing struct {
	Rule   string
	Labels map[string]string
	// Complaints are the complaints whose verdict names the alert first: it fired on that symptom.
	Complaints []string
	// Branch is the hypothesis read at this rule's window (the branch's resolution: the first
	// bearing naming the branch whose rule is loaded), "" for none.
	Branch string
	// Signature says the alert is the branch's own signature: the branch is a finding when it
	// fired in the range, whatever diagnose's own thresholds say.
	Signature bool
}

// Bearings is the one mapping from the detector's rules to the complaints and branches they bear
// on (docs/concepts.md, Verdicts). An alert no bearing names is still named on every complaint
// page, among the other alerts of the range.
var Bearings = []Bearing{
	{Rule: "overload_queue", Complaints: []string{"first-word", "hangs"}, Branch: BranchQueueOverload, Signature: true},
	{Rule: "unfinished_rising", Complaints: []string{"hangs"}, Branch: BranchUnfinished, Signature: true},
	{Rule: "requests_hung", Complaints: []string{"hangs"}, Branch: BranchUnfinished, Signature: true},
	{Rule: "slot_limit", Complaints: []string{"hangs", "slow-text"}},
	{Rule: "kv_cache_pressure", Complaints: []string{"slow-text", "hangs"}, Branch: BranchKVPressure, Signature: true},
	{Rule: "latency_p95", Labels: map[string]string{"metric": "ttft_s"}, Complaints: []string{"first-word"}, Branch: BranchLongPrompt},
	{Rule: "latency_p95", Labels: map[string]string{"metric": "tpot_s"}, Complaints: []string{"slow-text"}, Branch: BranchGenerationContention},
	{Rule: "latency_p95", Labels: map[string]string{"metric": "e2e_s"}, Complaints: []string{"answers-long"}},
	{Rule: "truncated_outputs", Complaints: []string{"answers-long"}, Branch: BranchLongOutput},
	{Rule: "server_errors", Labels: map[string]string{"class": "5xx"}, Complaints: []string{"server-500"}, Branch: BranchEngineCrash, Signature: true},
	{Rule: "retrieval_score_drift", Complaints: []string{"off-topic"}, Branch: BranchRetrieval, Signature: true},
	{Rule: "retrieval_version_change", Complaints: []string{"off-topic"}, Branch: BranchRetrieval, Signature: true},
	{Rule: "output_language_errors", Complaints: []string{"mixed-language"}, Branch: BranchWrongLanguage, Signature: true},
	{Rule: "engine_not_scraped", Complaints: []string{"server-500"}, Branch: BranchEngineNotScraped, Signature: true},
	{Rule: "engine_spans_missing", Branch: BranchSpansMissing, Signature: true},
	{Rule: "kv_cache_stuck", Complaints: []string{"hangs"}, Branch: BranchKVStuck, Signature: true},
}

// scopeAll is the label contract's value of a label an alert is not about one of (all models,
// apps, engines or gateways): services/detector/rules.ScopeAll, which this package cannot import.
const scopeAll = "all"

func (b Bearing) matches(a Alert) bool {
	if a.Rule != b.Rule {
		return false
	}
	for k, v := range b.Labels {
		if a.Labels[k] != v {
			return false
		}
	}
	return true
}

// Resolution is the window branch id is read at: the window of its bearing's rule in windows
// (rule name → window), DefaultResolution when none is loaded.
func Resolution(id string, windows map[string]time.Duration) time.Duration {
	for _, b := range Bearings {
		if b.Branch == id {
			if w, ok := windows[b.Rule]; ok && w > 0 {
				return w
			}
		}
	}
	return DefaultResolution
}

// signatureAlerts are the alerts among as that are branch id's own signature.
func signatureAlerts(id string, as []Alert) []Alert {
	var out []Alert
	for _, a := range as {
		for _, b := range Bearings {
			if b.Signature && b.Branch == id && b.matches(a) {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

// bearsOn reports whether alert a bears on complaint id.
func bearsOn(a Alert, id string) bool {
	for _, b := range Bearings {
		if b.matches(a) && contains(b.Complaints, id) {
			return true
		}
	}
	return false
}

// Verdict statuses, from the most to the least definite.
const (
	// VerdictFinding: one of the complaint's hypotheses shows in the data or in its signature
	// alert.
	VerdictFinding = "finding"
	// VerdictUnexplained: an alert on the symptom fired, but none of the complaint's hypotheses
	// shows.
	VerdictUnexplained = "unexplained"
	// VerdictClear: every hypothesis is clear over the whole range and in every window of its
	// resolution, and no alert on the symptom fired.
	VerdictClear = "clear"
	// VerdictCannotTell: the data cannot decide (a hypothesis had no data or no baseline).
	VerdictCannotTell = "cannot tell"
)

// Verdict is a complaint's reading of a Report: what the on-call engineer acts on.
type Verdict struct {
	Complaint string `json:"complaint"`
	Status    string `json:"status"`
	// Text says the verdict in a sentence, with the alerts and the window it rests on.
	Text string `json:"text"`
	// Alerts are the alerts on this complaint's symptom that fired in the range, Others the rest
	// of the range's alerts.
	Alerts []Alert `json:"alerts"`
	Others []Alert `json:"other_alerts"`
	// Findings are the complaint's branches that found their signature; Branches are all of its
	// branches as walked, in its order.
	Findings []string `json:"findings"`
	Branches []Branch `json:"branches"`
}

// Verdict reads the report for complaint id (one of Complaints).
func (r *Report) Verdict(id string) (Verdict, error) {
	c, ok := ComplaintByID(id)
	if !ok {
		return Verdict{}, fmt.Errorf("complaint %q: want one of %s", id, strings.Join(complaintIDs(), ", "))
	}
	v := Verdict{Complaint: id, Alerts: []Alert{}, Others: []Alert{}, Findings: []string{}}
	for _, a := range r.Alerts {
		if bearsOn(a, id) {
			v.Alerts = append(v.Alerts, a)
		} else {
			v.Others = append(v.Others, a)
		}
	}
	var undecided *Branch
	for _, bid := range c.Branches {
		for i := range r.Branches {
			b := &r.Branches[i]
			if b.ID != bid {
				continue
			}
			v.Branches = append(v.Branches, *b)
			switch b.Status {
			case StatusFinding:
				v.Findings = append(v.Findings, b.ID)
			case StatusNoData, StatusCannotTell:
				if undecided == nil {
					undecided = b
				}
			}
		}
	}
	alerts := ""
	if len(v.Alerts) > 0 {
		var parts []string
		for _, a := range v.Alerts {
			parts = append(parts, a.Rule+" "+a.Span(r.Window))
		}
		alerts = "alerts on this symptom: " + strings.Join(parts, "; ")
	}
	switch {
	case len(v.Findings) > 0:
		v.Status = VerdictFinding
		var parts []string
		for _, b := range v.Branches {
			if b.Status == StatusFinding {
				parts = append(parts, b.Headline(r.Window))
			}
		}
		v.Text = strings.Join(parts, "; ")
		if alerts != "" {
			v.Text += " (" + alerts + ")"
		}
	case len(v.Alerts) > 0:
		v.Status = VerdictUnexplained
		var titles []string
		for _, b := range v.Branches {
			titles = append(titles, shortTitle(b.Title))
		}
		v.Text = fmt.Sprintf("the symptom is real (%s), but none of this page's hypotheses (%s) shows in the data: look at what they do not cover",
			alerts, strings.Join(titles, ", "))
	case undecided != nil:
		v.Status = VerdictCannotTell
		v.Text = fmt.Sprintf("the data cannot decide: %s: %s", shortTitle(undecided.Title), undecided.Conclusion)
	default:
		v.Status = VerdictClear
		v.Text = "none of this page's hypotheses shows, over the whole range or in any window of its rules' length, and no alert on this symptom fired"
	}
	return v, nil
}

// Headline is a finding in one line: its hypothesis, its conclusion and where it was seen.
func (b Branch) Headline(r Range) string {
	s := shortTitle(b.Title) + ": " + b.Conclusion
	if b.Window != nil && b.FromWindow {
		s += " (in the window " + clockIn(b.Window.From, r) + " → " + clockIn(b.Window.To, r) + ")"
	}
	return s
}

// shortTitle is a branch title without its quoted complaints: "Queue-dominated overload".
func shortTitle(t string) string {
	if i := strings.Index(t, " ("); i > 0 {
		return t[:i]
	}
	return t
}

func complaintIDs() []string {
	out := make([]string, len(Complaints))
	for i, c := range Complaints {
		out[i] = c.ID
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
