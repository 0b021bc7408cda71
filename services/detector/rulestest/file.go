// Package rulestest runs rule unit tests in the spirit of Prometheus's `promtool test rules`: a
// test file gives rows for servescope's tables at times relative to an evaluation time 0, and the
// alerts expected at evaluation times after it. The runner loads each case's rows into a fresh
// ClickHouse database migrated with the project's migrations, evaluates the detector's own
// alerting engine (services/detector/alerting: hold, keep_firing_for, hysteresis) with the clock
// pinned, evaluation after evaluation, and compares the alerts it holds with the expected ones.
//
// A test file:
//
//	rule_files: [../rules/my_rule.yaml]  # relative to this file; empty: the built-in rules
//	slo_files: [../slos/chat.yaml]       # SLO files (services/detector/slo) whose burn-rate rules
//	                                     # the tests name; with neither key, the built-in SLOs'
//	evaluation_interval: 30s             # for rules without their own interval (default 30s)
//	tests:
//	  - name: 5xx fires at once and resolves when the window is clean
//	    inputs:
//	      - table: requests              # any table of the schema
//	        at: -4m                      # time of the first row, relative to time 0 (negative: before)
//	        every: 10s                   # between rows (default: all at `at`)
//	        count: 3                     # rows (default 1)
//	        times: {finished_ts: 2s}     # a time column's offset from the row's time
//	        row: {model: m, status_code: 503, e2e_s: 2}
//	    alerts:
//	      - at: 0s                       # an evaluation time: a multiple of the rule's interval
//	        rule: server_errors
//	        expect:                      # every alert the rule holds then, no more, no fewer
//	          - state: firing            # pending, firing or resolved
//	            labels: {class: 5xx, model: m, severity: critical}
//	            annotations: {summary: "..."}   # optional: only the keys given are compared
//	      - at: 6m
//	        rule: server_errors
//	        expect:
//	          - {state: resolved, labels: {class: 5xx, model: m, severity: critical}}
//
// Rows: every DateTime column of the table that the row does not set and that has no DEFAULT of its
// own gets the row's time (plus its `times` offset); event_id and request_id, when the table has
// them and the row does not set them, get a value unique to the row; "${i}" in a string value
// becomes the row's index in its input (0, 1, ...), so two inputs can share request ids. Values are
// read by ClickHouse as JSONEachRow would read them, into the column's type.
//
// SLOs: each case's database holds the SLOs of the file (slo_files, else the built-in ones) in
// slo_objectives, as the detector writes them at its start, so that their generated rules
// (slo_<name>_page, slo_<name>_ticket) judge the case's rows as they would in production.
//
// Evaluation: each rule named in a case is evaluated from time 0 every interval up to the case's
// last expectation for it, as the detector's evaluation group does, with the state carried from
// one evaluation to the next. An expectation lists the rule's alerts at that time exactly: alerts
// pending, firing, or resolved within the last 15 minutes (the engine keeps a resolved alert that
// long, and Alertmanager is sent it that long), with every label except alertname.
package rulestest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/servescope/servescope/services/detector/rules"
)

// File is one test file.
type File struct {
	// RuleFiles are rule files, relative to the test file; empty means the built-in rules.
	RuleFiles []string `yaml:"rule_files"`
	// SLOFiles are SLO files, relative to the test file: their burn-rate rules are tested, and
	// their objectives are in every case's slo_objectives. Empty with RuleFiles empty: the
	// built-in SLOs.
	SLOFiles []string `yaml:"slo_files"`
	// EvaluationInterval is the interval of rules that do not set their own (default 30s, the
	// detector's DETECTOR_INTERVAL default).
	EvaluationInterval rules.Duration `yaml:"evaluation_interval"`
	Tests              []Case         `yaml:"tests"`
	// Path is the file as named when read.
	Path string `yaml:"-"`
}

// Case is one test: rows and the alerts expected from them.
type Case struct {
	Name   string   `yaml:"name"`
	Inputs []Input  `yaml:"inputs"`
	Alerts []Expect `yaml:"alerts"`
	Line   int      `yaml:"-"`
}

// Input is one or more rows of a table, count rows every `every` from `at`.
type Input struct {
	Table string                    `yaml:"table"`
	At    rules.Duration            `yaml:"at"`
	Every rules.Duration            `yaml:"every"`
	Count int                       `yaml:"count"`
	Times map[string]rules.Duration `yaml:"times"`
	Row   map[string]any            `yaml:"row"`
	Line  int                       `yaml:"-"`
}

// Expect is the alerts a rule holds at one evaluation time.
type Expect struct {
	At     rules.Duration `yaml:"at"`
	Rule   string         `yaml:"rule"`
	Expect []Alert        `yaml:"expect"`
	Line   int            `yaml:"-"`
}

