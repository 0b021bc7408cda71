package alerting

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/servescope/servescope/services/detector/rules"
)

// resolvedRetention is how long a resolved alert stays in memory, so that its resolved notification
// is sent and a quick re-fire is recognised as the same alert.
const resolvedRetention = 15 * time.Minute

// Rule is an alerting rule: a [rules.Rule] that produces rows plus the metadata that turns them into
// alerts, and the rule's active alerts keyed by fingerprint.
type Rule struct {
	def  *rules.Definition
	eval rules.Rule

	mu     sync.Mutex
	active map[string]*Alert
}

// NewRule makes an alerting rule from a definition and the evaluator of its query.
func NewRule(def *rules.Definition, eval rules.Rule) *Rule {
	return &Rule{def: def, eval: eval, active: map[string]*Alert{}}
}

// Name returns the rule name.
func (r *Rule) Name() string { return r.def.Name }

// Definition returns the rule's metadata.
func (r *Rule) Definition() *rules.Definition { return r.def }

// Hold is the rule's `for`: how long a row must fire before its alert fires.
func (r *Rule) Hold() time.Duration { return r.def.For.D() }

// KeepFiringFor is the rule's `keep_firing_for`: how long a firing alert stays firing after its
// row stopped firing.
func (r *Rule) KeepFiringFor() time.Duration { return r.def.KeepFiringFor.D() }

// Eval evaluates the rule at ts and advances its alerts' states. It returns copies of the alerts
// whose state changed (new pending, pending→firing, firing→resolved, pending→inactive). On a query
// error the state is left as it was.
func (r *Rule) Eval(ctx context.Context, ts time.Time) ([]*Alert, error) {
	samples, err := r.eval.Eval(ctx, ts)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var changed []*Alert
	seen := map[string]bool{}
	// rows holds every row by its alert's fingerprint, firing or not, so that a resolution says
	// what the value came back to.
	rows := map[string]*rules.Sample{}
	for i := range samples {
		s := samples[i]
		labels := r.labels(s.Labels)
		fp := Fingerprint(labels)
		if _, ok := rows[fp]; !ok {
			rows[fp] = &samples[i]
		}
		if !s.Firing && !s.KeepFiring {
			continue
		}
		if seen[fp] {
			continue
		}
		// A row that only keeps firing (hysteresis) holds an alert that fires already; it starts
		// none and does not advance a pending one.
		if !s.Firing {
			if a, ok := r.active[fp]; !ok || a.State != StateFiring {
				continue
			}
		}
		seen[fp] = true
		ann, err := r.annotations(s)
		if err != nil {
			return nil, err
		}
		a, ok := r.active[fp]
		if !ok || a.State == StateInactive {
			a = &Alert{Rule: r.def.Name, Fingerprint: fp, Labels: labels, Severity: r.def.Severity,
				State: StatePending, ActiveAt: ts}
			if ok {
				// A re-fire keeps when the last notification went out, so a resolved that was never
				// delivered is not mistaken for one that was.
				a.LastSentAt = r.active[fp].LastSentAt
			}
			r.active[fp] = a
			changed = append(changed, a)
		}
		a.Value, a.Baseline, a.Threshold, a.Annotations = s.Value, s.Baseline, s.Threshold, ann
	}
	for fp, a := range r.active {
		if seen[fp] {
			a.KeepFiringSince = time.Time{}
			if a.State == StatePending && ts.Sub(a.ActiveAt) >= r.Hold() {
				a.State, a.FiredAt = StateFiring, ts
				changed = append(changed, a)
			}
			continue
		}
		// keep_firing_for as Prometheus's rules/alerting.go has it: a firing alert whose row is
		// gone keeps firing until keep_firing_for has passed since the first evaluation without
		// the row; the row's return within it resets that start.
		if a.State == StateFiring && r.KeepFiringFor() > 0 {
			if a.KeepFiringSince.IsZero() {
				a.KeepFiringSince = ts
			}
			if ts.Sub(a.KeepFiringSince) < r.KeepFiringFor() {
				continue
			}
		}
		switch a.State {
		case StatePending:
			a.State = StateInactive
			delete(r.active, fp)
			changed = append(changed, a)
		case StateFiring:
			a.State, a.ResolvedAt = StateInactive, ts
			r.resolvedAnnotations(a, rows[fp])
			changed = append(changed, a)
		case StateInactive:
			if ts.Sub(a.ResolvedAt) >= resolvedRetention {
				delete(r.active, fp)
			}
		}
	}
	// An alert can change twice in one evaluation (new and, with no hold, firing at once); it is
	// reported once, in its final state.
	out := make([]*Alert, 0, len(changed))
	dup := map[*Alert]bool{}
	for _, a := range changed {
		if !dup[a] {
			dup[a] = true
			out = append(out, a.clone())
		}
	}
	return out, nil
}

