// Package panels reads the console's panel definitions (deploy/console/panels/*.yaml) and renders
// their SQL for the two places that draw them: the console, which binds every value as a
// ClickHouse query parameter, and the Grafana dashboard, whose ClickHouse data source expands its
// own macros. One file holds a panel's SQL, its baseline and threshold, the "alert when" text, the
// detector rule that watches it and the action it calls for, so the two cannot drift apart.
//
// A panel file:
//
//	name: ttft                      # lower case, digits, '_'
//	row: TTFT, TPOT, E2E - p50 and p95   # the row of the minimal dashboard (docs/measurements.md) it belongs to
//	title: TTFT - time to first token
//	unit: s                         # s, requests, share (a fraction 0..1), score, tokens, tokens_per_s,
//	                                # requests_per_s, ratio (a multiple, ×) or usd (money); unit_right for axis right
//	split: engine                   # optional: the column naming each series of long-form rows
//	stack: true                     # optional: stacked areas
//	rule: latency_p95               # optional: the detector rule watching it (its params, window, baseline)
//	rule_labels: {metric: ttft_s}   # optional: which of the rule's alerts are this panel's
//	also_rules: [...]               # optional: other rules whose alerts concern it
//	alert_when: text/template over the rule: .Params, .Window, .For, pct
//	why: ...
//	action: ...                     # only without a rule: a watched panel's action is its rule's
//	                                # runbook action (for rule_labels), one text with the alerts'
//	                                # description and the runbook page
//	series: [{column: p95, label: p95, axis: right}]   # the query's value columns
//	query: SQL returning t (the interval's start), [the split column], the series columns
//	baseline: [{column: base_p95, label: baseline p95}]
//	threshold: {column: threshold, label: alert above}
//	baseline_query: SQL returning t and the baseline and threshold columns at the range's two ends
//	marks_query: optional SQL returning t and text: moments marked on the time axis
//
// The SQL uses macros (Go templates) that each target renders:
//
//	{{period "col"}}       col in [from, to)                      Grafana: $__timeFilter(col)
//	{{bucket "col"}}       the start of col's interval            Grafana: $__timeInterval(col)
//	{{bucket_of_from}}     the start of the first interval
//	{{from}}, {{to}}       the range's ends                       Grafana: $__fromTime, $__toTime
//	{{ends}}               [from, to], for ARRAY JOIN
//	{{filter "col" "var"}} col = the model/app/engine filter, or true when it is empty
//	{{param "name"}}       the watching rule's parameter         Grafana: its value, written in
//	{{baseline "col"}}     col in the range's baseline period (internal/baseline: the 24 h ending
//	                       1 h before the range starts), the period diagnose and the complaint
//	                       pages compare the same range with
//	{{baseline_s}}         the baseline's length in seconds
//	{{figure "key" "expr"}}  a baseline figure that the complaint pages' table also shows (key is
//	                       its diagnose quantity, e.g. ttft_s_p95): in the console diagnose's own
//	                       figure for the range's baseline (NULL when it has none), so that a panel
//	                       and the table never show two numbers for one quantity; in Grafana, and
//	                       in the console under an app or engine filter (diagnose reads all apps
//	                       and engines), the SQL expression expr over the baseline rows
//	{{baseline_from}}, {{baseline_to}}  the baseline period's ends, for a parameterized view's
//	                       range (the period {{baseline}} selects)
//	{{step_s}}             the length of an interval in seconds      Grafana: $__interval_s
//
// In the console every value is a query parameter ({from:DateTime64(6, 'UTC')}, {f_model:String},
// {p_ratio:Float64}, ...): no filter or parameter is ever spliced into the SQL text.
package panels

import (
	"bytes"
	"fmt"
	"io/fs"
	"math"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/servescope/servescope/internal/baseline"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/services/detector/rules"
)

// Series is one drawn column.
type Series struct {
	// Column is the query's column holding the values.
	Column string `yaml:"column"`
	// Label is the legend's name.
	Label string `yaml:"label"`
	// Axis is "" (left) or "right".
	Axis string `yaml:"axis"`
}

