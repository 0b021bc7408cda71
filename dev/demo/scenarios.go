package demo

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/diagnose"
	"github.com/servescope/servescope/sim/loadgen/load"
)

// Scenario is one workload of docs/measurements.md as the demo runs it.
type Scenario struct {
	Key, Title string
	Load       load.Config
}

// Scenarios are the four measured workloads (docs/measurements.md) at their rates and prompt
// sizes, with arrival windows short enough for the whole demo to fit in minutes. Overload keeps
// the measured 14 req/s long enough to fill the 256 slots and queue the excess, and sends
// OverloadStreamShare of its requests with a stream, the others without.
//
// Their clients behave as the synthetic normal day's (Natural): they ask max_tokens MaxTokens and
// let answers end where vllmsim's end (AnswerTokens typical, as the day's), so finish_reason
// "length" is as rare as the baseline's and no rule sees a change that is not there. Only long
// output asks vLLM's ignore_eos and runs its answers to 1,024 tokens: that workload's signature
// (answers stopped at max_tokens, E2E many times the baseline's) is what its alerts say.
func Scenarios(target string) []Scenario {
	mk := func(name string, d time.Duration) load.Config {
		return Natural(load.Config{Target: target, MetricsURL: "none", Scenario: name, Duration: d, Seed: 7, HTTPClient: LoadClient()})
	}
	overload := mk("overload", 40*time.Second)
	share := OverloadStreamShare
	overload.StreamShare = &share
	long := load.Config{Target: target, MetricsURL: "none", Scenario: "long-output", Duration: 40 * time.Second, Seed: 7, HTTPClient: LoadClient()}
	return []Scenario{
		{"normal", "Normal", mk("normal", 20*time.Second)},
		{"overload", "Overload", overload},
		{"long-prompt", "Long prompt", mk("long-prompt", 15*time.Second)},
		{"long-output", "Long output", long},
	}
}

// Natural makes cfg's clients those of the synthetic normal day: max_tokens MaxTokens, answers
// ending naturally (no ignore_eos).
func Natural(cfg load.Config) load.Config {
	off := false
	cfg.IgnoreEOS, cfg.MaxTokens = &off, MaxTokens
	return cfg
}

// Window is the time a scenario or incident occupied: requests that arrived in it and engine
// samples taken in it belong to it.
type Window struct {
	Key, Title string
	Range      diagnose.Range
	Report     *load.Report
}

// RunLoad runs cfg, printing progress to out every few seconds, and returns the window it took
// (from just before the first request to just after the last answer) and loadgen's report.
func RunLoad(ctx context.Context, out io.Writer, key, title string, cfg load.Config) (Window, error) {
	var done, total atomic.Int64
	cfg.Prepared = func(n int) { total.Store(int64(n)) }
	cfg.Progress = func(d, _ int) { done.Store(int64(d)) }
	start := time.Now().UTC()
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				fmt.Fprintf(out, "    %-12s %3.0fs  %d of %d requests answered\n", key, time.Since(start).Seconds(), done.Load(), total.Load())
			case <-stop:
				return
			}
		}
	}()
	rep, err := load.Run(ctx, cfg)
	close(stop)
	<-ticked
	// The collector scrapes every 0.5 s: one more second puts the drained engine's last samples
	// into the window.
	time.Sleep(time.Second)
	w := Window{Key: key, Title: title, Range: diagnose.Range{From: start.Add(-100 * time.Millisecond), To: time.Now().UTC()}, Report: rep}
	if err != nil {
		return w, fmt.Errorf("run %s load: %w", key, err)
	}
	fmt.Fprintf(out, "    %-12s done in %.0fs: %d sent, %d answered, %d failed%s\n", key, time.Since(start).Seconds(),
		rep.Sent, rep.Succeeded, rep.Failed, errorsText(rep.Errors))
	return w, nil
}

