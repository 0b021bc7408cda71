// Package diagnose reads serving incidents for the on-call engineer: it computes, from the recorded
// data in ClickHouse, every quantity the four measured workloads of docs/measurements.md left their
// signature on, for an incident window and for a baseline, and walks the hypotheses of that page's
// "From symptom to quantity" (the symptom table and its three branches for a slow E2E) against
// them. Every conclusion names the numbers behind it and the alternative those numbers could not
// rule out; no finding is a valid result.
//
// The baseline is internal/baseline's: the 24 h ending 1 h before the window starts, the
// detector's. A range is read whole and again at the resolution of the detector's rules (each
// branch on windows of its rule's length, windows.go), and the alerts the detector fired in it are
// read first (alerts.go); a branch is clear only when the whole range, every window and its rule's
// alerts agree. Complaints and Bearings (complaints.go) map the detector's rules to the complaint
// pages and the branches, and Report.Verdict gives a complaint's verdict: the console's complaint
// pages, `servescope diagnose --complaint` and scripts/demo all read it so.
//
// Sources: per-request quantities come from the gateway's `requests` rows, with the engine's own
// timings filled from its spans and TTFT from arrival as `request_facts` gives them; without
// gateway records, from the engine's spans alone. Both read the spans through the view
// `engine_requests`, so a request counts once: the spans of its n > 1 and multi-prompt children
// are combined (migrations/000009). When neither has them, the window
// averages come from the cumulative histograms in `engine_samples` (difference over the window,
// counter resets handled).
// Running, waiting and KV maxima come from `engine_samples`; retrieval scores, versions and output
// checks from `app_records` (and `requests`); crash evidence from `engine_logs`. Each engine's
// health (scrapes, spans against the baseline's, KV cache with nothing running) names the engine
// an engine branch finds.
package diagnose

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/baseline"
)

// DefaultBaseline is the baseline's length when none is given: a normal day of the same system,
// because the normal signature itself depends on prompt and answer lengths (docs/measurements.md,
// What the detector's thresholds rest on). It ends baseline.Default.Offset before the window
// starts (docs/concepts.md, The baseline).
var DefaultBaseline = baseline.Default.Length

// ErrNoData is wrapped by Run's error when the window holds no record in any table.
var ErrNoData = errors.New("no data")

// Options selects what Run reads.
type Options struct {
	// Window is the incident window.
	Window Range
	// Baseline is the normal period to compare with; the zero value means baseline.Default's
	// period of the window (the 24 h ending 1 h before it starts: the detector's).
	Baseline Range
	// Model keeps only requests of this model (empty: all models).
	Model string
	// RuleWindows are the windows of the detector's rules by rule name: each branch is also read
	// at its rule's window (Resolution). Nil: every branch at DefaultResolution.
	RuleWindows map[string]time.Duration
	// NoAlerts leaves the alerts table unread (an account that may not read it).
	NoAlerts bool
	// BaselineRule says how a given Baseline was chosen, for the report (e.g. baseline.Spec's
	// Describe); "given" when empty.
	BaselineRule string
}

// Report is the result of a diagnosis: the quantities side by side and the branches walked.
type Report struct {
	Window   Range  `json:"window"`
	Baseline Range  `json:"baseline"`
	Model    string `json:"model,omitempty"`
	// Current and Base are the quantities of the window and of the baseline.
	Current Stats `json:"window_stats"`
	Base    Stats `json:"baseline_stats"`
	// BaselineSource says how the baseline was read: BaselineLive, or BaselineHourly, when
	// Baseline is the whole hours of the one asked for (WholeHours). BaselineRule says how the
	// baseline period was chosen ("the 24 h ending 1 h before the window starts", or "given").
	BaselineSource string `json:"baseline_source"`
	BaselineRule   string `json:"baseline_rule"`
	// Alerts are the detector's alerts that were firing at some time in the window (under the
	// model filter), first fired first.
	Alerts []Alert `json:"alerts"`
	// AlertsError says why the alerts could not be read ("" when they were).
	AlertsError string `json:"alerts_error,omitempty"`
	// HasBaseline is false when the baseline held no records; branches then fall back to the
	// absolute floors documented with the thresholds.
	HasBaseline bool `json:"has_baseline"`
	// Rows are the quantities of docs/measurements.md's Four workloads table, in print order.
	Rows []Row `json:"rows"`
	// Branches are every hypothesis walked, in order; Findings lists the IDs with StatusFinding.
	Branches []Branch `json:"branches"`
	// Engines are each engine's health over the window, which the last branches read (an engine
	// not scraped, its spans missing, its KV cache stuck with nothing running).
	Engines  []EngineHealth `json:"engines,omitempty"`
	Findings []string       `json:"findings"`
	// Notes are what the walk saw outside the branches, e.g. a latency rise no signature explains.
	Notes []string `json:"notes,omitempty"`
}

