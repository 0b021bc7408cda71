package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/servescope/servescope/internal/chstore"
	detectorservice "github.com/servescope/servescope/services/detector/service"
	"github.com/servescope/servescope/sim/loadgen/load"
)

// play runs the scenarios and incidents and prints the report.
func (r *run) play(ctx context.Context) error {
	gw := url(r.stack.Ports.Gateway, "")
	var expect []Expectation

	// The four workloads of docs/measurements.md, one after the other (in RunOrder), each in its
	// own window; scen keeps docs/measurements.md's order for the report.
	r.step("the four workloads of docs/measurements.md through the gateway (loadgen, open loop, vllmsim at real time), the overload last:")
	byKey := map[string]Scenario{}
	for _, sc := range Scenarios(gw) {
		byKey[sc.Key] = sc
	}
	ran := map[string]Window{}
	for _, key := range RunOrder {
		sc := byKey[key]
		w, err := RunLoad(ctx, r.out, sc.Key, sc.Title, sc.Load)
		if err != nil {
			return err
		}
		if sc.Key == "overload" {
			expect = append(expect, Expectation{Incident: "overload", Rules: []string{"overload_queue", "unfinished_rising"}, Since: w.Range.From},
				Expectation{Incident: "overload's TTFT burn", Rules: []string{TTFTPage}, Since: w.Range.From})
		}
		ran[key] = w
	}
	var scen []Window
	for _, sc := range Scenarios(gw) {
		scen = append(scen, ran[sc.Key])
	}

	// Incident 1: the query-side embedding model changes, the index stays.
	r.step("incident 1: ragdemo's query embedding model switches from hash-embed-v1 to hash-embed-v2 without re-indexing…")
	before, err := r.ask(ctx, "embedding-before", "Embedding v1", 16)
	if err != nil {
		return err
	}
	if err := r.switchEmbedding(ctx, "hash-embed-v2"); err != nil {
		return err
	}
	after, err := r.ask(ctx, "embedding-after", "Embedding v2", 40)
	if err != nil {
		return err
	}
	expect = append(expect, Expectation{Incident: "embedding version switch", Rules: []string{"retrieval_version_change", "retrieval_score_drift"}, Since: after.Range.From})

	// Incident 2: the model starts mixing Chinese into English answers.
	r.step("incident 2: the engine restarts with --wrong-language-share 0.25 (answers mixed with Chinese)…")
	if err := r.restartEngine(ctx, "--wrong-language-share", "0.25"); err != nil {
		return err
	}
	wl, err := RunLoad(ctx, r.out, "wrong-lang", "Wrong language", Natural(load.Config{Target: gw, MetricsURL: "none", Scenario: "normal", Duration: 20 * time.Second, Seed: 11, HTTPClient: LoadClient()}))
	if err != nil {
		return err
	}
	expect = append(expect, Expectation{Incident: "wrong-language answers", Rules: []string{"output_language_errors"}, Since: wl.Range.From})

	// Incident 3: the engine dies under load (docs/measurements.md, The crash).
	r.step("incident 3: the engine restarts with --crash-at-running 190 and takes the overload (docs/measurements.md, The crash)…")
	if err := r.restartEngine(ctx, "--crash-at-running", "190"); err != nil {
		return err
	}
	r.engine.ExpectExit()
	crashed := r.engine
	crash, err := RunLoad(ctx, r.out, "crash", "Engine crash", Natural(load.Config{Target: gw, MetricsURL: "none", Scenario: "overload", Duration: 25 * time.Second, Seed: 13, RequestTimeout: 2 * time.Minute, HTTPClient: LoadClient()}))
	if err != nil {
		return err
	}
	select {
	case <-crashed.Done():
		r.step("the engine process is gone (%v); the collector kept its log", crashed.Err())
	default:
		r.step("the engine did not crash: running never exceeded 190")
	}
	expect = append(expect, Expectation{Incident: "engine crash", Rules: []string{"server_errors"}, Since: crash.Range.From})

	// The stack stays usable after the demo (without --once): a healthy engine again.
	if !r.opt.Once {
		if err := r.restartEngine(ctx); err != nil {
			return err
		}
	}

	r.step("waiting for the last records to reach ClickHouse and for the detector's alerts…")
	for _, w := range append(append([]Window{}, scen...), wl) {
		if err := WaitIngested(ctx, r.conn, w); err != nil {
			return err
		}
	}
	missing := r.waitAlerts(ctx, expect, 90*time.Second)
	// The TTFT page resolves once its longest short window (1 minute, scaled) holds no miss.
	r.waitResolved(ctx, TTFTPage, "ttft", ran["overload"].Range.From, 3*time.Minute)

	// The report.
	fmt.Fprintf(r.out, "\n(a) The four workloads (docs/measurements.md), computed from ClickHouse (database %s: gateway requests joined with the engine's spans, collector samples every 0.5 s)\n\n", r.stack.Database)
	st, err := Measure(ctx, r.conn, scen)
	if err != nil {
		return err
	}
	if err := WriteTable(r.out, scen, st, SignatureRows); err != nil {
		return err
	}
	checks := SignatureChecks(scen, st)
	for _, c := range checks {
		fmt.Fprintf(r.out, "  %s %s\n", mark(c.OK), c.Text)
	}
	for _, w := range scen {
		if w.Key != "overload" {
			continue
		}
		ns, err := MeasureNonStreaming(ctx, r.conn, w)
		if err != nil {
			return err
		}
		if err := WriteNonStreaming(r.out, w.Title, ns); err != nil {
			return err
		}
		c := ns.Check()
		fmt.Fprintf(r.out, "  %s %s\n", mark(c.OK), c.Text)
		checks = append(checks, c)
	}

	fmt.Fprintf(r.out, "\n    The silent incidents, from ClickHouse\n\n")
	inc := []Window{before, after, wl, crash}
	ist, err := Measure(ctx, r.conn, inc)
	if err != nil {
		return err
	}
	if err := WriteTable(r.out, inc, ist, IncidentRows); err != nil {
		return err
	}

	fmt.Fprintf(r.out, "\n(b) Alerts the demo's webhook receiver got from the detector (times since the demo started; baseline: the synthetic normal day)\n\n")
	WriteAlerts(r.out, r.recv.Alerts(), r.started)
	var phases []Phase
	for _, w := range append(append([]Window{}, scen...), inc...) {
		phases = append(phases, Phase{Name: w.Title, Start: w.Range.From, Rules: PhaseRules[w.Key]})
	}
	flaps, flapCount := Flaps(r.recv.Alerts(), phases)
	fmt.Fprintln(r.out)
	WriteFlaps(r.out, flaps, flapCount)
	unexpected := Unexpected(r.recv.Alerts(), phases)
	WriteUnexpected(r.out, unexpected, phases)
	links := CheckLinks(ctx, r.recv.Alerts(), r.stack.ConsoleToken)
	WriteLinks(r.out, links)
	if st, err := ScrapeDetectorStats(ctx, url(r.stack.Ports.Detector, "/metrics")); err != nil {
		fmt.Fprintf(r.out, "  detector: %v\n", err)
	} else {
		WriteDetectorStats(r.out, st)
	}
	fmt.Fprintln(r.out, "\n  The clients of every phase but long output behave as the synthetic normal day's (max_tokens 4× the")
	fmt.Fprintln(r.out, "  typical answer, answers ending naturally, as vllmsim's do): only what a phase changes can fire.")
	fmt.Fprintln(r.out)
	for _, e := range expect {
		rule, at, ok := r.recv.Met(e)
		if ok {
			fmt.Fprintf(r.out, "  %s %-25s → %s, %.0f s after it began\n", mark(true), e.Incident, rule, at.Sub(e.Since).Seconds())
		} else {
			fmt.Fprintf(r.out, "  %s %-25s → none of %s arrived\n", mark(false), e.Incident, strings.Join(e.Rules, ", "))
		}
	}

	fmt.Fprintf(r.out, "\n(c) The crash, from engine_logs (the engine's own log, kept by the collector)\n\n")
	if err := r.writeCrash(ctx, crash); err != nil {
		return err
	}
	slChecks, err := r.serviceLevels(ctx, scen)
	if err != nil {
		return err
	}
	checks = append(checks, slChecks...)

	// The verdicts, as the console reads them: the rules the console and the detector load.
	defs, err := detectorservice.LoadRules(filepath.Join(r.dirs.State, "rules"))
	if err != nil {
		return err
	}
	ruleWindows := RuleWindows(defs)
	fmt.Fprintf(r.out, "\n(e) Beside each incident, the complaint page a user would open for it, over the incident's window, as the\n    console reads it (diagnose at the rules' windows against the 24 h ending 1 h before, the range's alerts first)\n\n")
	pageFails, err := WritePageVerdicts(ctx, r.out, r.conn, append(append([]Window{}, scen...), inc...), ruleWindows)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.out, "\n(f) Every complaint page over the last hour names the alerts that fired in it (the webhook receiver's)\n\n")
	hourFails, err := WriteLastHourPages(ctx, r.out, r.conn, r.recv.Alerts(), ruleWindows)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.out, "\ndemo finished in %s\n", time.Since(r.started).Round(time.Second))

	var fails []string
	for _, e := range missing {
		fails = append(fails, fmt.Sprintf("no %s alert for the %s", strings.Join(e.Rules, " or "), e.Incident))
	}
	for _, c := range checks {
		if !c.OK {
			fails = append(fails, c.Text)
		}
	}
	for _, f := range flaps {
		fails = append(fails, fmt.Sprintf("%s %s flapped: fired %d times during %s", f.Rule, f.Labels, f.Firings, f.Phase))
	}
	for _, e := range unexpected {
		fails = append(fails, fmt.Sprintf("unexpected alert %s %s: %s", e.Rule, e.Labels, e.Summary))
	}
	for _, l := range links {
		if !l.OK() {
			fails = append(fails, fmt.Sprintf("alert link %s of %s does not open: %s", l.URL, l.Rule, l.Problem))
		}
	}
	fails = append(append(fails, pageFails...), hourFails...)
	if len(fails) > 0 && r.opt.Once {
		return fmt.Errorf("the demo did not show what it must:\n  %s", strings.Join(fails, "\n  "))
	}
	return nil
}

