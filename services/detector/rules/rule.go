package rules

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"text/template"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Sample is one row of a rule's result at one evaluation time.
type Sample struct {
	// Labels identify what the row is about; they do not include the rule name.
	Labels map[string]string
	// Value is the window's figure, Baseline the baseline's (NaN when unknown), Threshold the
	// limit Value was compared with; their unit is the rule's (a share, seconds, a count).
	Value, Baseline, Threshold float64
	// Firing is true when the row breaches the threshold.
	Firing bool
	// BaselineOK is false when the baseline lacked data and the rule used its absolute floor.
	BaselineOK bool
	// KeepFiring is true while the row's resolve condition is not met: an alert already firing
	// stays firing (see Definition.Hysteresis). It equals Firing for rules without hysteresis.
	KeepFiring bool
	// Details are the row's details column (empty when the query has none): annotations of the
	// alert that do not identify it, such as the oldest hung request's request_id.
	Details map[string]string
}

// Rule is anything the detector evaluates: a name and rows at an explicit time. Nothing inside a
// rule reads the wall clock.
type Rule interface {
	Name() string
	Eval(ctx context.Context, ts time.Time) ([]Sample, error)
}

// SQLRule evaluates a [Definition]'s query on ClickHouse.
type SQLRule struct {
	def   *Definition
	query string
	conn  driver.Conn
	// details is set when the query returns the optional details column.
	details bool
}

// NewSQLRule prepares def for evaluation on conn.
func NewSQLRule(def *Definition, conn driver.Conn) (*SQLRule, error) {
	q, err := def.expandQuery()
	if err != nil {
		return nil, err
	}
	// The wrapper fixes the result's column types so that every rule scans the same way.
	keep := "firing"
	if def.Hysteresis {
		keep = "keep_firing"
	}
	details := hasOutputColumn(q, "details")
	detailsCol := "map()"
	if details {
		detailsCol = "details"
	}
	wrapped := "SELECT CAST(labels, 'Map(String, String)'), toFloat64(value), CAST(baseline, 'Nullable(Float64)'), " +
		"toFloat64(threshold), toUInt8(firing), toUInt8(baseline_ok), toUInt8(" + keep + "), " +
		"CAST(" + detailsCol + ", 'Map(String, String)') FROM (\n" + q + "\n)"
	return &SQLRule{def: def, query: wrapped, conn: conn, details: details}, nil
}

// Name returns the rule's name.
func (r *SQLRule) Name() string { return r.def.Name }

// Definition returns the rule's metadata.
func (r *SQLRule) Definition() *Definition { return r.def }

// Query returns the SQL sent to ClickHouse (macros expanded, parameters unbound).
func (r *SQLRule) Query() string { return r.query }

// Params returns the query parameters bound for an evaluation at ts, as ClickHouse text values.
func (r *SQLRule) Params(ts time.Time) clickhouse.Parameters {
	d := r.def
	ts = ts.UTC()
	p := clickhouse.Parameters{
		"now":              chTime(ts),
		"window_start":     chTime(ts.Add(-d.Window.D())),
		"window_s":         strconv.FormatInt(int64(d.Window.D()/time.Second), 10),
		"baseline_slice_s": strconv.FormatInt(int64(d.Baseline.Slice.D()/time.Second), 10),
	}
	// The baseline is internal/baseline's period of the window (ts − window, ts].
	b := d.Period(ts)
	p["baseline_start"] = chTime(b.From)
	p["baseline_end"] = chTime(b.To)
	p["baseline_s"] = strconv.FormatInt(int64(b.Seconds()), 10)
	for k, v := range d.Params {
		p[k] = paramText(v)
	}
	return p
}

func chTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }

func paramText(v any) string {
	switch x := v.(type) {
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case bool:
		if x {
			return "1"
		}
		return "0"
	default:
		return fmt.Sprint(x)
	}
}

// Eval runs the query as of ts and returns its rows.
func (r *SQLRule) Eval(ctx context.Context, ts time.Time) ([]Sample, error) {
	ctx = clickhouse.Context(ctx, clickhouse.WithParameters(r.Params(ts)))
	rows, err := r.conn.Query(ctx, r.query)
	if err != nil {
		return nil, fmt.Errorf("evaluate rule %s at %s: %w", r.def.Name, ts.UTC().Format(time.RFC3339), err)
	}
	defer rows.Close()
	var out []Sample
	for rows.Next() {
		var (
			s        Sample
			baseline *float64
			firing   uint8
			ok       uint8
			keep     uint8
		)
		if err := rows.Scan(&s.Labels, &s.Value, &baseline, &s.Threshold, &firing, &ok, &keep, &s.Details); err != nil {
			return nil, fmt.Errorf("read rule %s row: %w", r.def.Name, err)
		}
		s.Baseline = math.NaN()
		if baseline != nil {
			s.Baseline = *baseline
		}
		s.Firing, s.BaselineOK, s.KeepFiring = firing != 0, ok != 0, keep != 0
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read rule %s rows: %w", r.def.Name, err)
	}
	return out, nil
}

