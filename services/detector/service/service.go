package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/services/detector/alerting"
	"github.com/servescope/servescope/services/detector/notify"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/detector/slo"
)

// LoadSLOs returns the built-in SLOs merged with the *.yaml files of dir (when not empty).
func LoadSLOs(dir string) ([]*slo.Definition, error) {
	defs, err := slo.LoadBuiltin(builtin.SLOs, builtin.SLOsDir, builtin.RepoDir)
	if err != nil {
		return nil, fmt.Errorf("built-in SLOs: %w", err)
	}
	if dir == "" {
		return defs, nil
	}
	user, err := slo.Load(os.DirFS(dir), ".")
	if err != nil {
		return nil, fmt.Errorf("DETECTOR_SLOS_DIR %s: %w", dir, err)
	}
	return slo.Merge(defs, user), nil
}

// Loaded is what the detector runs: its rules (built-in, DETECTOR_RULES_DIR's and the burn-rate
// rules of the SLOs), the SLOs themselves and the engines file.
type Loaded struct {
	Rules   []*rules.Definition
	SLOs    []*slo.Definition
	Engines *slo.Engines
}

// Load reads the rules of cfg.RulesDir, the SLOs of cfg.SLOsDir and cfg.EnginesFile. A rule file
// naming an SLO's generated rule is refused: the SLO file is where that rule is changed.
func Load(cfg Config) (Loaded, error) {
	defs, err := LoadRules(cfg.RulesDir)
	if err != nil {
		return Loaded{}, err
	}
	slos, err := LoadSLOs(cfg.SLOsDir)
	if err != nil {
		return Loaded{}, err
	}
	names := map[string]string{}
	for _, d := range defs {
		names[d.Name] = d.Source
	}
	for _, s := range slos {
		rs, err := s.Rules()
		if err != nil {
			return Loaded{}, fmt.Errorf("SLO %s: %w", s.Name, err)
		}
		for _, r := range rs {
			if src, ok := names[r.Name]; ok {
				return Loaded{}, fmt.Errorf("rule file %s: rule %s is generated from SLO %s (%s): change the SLO file instead", src, r.Name, s.Name, s.Source)
			}
			names[r.Name] = r.Source
			defs = append(defs, r)
		}
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].Name < defs[j].Name })
	eng, err := slo.ReadEngines(cfg.EnginesFile)
	if err != nil {
		return Loaded{}, err
	}
	return Loaded{Rules: defs, SLOs: slos, Engines: eng}, nil
}

// LoadRules returns the built-in rules merged with the *.yaml files of dir (when not empty).
func LoadRules(dir string) ([]*rules.Definition, error) {
	defs, err := rules.Load(builtin.Rules, builtin.RulesDir)
	if err != nil {
		return nil, fmt.Errorf("built-in rules: %w", err)
	}
	if dir == "" {
		return defs, nil
	}
	user, err := rules.Load(os.DirFS(dir), ".")
	if err != nil {
		return nil, fmt.Errorf("DETECTOR_RULES_DIR %s: %w", dir, err)
	}
	return rules.Merge(defs, user), nil
}

// Detector is the assembled service.
type Detector struct {
	cfg  Config
	conn driver.Conn
	// mu guards rules and groups, which a reload replaces (see Reload).
	mu       sync.RWMutex
	rules    []*alerting.Rule
	groups   []*alerting.Group
	metrics  *alerting.Metrics
	resend   alerting.NotifyFunc
	reloads  *reloadState
	notifier *notify.Notifier
	// alertmanagers is nil without AlertmanagerURLs.
	alertmanagers *notify.Alertmanagers
	reg           *prometheus.Registry
	warm          *warmer
	log           *slog.Logger
}

// New builds the detector's rules and groups on conn. reg receives the detector's metrics.
func New(cfg Config, conn driver.Conn, defs []*rules.Definition, reg *prometheus.Registry, log *slog.Logger) (*Detector, error) {
	secret, err := cfg.Secret()
	if err != nil {
		return nil, err
	}
	n, err := notify.New(notify.Options{
		URLs: cfg.WebhookURLs, Secret: secret, ExternalURL: cfg.ExternalURL, GiveUpAfter: DeliveryHorizon,
		Recorder: notify.CHRecorder{Conn: conn}, Registerer: reg, Log: log,
	})
	if err != nil {
		return nil, err
	}
	d := &Detector{cfg: cfg, conn: conn, notifier: n, reg: reg, log: log}
	var resend alerting.NotifyFunc
	if len(cfg.AlertmanagerURLs) > 0 {
		d.alertmanagers, err = notify.NewAlertmanagers(notify.AlertmanagerOptions{
			URLs: cfg.AlertmanagerURLs, Timeout: cfg.AlertmanagerTimeout, Recorder: notify.CHRecorder{Conn: conn},
			Registerer: reg, Log: log,
		})
		if err != nil {
			return nil, err
		}
		resend = d.sendAlertmanagers
	}
	d.resend = resend
	d.metrics = alerting.NewMetrics(reg)
	d.warm = newWarmer(reg)
	d.reloads = newReloadState(reg, len(defs))
	if d.rules, d.groups, err = d.build(defs); err != nil {
		return nil, err
	}
	return d, nil
}

