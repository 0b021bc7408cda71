// Package slo reads service level objectives (one YAML file each, beside the detector's rule
// files), generates from each the Google SRE workbook's multi-window, multi-burn-rate alert rules
// as detector rules (services/detector/rules Definitions, evaluated by the same engine as the
// built-in rules), and writes the objectives into ClickHouse's slo_objectives table, where the
// view slo_requests_window (migrations/000040) judges every request by one definition
// (docs/slo.md).
//
// An SLO file:
//
//	name: chat                      # lower case, digits, '_'; the rules are slo_<name>_page and _ticket
//	description: chat answers
//	selector:                       # optional; an empty field matches every request
//	  model: Qwen/Qwen2.5-7B-Instruct-AWQ
//	  app: docs-qa                  # the request's app (its X-Servescope-App header)
//	  endpoint: /v1/chat/completions
//	  stream: true                  # streamed requests only (false: only those answered in one body)
//	period: 28d                     # the error budget's period (whole days; default 28d)
//	objectives:                     # at least one
//	  ttft: {p95: 1s}               # a quantile: 95 % of requests at or under 1 s ...
//	  tpot: {under: 50ms, target: 99%}   # ... or a share of requests at or under a threshold
//	  e2e:  {under: 30s, target: 0.99}
//	  availability: {target: 99.5%} # requests without a 5xx, a 429, a broken stream or an engine error
//	alerts:                         # optional: the workbook's windows are the default
//	  page:   [{long: 1h, short: 5m, factor: 14.4}, {long: 6h, short: 30m, factor: 6}]
//	  ticket: [{long: 1d, short: 2h, factor: 3}, {long: 3d, short: 6h, factor: 1}]
//	  page_severity: critical       # default critical; ticket_severity default warning
//	  min_bad: 3                    # bad requests the short window must hold (1: the workbook's rule)
//	  interval: 30s                 # default: the detector's DETECTOR_INTERVAL
//	  labels: {team: serving}
//	  runbook_url: https://runbooks.example/slo
//
// "p95: 1s" and "under: 1s, target: 95%" say the same: a quantile objective is the share of
// requests at or under its threshold. An empty page or ticket list generates no rule of that kind.
package slo

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
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/servescope/servescope/services/detector/rules"
)

// Definition is one SLO file.
type Definition struct {
	// Name identifies the SLO: the slo label of its alerts and the slo column of the views.
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Selector picks the requests the SLO judges.
	Selector Selector `yaml:"selector"`
	// Period is the error budget's period, in whole days (28 by default).
	Period Span `yaml:"period"`
	// Objectives are what a request must meet.
	Objectives Objectives `yaml:"objectives"`
	// Alerts configure the burn-rate rules.
	Alerts Alerts `yaml:"alerts"`
	// Source is the file the SLO was read from.
	Source string `yaml:"-"`
	lines  map[string]int
}

// Selector picks requests by the gateway's request.finished fields; an empty field matches all.
type Selector struct {
	Model    string `yaml:"model"`
	App      string `yaml:"app"`
	Endpoint string `yaml:"endpoint"`
	// Stream, when set, picks streamed requests (true) or requests answered with one body (false).
	Stream *bool `yaml:"stream"`
}

// Objectives are an SLO's objectives; nil ones are not part of it.
type Objectives struct {
	// TTFT, TPOT and E2E are latency objectives, judged as docs/slo.md defines each figure.
	TTFT *Latency `yaml:"ttft"`
	TPOT *Latency `yaml:"tpot"`
	E2E  *Latency `yaml:"e2e"`
	// Availability is the share of requests that do not fail (docs/slo.md).
	Availability *Availability `yaml:"availability"`
}

// Latency is "Target of the requests at or under Threshold" (a share between 0 and 1).
type Latency struct {
	Threshold time.Duration
	Target    float64
}

// Availability is "Target of the requests do not fail".
type Availability struct {
	Target float64
}