// Row is one quantity, window against baseline.
type Row struct {
	Key      string   `json:"key"`
	Label    string   `json:"label"`
	Window   *float64 `json:"window,omitempty"`
	Baseline *float64 `json:"baseline,omitempty"`
	// Text forms, as printed: value, baseline value, change ("×9.2", "+12.5 pts", "=").
	WindowText   string `json:"window_text"`
	BaselineText string `json:"baseline_text"`
	Change       string `json:"change,omitempty"`
	// Source is where the window's value came from, when it matters (see Stats.Sources).
	Source string `json:"source,omitempty"`
}

// Run computes the quantities of opts.Window and of its baseline from conn, and walks the branches.
// It returns an error wrapping ErrNoData, with a message telling empty tables from an empty
// window, when the window holds nothing; other errors say which read failed.
func Run(ctx context.Context, conn driver.Conn, opts Options) (Report, error) {
	if !opts.Window.To.After(opts.Window.From) {
		return Report{}, fmt.Errorf("diagnose: window %s is empty or reversed", opts.Window)
	}
	rule := opts.BaselineRule
	if rule == "" {
		rule = "given"
	}
	if opts.Baseline.From.IsZero() && opts.Baseline.To.IsZero() {
		p := baseline.Default.Of(opts.Window.From, opts.Window.To)
		opts.Baseline, rule = Range{From: p.From, To: p.To}, baseline.Default.Describe()
	}
	if !opts.Baseline.To.After(opts.Baseline.From) {
		return Report{}, fmt.Errorf("diagnose: baseline %s is empty or reversed", opts.Baseline)
	}
	rep := Report{Window: opts.Window, Baseline: opts.Baseline, Model: opts.Model, BaselineRule: rule, Alerts: []Alert{}}
	// The window and the baseline are read at the same time (the baseline's reads write only
	// the report's baseline fields).
	var err error
	baseDone := make(chan error, 1)
	go func() { baseDone <- rep.readBaseline(ctx, conn, opts) }()
	rep.Current, err = collect(ctx, conn, opts.Window, opts.Model)
	if err == nil {
		err = rep.Current.readUnfinished(paramsWith(ctx, opts.Window, opts.Model, map[string]string{
			"grace_us": fmt.Sprint(graceOf(opts.Window).Microseconds())}), conn)
	}
	baseErr := <-baseDone
	if err != nil {
		return rep, fmt.Errorf("read window %s: %w", opts.Window, err)
	}
	if rep.Current.Empty() {
		return rep, emptyWindow(ctx, conn, opts)
	}
	if baseErr != nil {
		return rep, baseErr
	}
	rep.HasBaseline = !rep.Base.Empty()
	rep.Rows = rows(&rep.Current, &rep.Base, rep.HasBaseline)
	if rep.Engines, err = readEngines(ctx, conn, opts.Window, opts.Baseline, opts.Model); err != nil {
		return rep, fmt.Errorf("read window %s: %w", opts.Window, err)
	}
	rep.Branches = append(walk(&rep.Current, &rep.Base, rep.HasBaseline), engineBranches(rep.Engines)...)
	if !opts.NoAlerts {
		as, err := ReadAlerts(ctx, conn, opts.Window)
		if err != nil {
			rep.AlertsError = err.Error()
		}
		for _, a := range as {
			// "all" is the label contract's model of an alert not about one model.
			if m := a.Labels["model"]; opts.Model == "" || m == "" || m == scopeAll || m == opts.Model {
				rep.Alerts = append(rep.Alerts, a)
			}
		}
	}
	if err := rep.readByWindow(ctx, conn, opts); err != nil {
		return rep, err
	}
	rep.Findings = []string{}
	for _, b := range rep.Branches {
		if b.Status == StatusFinding {
			rep.Findings = append(rep.Findings, b.ID)
		}
	}
	if len(rep.Findings) == 0 {
		for _, q := range []struct {
			name      string
			cur, base *float64
		}{{"E2E p95", rep.Current.E2EP95, rep.Base.E2EP95}, {"TTFT p95", rep.Current.TTFTP95, rep.Base.TTFTP95}} {
			if rep.HasBaseline && baseline.Compare(q.cur, q.base, RiseRatio, 0).Up() {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s rose %s with none of the signatures above: look at what these quantities do not cover (the application's own steps, the network, the client)",
					q.name, vs(q.cur, q.base, secs)))
			}
		}
	}
	return rep, nil
}