// Definition is one panel file.
type Definition struct {
	Name       string            `yaml:"name"`
	Row        string            `yaml:"row"`
	Title      string            `yaml:"title"`
	Unit       string            `yaml:"unit"`
	UnitRight  string            `yaml:"unit_right"`
	Split      string            `yaml:"split"`
	Stack      bool              `yaml:"stack"`
	Rule       string            `yaml:"rule"`
	RuleLabels map[string]string `yaml:"rule_labels"`
	AlsoRules  []string          `yaml:"also_rules"`
	AlertWhen  string            `yaml:"alert_when"`
	Why        string            `yaml:"why"`
	Action     string            `yaml:"action"`
	Series     []Series          `yaml:"series"`
	Query      string            `yaml:"query"`
	Baseline   []Series          `yaml:"baseline"`
	Threshold  *Series           `yaml:"threshold"`
	// BaselineQuery returns the baseline and threshold columns at t = from and t = to.
	BaselineQuery string `yaml:"baseline_query"`
	MarksQuery    string `yaml:"marks_query"`
	// Source is the file the panel was read from.
	Source string `yaml:"-"`
}

// Panel is a definition bound to the detector rule that watches it.
type Panel struct {
	Definition
	// RuleDef is the watching rule (nil when none does); its params, window and baseline are the
	// ones the detector uses.
	RuleDef *rules.Definition
	// AlertWhenText is alert_when rendered with the rule's values.
	AlertWhenText string
	// figures are the keys of its {{figure}} macros, in order of appearance.
	figures []string
}

// Kind selects one of a panel's queries.
type Kind int

const (
	// SeriesQuery is the panel's main query.
	SeriesQuery Kind = iota
	// BaselineQuery returns the baseline and the threshold.
	BaselineQuery
	// MarksQuery returns the moments marked on the time axis.
	MarksQuery
)

func (k Kind) String() string {
	return [...]string{"series", "baseline", "marks"}[k]
}

// Target is where the SQL runs.
type Target int

const (
	// Console binds every value as a ClickHouse query parameter.
	Console Target = iota
	// Grafana writes the grafana-clickhouse-datasource macros and dashboard variables.
	Grafana
)

// Filters are the dashboard's filters; an empty one matches everything.
var Filters = []string{"model", "app", "engine"}

var (
	nameRE  = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)
	units   = map[string]bool{"s": true, "requests": true, "share": true, "score": true, "tokens": true, "tokens_per_s": true, "requests_per_s": true, "ratio": true, "usd": true}
)

// Load reads every *.yaml file directly in dir of fsys, sorted by name (the console's order), and
// binds each to its rule among defs.
func Load(fsys fs.FS, dir string, defs []*rules.Definition) ([]*Panel, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read panels directory %s: %w", dir, err)
	}
	byName := map[string]*rules.Definition{}
	for _, d := range defs {
		byName[d.Name] = d
	}
	var out []*Panel
	seen := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		p := path.Join(dir, e.Name())
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("read panel file %s: %w", p, err)
		}
		pn, err := Parse(p, data, byName)
		if err != nil {
			return nil, err
		}
		if seen[pn.Name] {
			return nil, fmt.Errorf("panel file %s: a panel named %s exists already", p, pn.Name)
		}
		seen[pn.Name] = true
		out = append(out, pn)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("panels directory %s holds no panel", dir)
	}
	return out, nil
}

// Parse reads one panel file; rulesByName resolves its rule.
func Parse(source string, data []byte, rulesByName map[string]*rules.Definition) (*Panel, error) {
	var d Definition
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("panel file %s: %w", source, err)
	}
	d.Source = source
	p := &Panel{Definition: d}
	if err := p.bind(rulesByName); err != nil {
		return nil, fmt.Errorf("panel file %s: %w", source, err)
	}
	return p, nil
}