// build makes the rules of defs and their evaluation groups, one per distinct interval.
func (d *Detector) build(defs []*rules.Definition) ([]*alerting.Rule, []*alerting.Group, error) {
	var rs []*alerting.Rule
	var groups []*alerting.Group
	byInterval := map[time.Duration]*alerting.Group{}
	for _, def := range defs {
		q, err := rules.NewSQLRule(def, d.conn)
		if err != nil {
			return nil, nil, err
		}
		r := alerting.NewRule(def, q)
		rs = append(rs, r)
		iv := def.Interval.D()
		if iv <= 0 {
			iv = d.cfg.Interval
		}
		g, ok := byInterval[iv]
		if !ok {
			g = &alerting.Group{Interval: iv, Repeat: d.cfg.RepeatInterval, Store: alerting.CHStore{Conn: d.conn},
				Notify: d.notify, Resend: d.resend, Metrics: d.metrics, Log: d.log, Concurrency: d.cfg.RuleConcurrency}
			byInterval[iv] = g
			groups = append(groups, g)
		}
		g.Rules = append(g.Rules, r)
	}
	return rs, groups, nil
}

// Groups returns the evaluation groups (one per distinct interval).
func (d *Detector) Groups() []*alerting.Group {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.groups
}

// Rules returns the rules being evaluated.
func (d *Detector) Rules() []*alerting.Rule {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.rules
}

// Notifier returns the webhook notifier.
func (d *Detector) Notifier() *notify.Notifier { return d.notifier }

// Alertmanagers returns the Alertmanager sender, nil when no Alertmanager is configured.
func (d *Detector) Alertmanagers() *notify.Alertmanagers { return d.alertmanagers }

// DeliveryHorizon is how long a notification is tried: the notifier gives up on a message this
// long after its first attempt, and a start delivers the undelivered state changes decided within
// it (older ones are left to the repeat interval).
const DeliveryHorizon = 24 * time.Hour

// Restore loads alert state from the alerts table, so a restart neither forgets a firing alert
// nor notifies it again, and queues, for each receiver, the state changes that were decided (due
// for notification) within DeliveryHorizon but that the receiver never accepted (no 2xx recorded
// in alert_deliveries): a notification queued or in flight when the detector stopped is delivered
// after the restart. Only an alert's latest state is delivered, so a firing that was not delivered
// before its resolution is never sent after it: the receiver gets the resolution alone, whose
// startsAt and endsAt tell the whole episode.
//
// Delivery is at least once: a crash between a receiver's 2xx and the insert into alert_deliveries
// (or a failed insert) sends that state change once more after the restart. Receivers
// de-duplicate by fingerprint, status and startsAt, as Alertmanager receivers do.
func (d *Detector) Restore(ctx context.Context) error {
	alerts, err := alerting.CHStore{Conn: d.conn}.Load(ctx)
	if err != nil {
		return err
	}
	for _, g := range d.Groups() {
		if err := g.Restore(ctx, alerts); err != nil {
			return err
		}
	}
	d.log.Info("alert state restored", "alerts", len(alerts))
	// Alerts of rules removed while the detector was stopped, resolved now as a reload would.
	d.retire(ctx, d.orphans(alerts))
	n, err := d.redeliver(ctx, alerts, time.Now())
	if err != nil {
		return err
	}
	if n > 0 {
		d.log.Info("undelivered notifications queued again", "notifications", n)
	}
	return nil
}

