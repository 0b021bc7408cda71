// Package rules loads the detector's rules (SQL plus metadata, one YAML file each) and evaluates
// them against ClickHouse at an explicit evaluation time.
//
// A rule's query returns one row per label set with the columns
//
//	labels      Map(String, String)  what the alert is about (e.g. {'app': 'docs-qa'})
//	value       Float64              the window's figure
//	baseline    Nullable(Float64)    the same figure over the baseline period (NULL when unknown)
//	threshold   Float64              the limit value was compared with
//	firing      UInt8/Bool           1 when the row breaches the threshold
//	baseline_ok UInt8/Bool           0 when the baseline lacked data and an absolute floor was used
//	keep_firing UInt8/Bool           only with `hysteresis: true`: 1 while the row's resolve
//	                                 condition is not met (see Definition.Hysteresis)
//	details     Map(String, String)  optional: annotations of the alert that do not identify it
//	                                 (the oldest hung request's request_id, say)
//
// `servescope rules check` ([Check]) verifies these names in the query's text before ClickHouse
// sees it ([Contract]), and their types in a dry run.
//
// Every alert carries one label contract (docs/alerting.md): alertname (the rule), severity, and
// the scope labels model, app, engine and gateway ([ScopeLabels]), each present: a row's label, or
// "all" when the row does not narrow the alert to one (see the alerting package).
//
// Every value in the query is a ClickHouse query parameter ({name:Type}) bound by clickhouse-go; the
// only text expanded before the query is sent are the macros below, which produce SQL that itself
// refers to parameters:
//
//	{{window "col"}}    col in (now - window, now]
//	{{baseline "col"}}  col in the baseline period (internal/baseline: by default the 24 h ending
//	                    1 h before the window starts; or the same slice of earlier days)
//	{{poisson_tail "k" "lambda"}}  P(X >= k) for a Poisson count X of mean lambda (two columns)
//
// Parameters always bound: now, window_start, baseline_start, baseline_end (DateTime64(6, 'UTC')),
// window_s, baseline_slice_s and baseline_s (the baseline's total length; Int64 seconds), plus
// every entry of the rule's params.
package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/servescope/servescope/internal/baseline"
)

// Definition is one rule file: SQL plus the metadata that turns its rows into alerts.
type Definition struct {
	// Name identifies the rule; it becomes the alert's `alertname` label. Lower case, digits, '_'.
	Name string `yaml:"name"`
	// Severity is copied to the alert's `severity` label (e.g. "warning", "critical").
	Severity string `yaml:"severity"`
	// Interval is how often the rule is evaluated; zero means the detector's DETECTOR_INTERVAL.
	Interval Duration `yaml:"interval"`
	// Window is the length of the evaluated period ending at the evaluation time.
	Window Duration `yaml:"window"`
	// For is how long a row must keep firing before the alert fires (a hold; zero fires at once),
	// as Prometheus's `for`: the alert is pending until then, and a row that stops firing while
	// pending drops it without a notification.
	For Duration `yaml:"for"`
	// KeepFiringFor keeps a firing alert firing this long after its row stopped firing, as
	// Prometheus's `keep_firing_for`: a row that fires again within it continues the same alert
	// (same startsAt) instead of resolving it and opening a new one.
	KeepFiringFor Duration `yaml:"keep_firing_for"`
	// Hysteresis says the query also returns keep_firing: an alert already firing stays firing
	// while its row has keep_firing = 1 even though firing = 0, and resolves once both are 0.
	// keep_firing never starts an alert. It is for signals that oscillate around their firing
	// threshold (in flight back under a lower limit, not merely no longer rising), as Prometheus
	// rules write `x > 100 or (x > 80 and ALERTS{...})`.
	Hysteresis bool `yaml:"hysteresis"`
	// Labels are added to every alert of the rule (e.g. team: serving) for Alertmanager's routing;
	// they replace a row label of the same name. alertname and severity cannot be set here.
	Labels map[string]string `yaml:"labels"`
	// RunbookURL, when set, is the alerts' runbook_url annotation. Without it, a rule with a
	// Runbook links to the console's page of it (DETECTOR_CONSOLE_URL/runbooks/<rule>).
	RunbookURL string `yaml:"runbook_url"`
	// Runbook is what fired, how to confirm it, what to do and what not to do: the source of the
	// alerts' description, the console panel's Action and the runbook page (see [Runbook]). A
	// rule sets runbook or description, not both; every built-in rule has a runbook.
	Runbook *Runbook `yaml:"runbook"`
	// Baseline says which earlier period the window is compared with.
	Baseline Baseline `yaml:"baseline"`
	// Params are thresholds and other constants, bound as query parameters of the same name.
	Params map[string]any `yaml:"params"`
	// Summary and Description are text/template strings over [TemplateData]. Description is for
	// rules without a Runbook, whose action is the description.
	Summary     string `yaml:"summary"`
	Description string `yaml:"description"`
	// ResolvedSummary is the summary of a resolved alert, a text/template string over
	// [TemplateData] with Resolved set: what the value came back to (Value, NaN when the row is
	// gone: no data in the window), against FiredValue, the value at its last firing evaluation.
	// Empty: a generic text (DefaultResolvedSummary).
	ResolvedSummary string `yaml:"resolved_summary"`
	// Query is the SQL (see the package documentation for its contract).
	Query string `yaml:"query"`
	// Source is the file the rule was read from.
	Source string `yaml:"-"`
	// lines maps a key ("query", "params.ratio") to its line in Source, for errors.
	lines map[string]int
}

