package rulestest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/detector/alerting"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/detector/slo"
)

// Options say where and as of when the tests run.
type Options struct {
	// ClickHouse is the server and account; its Database is not used: each case gets a database
	// of its own, named DatabasePrefix plus a random suffix, created, migrated and dropped, so
	// the account needs CREATE DATABASE and DROP DATABASE.
	ClickHouse config.ClickHouse
	// Builtin are the rules of test files without rule_files and slo_files.
	Builtin []*rules.Definition
	// BuiltinSLOs are the SLOs of test files without rule_files and slo_files: their generated
	// rules are tested too, and their objectives are in every case's slo_objectives.
	BuiltinSLOs []*slo.Definition
	// Time0 is time 0 of every test (zero: the wall clock, truncated to the minute). Rules only
	// see times relative to it.
	Time0 time.Time
	// Log receives the engine's log (alert state changes); nil discards it.
	Log *slog.Logger
}

// maxEvaluations bounds the evaluations of one rule in one test (a day at 10 s).
const maxEvaluations = 8640

// DatabasePrefix starts the name of every database the runner creates.
const DatabasePrefix = "servescope_rulestest_"

// Result is the outcome of one test file.
type Result struct {
	File string
	// Cases is how many tests ran, Checks how many expectations were compared.
	Cases, Checks int
	// Failures are the expectations that did not hold, one message each.
	Failures []string
}

// Run runs every test of f. An error means a test could not run (a rule file or an input is
// wrong, ClickHouse refused or is unreachable); expectations that do not hold are Failures.
func Run(ctx context.Context, f *File, opts Options) (*Result, error) {
	defs, slos := opts.Builtin, opts.BuiltinSLOs
	if len(f.RuleFiles) > 0 || len(f.SLOFiles) > 0 {
		defs, slos = nil, nil
		for _, p := range f.ruleFiles() {
			d, err := rules.ParseFile(p)
			if err != nil {
				return nil, fmt.Errorf("test file %s: %w", f.Path, err)
			}
			defs = append(defs, d)
		}
		for _, p := range f.sloFiles() {
			d, err := slo.ParseFile(p)
			if err != nil {
				return nil, fmt.Errorf("test file %s: %w", f.Path, err)
			}
			slos = append(slos, d)
		}
	}
	for _, s := range slos {
		rs, err := s.Rules()
		if err != nil {
			return nil, fmt.Errorf("test file %s: SLO %s: %w", f.Path, s.Name, err)
		}
		defs = append(defs, rs...)
	}
	byName := map[string]*rules.Definition{}
	for _, d := range defs {
		byName[d.Name] = d
	}
	t0 := opts.Time0
	if t0.IsZero() {
		t0 = time.Now().UTC().Truncate(time.Minute)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	res := &Result{File: f.Path}
	for i := range f.Tests {
		c := &f.Tests[i]
		failures, checks, err := runCase(ctx, f, c, byName, slos, t0, opts.ClickHouse, log)
		if err != nil {
			return nil, err
		}
		res.Cases++
		res.Checks += checks
		res.Failures = append(res.Failures, failures...)
	}
	return res, nil
}

func runCase(ctx context.Context, f *File, c *Case, byName map[string]*rules.Definition, slos []*slo.Definition,
	t0 time.Time, ch config.ClickHouse, log *slog.Logger) (failures []string, checks int, err error) {
	where := func(line int) string { return fmt.Sprintf("%s:%d: test %q", f.Path, line, c.Name) }
	// The rules the case names, in the order it first names them, each with its expectations.
	var order []string
	expects := map[string][]Expect{}
	for _, e := range c.Alerts {
		d, ok := byName[e.Rule]
		if !ok {
			return nil, 0, fmt.Errorf("%s: no rule named %s among %s", where(e.Line), e.Rule, ruleNames(byName))
		}
		iv := interval(d, f)
		if e.At.D()/iv > maxEvaluations {
			return nil, 0, fmt.Errorf("%s: at %s is %d evaluations of rule %s after 0s; a test runs at most %d", where(e.Line), e.At.D(), e.At.D()/iv, e.Rule, maxEvaluations)
		}
		if e.At.D()%iv != 0 {
			return nil, 0, fmt.Errorf("%s: at %s is not an evaluation of rule %s (every %s from 0s)", where(e.Line), e.At.D(), e.Rule, iv)
		}
		if _, ok := expects[e.Rule]; !ok {
			order = append(order, e.Rule)
		}
		expects[e.Rule] = append(expects[e.Rule], e)
	}

	conn, drop, err := freshDatabase(ctx, ch)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", where(c.Line), err)
	}
	defer drop()
	cfg := ch
	cfg.Cluster = ""
	if err := slo.Sync(ctx, cfg, conn, slos, t0); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", where(c.Line), err)
	}
	ld := loader{conn: conn, columns: map[string][]column{}}
	for j, in := range c.Inputs {
		if err := ld.insert(ctx, j, in, t0); err != nil {
			return nil, 0, fmt.Errorf("%s: input at line %d: %w", where(c.Line), in.Line, err)
		}
	}

	for _, name := range order {
		d := byName[name]
		q, err := rules.NewSQLRule(d, conn)
		if err != nil {
			return nil, 0, err
		}
		r := alerting.NewRule(d, q)
		iv := interval(d, f)
		g := &alerting.Group{Interval: iv, Rules: []*alerting.Rule{r}, Log: log.With("test", c.Name)}
		es := expects[name]
		sort.SliceStable(es, func(a, b int) bool { return es[a].At < es[b].At })
		last := es[len(es)-1].At.D()
		next := 0
		for tick := time.Duration(0); tick <= last; tick += iv {
			if err := g.Eval(ctx, t0.Add(tick)); err != nil {
				return nil, 0, fmt.Errorf("%s: evaluate rule %s at %s: %w", where(c.Line), name, tick, err)
			}
			for ; next < len(es) && es[next].At.D() == tick; next++ {
				checks++
				if msg := compare(es[next].Expect, r.Alerts()); msg != "" {
					failures = append(failures, fmt.Sprintf("%s: rule %s at %s:\n%s", where(es[next].Line), name, tick, msg))
				}
			}
		}
	}
	return failures, checks, nil
}