// labels are the labels of the alert of a row with row labels: the row's non-empty labels, the
// rule's own labels over them (as a Prometheus rule's labels win over its series'), every scope
// label (rules.ScopeLabels) the row leaves empty set to rules.ScopeAll, then alertname and
// severity. So every alert carries model, app, engine and gateway: Alertmanager drops an empty
// label, and an inhibit rule's `equal` takes two missing labels as equal, which muted alerts
// about different things.
func (r *Rule) labels(row map[string]string) map[string]string {
	labels := map[string]string{}
	for k, v := range row {
		if v != "" {
			labels[k] = v
		}
	}
	for k, v := range r.def.Labels {
		labels[k] = v
	}
	for _, k := range rules.ScopeLabels {
		if labels[k] == "" {
			labels[k] = rules.ScopeAll
		}
	}
	labels["alertname"], labels["severity"] = r.def.Name, r.def.Severity
	return labels
}

// reservedAnnotations are the annotations the detector writes; a row's details cannot replace them.
var reservedAnnotations = map[string]bool{
	"summary": true, "description": true, "value": true, "baseline": true, "threshold": true,
	"runbook_url": true, "baseline_note": true, "fired_value": true,
}

func (r *Rule) annotations(s rules.Sample) (map[string]string, error) {
	summary, description, err := r.def.Render(s)
	if err != nil {
		return nil, err
	}
	ann := map[string]string{
		"summary": summary, "description": description,
		"value": formatFigure(s.Value), "baseline": formatFigure(s.Baseline), "threshold": formatFigure(s.Threshold),
	}
	for k, v := range s.Details {
		if !reservedAnnotations[k] && v != "" {
			ann[k] = v
		}
	}
	if r.def.RunbookURL != "" {
		ann["runbook_url"] = r.def.RunbookURL
	}
	if !s.BaselineOK {
		ann["baseline_note"] = "not enough baseline data: compared with the rule's absolute floor"
	}
	return ann, nil
}

// resolvedAnnotations replace a resolved alert's firing texts with what its value came back to:
// current is the rule's row for it at the resolving evaluation, nil when the rule returned none.
// The value it last fired with stays as fired_value; the runbook_url stays.
func (r *Rule) resolvedAnnotations(a *Alert, current *rules.Sample) {
	fired := a.Value
	row := map[string]string{}
	for k, v := range a.Labels {
		if k != "alertname" && k != "severity" {
			row[k] = v
		}
	}
	summary, err := r.def.RenderResolved(row, current, fired)
	if err != nil {
		summary = fmt.Sprintf("Resolved (value %s when it last fired).", formatFigure(fired))
	}
	ann := map[string]string{"summary": summary, "fired_value": formatFigure(fired)}
	if u := a.Annotations["runbook_url"]; u != "" {
		ann["runbook_url"] = u
	}
	a.Value, a.Baseline, a.Threshold = math.NaN(), math.NaN(), math.NaN()
	if current != nil {
		a.Value, a.Baseline, a.Threshold = current.Value, current.Baseline, current.Threshold
	}
	ann["value"], ann["baseline"], ann["threshold"] = formatFigure(a.Value), formatFigure(a.Baseline), formatFigure(a.Threshold)
	a.Annotations = ann
}