func (p *Panel) bind(rulesByName map[string]*rules.Definition) error {
	if !nameRE.MatchString(p.Name) {
		return fmt.Errorf("name %q: must match %s", p.Name, nameRE)
	}
	if p.Title == "" || p.Row == "" || p.AlertWhen == "" || p.Why == "" {
		return fmt.Errorf("panel %s: title, row, alert_when and why are required", p.Name)
	}
	if !units[p.Unit] || (p.UnitRight != "" && !units[p.UnitRight]) {
		return fmt.Errorf("panel %s: unit %q, unit_right %q: want s, requests, share, score, tokens, tokens_per_s, requests_per_s, ratio or usd", p.Name, p.Unit, p.UnitRight)
	}
	if p.Rule != "" {
		p.RuleDef = rulesByName[p.Rule]
		if p.RuleDef == nil {
			return fmt.Errorf("panel %s: rule %s is not a detector rule", p.Name, p.Rule)
		}
	}
	for _, r := range p.AlsoRules {
		if rulesByName[r] == nil {
			return fmt.Errorf("panel %s: also_rules: %s is not a detector rule", p.Name, r)
		}
	}
	switch {
	case p.RuleDef != nil && p.Action != "":
		return fmt.Errorf("panel %s: action: the action of a panel a rule watches is the rule's runbook action "+
			"(rule %s, %s): remove it here and write it there", p.Name, p.Rule, p.RuleDef.Source)
	case p.RuleDef != nil:
		p.Action = ruleAction(p.RuleDef, p.RuleLabels)
	case strings.TrimSpace(p.Action) == "":
		return fmt.Errorf("panel %s: action is required for a panel no rule watches", p.Name)
	}
	if len(p.Series) == 0 || strings.TrimSpace(p.Query) == "" {
		return fmt.Errorf("panel %s: series and query are required", p.Name)
	}
	if strings.TrimSpace(p.BaselineQuery) == "" || len(p.Baseline) == 0 {
		return fmt.Errorf("panel %s: every panel draws its baseline: baseline and baseline_query are required", p.Name)
	}
	cols := append(append([]Series{}, p.Series...), p.Baseline...)
	if p.Threshold != nil {
		cols = append(cols, *p.Threshold)
	}
	for _, s := range cols {
		if !identRE.MatchString(s.Column) || s.Label == "" || (s.Axis != "" && s.Axis != "right") {
			return fmt.Errorf("panel %s: series %q: want a column name, a label and axis \"\" or right", p.Name, s.Column)
		}
	}
	if p.Split != "" && !identRE.MatchString(p.Split) {
		return fmt.Errorf("panel %s: split %q is not a column name", p.Name, p.Split)
	}
	for _, k := range []Kind{SeriesQuery, BaselineQuery, MarksQuery} {
		for _, t := range []Target{Console, Grafana} {
			if _, err := p.render(k, t, func(key string) {
				if !contains(p.figures, key) {
					p.figures = append(p.figures, key)
				}
			}); err != nil {
				return err
			}
		}
	}
	text, err := p.renderAlertWhen()
	if err != nil {
		return err
	}
	p.AlertWhenText = text
	return nil
}

// ruleAction is the action of the alerts of def with labels: its runbook's action for them, or,
// for a rule without a runbook (a user's rule), its description rendered for such a row.
func ruleAction(def *rules.Definition, labels map[string]string) string {
	if def.Runbook != nil {
		return def.Runbook.ActionFor(labels)
	}
	_, desc, err := def.Render(rules.Sample{Labels: labels, Value: math.NaN(), Baseline: math.NaN(), Threshold: math.NaN(), Firing: true, BaselineOK: true})
	if err != nil || strings.TrimSpace(desc) == "" {
		return "See rule " + def.Name + " (" + def.Source + "): it has no runbook."
	}
	return desc
}

// Window is the watching rule's window (0 without a rule).
func (p *Panel) Window() time.Duration {
	if p.RuleDef == nil {
		return 0
	}
	return p.RuleDef.Window.D()
}

func (p *Panel) renderAlertWhen() (string, error) {
	data := struct {
		Params      map[string]any
		Window, For string
	}{Params: map[string]any{}}
	if r := p.RuleDef; r != nil {
		data.Params, data.Window, data.For = r.Params, shortDuration(r.Window.D()), shortDuration(r.For.D())
		if r.For == 0 {
			data.For = "at once"
		}
	}
	t, err := template.New(p.Name).Option("missingkey=error").Funcs(template.FuncMap{
		"pct": func(v any) string {
			f, _ := toFloat(v)
			return strconv.FormatFloat(f*100, 'f', -1, 64) + "%"
		},
	}).Parse(p.AlertWhen)
	if err != nil {
		return "", fmt.Errorf("panel %s: alert_when template: %w", p.Name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("panel %s: alert_when template: %w", p.Name, err)
	}
	return strings.Join(strings.Fields(b.String()), " "), nil
}

// shortDuration prints 10m0s as 10m and 1h0m0s as 1h.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return math.NaN(), false
}

func (p *Panel) text(k Kind) string {
	switch k {
	case BaselineQuery:
		return p.BaselineQuery
	case MarksQuery:
		return p.MarksQuery
	}
	return p.Query
}

// HasQuery reports whether the panel has a query of kind k.
func (p *Panel) HasQuery(k Kind) bool { return strings.TrimSpace(p.text(k)) != "" }

// console's placeholders.
const (
	chFrom = "{from:DateTime64(6, 'UTC')}"
	chTo   = "{to:DateTime64(6, 'UTC')}"
	chStep = "{step_s:UInt32}"
	// The range's baseline period, bound from Request.Baseline.
	chBaseFrom = "{b_from:DateTime64(6, 'UTC')}"
	chBaseTo   = "{b_to:DateTime64(6, 'UTC')}"
)

