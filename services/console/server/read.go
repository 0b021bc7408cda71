package server

import (
	"context"
	"fmt"
	"html/template"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/baseline"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/diagnose"
	"github.com/servescope/servescope/internal/panels"
	"github.com/servescope/servescope/internal/requestview"
	"github.com/servescope/servescope/services/detector/rules"
)

// Line is one drawn series: a label and one value per timestamp of its PanelData (nil: no value).
type Line struct {
	Label  string     `json:"label"`
	Axis   string     `json:"axis,omitempty"`
	Values []*float64 `json:"values"`
	// Kind is "series", "baseline" or "threshold".
	Kind string `json:"kind"`
}

// Mark is a moment marked on the time axis (a version's first appearance).
type Mark struct {
	TS   int64  `json:"t"`
	Text string `json:"text"`
}

// PanelData is what one panel draws over a range: timestamps in Unix milliseconds (the buckets'
// starts and the range's two ends, where the baseline and threshold are drawn) and the lines.
type PanelData struct {
	Name  string  `json:"name"`
	From  int64   `json:"from"`
	To    int64   `json:"to"`
	StepS int64   `json:"step_s"`
	T     []int64 `json:"t"`
	Lines []Line  `json:"lines"`
	Marks []Mark  `json:"marks"`
	// Points is how many non-null series values there are (0: nothing recorded in the range).
	Points int       `json:"points"`
	Rule   RuleState `json:"rule"`
	// Baseline says which period the baseline lines are of and where their figures come from.
	Baseline BaselineInfo `json:"baseline"`
}

// BaselineInfo is a panel's baseline as the page states it.
type BaselineInfo struct {
	// From and To are the period as read, in Unix milliseconds.
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Text says it in a sentence: the period, how it was chosen, where its figures come from.
	Text string `json:"text"`
	// None is true when the baseline holds no records: every baseline line is "no baseline".
	None bool `json:"none"`
}

func baselineInfo(v View, b *baselineEntry, figures bool) BaselineInfo {
	stamp := func(t time.Time) string { return t.UTC().Format("01-02 15:04") }
	text := "baseline " + stamp(b.read.From) + " → " + stamp(b.read.To) + " UTC: " + baseline.Default.Describe()
	if b.source == diagnose.BaselineHourly {
		text += " (its whole hours)"
	}
	switch {
	case !b.has:
		text += "; it holds no records: no baseline"
	case figures:
		text += "; the figures of the complaint pages' table (diagnose's)"
	default:
		text += "; read here for the app or engine filter (diagnose reads every app and engine)"
	}
	return BaselineInfo{From: b.read.From.UnixMilli(), To: b.read.To.UnixMilli(), Text: text, None: !b.has}
}

// point is one value of one line at one time.
type point struct {
	t     int64
	line  string
	value *float64
}