// ReadBaseline reads the quantities of the baseline period r under the model filter, as Run reads
// a window's: read is the period as read (its whole hours, when read from diagnose_hourly) and
// source BaselineLive or BaselineHourly. An empty Stats (Empty) means no baseline.
func ReadBaseline(ctx context.Context, conn driver.Conn, r Range, model string) (s Stats, read Range, source string, err error) {
	rep := Report{}
	err = rep.readBaseline(ctx, conn, Options{Baseline: r, Model: model})
	return rep.Base, rep.Baseline, rep.BaselineSource, err
}

// readBaseline reads the baseline: long (HourlyMinSpan) and large (HourlyMinRequests) ones as
// their whole hours (WholeHours) from diagnose_hourly, others, and those when diagnose_hourly
// fails, live over the range given.
func (rep *Report) readBaseline(ctx context.Context, conn driver.Conn, opts Options) error {
	if opts.Baseline.Seconds() >= HourlyMinSpan.Seconds() {
		r := WholeHours(opts.Baseline)
		s, ok, note, err := hourlyBaseline(ctx, conn, r, opts.Model, time.Now())
		if err != nil {
			return fmt.Errorf("read baseline %s: %w", r, err)
		}
		if ok {
			rep.Base, rep.Baseline, rep.BaselineSource = s, r, BaselineHourly
			return nil
		}
		if note != "" {
			rep.Notes = append(rep.Notes, note)
		}
	}
	var err error
	if rep.Base, err = collect(ctx, conn, opts.Baseline, opts.Model); err != nil {
		return fmt.Errorf("read baseline %s: %w", opts.Baseline, err)
	}
	rep.Baseline, rep.BaselineSource = opts.Baseline, BaselineLive
	return nil
}

// emptyWindow explains an empty window: nothing recorded at all, or nothing in this window.
func emptyWindow(ctx context.Context, conn driver.Conn, opts Options) error {
	var reqs, apps, samples, spans, logs uint64
	var latest time.Time
	if err := conn.QueryRow(ctx, query("presence")).Scan(&reqs, &apps, &samples, &spans, &logs, &latest); err != nil {
		return fmt.Errorf("window %s holds no records, and counting the tables failed: %w", opts.Window, err)
	}
	model := ""
	if opts.Model != "" {
		model = fmt.Sprintf(" for model %q", opts.Model)
	}
	if reqs+apps+samples+spans+logs == 0 {
		return fmt.Errorf("%w: every servescope table is empty (requests, app_records, engine_samples, engine_spans, engine_logs): nothing has been recorded yet; check that the gateway, collector and consumer are running", ErrNoData)
	}
	return fmt.Errorf("%w: no records in window %s%s; the latest record is at %s (requests %d, app_records %d, engine_samples %d, engine_spans %d, engine_logs %d rows in total)",
		ErrNoData, opts.Window, model, latest.UTC().Format(time.RFC3339), reqs, apps, samples, spans, logs)
}