// Objective names, as the objective label and the views' columns spell them.
const (
	ObjectiveAvailability = "availability"
	ObjectiveTTFT         = "ttft"
	ObjectiveTPOT         = "tpot"
	ObjectiveE2E          = "e2e"
)

// Objective is one objective of an SLO, by name.
type Objective struct {
	Name string
	// Threshold is zero for availability.
	Threshold time.Duration
	Target    float64
}

// Budget is the share of requests allowed to miss the objective over the period (1 − Target).
func (o Objective) Budget() float64 { return 1 - o.Target }

// List returns the SLO's objectives in a fixed order: availability, ttft, tpot, e2e.
func (o Objectives) List() []Objective {
	var out []Objective
	if o.Availability != nil {
		out = append(out, Objective{Name: ObjectiveAvailability, Target: o.Availability.Target})
	}
	for _, l := range []struct {
		name string
		v    *Latency
	}{{ObjectiveTTFT, o.TTFT}, {ObjectiveTPOT, o.TPOT}, {ObjectiveE2E, o.E2E}} {
		if l.v != nil {
			out = append(out, Objective{Name: l.name, Threshold: l.v.Threshold, Target: l.v.Target})
		}
	}
	return out
}

// Window is one pair of the multi-window rule: the budget burns faster than Factor over both Long
// and Short.
type Window struct {
	Long   Span    `yaml:"long"`
	Short  Span    `yaml:"short"`
	Factor float64 `yaml:"factor"`
}

// Alerts configure the generated rules.
type Alerts struct {
	// Page and Ticket are the window pairs of each rule; nil means the workbook's
	// (DefaultPage, DefaultTicket), an empty list no rule.
	Page   *[]Window `yaml:"page"`
	Ticket *[]Window `yaml:"ticket"`
	// PageSeverity and TicketSeverity are the rules' severity labels.
	PageSeverity   string `yaml:"page_severity"`
	TicketSeverity string `yaml:"ticket_severity"`
	// MinBad is how many bad requests a pair's short window must hold to fire: one slow request
	// among three at night is a 33 % share, a burn rate of 33 against a 1 % budget (default 3).
	MinBad *int `yaml:"min_bad"`
	// Interval is the rules' evaluation interval (zero: DETECTOR_INTERVAL).
	Interval rules.Duration `yaml:"interval"`
	// Labels are added to every alert, RunbookURL is their runbook_url annotation.
	Labels     map[string]string `yaml:"labels"`
	RunbookURL string            `yaml:"runbook_url"`
}

// DefaultPage and DefaultTicket are the Google SRE workbook's windows (chapter "Alerting on
// SLOs", multiwindow, multi-burn-rate alerts): 2 % of a 30-day budget in an hour, 5 % in six
// hours (page); 10 % in a day, 10 % in three days (ticket).
var (
	DefaultPage = []Window{
		{Long: Span(time.Hour), Short: Span(5 * time.Minute), Factor: 14.4},
		{Long: Span(6 * time.Hour), Short: Span(30 * time.Minute), Factor: 6},
	}
	DefaultTicket = []Window{
		{Long: Span(24 * time.Hour), Short: Span(2 * time.Hour), Factor: 3},
		{Long: Span(72 * time.Hour), Short: Span(6 * time.Hour), Factor: 1},
	}
)

// DefaultPeriod is the error budget's period when a file gives none.
const DefaultPeriod = 28 * 24 * time.Hour

// DefaultMinBad is Alerts.MinBad's default.
const DefaultMinBad = 3

// PageWindows returns the page rule's pairs (the default when the file gives none).
func (a Alerts) PageWindows() []Window {
	if a.Page == nil {
		return DefaultPage
	}
	return *a.Page
}

// TicketWindows returns the ticket rule's pairs (the default when the file gives none).
func (a Alerts) TicketWindows() []Window {
	if a.Ticket == nil {
		return DefaultTicket
	}
	return *a.Ticket
}

// MinBadRequests returns MinBad or its default.
func (a Alerts) MinBadRequests() int {
	if a.MinBad == nil {
		return DefaultMinBad
	}
	return *a.MinBad
}