// readPanel runs the panel's series, baseline and marks queries for r.
func readPanel(ctx context.Context, conn driver.Conn, p *panels.Panel, r panels.Request) (PanelData, error) {
	params := p.Params(r)
	qctx := chstore.WithParams(ctx, params)
	out := PanelData{Name: p.Name, From: r.From.UnixMilli(), To: r.To.UnixMilli(), StepS: int64(r.Step / time.Second), Marks: []Mark{}}

	var pts []point
	order := []string{}
	meta := map[string]Line{}
	addLine := func(key string, l Line) {
		if _, ok := meta[key]; !ok {
			meta[key] = l
			order = append(order, key)
		}
	}
	// The series: one line per column, or per split value and column.
	wrapped, err := statementSQL(p, panels.SeriesQuery)
	if err != nil {
		return out, err
	}
	rows, err := conn.Query(qctx, wrapped)
	if err != nil {
		return out, fmt.Errorf("panel %s: series query: %w", p.Name, err)
	}
	for rows.Next() {
		var t int64
		var key string
		vals := make([]*float64, len(p.Series))
		dest := []any{&t, &key}
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return out, fmt.Errorf("panel %s: read series row: %w", p.Name, err)
		}
		for i, s := range p.Series {
			label := s.Label
			if p.Split != "" {
				label = key
				if len(p.Series) > 1 {
					label = key + " " + s.Label
				}
			}
			addLine("s:"+label, Line{Label: label, Axis: s.Axis, Kind: "series"})
			v := clean(vals[i])
			if v != nil {
				out.Points++
			}
			pts = append(pts, point{t, "s:" + label, v})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("panel %s: series rows: %w", p.Name, err)
	}

	// The baseline and threshold, at the range's two ends.
	bq, err := statementSQL(p, panels.BaselineQuery)
	if err != nil {
		return out, err
	}
	bcols := baselineColumns(p)
	kinds := make([]string, 0, len(bcols))
	for range p.Baseline {
		kinds = append(kinds, "baseline")
	}
	if p.Threshold != nil {
		kinds = append(kinds, "threshold")
	}
	for i, s := range bcols {
		addLine("b:"+s.Label, Line{Label: s.Label, Axis: s.Axis, Kind: kinds[i]})
	}
	rows, err = conn.Query(qctx, bq)
	if err != nil {
		return out, fmt.Errorf("panel %s: baseline query: %w", p.Name, err)
	}
	for rows.Next() {
		var t int64
		vals := make([]*float64, len(bcols))
		dest := []any{&t}
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return out, fmt.Errorf("panel %s: read baseline row: %w", p.Name, err)
		}
		for i, s := range bcols {
			pts = append(pts, point{t, "b:" + s.Label, clean(vals[i])})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("panel %s: baseline rows: %w", p.Name, err)
	}

	if p.HasQuery(panels.MarksQuery) {
		mq, err := statementSQL(p, panels.MarksQuery)
		if err != nil {
			return out, err
		}
		rows, err := conn.Query(qctx, mq)
		if err != nil {
			return out, fmt.Errorf("panel %s: marks query: %w", p.Name, err)
		}
		for rows.Next() {
			var m Mark
			if err := rows.Scan(&m.TS, &m.Text); err != nil {
				rows.Close()
				return out, fmt.Errorf("panel %s: read mark: %w", p.Name, err)
			}
			out.Marks = append(out.Marks, m)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return out, fmt.Errorf("panel %s: marks rows: %w", p.Name, err)
		}
	}

	// Align every line on the union of the timestamps (uPlot's data shape).
	times := map[int64]int{}
	for _, pt := range pts {
		times[pt.t] = 0
	}
	out.T = make([]int64, 0, len(times))
	for t := range times {
		out.T = append(out.T, t)
	}
	sort.Slice(out.T, func(i, j int) bool { return out.T[i] < out.T[j] })
	for i, t := range out.T {
		times[t] = i
	}
	idx := map[string]int{}
	for i, key := range order {
		l := meta[key]
		l.Values = make([]*float64, len(out.T))
		out.Lines = append(out.Lines, l)
		idx[key] = i
	}
	for _, pt := range pts {
		out.Lines[idx[pt.line]].Values[times[pt.t]] = pt.value
	}
	if out.Lines == nil {
		out.Lines = []Line{}
	}
	return out, nil
}

// Statement is one query the console runs to draw a panel.
type Statement struct {
	Kind panels.Kind
	// SQL is the panel's query of Kind wrapped to the columns the console scans; its query
	// parameters are the panel's Params for the view's Request.
	SQL string
}

// Statements are the queries the console runs, in this order, to draw p: its series, its
// baseline, and its marks when it has a marks query. Benchmarks time these very statements.
func Statements(p *panels.Panel) ([]Statement, error) {
	var out []Statement
	for _, k := range []panels.Kind{panels.SeriesQuery, panels.BaselineQuery, panels.MarksQuery} {
		if !p.HasQuery(k) {
			continue
		}
		q, err := statementSQL(p, k)
		if err != nil {
			return nil, err
		}
		out = append(out, Statement{Kind: k, SQL: q})
	}
	return out, nil
}

// statementSQL wraps the panel's query of kind k to the columns readPanel scans: the series as
// (t in Unix ms, split value, one Nullable(Float64) per series column), the baseline as (t, one
// per baseline and threshold column), the marks as (t, text).
func statementSQL(p *panels.Panel, k panels.Kind) (string, error) {
	q, err := p.SQL(k, panels.Console)
	if err != nil {
		return "", err
	}
	const t = "toUnixTimestamp64Milli(toDateTime64(t, 3, 'UTC'))"
	switch k {
	case panels.SeriesQuery:
		split := "''"
		if p.Split != "" {
			split = "toString(" + p.Split + ")"
		}
		return "SELECT " + t + ", " + split + ", " + floatColumns(p.Series) + " FROM (\n" + q + "\n)", nil
	case panels.BaselineQuery:
		return "SELECT " + t + ", " + floatColumns(baselineColumns(p)) + " FROM (\n" + q + "\n)", nil
	}
	return "SELECT " + t + ", toString(text) FROM (\n" + q + "\n)", nil
}

// baselineColumns are the baseline query's drawn columns: the baselines, then the threshold.
func baselineColumns(p *panels.Panel) []panels.Series {
	cols := append([]panels.Series{}, p.Baseline...)
	if p.Threshold != nil {
		cols = append(cols, *p.Threshold)
	}
	return cols
}

func floatColumns(cols []panels.Series) string {
	out := make([]string, len(cols))
	for i, s := range cols {
		out[i] = "CAST(" + s.Column + " AS Nullable(Float64))"
	}
	return strings.Join(out, ", ")
}