// rowSpec describes one printed quantity.
type rowSpec struct {
	key, label string
	get        func(*Stats) *float64
	f          func(float64) string
}

func u64(n uint64) *float64 { f := float64(n); return &f }

// u64If is n when the count was observed at all (ok), else nil: a count of failed scrapes where
// no scrape was made, or of log lines where no log was kept, is unknown, not 0.
func u64If(n uint64, ok bool) *float64 {
	if !ok {
		return nil
	}
	return u64(n)
}

var rowSpecs = []rowSpec{
	{"requests", "Requests", func(s *Stats) *float64 { return u64(s.Requests) }, count},
	{"rate_per_s", "Request rate", func(s *Stats) *float64 { return s.RatePerSecond }, perSec},
	{"prompt_tokens_mean", "Tokens in (mean)", func(s *Stats) *float64 { return s.PromptTokensMean }, tokens},
	{"completion_tokens_mean", "Tokens out (mean)", func(s *Stats) *float64 { return s.CompletionTokensMean }, tokens},
	{"cached_share", "Prompt tokens from prefix cache", func(s *Stats) *float64 { return s.CachedShare }, pct},
	{"queue_s_mean", "Queue wait (mean)", func(s *Stats) *float64 { return s.QueueMean }, secs},
	{"queue_s_p95", "Queue wait (p95)", func(s *Stats) *float64 { return s.QueueP95 }, secs},
	{"prefill_s_mean", "Prompt prefill (mean)", func(s *Stats) *float64 { return s.PrefillMean }, secs},
	{"ttft_s_mean", "TTFT (mean)", func(s *Stats) *float64 { return s.TTFTMean }, secs},
	{"ttft_s_p50", "TTFT (p50)", func(s *Stats) *float64 { return s.TTFTP50 }, secs},
	{"ttft_s_p95", "TTFT (p95)", func(s *Stats) *float64 { return s.TTFTP95 }, secs},
	{"tpot_s_mean", "Between two tokens, TPOT (mean)", func(s *Stats) *float64 { return s.TPOTMean }, secs},
	{"tpot_s_p95", "Between two tokens, TPOT (p95)", func(s *Stats) *float64 { return s.TPOTP95 }, secs},
	{"itl_s_mean", "Inter-token latency, token-weighted (mean)", func(s *Stats) *float64 { return s.ITLMean }, secs},
	{"decode_s_mean", "Token generation (mean)", func(s *Stats) *float64 { return s.DecodeMean }, secs},
	{"e2e_s_mean", "E2E (mean)", func(s *Stats) *float64 { return s.E2EMean }, secs},
	{"e2e_s_p50", "E2E (p50)", func(s *Stats) *float64 { return s.E2EP50 }, secs},
	{"e2e_s_p95", "E2E (p95)", func(s *Stats) *float64 { return s.E2EP95 }, secs},
	{"running_max", "Running - maximum", func(s *Stats) *float64 { return s.RunningMax }, count},
	{"waiting_max", "Waiting - maximum", func(s *Stats) *float64 { return s.WaitingMax }, count},
	{"kv_cache_usage_max", "KV cache - maximum", func(s *Stats) *float64 { return s.KVMax }, pct},
	{"preemptions", "Preemptions (KV cache ran out)", func(s *Stats) *float64 { return s.Preemptions }, count},
	{"samples_down", "Failed scrapes (up = 0)", func(s *Stats) *float64 { return u64If(s.SamplesDown, s.Samples > 0) }, count},
	{"share_4xx", "Errors 4xx", func(s *Stats) *float64 { return s.Share4xx }, pct},
	{"share_5xx", "Errors 5xx", func(s *Stats) *float64 { return s.Share5xx }, pct},
	{"length_share", "Stops at max_tokens (`length`)", func(s *Stats) *float64 { return s.LengthShare }, pct},
	{"retrieval_top_score_p50", "Top retrieval score (p50)", func(s *Stats) *float64 { return s.RetrievalTopP50 }, score},
	{"wrong_script_share", "Answers in a wrong script", func(s *Stats) *float64 { return s.WrongScriptShare }, pct},
	{"oom_lines", "Engine log out-of-memory lines", func(s *Stats) *float64 { return u64If(s.OOMLines, s.LogLines > 0) }, count},
}