// SQL renders the panel's query of kind k for target t. The console's SQL refers only to query
// parameters (see Params); Grafana's to the data source's macros, the dashboard variables model,
// app and engine, and the rule's parameter values.
func (p *Panel) SQL(k Kind, t Target) (string, error) { return p.render(k, t, nil) }

// render is SQL, calling figure with the key of each {{figure}} macro it expands.
func (p *Panel) render(k Kind, t Target, figure func(key string)) (string, error) {
	text := p.text(k)
	if strings.TrimSpace(text) == "" {
		return "", nil
	}
	col := func(c string) error {
		if !identRE.MatchString(c) {
			return fmt.Errorf("panel %s: macro argument %q is not a column name", p.Name, c)
		}
		return nil
	}
	b := baseline.Default
	funcs := template.FuncMap{
		"from": func() string { return pick(t, chFrom, "$__fromTime") },
		"to":   func() string { return pick(t, chTo, "$__toTime") },
		"ends": func() string {
			return "[" + pick(t, chFrom, "$__fromTime") + ", " + pick(t, chTo, "$__toTime") + "]"
		},
		"period": func(c string) (string, error) {
			if err := col(c); err != nil {
				return "", err
			}
			if t == Grafana {
				return "$__timeFilter(" + c + ")", nil
			}
			return fmt.Sprintf("(%[1]s >= %[2]s AND %[1]s < %[3]s)", c, chFrom, chTo), nil
		},
		"bucket": func(c string) (string, error) {
			if err := col(c); err != nil {
				return "", err
			}
			if t == Grafana {
				return "$__timeInterval(" + c + ")", nil
			}
			return fmt.Sprintf("toStartOfInterval(%s, toIntervalSecond(%s))", c, chStep), nil
		},
		"bucket_of_from": func() string {
			if t == Grafana {
				return "toStartOfInterval(toDateTime($__fromTime), INTERVAL $__interval_s second)"
			}
			return fmt.Sprintf("toStartOfInterval(%s, toIntervalSecond(%s))", chFrom, chStep)
		},
		"filter": func(c, name string) (string, error) {
			if err := col(c); err != nil {
				return "", err
			}
			if !contains(Filters, name) {
				return "", fmt.Errorf("panel %s: filter %q: want one of %v", p.Name, name, Filters)
			}
			if t == Grafana {
				// A dashboard variable with format sqlstring is quoted and escaped by Grafana; its
				// "All" value is the custom all value '' written as is (see the generator).
				v := "${" + name + ":sqlstring}"
				return fmt.Sprintf("(%[2]s = '' OR %[1]s = %[2]s)", c, v), nil
			}
			v := "{f_" + name + ":String}"
			return fmt.Sprintf("(%[2]s = '' OR %[1]s = %[2]s)", c, v), nil
		},
		"param": func(name string) (string, error) {
			if p.RuleDef == nil {
				return "", fmt.Errorf("panel %s: {{param %q}} without a rule", p.Name, name)
			}
			v, ok := p.RuleDef.Params[name]
			if !ok {
				return "", fmt.Errorf("panel %s: rule %s has no parameter %s", p.Name, p.Rule, name)
			}
			if t == Grafana {
				return literal(v), nil
			}
			return "{p_" + name + ":" + chType(v) + "}", nil
		},
		"baseline": func(c string) (string, error) {
			if err := col(c); err != nil {
				return "", err
			}
			if t == Grafana {
				// The same period as the console's, from the dashboard's range start.
				end := int64(b.Offset / time.Second)
				return fmt.Sprintf("(%[1]s >= $__fromTime - INTERVAL %[2]d SECOND AND %[1]s < $__fromTime - INTERVAL %[3]d SECOND)",
					c, end+int64(b.Length/time.Second), end), nil
			}
			return fmt.Sprintf("(%[1]s >= %[2]s AND %[1]s < %[3]s)", c, chBaseFrom, chBaseTo), nil
		},
		"baseline_s": func() string { return strconv.FormatInt(int64(b.Length/time.Second), 10) },
		"figure": func(key, expr string) (string, error) {
			if !nameRE.MatchString(key) {
				return "", fmt.Errorf("panel %s: figure %q: want a quantity key (lower case, digits, '_')", p.Name, key)
			}
			if figure != nil {
				figure(key)
			}
			if t == Grafana {
				return "(" + expr + ")", nil
			}
			// "+ 0 * count()" keeps the column an aggregate when ClickHouse folds the constant
			// condition: `if(1, const, avg(x))` alone is `const`, a column of every row, not one.
			return fmt.Sprintf("(if({figures:UInt8} = 1, {bf_%s:Nullable(Float64)}, (%s)) + 0 * count())", key, expr), nil
		},
		"baseline_from": func() string {
			if t == Grafana {
				return fmt.Sprintf("($__fromTime - INTERVAL %d SECOND)", int64((b.Offset+b.Length)/time.Second))
			}
			return chBaseFrom
		},
		"baseline_to": func() string {
			if t == Grafana {
				return fmt.Sprintf("($__fromTime - INTERVAL %d SECOND)", int64(b.Offset/time.Second))
			}
			return chBaseTo
		},
		"step_s": func() string { return pick(t, chStep, "$__interval_s") },
	}
	tpl, err := template.New(p.Name).Option("missingkey=error").Funcs(funcs).Parse(text)
	if err != nil {
		return "", fmt.Errorf("panel %s: %s query: %w", p.Name, k, err)
	}
	var buf bytes.Buffer
	if err := tpl.Execute(&buf, nil); err != nil {
		return "", fmt.Errorf("panel %s: %s query: %w", p.Name, k, err)
	}
	return buf.String(), nil
}