func clean(v *float64) *float64 {
	if v == nil || math.IsNaN(*v) || math.IsInf(*v, 0) {
		return nil
	}
	return v
}

// AlertRow is one alert's latest state (or one state change, on the alerts page).
type AlertRow struct {
	TS          time.Time         `json:"ts"`
	Rule        string            `json:"rule"`
	Fingerprint string            `json:"fingerprint"`
	State       string            `json:"state"`
	Severity    string            `json:"severity"`
	Value       *float64          `json:"value"`
	Baseline    *float64          `json:"baseline"`
	Threshold   *float64          `json:"threshold"`
	Labels      map[string]string `json:"labels"`
	Summary     string            `json:"summary"`
	Annotations map[string]string `json:"annotations,omitempty"`
	ActiveAt    *time.Time        `json:"active_at,omitempty"`
	FiredAt     *time.Time        `json:"fired_at,omitempty"`
	ResolvedAt  *time.Time        `json:"resolved_at,omitempty"`
	// Resolution is, for a resolved row, what the rule measured when the alert resolved (the
	// figures the row holds are its last firing evaluation's).
	Resolution *Resolution `json:"resolution,omitempty"`
	// DashHref is the dashboard at the row's moment; Requests the requests its labels or
	// annotations name (request_id, request_ids), linked to their pages.
	DashHref template.URL `json:"-"`
	Requests []reqLink    `json:"-"`
}

// reqLink is a request id and its page.
type reqLink struct {
	ID   string
	Href template.URL
}

// requestsOf are the requests an alert names — its request_id label or annotation, and its
// request_ids annotation (ids separated by commas or spaces), each once — linked to their pages
// in the view q.
func requestsOf(a *AlertRow, q template.URL) []reqLink {
	var out []reqLink
	seen := map[string]bool{}
	add := func(s string) {
		for _, id := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
			if requestview.CheckID(id) == nil && !seen[id] {
				seen[id] = true
				out = append(out, reqLink{ID: id, Href: RequestHref(id, time.Time{}, q)})
			}
		}
	}
	add(a.Labels["request_id"])
	add(a.Annotations["request_id"])
	add(a.Annotations["request_ids"])
	return out
}

// RuleState is the state of the rules watching a panel at the range's end: firing when one of
// their alerts fires, else pending, else ok; "none" when no rule watches the panel. InRange are
// their alerts that fired at some time in the range, drawn as marks and named by the badge.
type RuleState struct {
	Rules   []string         `json:"rules"`
	State   string           `json:"state"`
	Alerts  []AlertRow       `json:"alerts"`
	InRange []diagnose.Alert `json:"in_range"`
}