// Alert is one expected alert.
type Alert struct {
	// State is pending, firing or resolved.
	State string `yaml:"state"`
	// Labels are every label of the alert except alertname (the rule's labels and severity too).
	Labels map[string]string `yaml:"labels"`
	// Annotations, when given, are compared key by key; keys not given are not compared.
	Annotations map[string]string `yaml:"annotations"`
}

// UnmarshalYAML keeps the case's line for messages.
func (c *Case) UnmarshalYAML(n *yaml.Node) error {
	if err := knownKeys(n, "name", "inputs", "alerts"); err != nil {
		return err
	}
	type plain Case
	if err := n.Decode((*plain)(c)); err != nil {
		return err
	}
	c.Line = n.Line
	return nil
}

// UnmarshalYAML keeps the input's line for messages.
func (in *Input) UnmarshalYAML(n *yaml.Node) error {
	if err := knownKeys(n, "table", "at", "every", "count", "times", "row"); err != nil {
		return err
	}
	type plain Input
	if err := n.Decode((*plain)(in)); err != nil {
		return err
	}
	in.Line = n.Line
	return nil
}

// UnmarshalYAML keeps the expectation's line for messages.
func (e *Expect) UnmarshalYAML(n *yaml.Node) error {
	if err := knownKeys(n, "at", "rule", "expect"); err != nil {
		return err
	}
	type plain Expect
	if err := n.Decode((*plain)(e)); err != nil {
		return err
	}
	e.Line = n.Line
	return nil
}

// knownKeys refuses a key of mapping n that is not one of keys: go-yaml's KnownFields does not
// reach into a type's own UnmarshalYAML.
func knownKeys(n *yaml.Node, keys ...string) error {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i < len(n.Content); i += 2 {
		k := n.Content[i]
		if !slices.Contains(keys, k.Value) {
			return fmt.Errorf("line %d: field %s not found (want one of %s)", k.Line, k.Value, strings.Join(keys, ", "))
		}
	}
	return nil
}

// maxRows bounds one input, so that a typo (count: 1000000000) is an error, not a full disk.
const maxRows = 100_000

var indexRE = regexp.MustCompile(`\$\{i\}`)

// ReadFile reads and checks a test file.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read test file: %w", err)
	}
	return Parse(path, data)
}

// Parse reads a test file's text; path names it in errors (file:line: what).
func Parse(path string, data []byte) (*File, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("test file %s: %w", path, err)
	}
	f.Path = path
	if f.EvaluationInterval == 0 {
		f.EvaluationInterval = rules.Duration(30 * time.Second)
	}
	if f.EvaluationInterval.D() < time.Second {
		return nil, fmt.Errorf("test file %s: evaluation_interval %s: want at least 1s, as DETECTOR_INTERVAL", path, f.EvaluationInterval.D())
	}
	if len(f.Tests) == 0 {
		return nil, fmt.Errorf("test file %s: no tests", path)
	}
	for i := range f.Tests {
		c := &f.Tests[i]
		at := func(line int, format string, args ...any) error {
			return fmt.Errorf("test file %s:%d: test %q: %s", path, line, c.Name, fmt.Sprintf(format, args...))
		}
		if c.Name == "" {
			c.Name = "#" + strconv.Itoa(i+1)
		}
		if len(c.Alerts) == 0 {
			return nil, at(c.Line, "no alerts to expect")
		}
		for j := range c.Inputs {
			in := &c.Inputs[j]
			if in.Table == "" {
				return nil, at(in.Line, "input without a table")
			}
			if in.Count == 0 {
				in.Count = 1
			}
			if in.Count < 0 || in.Count > maxRows {
				return nil, at(in.Line, "count %d: want 1 to %d rows", in.Count, maxRows)
			}
			if in.Every < 0 {
				return nil, at(in.Line, "every must not be negative")
			}
		}
		for _, e := range c.Alerts {
			if e.Rule == "" {
				return nil, at(e.Line, "expectation without a rule")
			}
			if e.At < 0 {
				return nil, at(e.Line, "at %s: evaluation times start at 0s", e.At.D())
			}
			for _, a := range e.Expect {
				switch a.State {
				case "pending", "firing", "resolved":
				default:
					return nil, at(e.Line, "state %q: want pending, firing or resolved", a.State)
				}
				if _, ok := a.Labels["alertname"]; ok {
					return nil, at(e.Line, "alertname is the rule; leave it out of labels")
				}
			}
		}
	}
	return &f, nil
}

// ruleFiles returns the test file's rule files, relative to the working directory.
func (f *File) ruleFiles() []string { return f.relative(f.RuleFiles) }

// sloFiles returns the test file's SLO files, relative to the working directory.
func (f *File) sloFiles() []string { return f.relative(f.SLOFiles) }

func (f *File) relative(files []string) []string {
	out := make([]string, 0, len(files))
	for _, p := range files {
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(f.Path), p)
		}
		out = append(out, p)
	}
	return out
}