// Span is a duration read from YAML as a Go duration string or a number of days ("28d", "1d12h"
// is not accepted: days stand alone).
type Span time.Duration

// D returns the value as a time.Duration.
func (s Span) D() time.Duration { return time.Duration(s) }

// String writes whole days as "Nd", other spans as Go durations with trailing zero units cut
// ("1h", "5m", "90s").
func (s Span) String() string {
	d := s.D()
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	t := d.String()
	if strings.HasSuffix(t, "m0s") {
		t = strings.TrimSuffix(t, "0s")
	}
	if strings.HasSuffix(t, "h0m") {
		t = strings.TrimSuffix(t, "0m")
	}
	return t
}

var daysRE = regexp.MustCompile(`^([0-9]+)d$`)

// ParseSpan reads "28d" or a Go duration ("1h", "5m").
func ParseSpan(text string) (Span, error) {
	if m := daysRE.FindStringSubmatch(text); m != nil {
		n, err := strconv.Atoi(m[1])
		if err != nil || n > 3650 {
			return 0, fmt.Errorf("%q: too many days", text)
		}
		return Span(time.Duration(n) * 24 * time.Hour), nil
	}
	d, err := time.ParseDuration(text)
	if err != nil {
		return 0, fmt.Errorf("%q: want a duration like 5m, 1h or 28d", text)
	}
	return Span(d), nil
}

// UnmarshalYAML parses a span string.
func (s *Span) UnmarshalYAML(n *yaml.Node) error {
	var text string
	if err := n.Decode(&text); err != nil {
		return fmt.Errorf("line %d: want a duration like \"5m\" or \"28d\": %w", n.Line, err)
	}
	v, err := ParseSpan(text)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*s = v
	return nil
}

// MarshalYAML writes the span as String does.
func (s Span) MarshalYAML() (any, error) { return s.String(), nil }

// quantileRE is a quantile key: p50, p90, p95, p99, p99.9.
var quantileRE = regexp.MustCompile(`^p([0-9]{1,2}(?:\.[0-9]+)?)$`)

// UnmarshalYAML reads {under: 1s, target: 95%} or {p95: 1s}.
func (l *Latency) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want {under: 1s, target: 95%%} or {p95: 1s}", n.Line)
	}
	var threshold, target string
	quantile, pair := false, false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Value == "under":
			threshold, pair = v.Value, true
		case k.Value == "target":
			target, pair = v.Value, true
		case quantileRE.MatchString(k.Value):
			if quantile {
				return fmt.Errorf("line %d: one quantile or one under/target pair", k.Line)
			}
			quantile = true
			threshold = v.Value
			q, _ := strconv.ParseFloat(quantileRE.FindStringSubmatch(k.Value)[1], 64)
			target = strconv.FormatFloat(q/100, 'g', -1, 64)
		default:
			return fmt.Errorf("line %d: %s: want under and target, or a quantile like p95", k.Line, k.Value)
		}
	}
	if quantile && pair {
		return fmt.Errorf("line %d: one quantile or one under/target pair", n.Line)
	}
	if threshold == "" || target == "" {
		return fmt.Errorf("line %d: want {under: 1s, target: 95%%} or {p95: 1s}", n.Line)
	}
	d, err := time.ParseDuration(threshold)
	if err != nil || d <= 0 {
		return fmt.Errorf("line %d: threshold %q: want a positive duration like 800ms or 2s", n.Line, threshold)
	}
	t, err := ParseShare(target)
	if err != nil {
		return fmt.Errorf("line %d: target: %w", n.Line, err)
	}
	l.Threshold, l.Target = d, t
	return nil
}

// MarshalYAML writes {under, target}.
func (l Latency) MarshalYAML() (any, error) {
	return map[string]string{"under": l.Threshold.String(), "target": FormatShare(l.Target)}, nil
}