func errorsText(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s×%d", k, v))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// WaitIngested waits until ClickHouse holds a request row for every request loadgen sent in w and
// an engine span for every answered one, so the tables read complete windows.
func WaitIngested(ctx context.Context, conn driver.Conn, w Window) error {
	if w.Report == nil {
		return nil
	}
	sent, answered := uint64(w.Report.Sent), uint64(w.Report.Succeeded)
	return waitFor(ctx, 60*time.Second, func() (bool, error) {
		var reqs, spans uint64
		pctx := chstore.WithParams(ctx, map[string]string{
			"from_us": fmt.Sprint(w.Range.From.UnixMicro()), "to_us": fmt.Sprint(w.Range.To.UnixMicro()),
		})
		err := conn.QueryRow(pctx, `
			SELECT count(), countIf(request_id IN (
			    SELECT request_id FROM engine_spans
			    WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC') - INTERVAL 1 MINUTE))
			FROM requests FINAL
			WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
			  AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')`).Scan(&reqs, &spans)
		if err != nil {
			return false, fmt.Errorf("count ingested requests of %s: %w", w.Key, err)
		}
		return reqs >= sent && spans >= answered, nil
	}, fmt.Sprintf("the %d requests of %s to reach ClickHouse", sent, w.Key))
}

// Measure computes the workloads' table quantities of each window from ClickHouse (package diagnose:
// gateway request rows joined with the engine's spans, and the collector's engine samples).
func Measure(ctx context.Context, conn driver.Conn, ws []Window) ([]diagnose.Stats, error) {
	out := make([]diagnose.Stats, len(ws))
	for i, w := range ws {
		rep, err := diagnose.Run(ctx, conn, diagnose.Options{
			Window: w.Range,
			// The baseline is not printed here; one second keeps its read cheap.
			Baseline: diagnose.Range{From: w.Range.From.Add(-time.Second), To: w.Range.From},
		})
		if err != nil {
			return nil, fmt.Errorf("measure %s from ClickHouse: %w", w.Key, err)
		}
		out[i] = rep.Current
	}
	return out, nil
}

// TableRow is one printed quantity of the workloads' table.
type TableRow struct {
	Label string
	Cell  func(*diagnose.Stats) string
}

func f(p *float64, format string) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf(format, *p)
}

// SignatureRows are the rows of docs/measurements.md's Four workloads table.
var SignatureRows = []TableRow{
	{"Requests", func(s *diagnose.Stats) string { return fmt.Sprint(s.Requests) }},
	{"Tokens in / out (average)", func(s *diagnose.Stats) string {
		return f(s.PromptTokensMean, "%.0f") + " / " + f(s.CompletionTokensMean, "%.0f")
	}},
	{"Queue wait (s)", func(s *diagnose.Stats) string { return f(s.QueueMean, "%.3f") }},
	{"Prompt prefill (s)", func(s *diagnose.Stats) string { return f(s.PrefillMean, "%.3f") }},
	{"TTFT (s)", func(s *diagnose.Stats) string { return f(s.TTFTMean, "%.3f") }},
	{"Between two tokens (s)", func(s *diagnose.Stats) string { return f(s.TPOTMean, "%.3f") }},
	{"Token generation (s)", func(s *diagnose.Stats) string { return f(s.DecodeMean, "%.2f") }},
	{"E2E (s)", func(s *diagnose.Stats) string { return f(s.E2EMean, "%.2f") }},
	{"Running - maximum", func(s *diagnose.Stats) string { return f(s.RunningMax, "%.0f") }},
	{"Waiting - maximum", func(s *diagnose.Stats) string { return f(s.WaitingMax, "%.0f") }},
	{"KV cache - maximum", func(s *diagnose.Stats) string {
		if s.KVMax == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100**s.KVMax)
	}},
}

