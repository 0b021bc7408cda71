package diagnose_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/servescope/servescope/dev/testclock"
	"github.com/servescope/servescope/internal/diagnose"
)

// TestHourlyBaseline: a long, large baseline is read from diagnose_hourly once its hours are
// there (migrations/000017), with the figures the requests give — exact counts, means and shares
// (each hour is under the sampling bound), quantiles within the t-digest's error; with more hours
// missing than Run computes itself it is read live, saying why; an hour that rows landed in since
// it was computed is computed again, a few late rows within the tolerance are not; and without the
// table the baseline is read live.
func TestHourlyBaseline(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	// The baseline is the 6 whole hours before the window's hour, so that the live and the hourly
	// reads cover the same requests (pinned at 23:59:30, the window crosses midnight; just after a
	// month's start, the baseline is in the month before).
	at := testclock.EvalTime(t, 3*time.Hour)
	base := diagnose.WholeHours(diagnose.Range{From: at.Add(-6 * time.Hour), To: at})
	window := diagnose.Range{From: at, To: at.Add(30 * time.Minute)}
	const perHour = 20_000 // 180 ms apart: 120,000 in the baseline, over HourlyMinRequests
	// Request n: queued 0.4 s when n % 5 = 0; E2E 1.00 to 1.99 s by n % 100; status 500 when
	// n % 50 = 0; cut at max_tokens when n % 4 = 0; a wrong-script answer when n % 10 = 0; model
	// m, prompt version p1. One application record per request with top score 0.5 to 0.99.
	insert := func(from time.Time, n, first int) {
		t.Helper()
		ts := from.Format("2006-01-02 15:04:05.000000")
		d.exec(`INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, status_code,
		            queue_s, ttft_s, e2e_s, prompt_tokens, finish_reason, output_script_violation, prompt_version)
		        SELECT concat('e-', toString(k)), concat('r-', toString(k)), arrival + INTERVAL 1 SECOND, arrival,
		               arrival + INTERVAL 1 SECOND, 'm', '/v1/chat/completions', if(k % 50 = 0, 500, 200),
		               if(k % 5 = 0, 0.4, 0), 0.05, 1.0 + (k % 100) / 100, 100,
		               if(k % 4 = 0, 'length', 'stop'), k % 10 = 0, 'p1'
		        FROM (SELECT number + ? AS k, toDateTime64(?, 6, 'UTC') + toIntervalMicrosecond(number * 180000) AS arrival
		              FROM numbers(?))`, first, ts, n)
		d.exec(`INSERT INTO app_records (event_id, request_id, ts, app, retrieval_top_score)
		        SELECT concat('a-', toString(k)), concat('r-', toString(k)), arrival, 'rag', 0.5 + (k % 50) / 100
		        FROM (SELECT number + ? AS k, toDateTime64(?, 6, 'UTC') + toIntervalMicrosecond(number * 180000) AS arrival
		              FROM numbers(?))`, first, ts, n)
	}
	insert(base.From, 6*perHour, 0)
	insert(window.From, 1000, 10_000_000)
	run := func() diagnose.Report {
		t.Helper()
		rep, err := diagnose.Run(d.ctx, d.conn, diagnose.Options{Window: window, Baseline: base})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}

	rep := run()
	if rep.BaselineSource != diagnose.BaselineLive || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "6 of its 6 hours are not in diagnose_hourly (the detector") {
		t.Fatalf("with no hour computed: baseline %q, notes %q; want it read live, saying 6 of 6 hours are missing", rep.BaselineSource, rep.Notes)
	}
	live := rep.Base

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := diagnose.Warm(d.ctx, d.conn, base.To.Add(10*time.Minute), 6*time.Hour, log)
	if err != nil || n != 6 {
		t.Fatalf("Warm computed %d hours (%v), want the baseline's 6", n, err)
	}
	if n, err := diagnose.Warm(d.ctx, d.conn, base.To.Add(10*time.Minute), 6*time.Hour, log); err != nil || n != 0 {
		t.Fatalf("Warm again computed %d hours (%v), want none: nothing changed", n, err)
	}
	rep = run()
	if rep.BaselineSource != diagnose.BaselineHourly || rep.Baseline != base || len(rep.Notes) != 0 {
		t.Fatalf("baseline %q over %s, notes %q; want diagnose_hourly over %s and no note", rep.BaselineSource, rep.Baseline, rep.Notes, base)
	}
	s := rep.Base
	if s.Requests != 6*perHour || s.StatusCodes[500] != 6*perHour/50 || !near(s.Share5xx, 0.02, 1e-12) {
		t.Errorf("requests %d, 500s %d, 5xx share %v; want %d, %d and 0.02", s.Requests, s.StatusCodes[500], deref(s.Share5xx), 6*perHour, 6*perHour/50)
	}
	if !near(s.QueueMean, 0.08, 1e-9) || !near(s.E2EMean, 1.495, 1e-9) || !near(s.LengthShare, 0.25, 1e-12) ||
		!near(s.PromptTokensMean, 100, 1e-9) || !near(s.TTFTMean, 0.05, 1e-9) {
		t.Errorf("queue mean %v, e2e mean %v, length share %v, tokens in %v, ttft %v; want 0.08, 1.495, 0.25, 100 and 0.05 exactly",
			deref(s.QueueMean), deref(s.E2EMean), deref(s.LengthShare), deref(s.PromptTokensMean), deref(s.TTFTMean))
	}
	if !near(s.E2EP50, 1.495, 0.02) || !near(s.E2EP95, 1.945, 0.02) || !near(s.QueueP95, 0.4, 0.01) {
		t.Errorf("e2e p50 %v, p95 %v, queue p95 %v; want about 1.495, 1.945 and 0.4", deref(s.E2EP50), deref(s.E2EP95), deref(s.QueueP95))
	}
	if s.RetrievalN != 6*perHour || !near(s.RetrievalTopP50, 0.745, 0.02) {
		t.Errorf("retrieval records %d, top score p50 %v; want %d and about 0.745", s.RetrievalN, deref(s.RetrievalTopP50), 6*perHour)
	}
	if s.ScriptChecked != 6*perHour || !near(s.WrongScriptShare, 0.1, 1e-12) || s.SampleFactor != 0 {
		t.Errorf("script checks %d, wrong share %v, sample factor %d; want %d, 0.1, exact", s.ScriptChecked, deref(s.WrongScriptShare), s.SampleFactor, 6*perHour)
	}
	if s.Versions["model"]["m"] != 6*perHour || s.Versions["prompt_version"]["p1"] != 6*perHour {
		t.Errorf("versions %v, want model m and prompt_version p1 with %d requests each", s.Versions, 6*perHour)
	}
	// The live read of the same baseline (sampled: over 100,000 requests) agrees.
	if live.Requests != s.Requests || !near(live.QueueMean, 0.08, 0.004) || !near(live.E2EP95, *s.E2EP95, 0.03) {
		t.Errorf("live: requests %d, queue mean %v, e2e p95 %v; by the hour %d, %v, %v", live.Requests, deref(live.QueueMean), deref(live.E2EP95),
			s.Requests, deref(s.QueueMean), deref(s.E2EP95))
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "its whole hours, merged from diagnose_hourly") || !s.CountsByHour ||
		!strings.Contains(out.String(), "baseline m (≈120000)") || !strings.Contains(out.String(), "≈: the baseline's counts are summed over its hours") {
		t.Errorf("the text does not say where the baseline came from, or does not mark its counts summed by hour (counts_by_hour %v):\n%s", s.CountsByHour, out.String())
	}

	// 1,000 requests land in the third hour: Run computes that hour again itself.
	insert(base.From.Add(2*time.Hour+30*time.Minute), 1000, 20_000_000)
	if rep = run(); rep.BaselineSource != diagnose.BaselineHourly || rep.Base.Requests != 6*perHour+1000 {
		t.Errorf("after 1,000 more requests: baseline %q with %d requests, want diagnose_hourly with %d", rep.BaselineSource, rep.Base.Requests, 6*perHour+1000)
	}
	// 5 more, under 0.1% of the hour: the row stands.
	insert(base.From.Add(2*time.Hour+40*time.Minute), 5, 30_000_000)
	if rep = run(); rep.Base.Requests != 6*perHour+1000 {
		t.Errorf("after 5 more requests: %d, want the row computed before them (%d) to stand", rep.Base.Requests, 6*perHour+1000)
	}

	// A schema without the table (before migrations/000017): read live, saying so.
	d.exec(`DROP TABLE diagnose_hourly`)
	if rep = run(); rep.BaselineSource != diagnose.BaselineLive || rep.Base.Requests != 6*perHour+1005 ||
		len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "servescope migrate") {
		t.Errorf("without diagnose_hourly: baseline %q, %d requests, notes %q; want it live with %d and a note", rep.BaselineSource, rep.Base.Requests, rep.Notes, 6*perHour+1005)
	}
}