func mark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

// PhaseRules are, by window key, the rules whose alerts each phase of the demo explains: its
// incident's, and the true consequences of its load against a normal day's baseline. Any other
// alert is unexpected, and fails the demo. Phases not named explain none (normal, and ragdemo's
// questions before the switch).
var PhaseRules = map[string][]string{
	"overload":    append([]string{"overload_queue", "unfinished_rising", "slot_limit", "latency_p95"}, SLORules...),
	"long-prompt": append([]string{"latency_p95"}, SLORules...),
	// Answers of 1,024 tokens, cut at max_tokens by design (ignore_eos), each in flight 8× longer.
	"long-output":     append([]string{"latency_p95", "truncated_outputs", "unfinished_rising"}, SLORules...),
	"embedding-after": {"retrieval_version_change", "retrieval_score_drift"},
	"wrong-lang":      {"output_language_errors"},
	// The overload that kills the engine, the 5xx, and the engine gone (not restarted with --once).
	"crash": append([]string{"server_errors", "engine_not_scraped", "unfinished_rising", "latency_p95", "overload_queue", "slot_limit"}, SLORules...),
}

// SLORules are the built-in SLO's burn-rate rules (windows ÷SLOScale). They judge the streams'
// TTFT, TPOT and availability, so a phase whose load slows answers (latency_p95) or fails them
// (server_errors) burns its budget as a true consequence: the overload's TTFT page is one of the
// demo's checks, and a slowed phase may page or ticket too.
var SLORules = []string{TTFTPage, "slo_streams_ticket"}

