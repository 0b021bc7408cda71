package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/servescope/servescope/services/detector/notify"
)

// Received is one alert as the demo's webhook receiver got it.
type Received struct {
	At          time.Time // when the receiver got it (wall clock)
	Rule        string    // the alertname label
	Status      string    // firing or resolved
	Labels      map[string]string
	Summary     string
	StartsAt    time.Time
	Fingerprint string
	// GeneratorURL and RunbookURL are the alert's links to the console.
	GeneratorURL, RunbookURL string
}

// Receiver is an Alertmanager-v4 webhook endpoint that keeps every alert it is sent.
type Receiver struct {
	mu     sync.Mutex
	alerts []Received
	// notify is signalled (non-blocking) after each message.
	notify chan struct{}
}

// NewReceiver returns an empty receiver.
func NewReceiver() *Receiver { return &Receiver{notify: make(chan struct{}, 1)} }

// ServeHTTP takes one webhook message (POST, JSON body of notify.Message).
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST an Alertmanager webhook message", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 4<<20))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var m notify.Message
	if err := json.Unmarshal(body, &m); err != nil {
		http.Error(w, "decode webhook message: "+err.Error(), http.StatusBadRequest)
		return
	}
	now := time.Now().UTC()
	r.mu.Lock()
	for _, a := range m.Alerts {
		r.alerts = append(r.alerts, Received{
			At: now, Rule: a.Labels["alertname"], Status: a.Status, Labels: a.Labels,
			Summary: a.Annotations["summary"], StartsAt: a.StartsAt, Fingerprint: a.Fingerprint,
			GeneratorURL: a.GeneratorURL, RunbookURL: a.Annotations["runbook_url"],
		})
	}
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
	w.WriteHeader(http.StatusOK)
}

// Listen serves the receiver on addr (host:port) until ctx ends.
func (r *Receiver) Listen(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for the detector's webhooks: %w", err)
	}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return nil
}

// Alerts returns a copy of every alert received, in arrival order.
func (r *Receiver) Alerts() []Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Received(nil), r.alerts...)
}

// Firing returns when the first firing alert of rule arrived at or after since.
func (r *Receiver) Firing(rule string, since time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.alerts {
		if a.Rule == rule && a.Status == "firing" && !a.At.Before(since) {
			return a.At, true
		}
	}
	return time.Time{}, false
}

// Expectation is one alert the demo must see: any of Rules firing.
type Expectation struct {
	Incident string
	Rules    []string
	// Since is when the incident started; earlier alerts do not count.
	Since time.Time
}

// Met reports whether one of e's rules fired since e.Since, which one first and when.
func (r *Receiver) Met(e Expectation) (string, time.Time, bool) {
	best, bestAt := "", time.Time{}
	for _, rule := range e.Rules {
		if at, ok := r.Firing(rule, e.Since); ok && (best == "" || at.Before(bestAt)) {
			best, bestAt = rule, at
		}
	}
	return best, bestAt, best != ""
}

// Episode is one alert from its first firing message to its resolution.
type Episode struct {
	Rule, Severity, Labels, Summary string
	// Fingerprint is the alert's identity: its rule and labels.
	Fingerprint         string
	FiredAt, ResolvedAt time.Time // receiver's clock; ResolvedAt zero while firing
}

// Episodes folds the received messages into one episode per alert (fingerprint and start),
// ordered by firing time. The summary is the one of the first firing message.
func Episodes(alerts []Received) []Episode {
	type key struct {
		fp    string
		start time.Time
	}
	idx := map[key]int{}
	var out []Episode
	for _, a := range alerts {
		k := key{a.Fingerprint, a.StartsAt}
		i, seen := idx[k]
		if !seen {
			if a.Status != "firing" {
				continue
			}
			idx[k] = len(out)
			out = append(out, Episode{Rule: a.Rule, Severity: a.Labels["severity"], Labels: labelText(a.Labels),
				Summary: strings.Join(strings.Fields(a.Summary), " "), Fingerprint: a.Fingerprint, FiredAt: a.At})
			continue
		}
		if a.Status == "resolved" && out[i].ResolvedAt.IsZero() {
			out[i].ResolvedAt = a.At
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].FiredAt.Before(out[j].FiredAt) })
	return out
}

// Phase is one stretch of the demo — a scenario or an incident — from its start to the next
// phase's.
type Phase struct {
	Name  string
	Start time.Time
	// Rules are the rules whose alerts the phase explains: its incident's, and the true
	// consequences of its load (an overload's latency and slot alerts). Flaps does not read them.
	Rules []string
}

// phaseAt returns the index of the phase of ps (sorted by start) in which t falls: the last one
// started at or before t; -1 before the first.
func phaseAt(ps []Phase, t time.Time) int {
	i := -1
	for j, p := range ps {
		if !t.Before(p.Start) {
			i = j
		}
	}
	return i
}