// Alerts returns copies of the rule's alerts (pending, firing and recently resolved).
func (r *Rule) Alerts() []*Alert {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Alert, 0, len(r.active))
	for _, a := range r.active {
		out = append(out, a.clone())
	}
	return out
}

// Restore puts a persisted alert back, e.g. after a restart. Inactive alerts that are not
// resolved are ignored.
func (r *Rule) Restore(a *Alert) error {
	if a.Rule != r.def.Name {
		return fmt.Errorf("restore alert %s of rule %s into rule %s", a.Fingerprint, a.Rule, r.def.Name)
	}
	if a.State == StateInactive && !a.Resolved() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.active[a.Fingerprint] = a.clone()
	return nil
}

// Identity is what makes two versions of a rule the same rule across a reload: its name,
// severity and labels, which make its alerts' fingerprints. A rule whose query, thresholds, hold
// or texts changed keeps its identity, as a Prometheus rule keeps its state across a reload when
// its name and labels stay.
func (r *Rule) Identity() string {
	keys := make([]string, 0, len(r.def.Labels))
	for k := range r.def.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(r.def.Name + "\x00" + r.def.Severity)
	for _, k := range keys {
		b.WriteString("\x00" + k + "=" + r.def.Labels[k])
	}
	return b.String()
}

// TakeState moves old's alerts (pending, firing, recently resolved, with when they were last
// sent) into r, which replaces old after a reload: a firing alert stays firing and is not
// notified again. old must not be evaluated any more.
func (r *Rule) TakeState(old *Rule) {
	old.mu.Lock()
	defer old.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for fp, a := range old.active {
		r.active[fp] = a.clone()
	}
}

// Retire ends the rule's alerts at ts, for a rule that a reload removes (or whose identity it
// changes, so that its alerts cannot be kept): it is never evaluated again, so nothing else
// would resolve a firing alert, and a receiver that is not Alertmanager (whose endsAt expires an
// alert by itself) would hold it firing for ever. A firing alert is resolved at ts (at its firing
// when that is later: an evaluation ahead of the wall clock in a test or a replay); a pending one,
// never notified, ends without a resolution. It returns copies of the alerts whose state changed.
func (r *Rule) Retire(ts time.Time) []*Alert {
	r.mu.Lock()
	defer r.mu.Unlock()
	var changed []*Alert
	for fp, a := range r.active {
		switch a.State {
		case StatePending:
			a.State = StateInactive
			delete(r.active, fp)
			changed = append(changed, a.clone())
		case StateFiring:
			a.State, a.ResolvedAt, a.KeepFiringSince = StateInactive, ts, time.Time{}
			if a.FiredAt.After(ts) {
				a.ResolvedAt = a.FiredAt
			}
			ann := map[string]string{"fired_value": formatFigure(a.Value),
				"summary": fmt.Sprintf("Resolved because rule %s was removed or changed by a reload (value %s when it last fired).",
					r.def.Name, formatFigure(a.Value))}
			if u := a.Annotations["runbook_url"]; u != "" {
				ann["runbook_url"] = u
			}
			a.Annotations = ann
			changed = append(changed, a.clone())
		}
	}
	return changed
}

// markSent records that the alert with fp was handed to the notifier at ts.
func (r *Rule) markSent(fp string, ts time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.active[fp]; ok {
		a.LastSentAt = ts
	}
}

// needsSending reports whether an alert must go to the notifier at ts: a firing alert never sent
// since it fired, or last sent repeat ago; a resolved alert whose firing was sent but whose
// resolution was not.
func needsSending(a *Alert, ts time.Time, repeat time.Duration) bool {
	switch {
	case a.State == StateFiring:
		return a.LastSentAt.Before(a.FiredAt) || (repeat > 0 && ts.Sub(a.LastSentAt) >= repeat)
	case a.Resolved():
		return !a.LastSentAt.IsZero() && a.LastSentAt.Before(a.ResolvedAt)
	default:
		return false
	}
}