// Baseline describes the comparison period, as internal/baseline defines it for every part of
// servescope (docs/concepts.md, The baseline): by default the 24 h ending 1 h before the rule's
// window starts. With Days > 0 the baseline is instead the same slice of time (the window's
// length, or Slice) on each of the previous Days days, which follows daily seasonality.
type Baseline struct {
	// Length of the period (default 24h) and Offset, the gap before the window's start (default 1h).
	Length Duration `yaml:"length"`
	Offset Duration `yaml:"offset"`
	// Days and Slice select the same-time-of-day mode.
	Days  int      `yaml:"days"`
	Slice Duration `yaml:"slice"`
}

// Duration is a time.Duration read from YAML as a Go duration string ("30s", "24h").
type Duration time.Duration

// UnmarshalYAML parses a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: duration must be a string like \"30s\": %w", n.Line, err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Spec is the baseline as internal/baseline defines it.
func (b Baseline) Spec() baseline.Spec {
	return baseline.Spec{Length: b.Length.D(), Offset: b.Offset.D(), Days: b.Days, Slice: b.Slice.D()}
}

// Period is the baseline of the rule's window ending at the evaluation time ts.
func (d *Definition) Period(ts time.Time) baseline.Period {
	return d.Baseline.Spec().Of(ts.Add(-d.Window.D()), ts)
}

// MarshalYAML writes the duration as UnmarshalYAML reads it ("30s", "1h0m0s").
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// ScopeLabels are the labels every alert carries besides alertname and severity, naming what it
// is about; a row that does not narrow the alert to one value of a scope label gets ScopeAll.
var ScopeLabels = []string{"model", "app", "engine", "gateway"}

// ScopeAll is a scope label's value on an alert that is not about one model, app, engine or
// gateway: the rule does not split by it, or the row covers every value. Alertmanager drops labels
// with empty values, and its inhibit rules take two missing labels as equal, so "all" is written
// instead of leaving the label out.
const ScopeAll = "all"

// ScopeNone is the value a rule gives a scope label for the records that carry none (requests sent
// without an application name): not every app, and not one app either.
const ScopeNone = "none"