// waitAlerts waits until every expectation is met or timeout passes, and returns those unmet.
func (r *run) waitAlerts(ctx context.Context, expect []Expectation, timeout time.Duration) []Expectation {
	deadline := time.Now().Add(timeout)
	for {
		var missing []Expectation
		for _, e := range expect {
			if _, _, ok := r.recv.Met(e); !ok {
				missing = append(missing, e)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return missing
		}
		select {
		case <-r.recv.notify:
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
}

// waitResolved waits until every episode of rule's alerts for objective that fired since since
// has resolved, or timeout passes.
func (r *run) waitResolved(ctx context.Context, rule, objective string, since time.Time, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		eps := PageEpisodes(r.recv.Alerts(), rule, objective, since)
		open := 0
		for _, e := range eps {
			if e.ResolvedAt.IsZero() {
				open++
			}
		}
		if open == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		select {
		case <-r.recv.notify:
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
}

// ask sends n of ragdemo's questions (cycling through them, 4 at a time) and returns their window.
func (r *run) ask(ctx context.Context, key, title string, n int) (Window, error) {
	qs := questions()
	start := time.Now().UTC()
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	var scores []float64
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func(q string) {
			defer wg.Done()
			defer func() { <-sem }()
			body, _ := json.Marshal(map[string]string{"question": q})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url(r.stack.Ports.RAG, "/ask"), bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, err.Error())
				return
			}
			defer resp.Body.Close()
			var ans struct {
				TopScore float64 `json:"top_score"`
				Error    string  `json:"error"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&ans)
			if resp.StatusCode != http.StatusOK {
				failed = append(failed, fmt.Sprintf("HTTP %d: %s", resp.StatusCode, ans.Error))
				return
			}
			scores = append(scores, ans.TopScore)
		}(qs[i%len(qs)])
	}
	wg.Wait()
	time.Sleep(time.Second)
	w := Window{Key: key, Title: title, Range: rangeOf(start, time.Now().UTC())}
	if len(failed) > 0 {
		return w, fmt.Errorf("%d of %d ragdemo questions failed, e.g. %s", len(failed), n, failed[0])
	}
	fmt.Fprintf(r.out, "    %-16s %d questions to ragdemo answered, top scores as ragdemo saw them: %s\n", key, n, median(scores))
	return w, nil
}

func median(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	sort.Float64s(v)
	return fmt.Sprintf("median %.3f", v[len(v)/2])
}

func (r *run) switchEmbedding(ctx context.Context, version string) error {
	body, _ := json.Marshal(map[string]string{"version": version})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url(r.stack.Ports.RAG, "/admin/embedding-model"), bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+r.stack.AdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("switch ragdemo's embedding model: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("switch ragdemo's embedding model: HTTP %d", resp.StatusCode)
	}
	return nil
}

// writeCrash prints the engine's last periodic stats lines before its out-of-memory line, and the
// OOM line itself with the multiplication that explains it (docs/measurements.md, The crash), all
// read from engine_logs.
func (r *run) writeCrash(ctx context.Context, crash Window) error {
	pctx := chstore.WithParams(ctx, map[string]string{
		"from_us": fmt.Sprint(crash.Range.From.Add(-5 * time.Second).UnixMicro()),
		"engine":  EngineName,
	})
	var oomTS time.Time
	var oomMsg string
	var oomBytes *uint64
	var frames []string
	err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		rows, err := r.conn.Query(pctx, `
			SELECT ts, message, oom_bytes_requested, frames FROM engine_logs FINAL
			WHERE engine = {engine:String} AND ingested_at >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
			  AND oom_bytes_requested IS NOT NULL
			ORDER BY ts DESC LIMIT 1`)
		if err != nil {
			return false, fmt.Errorf("read the OOM line from engine_logs: %w", err)
		}
		defer rows.Close()
		if rows.Next() {
			if err := rows.Scan(&oomTS, &oomMsg, &oomBytes, &frames); err != nil {
				return false, fmt.Errorf("scan the OOM line: %w", err)
			}
			return true, nil
		}
		return false, rows.Err()
	}, "the engine's OOM line in engine_logs")
	if err != nil {
		fmt.Fprintf(r.out, "  no out-of-memory line in engine_logs: %v\n", err)
		return nil
	}
	rows, err := r.conn.Query(chstore.WithParams(pctx, map[string]string{
		"from_us": fmt.Sprint(crash.Range.From.Add(-5 * time.Second).UnixMicro()),
		"engine":  EngineName,
		"oom_us":  fmt.Sprint(oomTS.UnixMicro()),
	}), `
		SELECT ts, running, waiting, kv_cache_usage_perc, line FROM
		(
		    -- vLLM stamps its log lines to the second: the file offset orders lines of one second.
		    SELECT ts, offset, running, waiting, kv_cache_usage_perc, line FROM engine_logs FINAL
		    WHERE engine = {engine:String} AND ingested_at >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
		      AND running IS NOT NULL AND ts <= fromUnixTimestamp64Micro({oom_us:Int64}, 'UTC')
		    ORDER BY ts DESC, offset DESC LIMIT 4
		)
		ORDER BY ts, offset`)
	if err != nil {
		return fmt.Errorf("read the engine's last stats lines: %w", err)
	}
	defer rows.Close()
	fmt.Fprintf(r.out, "  %-12s %8s %8s %10s\n", "Time", "Running", "Waiting", "KV cache")
	var lastRunning uint32
	for rows.Next() {
		var ts time.Time
		var running, waiting *uint32
		var kv *float64
		var line string
		if err := rows.Scan(&ts, &running, &waiting, &kv, &line); err != nil {
			return fmt.Errorf("scan a stats line: %w", err)
		}
		kvText := "-"
		if kv != nil {
			kvText = fmt.Sprintf("%.1f%%", 100**kv)
		}
		fmt.Fprintf(r.out, "  %-12s %8s %8s %10s\n", ts.Format("15:04:05"), u32(running), u32(waiting), kvText)
		if running != nil {
			lastRunning = *running
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the engine's last stats lines: %w", err)
	}
	fmt.Fprintf(r.out, "  %-12s last words:\n", oomTS.Format("15:04:05"))
	for _, l := range sentences(oomMsg, 2) {
		fmt.Fprintf(r.out, "      %s\n", l)
	}
	if len(frames) > 0 {
		fmt.Fprintf(r.out, "      … in %s\n", frames[len(frames)-1])
	}
	if oomBytes != nil {
		rows := float64(*oomBytes) / (VocabSize * 4)
		fmt.Fprintf(r.out, "  %.2f MiB requested = %.1f × %d (vocabulary) × 4 bytes: a logits-sized tensor of ~%.0f running sequences", float64(*oomBytes)/(1<<20), rows, VocabSize, rows)
		if lastRunning > 0 {
			fmt.Fprintf(r.out, " (last stats line: %d running)", lastRunning)
		}
		fmt.Fprintln(r.out)
	}
	return nil
}

// VocabSize is the logits width of vllmsim's default model (Qwen2.5's vocabulary, --vocab-size).
const VocabSize = 152064

// sentences returns the first n sentences of msg, one per element.
func sentences(msg string, n int) []string {
	var out []string
	rest := strings.TrimSpace(msg)
	for len(out) < n && rest != "" {
		i := strings.Index(rest, ". ")
		if i < 0 {
			out = append(out, rest)
			break
		}
		out = append(out, rest[:i+1])
		rest = strings.TrimSpace(rest[i+2:])
	}
	return out
}

func u32(p *uint32) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}