// Unexpected returns the episodes of the received alerts that no phase explains: an episode is
// expected when its rule is among the Rules of the phase in which it fired or of the phase before
// it (a rule's window and hold make its alert fire up to a window after the load that caused it).
// An alert firing before the first phase is unexpected.
func Unexpected(alerts []Received, phases []Phase) []Episode {
	ps := append([]Phase(nil), phases...)
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Start.Before(ps[j].Start) })
	var out []Episode
	for _, e := range Episodes(alerts) {
		i := phaseAt(ps, e.FiredAt)
		ok := false
		for _, j := range []int{i, i - 1} {
			if j >= 0 && slices.Contains(ps[j].Rules, e.Rule) {
				ok = true
			}
		}
		if !ok {
			out = append(out, e)
		}
	}
	return out
}

// WriteUnexpected prints the count of unexpected alerts and, under it, each one with the phase it
// fired in.
func WriteUnexpected(w io.Writer, unexpected []Episode, phases []Phase) {
	fmt.Fprintf(w, "  %d unexpected alerts (an alert that is not one of the phase's incident or its load's consequences)\n", len(unexpected))
	ps := append([]Phase(nil), phases...)
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Start.Before(ps[j].Start) })
	for _, e := range unexpected {
		name := "before the scenarios"
		if i := phaseAt(ps, e.FiredAt); i >= 0 {
			name = ps[i].Name
		}
		fmt.Fprintf(w, "    %s %s fired during %s: %s\n", e.Rule, e.Labels, name, e.Summary)
	}
}

// Flap is an alert identity (fingerprint) that fired more than once within one phase: each
// firing after the first is one flap. A firing sent again for the same episode (same startsAt,
// a reminder or a redelivery) is not a new firing.
type Flap struct {
	Phase, Rule, Labels string
	Firings             int
}

// Flaps returns the flaps of the received alerts, each episode counted in the phase in which it
// fired (the last phase started at or before its firing; "before the scenarios" before the
// first), and their total: the firings beyond one per identity and phase. phases need not be
// sorted.
func Flaps(alerts []Received, phases []Phase) ([]Flap, int) {
	ps := append([]Phase(nil), phases...)
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Start.Before(ps[j].Start) })
	phaseOf := func(t time.Time) string {
		name := "before the scenarios"
		for _, p := range ps {
			if !t.Before(p.Start) {
				name = p.Name
			}
		}
		return name
	}
	type key struct{ phase, fp string }
	firings := map[key]*Flap{}
	var order []key
	for _, e := range Episodes(alerts) {
		k := key{phaseOf(e.FiredAt), e.Fingerprint}
		f, ok := firings[k]
		if !ok {
			f = &Flap{Phase: k.phase, Rule: e.Rule, Labels: e.Labels}
			firings[k] = f
			order = append(order, k)
		}
		f.Firings++
	}
	var out []Flap
	total := 0
	for _, k := range order {
		if f := firings[k]; f.Firings > 1 {
			out = append(out, *f)
			total += f.Firings - 1
		}
	}
	return out, total
}

// WriteFlaps prints the flap count and, under it, each identity that flapped.
func WriteFlaps(w io.Writer, flaps []Flap, total int) {
	fmt.Fprintf(w, "  flaps: %d (an alert firing again within the scenario or incident in which it fired)\n", total)
	for _, f := range flaps {
		fmt.Fprintf(w, "    %s %s fired %d times during %s\n", f.Rule, f.Labels, f.Firings, f.Phase)
	}
}

func labelText(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k, v := range l {
		// A scope label "all" (the alert is not about one model, app, engine or gateway) says
		// nothing here.
		if k == "alertname" || k == "severity" || v == "" || v == "all" {
			continue
		}
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	return strings.Join(keys, " ")
}

// WriteAlerts prints one line per alert episode — when it fired and resolved, relative to
// origin — with its summary below.
func WriteAlerts(w io.Writer, alerts []Received, origin time.Time) {
	eps := Episodes(alerts)
	if len(eps) == 0 {
		fmt.Fprintln(w, "  (no alert received)")
		return
	}
	fmt.Fprintf(w, "  %-7s %-9s %-25s %-9s %s\n", "fired", "resolved", "rule", "severity", "labels")
	for _, e := range eps {
		res := "-"
		if !e.ResolvedAt.IsZero() {
			res = fmt.Sprintf("+%.0fs", e.ResolvedAt.Sub(origin).Seconds())
		}
		fmt.Fprintf(w, "  %-7s %-9s %-25s %-9s %s\n", fmt.Sprintf("+%.0fs", e.FiredAt.Sub(origin).Seconds()), res, e.Rule, e.Severity, e.Labels)
		if e.Summary != "" {
			fmt.Fprintf(w, "          %s\n", e.Summary)
		}
	}
}
