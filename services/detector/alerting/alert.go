// Package alerting turns rule rows into alerts with a lifecycle (inactive → pending → firing →
// resolved), evaluates groups of rules at explicit times, keeps alert state in the `alerts` table so
// a restart neither forgets nor repeats, and decides when an alert is (re)sent.
package alerting

import (
	"maps"
	"math"
	"strconv"
	"time"

	"github.com/prometheus/common/model"
)

// State is an alert's lifecycle state.
type State int

const (
	// StateInactive: the rule's row is not firing (a resolved alert is inactive with ResolvedAt set).
	StateInactive State = iota
	// StatePending: the row fires but has not yet for the rule's `for` hold.
	StatePending
	// StateFiring: the row has fired for at least the hold.
	StateFiring
)

// String returns "inactive", "pending" or "firing".
func (s State) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StateFiring:
		return "firing"
	default:
		return "inactive"
	}
}

// Alert is one label set of one rule.
type Alert struct {
	// Rule is the rule name (also the alertname label).
	Rule string
	// Fingerprint is Labels' fingerprint as Prometheus and Alertmanager compute it (see
	// [Fingerprint]); it identifies the alert across restarts and to receivers.
	Fingerprint string
	// Labels are the row's non-empty labels plus alertname and severity.
	Labels map[string]string
	// Annotations are summary, description, value, baseline, threshold, runbook_url when the
	// rule has one and, when the baseline lacked data, baseline_note.
	Annotations map[string]string
	Severity    string
	State       State
	// Value, Baseline (NaN when unknown) and Threshold are the row's figures at the last evaluation.
	Value, Baseline, Threshold float64
	// ActiveAt is when the row started firing, FiredAt when the alert went from pending to firing,
	// ResolvedAt when it stopped, LastSentAt when it was last due for notification (the evaluation
	// that handed it to the notifier). Zero = never. LastSentAt says the state change was decided,
	// not delivered: a receiver's acceptance is recorded in alert_deliveries, and a restart
	// delivers the decided state changes a receiver never accepted.
	ActiveAt, FiredAt, ResolvedAt, LastSentAt time.Time
	// KeepFiringSince is the first evaluation at which a firing alert's row was gone while the
	// rule's keep_firing_for held it firing (zero while the row fires). It is not persisted: after
	// a restart the hold starts again, which can only delay a resolution by keep_firing_for.
	KeepFiringSince time.Time
}

// Resolved reports whether the alert fired and then stopped.
func (a *Alert) Resolved() bool { return a.State == StateInactive && !a.ResolvedAt.IsZero() }

// StateName is the name stored in the alerts table: pending, firing, resolved or inactive.
func (a *Alert) StateName() string {
	if a.Resolved() {
		return "resolved"
	}
	return a.State.String()
}

func (a *Alert) clone() *Alert {
	c := *a
	c.Labels = maps.Clone(a.Labels)
	c.Annotations = maps.Clone(a.Annotations)
	return &c
}

// Fingerprint is the label set's fingerprint as Prometheus and Alertmanager compute it
// (prometheus/common's model.LabelSet.Fingerprint: FNV-64a over the names in byte order, each
// name and value followed by a 0xff byte), as 16 lower-case hex digits: the `fingerprint` of the
// Alertmanager webhook payload and of the alerts and alert_deliveries tables. It is the same
// value servescope computed with its own FNV-64a code before, so stored alerts keep their
// identity (TestFingerprintMatchesStoredValues).
func Fingerprint(labels map[string]string) string {
	ls := make(model.LabelSet, len(labels))
	for k, v := range labels {
		ls[model.LabelName(k)] = model.LabelValue(v)
	}
	return ls.Fingerprint().String()
}

func formatFigure(v float64) string {
	if math.IsNaN(v) {
		return "unknown"
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}