// orphans returns, as rules to retire, the firing alerts among alerts whose rule the detector no
// longer has (removed while it was stopped): no evaluation would ever resolve them. An alert of a
// rule that is still there under other labels or severity needs nothing: the restore puts it
// into that rule, whose next evaluation resolves it (its fingerprint is no longer produced).
func (d *Detector) orphans(alerts []*alerting.Alert) []*alerting.Rule {
	known := map[string]bool{}
	for _, r := range d.Rules() {
		known[r.Name()] = true
	}
	byRule := map[string]*alerting.Rule{}
	var out []*alerting.Rule
	for _, a := range alerts {
		if a.State != alerting.StateFiring || known[a.Rule] {
			continue
		}
		r, ok := byRule[a.Rule]
		if !ok {
			r = alerting.NewRule(&rules.Definition{Name: a.Rule, Severity: a.Severity}, nil)
			byRule[a.Rule] = r
			out = append(out, r)
		}
		if err := r.Restore(a); err != nil {
			d.log.Error("retire an alert of a removed rule", "rule", a.Rule, "fingerprint", a.Fingerprint, "err", err)
		}
	}
	return out
}

// redeliver queues, per receiver, the undelivered decided state changes among alerts (the latest
// state of each), and returns how many it queued. now bounds the search to DeliveryHorizon.
func (d *Detector) redeliver(ctx context.Context, alerts []*alerting.Alert, now time.Time) (int, error) {
	receivers := d.notifier.Receivers()
	if len(receivers) == 0 {
		return 0, nil
	}
	since := now.Add(-DeliveryHorizon)
	known := map[string]bool{}
	for _, r := range d.Rules() {
		known[r.Name()] = true
	}
	var due []*alerting.Alert
	var fps []string
	for _, a := range alerts {
		var decided time.Time
		switch {
		case a.State == alerting.StateFiring:
			decided = a.FiredAt
		case a.Resolved():
			decided = a.ResolvedAt
		default:
			continue
		}
		// A state change never due (LastSentAt before it) was never to be notified, and one
		// older than the horizon is past the notifier's retries. A removed rule's firing alert is
		// left to retire (its resolution is the news); its resolution, decided when the rule
		// went, is delivered like any other.
		if (!known[a.Rule] && !a.Resolved()) || decided.IsZero() || a.LastSentAt.Before(decided) || decided.Before(since) {
			continue
		}
		due = append(due, a)
		fps = append(fps, a.Fingerprint)
	}
	if len(due) == 0 {
		return 0, nil
	}
	accepted, err := notify.CHRecorder{Conn: d.conn}.Accepted(ctx, since, fps)
	if err != nil {
		return 0, err
	}
	queued := 0
	for _, recv := range receivers {
		var out []notify.Alert
		for _, a := range due {
			w := ToWebhook(a, d.cfg.ExternalURL)
			if !accepted[notify.KeyOf(recv, w)] {
				out = append(out, w)
			}
		}
		if len(out) == 0 {
			continue
		}
		if err := d.notifier.SendTo(recv, out...); err != nil {
			return queued, err
		}
		queued += len(out)
	}
	return queued, nil
}

// Run evaluates every group on its interval, delivers notifications and keeps diagnose_hourly
// up to date (DiagnoseWarmInterval) until ctx ends.
func (d *Detector) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); d.notifier.Run(ctx) }()
	if d.alertmanagers != nil {
		wg.Add(1)
		go func() { defer wg.Done(); d.alertmanagers.Run(ctx) }()
	}
	if d.cfg.DiagnoseWarmInterval > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); d.warmDiagnose(ctx) }()
	}
	d.runGroups(ctx)
	wg.Wait()
}

func (d *Detector) notify(_ context.Context, _ time.Time, alerts []*alerting.Alert) {
	out := make([]notify.Alert, 0, len(alerts))
	for _, a := range alerts {
		out = append(out, ToWebhook(a, d.cfg.ExternalURL))
	}
	d.notifier.Send(out...)
}

// sendAlertmanagers hands the group's current alerts to the Alertmanagers; a firing alert's
// endsAt is counted from the wall clock, not from the evaluation time (which runs EvalDelay
// behind it, and further in a replay), because Alertmanager compares it with its own clock.
func (d *Detector) sendAlertmanagers(_ context.Context, _ time.Time, alerts []*alerting.Alert) {
	now := time.Now()
	out := make([]notify.PostableAlert, 0, len(alerts))
	for _, a := range alerts {
		out = append(out, ToAlertmanager(a, d.cfg.ExternalURL, now, d.alertValidity(a)))
	}
	d.alertmanagers.Send(out...)
}

// resendDelay is Prometheus's default --rules.alert.resend-delay, the least period its firing
// alerts' validity is counted in.
const resendDelay = time.Minute