// TemplateData is what summary, description and resolved_summary templates see.
type TemplateData struct {
	Rule   string
	Labels map[string]string
	// Details are the row's details column (see Sample.Details).
	Details                    map[string]string
	Value, Baseline, Threshold float64
	BaselineOK                 bool
	Params                     map[string]any
	// Resolved is set for resolved_summary; FiredValue is then the value at the alert's last
	// firing evaluation, and HasValue says whether the rule still returns the alert's row
	// (Value, Baseline and Threshold are NaN when it does not: no data in the window).
	Resolved   bool
	FiredValue float64
	HasValue   bool
}

// DefaultResolvedSummary is the resolved summary of a rule without resolved_summary.
const DefaultResolvedSummary = `Resolved: {{.Rule}}{{range $k, $v := .Labels}} {{$k}}={{$v}}{{end}} ` +
	`{{if .HasValue}}is back to {{f .Value}} (threshold {{f .Threshold}}){{else}}has no row in the window any more (no data){{end}}; ` +
	`it was {{f .FiredValue}} when it last fired.`

var textFuncs = template.FuncMap{
	// f formats a number with 3 significant decimals, "unknown" for NaN.
	"f": func(v float64) string {
		if math.IsNaN(v) {
			return "unknown"
		}
		return strconv.FormatFloat(v, 'f', 3, 64)
	},
	// pct formats a fraction as a percentage.
	"pct": func(v float64) string {
		if math.IsNaN(v) {
			return "unknown"
		}
		return strconv.FormatFloat(v*100, 'f', 1, 64) + "%"
	},
}

// Render fills the rule's summary and description for one row. With a runbook, the description
// is the runbook's action for the row's labels.
func (d *Definition) Render(s Sample) (summary, description string, err error) {
	if summary, err = d.render("summary", d.Summary, s); err != nil {
		return "", "", err
	}
	if d.Runbook != nil {
		return summary, oneLine(d.Runbook.ActionFor(s.Labels)), nil
	}
	if description, err = d.render("description", d.Description, s); err != nil {
		return "", "", err
	}
	return summary, description, nil
}

// RenderResolved fills the resolved summary of an alert with labels labels (without alertname and
// severity) whose last
// firing value was firedValue: current is the rule's row for the alert at the resolving
// evaluation, nil when the rule returned none (no data in the window).
func (d *Definition) RenderResolved(labels map[string]string, current *Sample, firedValue float64) (string, error) {
	text := d.ResolvedSummary
	if text == "" {
		text = DefaultResolvedSummary
	}
	s := Sample{Value: math.NaN(), Baseline: math.NaN(), Threshold: math.NaN()}
	if current != nil {
		s = *current
	}
	s.Labels = labels
	return d.renderData("resolved_summary", text, s, func(t *TemplateData) {
		t.Resolved, t.FiredValue, t.HasValue = true, firedValue, current != nil
	})
}

// render fills one template (the summary or the description) for one row.
func (d *Definition) render(name, text string, s Sample) (string, error) {
	return d.renderData(name, text, s, nil)
}

func (d *Definition) renderData(name, text string, s Sample, set func(*TemplateData)) (string, error) {
	data := TemplateData{Rule: d.Name, Labels: s.Labels, Details: s.Details, Value: s.Value, Baseline: s.Baseline,
		Threshold: s.Threshold, BaselineOK: s.BaselineOK, Params: d.Params}
	if set != nil {
		set(&data)
	}
	// label names a label's value, or "(none)" when the row has it empty or not at all, so a
	// text never has a hole where a label would be (a request without an app, say).
	label := template.FuncMap{"label": func(name string) string {
		if v := s.Labels[name]; v != "" {
			return v
		}
		return "(none)"
	}, "detail": func(name string) string {
		// A detail of the row (the details column), or "(unknown)" when it has none.
		if v := s.Details[name]; v != "" {
			return v
		}
		return "(unknown)"
	}}
	t, err := template.New(name).Option("missingkey=zero").Funcs(textFuncs).Funcs(label).Parse(text)
	if err != nil {
		return "", fmt.Errorf("rule %s: %s template: %w", d.Name, name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("rule %s: render %s: %w", d.Name, name, err)
	}
	return b.String(), nil
}
