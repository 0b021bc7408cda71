package service

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/services/detector/alerting"
	"github.com/servescope/servescope/services/detector/rules"
)

// reloadState hands reloaded rules to the running evaluation and counts reloads.
type reloadState struct {
	// swaps carries a reload's rules to runGroups, which installs them between evaluations.
	swaps chan swap
	// running is true while runGroups runs; without it Reload installs the rules itself. Guarded
	// by the detector's mu, so that a reload never installs groups that runGroups does not run.
	running bool

	reloads, failures  prometheus.Counter
	lastOK, lastOKTime prometheus.Gauge
	loaded             prometheus.Gauge
}

type swap struct {
	rules  []*alerting.Rule
	groups []*alerting.Group
	done   chan struct{}
}

func newReloadState(reg prometheus.Registerer, rulesLoaded int) *reloadState {
	s := &reloadState{
		swaps: make(chan swap),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "servescope_detector_rule_reloads_total",
			Help: "Rule reloads attempted (SIGHUP, or a change of a file in DETECTOR_RULES_DIR).",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "servescope_detector_rule_reload_failures_total",
			Help: "Rule reloads refused (a file that does not parse, SQL ClickHouse refuses): the rules loaded before keep running.",
		}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "servescope_detector_rule_last_reload_successful",
			Help: "1 when the last rule load (at start or a reload) succeeded, 0 when it was refused.",
		}),
		lastOKTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "servescope_detector_rule_last_reload_success_timestamp_seconds",
			Help: "When the rules were last loaded successfully, Unix time in seconds.",
		}),
		loaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "servescope_detector_rules",
			Help: "Rules being evaluated.",
		}),
	}
	s.lastOK.Set(1)
	s.lastOKTime.SetToCurrentTime()
	s.loaded.Set(float64(rulesLoaded))
	reg.MustRegister(s.reloads, s.failures, s.lastOK, s.lastOKTime, s.loaded)
	return s
}

// Reload replaces the rules with defs and keeps the alert state of every rule whose identity
// (name, severity, labels: see alerting.Rule.Identity) is unchanged, so a firing alert stays
// firing and is not notified again. Each rule's SQL is first dry-run on ClickHouse
// (rules.Check): a rule ClickHouse refuses refuses the whole reload, and the rules loaded before
// keep running. When ClickHouse cannot be reached the SQL goes unchecked (the reload is not held
// back by an outage; a broken query then shows in the evaluation failures). While Run runs, the
// rules change between two evaluations: an evaluation under way finishes with the old rules.
//
// A rule the reload removes, or whose identity it changes, is never evaluated again: its firing
// alerts are resolved at the reload (evaluation time, EvalDelay behind the wall clock), saved in
// the alerts table and notified as resolved, once, to the webhook receivers and the
// Alertmanagers. Prometheus drops such alerts and leaves Alertmanager to expire them at their
// endsAt, but a webhook receiver has no endsAt to wait for and would hold them firing for ever.
func (d *Detector) Reload(ctx context.Context, defs []*rules.Definition) error {
	for _, def := range defs {
		if err := rules.Check(ctx, d.conn, def); err != nil {
			if rules.IsServerVerdict(err) {
				return err
			}
			if ctx.Err() != nil {
				return err
			}
			d.log.Warn("rule SQL not checked before the reload: ClickHouse did not answer", "err", err)
			break
		}
	}
	rs, gs, err := d.build(defs)
	if err != nil {
		return err
	}
	d.mu.Lock()
	if !d.reloads.running {
		removed := d.installLocked(rs, gs)
		d.mu.Unlock()
		d.retire(ctx, removed)
	} else {
		d.mu.Unlock()
		sw := swap{rules: rs, groups: gs, done: make(chan struct{})}
		select {
		case d.reloads.swaps <- sw:
		case <-ctx.Done():
			return ctx.Err()
		}
		<-sw.done
	}
	d.reloads.loaded.Set(float64(len(rs)))
	return nil
}

// installLocked makes rs and gs the detector's rules, moving the state of the rules they replace,
// and returns the rules whose identity is gone (their alerts are for retire). The caller holds
// d.mu.
func (d *Detector) installLocked(rs []*alerting.Rule, gs []*alerting.Group) []*alerting.Rule {
	old := map[string]*alerting.Rule{}
	for _, r := range d.rules {
		old[r.Identity()] = r
	}
	names := map[string]bool{}
	kept := 0
	for _, r := range rs {
		names[r.Name()] = true
		if o, ok := old[r.Identity()]; ok {
			r.TakeState(o)
			delete(old, r.Identity())
			kept++
		}
	}
	var removed []*alerting.Rule
	for _, o := range d.rules {
		if _, gone := old[o.Identity()]; !gone {
			continue
		}
		removed = append(removed, o)
		if !names[o.Name()] {
			d.metrics.Forget(o.Name())
		}
	}
	d.rules, d.groups = rs, gs
	d.log.Info("rules installed", "rules", len(rs), "state_kept", kept, "groups", len(gs), "removed", len(removed))
	return removed
}

// retire resolves, saves and notifies the firing alerts of rules a reload removed (see Reload),
// at the evaluation time of now. A failed save is logged (the notifications go out all the same,
// as after an evaluation).
func (d *Detector) retire(ctx context.Context, removed []*alerting.Rule) {
	if len(removed) == 0 {
		return
	}
	g := &alerting.Group{Repeat: d.cfg.RepeatInterval, Store: alerting.CHStore{Conn: d.conn},
		Notify: d.notify, Resend: d.resend, Log: d.log}
	ts := time.Now().Add(-d.cfg.EvalDelay)
	if err := g.Retire(ctx, ts, removed...); err != nil {
		d.log.Error("save the resolution of the alerts of removed rules", "rules", len(removed), "err", err)
	}
}