var (
	nameRE  = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	paramRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	// labelRE is Prometheus's label name syntax, which Alertmanager's matchers expect.
	labelRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// reservedParams are bound by the evaluator and may not be set in a rule's params.
var reservedParams = map[string]bool{
	"now": true, "window_start": true, "baseline_start": true, "baseline_end": true,
	"window_s": true, "baseline_slice_s": true, "baseline_s": true,
}

// FileError is a rule file's error with where it is: the file and, when known, the line of the
// YAML key it concerns (for an SQL error, the `query` key's line).
type FileError struct {
	// File is the rule file as it was named when loaded.
	File string
	// Line is 1-based; 0 when the error is about the file as a whole.
	Line int
	// Key is the YAML key the error concerns ("query", "params.ratio"), empty when unknown.
	Key string
	Err error
}

func (e *FileError) Error() string {
	where := "rule file " + e.File
	if e.Line > 0 {
		where += ":" + strconv.Itoa(e.Line)
	}
	if e.Key != "" {
		return where + ": " + e.Key + ": " + e.Err.Error()
	}
	return where + ": " + e.Err.Error()
}

func (e *FileError) Unwrap() error { return e.Err }

// keyError is a validation error about one YAML key; Parse turns it into a FileError with the
// key's line.
type keyError struct {
	key string
	// line, when set, is the file's line at fault inside the key's value (a query's line).
	line int
	err  error
}

func (e *keyError) Error() string { return e.key + ": " + e.err.Error() }

func keyErrorf(key, format string, args ...any) error {
	return &keyError{key: key, err: fmt.Errorf(format, args...)}
}

// yamlLineRE finds the line go-yaml puts in its messages ("yaml: line 3: ...", "line 3: field x
// not found").
var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// Parse reads one rule file. source names it in errors, which are [*FileError]s with the line
// and, when the fault is a key's, the key.
func Parse(source string, data []byte) (*Definition, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, syntaxError(source, data, err)
	}
	lines := keyLines(&root)
	var d Definition
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil {
		return nil, decodeError(source, lines, err)
	}
	d.Source = source
	d.lines = lines
	if err := d.validate(); err != nil {
		fe := &FileError{File: source, Err: err}
		var ke *keyError
		if errors.As(err, &ke) {
			fe.Key, fe.Err, fe.Line = ke.key, ke.err, d.Line(ke.key)
			if ke.line > 0 {
				fe.Line = ke.line
			}
		}
		return nil, fe
	}
	return &d, nil
}

// syntaxError places a YAML syntax error on the line at fault. go-yaml names the line where the
// construct around the fault began, counted from 0 (the line before an unclosed bracket's, a
// tab's or a block scalar's bad indentation), so the line is found again here: the first line
// from which every longer prefix of the file fails to parse. The error quotes that line.
func syntaxError(source string, data []byte, err error) *FileError {
	lines := strings.SplitAfter(string(data), "\n")
	line := 0
	for k := len(lines); k >= 1; k-- {
		var n yaml.Node
		if yaml.Unmarshal([]byte(strings.Join(lines[:k], "")), &n) == nil {
			break
		}
		line = k
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLineRE.FindStringSubmatchIndex(msg); m != nil && m[0] == 0 {
		msg = strings.TrimPrefix(msg[m[1]:], ": ")
	}
	fe := &FileError{File: source, Line: line, Err: fmt.Errorf("YAML: %s", msg)}
	if line > 0 && line <= len(lines) {
		fe.Err = fmt.Errorf("YAML: %s: %q", msg, strings.TrimRight(lines[line-1], "\r\n"))
	}
	return fe
}

// decodeError places an error of decoding the file into a Definition (an unknown key, a value of
// the wrong type) on its line, and names the key there.
func decodeError(source string, lines map[string]int, err error) *FileError {
	fe := &FileError{File: source, Err: err}
	msg := err.Error()
	if te, ok := err.(*yaml.TypeError); ok && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		fe.Line, _ = strconv.Atoi(m[1])
		msg = strings.TrimPrefix(strings.TrimPrefix(msg, m[0]), ": ")
	}
	for k, l := range lines {
		if strings.HasSuffix(k, textSuffix) {
			continue
		}
		if l == fe.Line && (fe.Key == "" || len(k) > len(fe.Key)) {
			fe.Key = k
		}
	}
	fe.Err = errors.New(msg)
	return fe
}

// QueryLine returns the file's line of line l (from 1) of the query's text, or the query key's
// line when that is unknown.
func (d *Definition) QueryLine(l int) int {
	if first, ok := d.lines["query"+textSuffix]; ok && l > 0 {
		return first + l - 1
	}
	return d.Line("query")
}

// Line returns the line of a key of the rule's file ("query", "params.ratio"; a nested key falls
// back to its parent's line), or 0 when the rule did not come from Parse.
func (d *Definition) Line(key string) int {
	for k := key; k != ""; {
		if l, ok := d.lines[k]; ok {
			return l
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return 0
}

// textSuffix marks, in a Definition's lines, the line where a top-level key's text starts
// ("query" + textSuffix).
const textSuffix = "#text"

// keyLines maps the document's top-level keys, and the keys of its mappings one level down
// ("params.ratio"), to their lines, and each top-level key + textSuffix to the line its value's
// text starts on.
func keyLines(root *yaml.Node) map[string]int {
	lines := map[string]int{}
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode {
		return lines
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		lines[k.Value] = k.Line
		// Where a scalar's text starts: the line after `|` or `>` for a block scalar.
		first := v.Line
		if v.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
			first++
		}
		lines[k.Value+textSuffix] = first
		if v.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(v.Content); j += 2 {
				lines[k.Value+"."+v.Content[j].Value] = v.Content[j].Line
			}
		}
	}
	return lines
}