// Figures are the keys of the baseline figures the panel's queries take from diagnose ({{figure}}).
func (p *Panel) Figures() []string { return p.figures }

func pick(t Target, console, grafana string) string {
	if t == Grafana {
		return grafana
	}
	return console
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func chType(v any) string {
	switch v.(type) {
	case int, int64:
		return "Int64"
	case float64:
		return "Float64"
	case bool:
		return "Bool"
	}
	return "String"
}

// literal writes a rule parameter as a ClickHouse literal for the Grafana dashboard: numbers as
// they are, strings quoted (a rule file's value, never a user's input).
func literal(v any) string {
	switch x := v.(type) {
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		if x {
			return "true"
		}
		return "false"
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(fmt.Sprint(v)) + "'"
}

// Request is what the console's reader asks for.
type Request struct {
	From, To time.Time
	// Step is the interval of the buckets (at least a second).
	Step time.Duration
	// Filters maps model, app and engine to a value ("" or absent: all).
	Filters map[string]string
	// Baseline is the range's baseline period; the zero value is baseline.Default's.
	Baseline baseline.Period
	// Figures, when not nil, are diagnose's baseline figures for Baseline under the model
	// filter, by quantity key (nil value: the baseline holds none of it); {{figure}} draws them.
	// Nil: the SQL expressions of {{figure}} are used instead.
	Figures map[string]*float64
}

// BaselinePeriod is r.Baseline, or baseline.Default's period of r's range when it is unset.
func (r Request) BaselinePeriod() baseline.Period {
	if r.Baseline.To.IsZero() {
		return baseline.Default.Of(r.From, r.To)
	}
	return r.Baseline
}

// Params are the ClickHouse query parameters of the console's SQL for r: the range, the step,
// its baseline period (b_from, b_to), every filter (f_model, f_app, f_engine), every rule
// parameter (p_<name>) and the baseline figures (figures, bf_<key>).
func (p *Panel) Params(r Request) map[string]string {
	step := int64(r.Step / time.Second)
	if step < 1 {
		step = 1
	}
	b := r.BaselinePeriod()
	out := map[string]string{
		"from":   chTime(r.From),
		"to":     chTime(r.To),
		"step_s": strconv.FormatInt(step, 10),
		"b_from": chTime(b.From),
		"b_to":   chTime(b.To),
	}
	out["figures"] = "0"
	if r.Figures != nil {
		out["figures"] = "1"
	}
	for _, key := range p.figures {
		out["bf_"+key] = `\N`
		if v := r.Figures[key]; v != nil && !math.IsNaN(*v) && !math.IsInf(*v, 0) {
			out["bf_"+key] = strconv.FormatFloat(*v, 'g', -1, 64)
		}
	}
	for _, f := range Filters {
		out["f_"+f] = chstore.StringParam(r.Filters[f])
	}
	if p.RuleDef != nil {
		keys := make([]string, 0, len(p.RuleDef.Params))
		for k := range p.RuleDef.Params {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out["p_"+k] = paramText(p.RuleDef.Params[k])
		}
	}
	return out
}

func chTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }

func paramText(v any) string {
	switch x := v.(type) {
	case bool:
		if x {
			return "1"
		}
		return "0"
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}