// UnmarshalYAML reads {target: 99.5%}.
func (a *Availability) UnmarshalYAML(n *yaml.Node) error {
	var v struct {
		Target string `yaml:"target"`
	}
	if err := n.Decode(&v); err != nil || v.Target == "" {
		return fmt.Errorf("line %d: want {target: 99.5%%}", n.Line)
	}
	t, err := ParseShare(v.Target)
	if err != nil {
		return fmt.Errorf("line %d: target: %w", n.Line, err)
	}
	a.Target = t
	return nil
}

// MarshalYAML writes {target}.
func (a Availability) MarshalYAML() (any, error) {
	return map[string]string{"target": FormatShare(a.Target)}, nil
}

// ParseShare reads "99.5%" or "0.995": a share strictly between 0 and 1.
func ParseShare(text string) (float64, error) {
	s := strings.TrimSpace(text)
	div := 1.0
	if strings.HasSuffix(s, "%") {
		s, div = strings.TrimSpace(strings.TrimSuffix(s, "%")), 100
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) {
		return 0, fmt.Errorf("%q: want a share like 99.5%% or 0.995", text)
	}
	v /= div
	if v <= 0 || v >= 1 {
		return 0, fmt.Errorf("%q: a target is above 0 and below 100%% (100%% leaves no budget)", text)
	}
	return v, nil
}

// FormatShare writes a share as a percentage ("99.5%").
func FormatShare(v float64) string {
	return strconv.FormatFloat(math.Round(v*1e6)/1e4, 'f', -1, 64) + "%"
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// labelRE is Prometheus's label name syntax.
var labelRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// reservedLabels are set by the generated rules.
var reservedLabels = []string{"alertname", "severity", "slo", "objective", "model", "app", "endpoint", "engine", "gateway"}

// FileError is an SLO file's error with where it is, as rules.FileError is a rule file's: the
// same type, so that `servescope rules check` and the detector report both alike.
type FileError = rules.FileError

// Parse reads one SLO file. source names it in errors, which are [*FileError]s.
func Parse(source string, data []byte) (*Definition, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlError(source, err)
	}
	var d Definition
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil {
		return nil, yamlError(source, err)
	}
	d.Source = source
	d.lines = keyLines(&root)
	if err := d.validate(); err != nil {
		fe := &FileError{File: source, Err: err}
		var ke *keyError
		if errors.As(err, &ke) {
			fe.Key, fe.Err, fe.Line = ke.key, ke.err, d.Line(ke.key)
		}
		return nil, fe
	}
	return &d, nil
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

func yamlError(source string, err error) *FileError {
	fe := &FileError{File: source, Err: err}
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		fe.Line, _ = strconv.Atoi(m[1])
	}
	return fe
}

type keyError struct {
	key string
	err error
}

func (e *keyError) Error() string { return e.key + ": " + e.err.Error() }

func keyErrorf(key, format string, args ...any) error {
	return &keyError{key: key, err: fmt.Errorf(format, args...)}
}