func (d *Definition) validate() error {
	if !nameRE.MatchString(d.Name) {
		return keyErrorf("name", "%q must match %s", d.Name, nameRE)
	}
	if d.Window <= 0 {
		return keyErrorf("window", "rule %s: window must be positive", d.Name)
	}
	for key, v := range map[string]Duration{"interval": d.Interval, "for": d.For, "keep_firing_for": d.KeepFiringFor} {
		if v < 0 {
			return keyErrorf(key, "rule %s: interval, for and keep_firing_for must not be negative", d.Name)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(d.Labels)) {
		if !labelRE.MatchString(k) || strings.HasPrefix(k, "__") {
			return keyErrorf("labels."+k, "rule %s: label name %q: must match %s and not start with __", d.Name, k, labelRE)
		}
		if k == "alertname" || k == "severity" {
			return keyErrorf("labels."+k, "rule %s: label %s is set from the rule's name and severity, not from labels", d.Name, k)
		}
	}
	if d.RunbookURL != "" {
		if u, err := url.Parse(d.RunbookURL); err != nil || u.Scheme == "" || u.Host == "" {
			return keyErrorf("runbook_url", "rule %s: runbook_url %q: want an absolute URL", d.Name, d.RunbookURL)
		}
	}
	if d.Baseline.Length == 0 {
		d.Baseline.Length = Duration(baseline.Default.Length)
	}
	if d.Baseline.Offset == 0 {
		d.Baseline.Offset = Duration(baseline.Default.Offset)
	}
	if d.Baseline.Slice == 0 {
		d.Baseline.Slice = d.Window
	}
	if d.Baseline.Days < 0 || d.Baseline.Length < 0 || d.Baseline.Offset < 0 {
		return keyErrorf("baseline", "rule %s: baseline days, length and offset must not be negative", d.Name)
	}
	if d.Baseline.Days > 0 && d.Baseline.Slice.D() >= 24*time.Hour {
		return keyErrorf("baseline.slice", "rule %s: baseline slice must be shorter than a day", d.Name)
	}
	if d.Severity == "" {
		d.Severity = "warning"
	}
	for _, k := range slices.Sorted(maps.Keys(d.Params)) {
		v := d.Params[k]
		if !paramRE.MatchString(k) || reservedParams[k] {
			return keyErrorf("params."+k, "rule %s: parameter name %q is not allowed", d.Name, k)
		}
		switch v.(type) {
		case int, int64, float64, string, bool:
		default:
			return keyErrorf("params."+k, "rule %s: parameter %s: want a number, string or bool, got %T", d.Name, k, v)
		}
	}
	if strings.TrimSpace(d.Query) == "" {
		return keyErrorf("query", "rule %s: query is empty", d.Name)
	}
	q, err := d.expandQuery()
	if err != nil {
		return &keyError{key: "query", err: err}
	}
	if err := d.checkParams(q); err != nil {
		return err
	}
	if d.Runbook != nil {
		if d.Description != "" {
			return keyErrorf("description", "rule %s: the description is the runbook's action: set runbook or description, not both", d.Name)
		}
		if err := d.Runbook.validate(); err != nil {
			return err
		}
	}
	return d.checkTemplates()
}

// checkParams checks each query parameter against params: a {name:Type} that no parameter (and
// no bound value) sets is placed on its line of the query, and a parameter whose value the type
// cannot take on its own key (a string where the query reads a Float64), not on the query.
func (d *Definition) checkParams(q string) error {
	for _, p := range placeholders(q) {
		v, ok := d.Params[p.name]
		if !ok {
			if reservedParams[p.name] {
				continue
			}
			return &keyError{key: "query", line: d.QueryLine(p.line), err: fmt.Errorf(
				"rule %s: {%s:%s} names no parameter: add %s to params (set: %s)", d.Name, p.name, p.typ, p.name, paramNames(d.Params))}
		}
		if ok, want := paramFits(v, p.typ); !ok {
			return keyErrorf("params."+p.name, "rule %s: parameter %s is %v, but the query reads it as %s (its line %d): want %s",
				d.Name, p.name, v, p.typ, d.QueryLine(p.line), want)
		}
	}
	return nil
}

func paramNames(params map[string]any) string {
	if len(params) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(params)), ", ")
}