func interval(d *rules.Definition, f *File) time.Duration {
	if d.Interval > 0 {
		return d.Interval.D()
	}
	return f.EvaluationInterval.D()
}

func ruleNames(byName map[string]*rules.Definition) string {
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return "[" + strings.Join(names, ", ") + "]"
}

// freshDatabase creates a database of its own on ch's server and migrates it; drop removes it.
func freshDatabase(ctx context.Context, ch config.ClickHouse) (driver.Conn, func(), error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	cfg := ch
	cfg.Database = DatabasePrefix + hex.EncodeToString(b[:])
	admin := ch
	admin.Database = "default"
	drop := func() {
		// The case's own context may be over (an interrupted run): the database still goes.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if conn, err := chstore.Open(dctx, admin); err == nil {
			_ = conn.Exec(dctx, "DROP DATABASE IF EXISTS `"+cfg.Database+"` SYNC")
			_ = conn.Close()
		}
	}
	if err := chstore.Migrate(ctx, cfg); err != nil {
		drop()
		return nil, nil, fmt.Errorf("create and migrate database %s: %w", cfg.Database, err)
	}
	conn, err := chstore.Open(ctx, cfg)
	if err != nil {
		drop()
		return nil, nil, err
	}
	return conn, func() { _ = conn.Close(); drop() }, nil
}

// compare returns "" when got (the rule's alerts) are exactly want, else the difference.
func compare(want []Alert, got []*alerting.Alert) string {
	type item struct {
		state, labels string
		ann           map[string]string
	}
	var have []item
	for _, a := range got {
		switch a.StateName() {
		case "pending", "firing", "resolved":
			have = append(have, item{a.StateName(), labelText(a.Labels), a.Annotations})
		}
	}
	sort.Slice(have, func(i, j int) bool { return have[i].labels+have[i].state < have[j].labels+have[j].state })
	used := make([]bool, len(have))
	var missing, wrong []string
	for _, w := range want {
		wl := labelText(w.Labels)
		found := false
		for i, h := range have {
			if used[i] || h.labels != wl || h.state != w.State {
				continue
			}
			used[i], found = true, true
			for _, k := range slices.Sorted(maps.Keys(w.Annotations)) {
				if h.ann[k] != w.Annotations[k] {
					wrong = append(wrong, fmt.Sprintf("    %s %s: annotation %s is %q, want %q", h.state, h.labels, k, h.ann[k], w.Annotations[k]))
				}
			}
			break
		}
		if !found {
			missing = append(missing, "    "+w.State+" "+wl)
		}
	}
	var extra []string
	for i, h := range have {
		if !used[i] {
			extra = append(extra, "    "+h.state+" "+h.labels)
		}
	}
	if len(missing)+len(extra)+len(wrong) == 0 {
		return ""
	}
	var b strings.Builder
	section := func(title string, lines []string) {
		if len(lines) > 0 {
			b.WriteString("  " + title + ":\n" + strings.Join(lines, "\n") + "\n")
		}
	}
	section("expected, not there", missing)
	section("there, not expected", extra)
	section("annotations differ", wrong)
	var all []string
	for _, h := range have {
		all = append(all, "    "+h.state+" "+h.labels)
	}
	if len(all) == 0 {
		all = []string{"    (no alerts)"}
	}
	section("the rule's alerts", all)
	return strings.TrimRight(b.String(), "\n")
}

// labelText writes labels as Prometheus does, {a="1", b="2"} sorted, without alertname.
func labelText(labels map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if k == "alertname" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%q", k, labels[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