// Line returns the line of a key ("objectives", "alerts.page"; a nested key falls back to its
// parent's line), 0 when unknown.
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
	if d.Period == 0 {
		d.Period = Span(DefaultPeriod)
	}
	if d.Period.D() < 24*time.Hour || d.Period.D()%(24*time.Hour) != 0 {
		return keyErrorf("period", "slo %s: period %s: want whole days, like 28d or 30d", d.Name, d.Period)
	}
	objs := d.Objectives.List()
	if len(objs) == 0 {
		return keyErrorf("objectives", "slo %s: no objective: give at least one of ttft, tpot, e2e, availability", d.Name)
	}
	for _, w := range [][]Window{d.Alerts.PageWindows(), d.Alerts.TicketWindows()} {
		for _, p := range w {
			if p.Short <= 0 || p.Long <= p.Short {
				return keyErrorf("alerts", "slo %s: window pair %s/%s: want 0 < short < long", d.Name, p.Long, p.Short)
			}
			if p.Factor <= 0 || math.IsNaN(p.Factor) || math.IsInf(p.Factor, 0) {
				return keyErrorf("alerts", "slo %s: window pair %s/%s: factor %g: want a positive burn rate", d.Name, p.Long, p.Short, p.Factor)
			}
			if p.Long.D() > d.Period.D() {
				return keyErrorf("alerts", "slo %s: window %s is longer than the period %s", d.Name, p.Long, d.Period)
			}
			if p.Long.D()%time.Second != 0 || p.Short.D()%time.Second != 0 {
				return keyErrorf("alerts", "slo %s: windows are whole seconds", d.Name)
			}
		}
	}
	if d.Alerts.MinBad != nil && *d.Alerts.MinBad < 1 {
		return keyErrorf("alerts.min_bad", "slo %s: min_bad must be at least 1", d.Name)
	}
	if d.Alerts.Interval < 0 {
		return keyErrorf("alerts.interval", "slo %s: interval must not be negative", d.Name)
	}
	if d.Alerts.PageSeverity == "" {
		d.Alerts.PageSeverity = "critical"
	}
	if d.Alerts.TicketSeverity == "" {
		d.Alerts.TicketSeverity = "warning"
	}
	for _, k := range slices.Sorted(maps.Keys(d.Alerts.Labels)) {
		if !labelRE.MatchString(k) || strings.HasPrefix(k, "__") {
			return keyErrorf("alerts.labels", "slo %s: label name %q: must match %s and not start with __", d.Name, k, labelRE)
		}
		if slices.Contains(reservedLabels, k) {
			return keyErrorf("alerts.labels", "slo %s: label %s is set by the generated rules", d.Name, k)
		}
	}
	if d.Alerts.RunbookURL != "" {
		if u, err := url.Parse(d.Alerts.RunbookURL); err != nil || u.Scheme == "" || u.Host == "" {
			return keyErrorf("alerts.runbook_url", "slo %s: runbook_url %q: want an absolute URL", d.Name, d.Alerts.RunbookURL)
		}
	}
	// The rules must load as the detector loads rules.
	if _, err := d.Rules(); err != nil {
		return keyErrorf("alerts", "slo %s: generated rule: %w", d.Name, err)
	}
	return nil
}

// ParseFile reads and parses one SLO file from disk.
func ParseFile(p string) (*Definition, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, &FileError{File: p, Err: err}
	}
	return Parse(p, data)
}

// Load reads every *.yaml / *.yml file directly in dir of fsys, sorted by name. Two files naming
// the same SLO are an error.
func Load(fsys fs.FS, dir string) ([]*Definition, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read SLO directory %s: %w", dir, err)
	}
	var defs []*Definition
	seen := map[string]string{}
	for _, e := range entries {
		if e.IsDir() || !(strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
			continue
		}
		p := path.Join(dir, e.Name())
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("read SLO file %s: %w", p, err)
		}
		d, err := Parse(p, data)
		if err != nil {
			return nil, err
		}
		if other, ok := seen[d.Name]; ok {
			return nil, &FileError{File: p, Line: d.Line("name"), Key: "name", Err: fmt.Errorf("slo %s is also defined in %s", d.Name, other)}
		}
		seen[d.Name] = p
		defs = append(defs, d)
	}
	return defs, nil
}

// LoadBuiltin is Load for files embedded under repoDir in the repository (deploy/detector): each
// SLO's Source is its repository path, as messages and the generated rules name it.
func LoadBuiltin(fsys fs.FS, dir, repoDir string) ([]*Definition, error) {
	defs, err := Load(fsys, dir)
	if err != nil {
		return nil, err
	}
	for _, d := range defs {
		d.Source = path.Join(repoDir, d.Source)
	}
	return defs, nil
}

// Merge combines SLO sets; a later set's SLO replaces an earlier one of the same name (a user
// directory overrides a built-in SLO). The result is sorted by name.
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

// IsSLOFile reports whether a YAML text is an SLO file rather than a rule file: it has a
// top-level objectives key.
func IsSLOFile(data []byte) bool {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return false
	}
	_, ok := keyLines(&root)["objectives"]
	return ok
}