// checkTemplates parses the summary and description and renders them for sample rows (with and
// without labels, a known and an unknown baseline), so that a misspelt field (.Valeu) or a
// function misused is refused when the file is loaded, not when the alert first fires.
func (d *Definition) checkTemplates() error {
	samples := []Sample{
		{Labels: map[string]string{}, Value: 1, Baseline: math.NaN(), Threshold: 1, Firing: true},
		{Labels: map[string]string{"model": "m", "app": "a"}, Value: 0.5, Baseline: 0.25, Threshold: 0.4, Firing: true, BaselineOK: true},
	}
	for _, t := range []struct{ name, text string }{{"summary", d.Summary}, {"description", d.Description}} {
		for _, s := range samples {
			if _, err := d.render(t.name, t.text, s); err != nil {
				return &keyError{key: t.name, err: err}
			}
		}
	}
	for _, s := range samples {
		for _, current := range []*Sample{&s, nil} {
			if _, err := d.RenderResolved(s.Labels, current, s.Value); err != nil {
				return &keyError{key: "resolved_summary", err: err}
			}
		}
	}
	return nil
}

// expandQuery applies the macros. Only SQL text with parameter references is produced.
func (d *Definition) expandQuery() (string, error) {
	t, err := template.New(d.Name).Option("missingkey=error").Funcs(template.FuncMap{
		"window": func(col string) (string, error) {
			if err := checkColumn(col); err != nil {
				return "", err
			}
			return fmt.Sprintf("(%[1]s > {window_start:DateTime64(6, 'UTC')} AND %[1]s <= {now:DateTime64(6, 'UTC')})", col), nil
		},
		"baseline": func(col string) (string, error) {
			if err := checkColumn(col); err != nil {
				return "", err
			}
			s := fmt.Sprintf("(%[1]s > {baseline_start:DateTime64(6, 'UTC')} AND %[1]s <= {baseline_end:DateTime64(6, 'UTC')}", col)
			if d.Baseline.Days > 0 {
				s += fmt.Sprintf(" AND modulo(dateDiff('second', %s, {now:DateTime64(6, 'UTC')}), 86400) <= {baseline_slice_s:Int64}", col)
			}
			return s + ")", nil
		},
		// poisson_tail is P(X >= k) for a Poisson count X of mean lambda (two column names), in
		// log space so that large counts stay finite: the chance that the baseline's own rate puts
		// k events into the window. A short window holds few requests, where a share of 3x the
		// baseline's is a few events more than expected and happens by chance every few hours.
		"poisson_tail": func(k, lambda string) (string, error) {
			for _, col := range []string{k, lambda} {
				if err := checkColumn(col); err != nil {
					return "", err
				}
			}
			return fmt.Sprintf("(1 - arraySum(arrayMap(i -> exp(i * log(greatest(%[2]s, 1e-300)) - %[2]s - lgamma(i + 1)), range(toUInt64(%[1]s)))))", k, lambda), nil
		},
	}).Parse(d.Query)
	if err != nil {
		return "", fmt.Errorf("rule %s: query template: %w", d.Name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, nil); err != nil {
		return "", fmt.Errorf("rule %s: query template: %w", d.Name, err)
	}
	return b.String(), nil
}

var columnRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

func checkColumn(col string) error {
	if !columnRE.MatchString(col) {
		return fmt.Errorf("macro argument %q is not a column name", col)
	}
	return nil
}

// ParseFile reads and parses one rule file from disk.
func ParseFile(path string) (*Definition, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &FileError{File: path, Err: err}
	}
	return Parse(path, data)
}

// Load reads every *.yaml / *.yml file directly in dir of fsys, sorted by name.
func Load(fsys fs.FS, dir string) ([]*Definition, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read rules directory %s: %w", dir, err)
	}
	var defs []*Definition
	for _, e := range entries {
		if e.IsDir() || !(strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
			continue
		}
		p := path.Join(dir, e.Name())
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("read rule file %s: %w", p, err)
		}
		d, err := Parse(p, data)
		if err != nil {
			return nil, err
		}
		defs = append(defs, d)
	}
	return defs, nil
}

// Merge combines rule sets; a later set's rule replaces an earlier one of the same name (so a user
// directory can override a built-in rule). The result is sorted by name.
func Merge(sets ...[]*Definition) []*Definition {
	byName := map[string]*Definition{}
	for _, set := range sets {
		for _, d := range set {
			byName[d.Name] = d
		}
	}
	out := make([]*Definition, 0, len(byName))
	for _, d := range byName {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