// alertValidity is how long past a send a firing alert stays firing at Alertmanager without
// another send: four times the longer of its evaluation interval and resendDelay, as Prometheus
// allows (its rules/alerting.go sendAlerts), so that up to three lost evaluations or POSTs — or
// evaluations slowed on a loaded server — do not resolve it. Four short intervals alone (8 s at
// a 2 s interval) let Alertmanager resolve and re-fire an alert whenever one evaluation ran late.
func (d *Detector) alertValidity(a *alerting.Alert) time.Duration {
	iv := d.cfg.Interval
	for _, r := range d.Rules() {
		if r.Name() == a.Rule && r.Definition().Interval.D() > 0 {
			iv = r.Definition().Interval.D()
		}
	}
	return 4 * max(iv, resendDelay)
}

// ToAlertmanager converts an alert to the form Alertmanager's /api/v2/alerts takes, as sent at
// now: startsAt is when the alert fired (after its hold, as Prometheus sends it); a firing alert's
// endsAt is now + validFor, a resolved one's the evaluation that resolved it.
func ToAlertmanager(a *alerting.Alert, externalURL string, now time.Time, validFor time.Duration) notify.PostableAlert {
	p := notify.PostableAlert{Labels: a.Labels, Annotations: a.Annotations, StartsAt: a.FiredAt.UTC(),
		EndsAt: now.Add(validFor).UTC(), Fingerprint: a.Fingerprint, Status: "firing"}
	if a.Resolved() {
		p.EndsAt, p.Status = a.ResolvedAt.UTC(), "resolved"
	}
	if externalURL != "" {
		p.GeneratorURL = externalURL + "/rules#" + a.Rule
	}
	return p
}

// ToWebhook converts an alert to its webhook form.
func ToWebhook(a *alerting.Alert, externalURL string) notify.Alert {
	w := notify.Alert{Status: "firing", Labels: a.Labels, Annotations: a.Annotations, StartsAt: a.ActiveAt.UTC(),
		Fingerprint: a.Fingerprint}
	if a.Resolved() {
		w.Status, w.EndsAt = "resolved", a.ResolvedAt.UTC()
	}
	if externalURL != "" {
		w.GeneratorURL = externalURL + "/rules#" + a.Rule
	}
	return w
}

// ReplayLine is one line of `--once` output: an alert that would be pending or firing.
type ReplayLine struct {
	Rule        string            `json:"rule"`
	State       string            `json:"state"`
	Labels      map[string]string `json:"labels"`
	Value       *float64          `json:"value"`
	Baseline    *float64          `json:"baseline"`
	Threshold   *float64          `json:"threshold"`
	Summary     string            `json:"summary"`
	Fingerprint string            `json:"fingerprint"`
	ActiveAt    time.Time         `json:"active_at"`
	BaselineOK  bool              `json:"baseline_ok"`
}

// Replay evaluates every rule as of at (with the earlier ticks each rule's `for` needs) and writes
// one JSON object per pending or firing alert to w, sorted by rule and fingerprint. It sends and
// saves nothing.
func (d *Detector) Replay(ctx context.Context, at time.Time, w io.Writer) error {
	alerts, err := alerting.Replay(ctx, at, d.cfg.Interval, d.Rules())
	if err != nil {
		return err
	}
	sort.Slice(alerts, func(i, j int) bool {
		if alerts[i].Rule != alerts[j].Rule {
			return alerts[i].Rule < alerts[j].Rule
		}
		return alerts[i].Fingerprint < alerts[j].Fingerprint
	})
	enc := json.NewEncoder(w)
	for _, a := range alerts {
		_, noteMissing := a.Annotations["baseline_note"]
		if err := enc.Encode(ReplayLine{
			Rule: a.Rule, State: a.State.String(), Labels: a.Labels, Value: finite(a.Value),
			Baseline: finite(a.Baseline), Threshold: finite(a.Threshold), Summary: a.Annotations["summary"],
			Fingerprint: a.Fingerprint, ActiveAt: a.ActiveAt.UTC(), BaselineOK: !noteMissing,
		}); err != nil {
			return fmt.Errorf("write replay output: %w", err)
		}
	}
	return nil
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// WriteConfig writes l's SLOs into slo_objectives and its engines file into engine_config (one
// load each, at the wall clock's time; every node of a sharded schema), which the service-level,
// cost and capacity views read (migrations/000040 and 000041).
func (d *Detector) WriteConfig(ctx context.Context, l Loaded) error {
	at := time.Now()
	if err := slo.Sync(ctx, d.cfg.ClickHouse, d.conn, l.SLOs, at); err != nil {
		return err
	}
	if l.Engines != nil {
		if err := slo.SyncEngines(ctx, d.cfg.ClickHouse, d.conn, l.Engines, at); err != nil {
			return err
		}
	}
	return nil
}