// runGroups evaluates the groups, each on its interval, until ctx ends, and puts in the groups of
// a reload between two evaluations.
func (d *Detector) runGroups(ctx context.Context) {
	d.mu.Lock()
	d.reloads.running = true
	groups := d.groups
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.reloads.running = false
		d.mu.Unlock()
	}()
	for {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, g := range groups {
			wg.Add(1)
			go func() { defer wg.Done(); g.RunUntil(ctx, stop, d.cfg.EvalDelay) }()
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			// A reload waiting for its swap gives up on ctx too.
			return
		case sw := <-d.reloads.swaps:
			close(stop)
			wg.Wait()
			d.mu.Lock()
			removed := d.installLocked(sw.rules, sw.groups)
			groups = d.groups
			d.mu.Unlock()
			// Before the groups run again, so that the resolutions are saved ahead of any later
			// evaluation's rows.
			d.retire(ctx, removed)
			close(sw.done)
		}
	}
}

// settle is how long file changes must pause before the rules are reloaded: an editor's save
// (write a temporary file, rename it over the old one) or a Kubernetes ConfigMap update (a
// symlink swap) is several events, reloaded once.
const settle = 250 * time.Millisecond

// watchRules reloads the rules (built-in plus DETECTOR_RULES_DIR's, and the SLOs with
// DETECTOR_SLOS_DIR's) on SIGHUP and when a file in either directory changes, until ctx ends.
// hup is the SIGHUP channel, registered by the caller before the detector starts so that a SIGHUP
// during the start is not lost (nor fatal). A refused reload is logged and counted; the rules
// loaded before keep running. The engines file is read again at every reload.
func (d *Detector) watchRules(ctx context.Context, hup <-chan os.Signal) {
	type watched struct{ name, dir string }
	var dirs []watched
	for _, w := range []watched{{"DETECTOR_RULES_DIR", d.cfg.RulesDir}, {"DETECTOR_SLOS_DIR", d.cfg.SLOsDir}} {
		if w.dir != "" {
			dirs = append(dirs, watched{w.name, filepath.Clean(w.dir)})
		}
	}
	var events <-chan fsnotify.Event
	var watchErrs <-chan error
	var w *fsnotify.Watcher
	if len(dirs) > 0 {
		var err error
		if w, err = fsnotify.NewWatcher(); err != nil {
			d.log.Error("rule and SLO directories are not watched: rules reload on SIGHUP only", "err", err)
		} else {
			defer w.Close()
			events, watchErrs = w.Events, w.Errors
			for _, wd := range dirs {
				if err := w.Add(wd.dir); err != nil {
					d.log.Error(wd.name+" is not watched: rules reload on SIGHUP only", "dir", wd.dir, "err", err)
					continue
				}
				// The directory itself can be replaced (removed and created again, a git checkout, a
				// deploy that swaps it): a watch follows the old directory, so the parent is watched
				// too, and a directory created again under the same name is watched afresh.
				if err := w.Add(filepath.Dir(wd.dir)); err != nil {
					d.log.Warn("the parent of "+wd.name+" is not watched: a directory created again is seen on SIGHUP only", "dir", wd.dir, "err", err)
				}
			}
		}
	}
	var settled <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			d.reloadFrom(ctx, "SIGHUP")
		case ev := <-events:
			name := filepath.Clean(ev.Name)
			for _, wd := range dirs {
				switch {
				case name == wd.dir:
					if ev.Has(fsnotify.Create) {
						if err := w.Add(wd.dir); err != nil {
							d.log.Warn("watching "+wd.name+" again", "dir", wd.dir, "err", err)
						}
					}
					settled = time.After(settle)
				case filepath.Dir(name) == wd.dir && ruleFileEvent(ev):
					settled = time.After(settle)
				}
			}
		case err := <-watchErrs:
			d.log.Warn("watching the rule and SLO directories", "err", err)
		case <-settled:
			settled = nil
			d.reloadFrom(ctx, "file change")
		}
	}
}

// ruleFileEvent reports whether ev may change the rules: a *.yaml or *.yml file, or a
// Kubernetes ConfigMap volume's "..data" link, created, written, removed or renamed.
func ruleFileEvent(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	base := filepath.Base(ev.Name)
	return strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml") || strings.HasPrefix(base, "..")
}

// reloadFrom loads the rules and SLOs again and reloads them, then writes the SLOs and the engines
// file into ClickHouse (WriteConfig), logging and counting the outcome.
func (d *Detector) reloadFrom(ctx context.Context, why string) {
	d.reloads.reloads.Inc()
	l, err := Load(d.cfg)
	if err == nil {
		err = d.Reload(ctx, l.Rules)
	}
	if err == nil {
		err = d.WriteConfig(ctx, l)
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return
		}
		d.reloads.failures.Inc()
		d.reloads.lastOK.Set(0)
		d.log.Error("rule reload refused: the rules loaded before keep running", "trigger", why, "err", err)
		return
	}
	d.reloads.lastOK.Set(1)
	d.reloads.lastOKTime.SetToCurrentTime()
	d.log.Info("rules reloaded", "trigger", why, "rules", len(l.Rules), "slos", len(l.SLOs))
}

// notifyHUP registers for SIGHUP; stop releases it.
func notifyHUP() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	return ch, func() { signal.Stop(ch) }
}