// NoBaselineText is what a quantity's baseline reads when the baseline holds none of it: never 0.
const NoBaselineText = "no baseline"

func rows(cur, base *Stats, hasBase bool) []Row {
	out := make([]Row, 0, len(rowSpecs))
	for _, sp := range rowSpecs {
		w, b := sp.get(cur), sp.get(base)
		if !hasBase {
			b = nil
		}
		r := Row{Key: sp.key, Label: sp.label, Window: w, Baseline: b, WindowText: "-", BaselineText: NoBaselineText,
			Change: change(w, b, sp.f), Source: cur.Sources[sp.key]}
		if w != nil {
			r.WindowText = sp.f(*w)
		}
		if b != nil {
			r.BaselineText = sp.f(*b)
		}
		out = append(out, r)
	}
	return out
}

// Figures are the baseline's figures by quantity key (the rows' keys; nil: the baseline holds
// none of it): what the console's panels draw as their baselines (internal/panels, {{figure}}),
// so that a panel and the complaint table never show two numbers for one quantity.
func (r *Report) Figures() map[string]*float64 { return BaselineFigures(&r.Base, r.HasBaseline) }

// BaselineFigures are the figures of baseline quantities s (see Report.Figures).
func BaselineFigures(s *Stats, hasBase bool) map[string]*float64 {
	out := map[string]*float64{}
	for _, sp := range rowSpecs {
		if hasBase {
			out[sp.key] = sp.get(s)
		} else {
			out[sp.key] = nil
		}
	}
	return out
}

// Ranges resolves the command line's window and its baseline at time now: either since > 0 (the
// window is [now−since, now)) or from and to both set; the baseline is spec's period of the window
// (baseline.Default's for the zero spec).
func Ranges(now time.Time, since time.Duration, from, to time.Time, spec baseline.Spec) (Range, Range, error) {
	var w Range
	switch {
	case since > 0 && (!from.IsZero() || !to.IsZero()):
		return Range{}, Range{}, errors.New("give either --since or --from/--to, not both")
	case since > 0:
		w = Range{From: now.Add(-since).UTC(), To: now.UTC()}
	case !from.IsZero() && !to.IsZero():
		w = Range{From: from.UTC(), To: to.UTC()}
	case !from.IsZero():
		w = Range{From: from.UTC(), To: now.UTC()}
	default:
		return Range{}, Range{}, errors.New("give the window: --since DURATION, or --from TIME [--to TIME]")
	}
	if !w.To.After(w.From) {
		return Range{}, Range{}, fmt.Errorf("window %s: --to must be after --from", w)
	}
	if spec.Length < 0 || spec.Offset < 0 || (spec != baseline.Spec{} && spec.Days == 0 && spec.Length == 0) {
		return Range{}, Range{}, fmt.Errorf("the baseline's length must be positive and its offset not negative, got %s and %s", spec.Length, spec.Offset)
	}
	p := spec.Of(w.From, w.To)
	return w, Range{From: p.From, To: p.To}, nil
}

// timeLayouts are the forms ParseTime accepts; those without a zone are UTC.
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02 15:04"}

// ParseTime reads a command-line time: RFC 3339, or "2006-01-02 15:04[:05]" (also with a "T") in UTC.
func ParseTime(s string) (time.Time, error) {
	for _, l := range timeLayouts {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2026-09-11T15:53:00Z) or \"2026-09-11 15:53[:00]\" (UTC)", s)
}