// firedOn keeps the alerts of the panel's rules (its own rule's under its rule_labels) that match
// the filters.
func firedOn(p *panels.Panel, fired []diagnose.Alert, filters map[string]string) []diagnose.Alert {
	out := []diagnose.Alert{}
	rules := append([]string{p.Rule}, p.AlsoRules...)
	for _, a := range fired {
		if !contains(rules, a.Rule) || (a.Rule == p.Rule && !labelsMatch(a.Labels, p.RuleLabels)) || !filtersMatch(a.Labels, filters) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// filtersMatch reports whether an alert's labels agree with the view's filters (a label the alert
// lacks, or an empty filter, agrees).
func filtersMatch(labels, filters map[string]string) bool {
	for k, v := range filters {
		// A label "all" (the label contract's value for an alert not about one model, app or
		// engine) matches every filter, as a missing label does.
		if lv, ok := labels[k]; ok && v != "" && lv != "" && lv != rules.ScopeAll && lv != v {
			return false
		}
	}
	return true
}

// latestAlerts reads every alert's latest row at or before at, of the given rules (all when
// empty): the detector keeps one row per state change, and an alert's state is its latest row.
func latestAlerts(ctx context.Context, conn driver.Conn, at time.Time, ruleNames []string) ([]AlertRow, error) {
	q := `
SELECT rule, fingerprint, r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8, r.9, r.10, r.11
FROM
(
    SELECT rule, fingerprint,
           argMax((ts, state, severity, value, baseline, threshold, labels, annotations,
                   active_at, fired_at, resolved_at), ts) AS r
    FROM alerts
    WHERE ts <= {at:DateTime64(6, 'UTC')} AND ts > {at:DateTime64(6, 'UTC')} - INTERVAL 365 DAY
      AND (empty({rules:Array(String)}) OR has({rules:Array(String)}, toString(rule)))
    GROUP BY rule, fingerprint
)
ORDER BY rule, fingerprint`
	ctx = chstore.WithParams(ctx, map[string]string{"at": chTime(at), "rules": arrayParam(ruleNames)})
	return scanAlerts(ctx, conn, q)
}

// alertHistory reads the state changes of [from, to], newest first, at most limit.
func alertHistory(ctx context.Context, conn driver.Conn, from, to time.Time, rule string, limit int) ([]AlertRow, error) {
	q := `
SELECT rule, fingerprint, ts, state, severity, value, baseline, threshold, labels, annotations,
       active_at, fired_at, resolved_at
FROM alerts
WHERE ts >= {from:DateTime64(6, 'UTC')} AND ts <= {to:DateTime64(6, 'UTC')}
  AND ({rule:String} = '' OR rule = {rule:String})
  AND state IN ('pending', 'firing', 'resolved')
ORDER BY ts DESC
LIMIT {limit:UInt32}`
	ctx = chstore.WithParams(ctx, map[string]string{"from": chTime(from), "to": chTime(to), "rule": chstore.StringParam(rule), "limit": fmt.Sprint(limit)})
	return scanAlerts(ctx, conn, q)
}

func scanAlerts(ctx context.Context, conn driver.Conn, q string) ([]AlertRow, error) {
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read alerts: %w", err)
	}
	defer rows.Close()
	out := []AlertRow{}
	for rows.Next() {
		var a AlertRow
		if err := rows.Scan(&a.Rule, &a.Fingerprint, &a.TS, &a.State, &a.Severity, &a.Value, &a.Baseline, &a.Threshold,
			&a.Labels, &a.Annotations, &a.ActiveAt, &a.FiredAt, &a.ResolvedAt); err != nil {
			return nil, fmt.Errorf("read alerts row: %w", err)
		}
		a.Summary = a.Annotations["summary"]
		a.Value, a.Baseline, a.Threshold = clean(a.Value), clean(a.Baseline), clean(a.Threshold)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read alerts rows: %w", err)
	}
	return out, nil
}

// ruleState picks, among the latest alerts, those of the panel's rules whose labels match the
// panel's rule_labels and the filters, and names the worst state.
func ruleState(p *panels.Panel, latest []AlertRow, filters map[string]string) RuleState {
	st := RuleState{Rules: []string{}, Alerts: []AlertRow{}, State: "none", InRange: []diagnose.Alert{}}
	if p.Rule == "" {
		return st
	}
	st.Rules = append([]string{p.Rule}, p.AlsoRules...)
	st.State = "ok"
	rank := map[string]int{"ok": 0, "pending": 1, "firing": 2}
	for _, a := range latest {
		if !contains(st.Rules, a.Rule) || (a.State != "firing" && a.State != "pending") {
			continue
		}
		if a.Rule == p.Rule && !labelsMatch(a.Labels, p.RuleLabels) {
			continue
		}
		if !filtersMatch(a.Labels, filters) {
			continue
		}
		st.Alerts = append(st.Alerts, a)
		if rank[a.State] > rank[st.State] {
			st.State = a.State
		}
	}
	return st
}

func labelsMatch(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Options are the filter values seen in a range.
type Options struct {
	Models  []string `json:"model"`
	Apps    []string `json:"app"`
	Engines []string `json:"engine"`
}

func readOptions(ctx context.Context, conn driver.Conn, from, to time.Time) (Options, error) {
	ctx = chstore.WithParams(ctx, map[string]string{"from": chTime(from), "to": chTime(to)})
	o := Options{}
	for _, q := range []struct {
		dst *[]string
		sql string
	}{
		{&o.Models, `SELECT DISTINCT toString(model) FROM requests WHERE arrival_ts >= {from:DateTime64(6, 'UTC')} AND arrival_ts < {to:DateTime64(6, 'UTC')} AND model != '' ORDER BY 1 LIMIT 200`},
		{&o.Apps, `SELECT DISTINCT toString(app) FROM app_records WHERE ts >= {from:DateTime64(6, 'UTC')} AND ts < {to:DateTime64(6, 'UTC')} AND app != '' ORDER BY 1 LIMIT 200`},
		{&o.Engines, `SELECT DISTINCT toString(engine) FROM engine_samples WHERE ts >= {from:DateTime64(6, 'UTC')} AND ts < {to:DateTime64(6, 'UTC')} AND engine != '' ORDER BY 1 LIMIT 200`},
	} {
		rows, err := conn.Query(ctx, q.sql)
		if err != nil {
			return o, fmt.Errorf("read filter values: %w", err)
		}
		*q.dst = []string{}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				rows.Close()
				return o, fmt.Errorf("read filter value: %w", err)
			}
			*q.dst = append(*q.dst, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return o, err
		}
	}
	return o, nil
}

func chTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }

// arrayParam writes a string list as a ClickHouse Array(String) parameter value.
func arrayParam(list []string) string {
	parts := make([]string, len(list))
	for i, s := range list {
		parts[i] = "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
	}
	return "[" + strings.Join(parts, ",") + "]"
}