func TestWholeHours(t *testing.T) {
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }
	for _, tc := range []struct{ from, to, want0, want1 string }{
		{"2026-09-10T15:53:00Z", "2026-09-11T15:53:00Z", "2026-09-10T15:00:00Z", "2026-09-11T15:00:00Z"},
		{"2026-09-11T00:00:00Z", "2026-09-11T06:00:00Z", "2026-09-11T00:00:00Z", "2026-09-11T06:00:00Z"},
		{"2026-09-11T05:50:00Z", "2026-09-11T06:20:00Z", "2026-09-11T05:00:00Z", "2026-09-11T06:00:00Z"},
	} {
		got := diagnose.WholeHours(diagnose.Range{From: at(tc.from), To: at(tc.to)})
		if want := (diagnose.Range{From: at(tc.want0), To: at(tc.want1)}); got != want {
			t.Errorf("WholeHours(%s → %s) = %s, want %s", tc.from, tc.to, got, want)
		}
	}
}

func TestHourlyErrorSaysWhatToDo(t *testing.T) {
	wrap := func(code int32, msg string) error {
		return fmt.Errorf("compute the hour 2026-12-02T07:00:00Z into diagnose_hourly: %w", &clickhouse.Exception{Code: code, Message: msg})
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{wrap(60, "Unknown table expression identifier 'diagnose_hourly' In scope SELECT hour FROM diagnose_hourly"), "does not exist (servescope migrate up creates it)"},
		{wrap(497, "servescope_console: Not enough privileges. To execute this query, it's necessary to have the grant INSERT(hour, model) ON servescope.diagnose_hourly"), "may not write diagnose_hourly"},
		{wrap(241, "Memory limit exceeded In scope SELECT a very long statement"), "diagnose_hourly: code 241: Memory limit exceeded"},
		{errors.New("dial tcp: connection refused"), "dial tcp: connection refused"},
	} {
		got := diagnose.HourlyError(tc.err)
		if !strings.Contains(got, tc.want) || strings.Contains(got, "In scope") {
			t.Errorf("HourlyError(%v) = %q, want it to contain %q and no statement", tc.err, got, tc.want)
		}
	}
}