// IncidentRows are the quantities the silent incidents move.
var IncidentRows = []TableRow{
	{"Requests through the gateway", func(s *diagnose.Stats) string { return fmt.Sprint(s.Requests) }},
	{"Top retrieval score (p50)", func(s *diagnose.Stats) string { return f(s.RetrievalTopP50, "%.3f") }},
	{"App records by embedding model", func(s *diagnose.Stats) string { return versions(s, "embedding_model_version") }},
	{"Answers in a wrong script", func(s *diagnose.Stats) string {
		if s.WrongScriptShare == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f%% of %d", 100**s.WrongScriptShare, s.ScriptChecked)
	}},
	{"Errors 5xx", func(s *diagnose.Stats) string {
		if s.Share5xx == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100**s.Share5xx)
	}},
	{"E2E (s)", func(s *diagnose.Stats) string { return f(s.E2EMean, "%.2f") }},
	{"Running - maximum", func(s *diagnose.Stats) string { return f(s.RunningMax, "%.0f") }},
	{"Failed scrapes (up = 0)", func(s *diagnose.Stats) string { return fmt.Sprint(s.SamplesDown) }},
	{"Engine log OOM lines", func(s *diagnose.Stats) string { return fmt.Sprint(s.OOMLines) }},
}

func versions(s *diagnose.Stats, label string) string {
	m := s.Versions[label]
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for v, n := range m {
		parts = append(parts, fmt.Sprintf("%s×%d", v, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// WriteTable prints rows × windows as a table: labels left-aligned, values right-aligned.
func WriteTable(out io.Writer, ws []Window, stats []diagnose.Stats, rows []TableRow) error {
	cells := make([][]string, 0, len(rows)+1)
	head := []string{""}
	for _, w := range ws {
		head = append(head, w.Title)
	}
	cells = append(cells, head)
	for _, r := range rows {
		line := []string{r.Label}
		for i := range ws {
			line = append(line, r.Cell(&stats[i]))
		}
		cells = append(cells, line)
	}
	width := make([]int, len(head))
	for _, line := range cells {
		for i, c := range line {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, line := range cells {
		var b strings.Builder
		b.WriteString("  ")
		for i, c := range line {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("   " + pad + c)
			}
		}
		if _, err := fmt.Fprintln(out, strings.TrimRight(b.String(), " ")); err != nil {
			return err
		}
	}
	return nil
}

// Check is one statement the demo's tables must bear out.
type Check struct {
	OK   bool
	Text string
}

// SignatureChecks verifies the signatures of docs/measurements.md, Four workloads, on the
// measured table: overload is the only scenario with a queue wait (shown as above 0.000 s), long
// output has the largest E2E, and the long prompt carries about 2,900 input tokens (±5%). Windows are found by key.
func SignatureChecks(ws []Window, st []diagnose.Stats) []Check {
	byKey := map[string]*diagnose.Stats{}
	for i, w := range ws {
		byKey[w.Key] = &st[i]
	}
	val := func(p *float64) float64 {
		if p == nil {
			return 0
		}
		return *p
	}
	var queued []string
	for i, w := range ws {
		if val(st[i].QueueMean) >= 0.0005 {
			queued = append(queued, w.Key)
		}
	}
	out := []Check{{
		OK:   len(queued) == 1 && queued[0] == "overload",
		Text: fmt.Sprintf("queue wait > 0 only in overload (scenarios with a queue wait: %s)", listOrNone(queued)),
	}}
	longest, e2e := "", -1.0
	for i, w := range ws {
		if v := val(st[i].E2EMean); v > e2e {
			longest, e2e = w.Key, v
		}
	}
	out = append(out, Check{OK: longest == "long-output", Text: fmt.Sprintf("long output has the largest E2E (largest: %s, %.2f s)", longest, e2e)})
	if lp := byKey["long-prompt"]; lp != nil {
		in := val(lp.PromptTokensMean)
		out = append(out, Check{OK: in >= 2900*0.95 && in <= 2905*1.05, Text: fmt.Sprintf("long prompt carries ~2,900 input tokens (%.0f)", in)})
	}
	return out
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func rangeOf(from, to time.Time) diagnose.Range {
	return diagnose.Range{From: from.Add(-100 * time.Millisecond), To: to}
}
