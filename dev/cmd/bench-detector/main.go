// Command bench-detector measures every built-in detector rule's evaluation time on 1M and on 10M rows
// of history per landing table, with the same window and baseline, in one run (scripts/bench-detector).
//
// It creates two isolated databases and generates history in them with ClickHouse itself (INSERT …
// SELECT FROM numbers()) at one constant rate: 1M rows per table (30 h, so the 24 h baseline is
// full) and 10M rows per table (the same newest 30 h plus 11 days of older history). Each rule is
// evaluated as of the newest row's time on both databases alternately (after background merges of the
// new history settled); the rows each evaluation read are reported, and the time kept per rule and
// size is the fastest of several runs (the least disturbed by other work on the machine) and the
// median is reported beside it. Both databases are dropped at the end (unless BENCH_DETECTOR_KEEP=1). The LAST line on stdout is one JSON object:
//
//	{"bench":"detector","rows_small":1000000,"rows_large":10000000,"rules":{"<rule>":{"small_rows_read":…,
//	 "large_rows_read":…,"small_ms":…,"large_ms":…,"ratio":…}},"worst_rule":…,"scaling_ratio":…,
//	 "rows_read_ratio":…,"target_ratio":1.5,"targets_met":true}
//
// It exits 1 when the worst rule's ratio (large ÷ small) exceeds the target.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/benchkit"
	svc "github.com/servescope/servescope/internal/service"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/detector/service"
)

func main() { command().Main() }

func command() *svc.Command {
	c := svc.NewCommand("bench-detector", "Usage: bench-detector [flags]\n\n"+
		"Times every built-in detector rule on 1M and on 10M rows of history per table (scripts/bench detector).")
	s := benchSettings{
		small:      c.Flags.Int("small", 1_000_000, "rows per table in the small history"),
		large:      c.Flags.Int("large", 10_000_000, "rows per table in the large history"),
		runs:       c.Flags.Int("runs", 15, "timed evaluations per rule and size"),
		target:     c.Flags.Float64("target", 1.5, "largest allowed large ÷ small time"),
		stopMerges: c.Flags.Bool("stop-merges", true, "stop merges on the server while timing (only on a private server)"),
		private: c.Flags.Bool("private", false, "run on a private ClickHouse server (the dev build, on free loopback ports, "+
			"data in a temporary directory) instead of SERVESCOPE_CLICKHOUSE_ADDR; the working directory is the repository root"),
	}
	c.Run = func(ctx context.Context, log *slog.Logger, _ []string) error {
		return benchkit.Verdict(run(ctx, log, s))
	}
	return c
}

// benchSettings are the flags.
type benchSettings struct {
	small, large, runs  *int
	target              *float64
	stopMerges, private *bool
}

type ruleResult struct {
	// SmallRowsRead and LargeRowsRead are the rows ClickHouse read for one evaluation (its progress
	// reports): equal counts show the window and baseline were pruned, not scanned.
	SmallRowsRead           uint64  `json:"small_rows_read"`
	LargeRowsRead           uint64  `json:"large_rows_read"`
	SmallMilliseconds       float64 `json:"small_ms"`
	LargeMilliseconds       float64 `json:"large_ms"`
	SmallMedianMilliseconds float64 `json:"small_median_ms"`
	LargeMedianMilliseconds float64 `json:"large_median_ms"`
	Ratio                   float64 `json:"ratio"`
}

type result struct {
	Bench        string                 `json:"bench"`
	RowsSmall    int                    `json:"rows_small"`
	RowsLarge    int                    `json:"rows_large"`
	Rules        map[string]*ruleResult `json:"rules"`
	WorstRule    string                 `json:"worst_rule"`
	ScalingRatio float64                `json:"scaling_ratio"`
	// RowsReadRatio is the worst rule's rows read on the large ÷ the small history.
	RowsReadRatio float64 `json:"rows_read_ratio"`
	TargetRatio   float64 `json:"target_ratio"`
	TargetsMet    bool    `json:"targets_met"`
}

func run(ctx context.Context, log *slog.Logger, s benchSettings) (bool, error) {
	small, large, runs, target, stopMerges, private := s.small, s.large, s.runs, s.target, s.stopMerges, s.private
	cfg, stopServer, err := benchkit.ClickHouse(ctx, *private, "", log)
	if err != nil {
		return false, err
	}
	defer stopServer()
	id := benchkit.RunID()
	// Two databases side by side, so the rules are timed alternately on both and load from other
	// work on the machine hits both sizes alike.
	smallDB, err := benchkit.CreateDatabase(ctx, cfg, "bench_detector_small_"+id, nil)
	if err != nil {
		return false, err
	}
	defer dropUnlessKept(smallDB, log)
	largeDB, err := benchkit.CreateDatabase(ctx, cfg, "bench_detector_large_"+id, nil)
	if err != nil {
		return false, err
	}
	defer dropUnlessKept(largeDB, log)

	defs, err := service.LoadRules("")
	if err != nil {
		return false, err
	}
	// Rows are spaced so that `small` rows cover 30 h: the window and the 24 h baseline hold the same
	// rows in both databases, the large one only has older history.
	now := time.Now().UTC().Truncate(time.Minute)
	step := 30 * time.Hour / time.Duration(*small)
	for _, db := range []struct {
		c    *benchkit.Database
		rows int
	}{{smallDB, *small}, {largeDB, *large}} {
		start := time.Now()
		if err := generate(ctx, db.c.Conn, now, step, 0, db.rows); err != nil {
			return false, err
		}
		log.Info("history generated", "database", db.c.Config.Database, "rows_per_table", db.rows, "took", time.Since(start).Round(time.Millisecond))
	}

	// Background merges of the freshly inserted history would slow the large database's queries
	// only; let them finish (bounded), then hold them so both sizes are timed in a steady state.
	settleMerges(ctx, largeDB.Conn, *stopMerges, log)

	res := &result{Bench: "detector", RowsSmall: *small, RowsLarge: *large, Rules: map[string]*ruleResult{}, TargetRatio: *target}
	for _, d := range defs {
		rs, err := rules.NewSQLRule(d, smallDB.Conn)
		if err != nil {
			return false, err
		}
		rl, err := rules.NewSQLRule(d, largeDB.Conn)
		if err != nil {
			return false, err
		}
		smallRows, err := rowsRead(ctx, rs, now)
		if err != nil {
			return false, err
		}
		largeRows, err := rowsRead(ctx, rl, now)
		if err != nil {
			return false, err
		}
		sm, lg, err := timeRule(ctx, rs, rl, now, *runs)
		if err != nil {
			return false, err
		}
		rr := &ruleResult{SmallRowsRead: smallRows, LargeRowsRead: largeRows,
			SmallMilliseconds: sm[0], SmallMedianMilliseconds: sm[len(sm)/2], LargeMilliseconds: lg[0], LargeMedianMilliseconds: lg[len(lg)/2]}
		res.Rules[d.Name] = rr
		log.Info("rule timed", "rule", d.Name, "small_rows_read", smallRows, "large_rows_read", largeRows,
			"small_fastest_ms", rr.SmallMilliseconds, "large_fastest_ms", rr.LargeMilliseconds,
			"small_median_ms", rr.SmallMedianMilliseconds, "large_median_ms", rr.LargeMedianMilliseconds)
	}
	for name, rr := range res.Rules {
		rr.Ratio = benchkit.Round(rr.LargeMilliseconds/rr.SmallMilliseconds, 2)
		if rr.SmallRowsRead > 0 {
			res.RowsReadRatio = max(res.RowsReadRatio, benchkit.Round(float64(rr.LargeRowsRead)/float64(rr.SmallRowsRead), 2))
		}
		if rr.Ratio > res.ScalingRatio {
			res.ScalingRatio, res.WorstRule = rr.Ratio, name
		}
	}
	res.TargetsMet = res.ScalingRatio <= *target
	names := make([]string, 0, len(res.Rules))
	for n := range res.Rules {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		rr := res.Rules[n]
		fmt.Fprintf(os.Stderr, "%-26s %8.1f ms (1M) %8.1f ms (10M)  ratio %.2f  rows read %d / %d\n",
			n, rr.SmallMilliseconds, rr.LargeMilliseconds, rr.Ratio, rr.SmallRowsRead, rr.LargeRowsRead)
	}
	return res.TargetsMet, benchkit.PrintResult(res)
}

// timeRule evaluates the rule on both databases alternately, runs times each after a warm-up, and
// returns the sorted times in milliseconds.
func timeRule(ctx context.Context, small, large *rules.SQLRule, at time.Time, runs int) (sm, lg []float64, err error) {
	for _, r := range []*rules.SQLRule{small, large} { // warm-up: marks cache, query plans
		if _, err := r.Eval(ctx, at); err != nil {
			return nil, nil, err
		}
	}
	once := func(r *rules.SQLRule) (float64, error) {
		start := time.Now()
		if _, err := r.Eval(ctx, at); err != nil {
			return 0, err
		}
		return benchkit.Round(float64(time.Since(start).Microseconds())/1000, 2), nil
	}
	for range runs {
		s, err := once(small)
		if err != nil {
			return nil, nil, err
		}
		l, err := once(large)
		if err != nil {
			return nil, nil, err
		}
		sm, lg = append(sm, s), append(lg, l)
	}
	sort.Float64s(sm)
	sort.Float64s(lg)
	return sm, lg, nil
}

// rowsRead evaluates r once and returns the rows ClickHouse reported reading.
func rowsRead(ctx context.Context, r *rules.SQLRule, at time.Time) (uint64, error) {
	var rows atomic.Uint64
	ctx = clickhouse.Context(ctx, clickhouse.WithProgress(func(p *clickhouse.Progress) { rows.Add(p.Rows) }))
	if _, err := r.Eval(ctx, at); err != nil {
		return 0, err
	}
	return rows.Load(), nil
}

// settleMerges waits up to two minutes for running merges to finish, then (with stop, on a private
// server only) stops merges for the timed part.
func settleMerges(ctx context.Context, conn driver.Conn, stop bool, log *slog.Logger) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.merges").Scan(&n); err != nil || n == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	if !stop {
		return
	}
	if err := conn.Exec(ctx, "SYSTEM STOP MERGES"); err != nil {
		log.Warn("stop merges", "err", err)
	}
}

// dropUnlessKept drops db, unless BENCH_DETECTOR_KEEP=1 keeps it to look at afterwards.
func dropUnlessKept(db *benchkit.Database, log *slog.Logger) {
	if os.Getenv("BENCH_DETECTOR_KEEP") == "1" {
		_ = db.Conn.Close()
		return
	}
	if err := db.Drop(); err != nil {
		log.Error("drop bench database", "err", err)
	}
}

// generate inserts history rows with index in [from, to) into every table the rules read; row i is
// at now - i*step. Values are pseudo-random functions of i (cityHash64), so runs are repeatable.
func generate(ctx context.Context, conn driver.Conn, now time.Time, step time.Duration, from, to int) error {
	const chunk = 1_000_000
	stmts := []string{
		`INSERT INTO requests_started (event_id, request_id, ts, arrival_ts, model, endpoint, stream, app,
			index_version, embedding_model_version)
		SELECT concat('s', toString(i)), concat('r', toString(i)), t, t, 'Qwen/Qwen2.5-7B-Instruct-AWQ',
			'/v1/chat/completions', true, 'docs-qa', 'idx-1', 'bge-m3@1'
		FROM (SELECT number AS i, {now:DateTime64(6, 'UTC')} - toIntervalMicrosecond(number * {step_us:UInt64}) AS t
		      FROM numbers({from:UInt64}, {n:UInt64}))`,
		`INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, stream,
			status_code, queue_s, ttft_s, tpot_s, e2e_s, completion_tokens, finish_reason,
			output_foreign_chars, output_script_violation, app, index_version, embedding_model_version)
		SELECT concat('f', toString(i)), concat('r', toString(i)), t + toIntervalMillisecond(toUInt64(e2e * 1000)), t,
			t + toIntervalMillisecond(toUInt64(e2e * 1000)), 'Qwen/Qwen2.5-7B-Instruct-AWQ', '/v1/chat/completions',
			true, if(h % 100 = 0, 400, 200), 0, ttft, tpot, e2e, 128, if(h % 50 = 1, 'length', 'stop'),
			0, h % 1000 = 2, 'docs-qa', 'idx-1', 'bge-m3@1'
		FROM (SELECT number AS i, {now:DateTime64(6, 'UTC')} - toIntervalMicrosecond(number * {step_us:UInt64}) AS t,
		             cityHash64(number) AS h, 0.04 + (h % 1000) / 20000 AS ttft, 0.014 + (intDiv(h, 1000) % 1000) / 250000 AS tpot,
		             ttft + tpot * 127 AS e2e
		      FROM numbers({from:UInt64}, {n:UInt64}))`,
		`INSERT INTO app_records (event_id, request_id, ts, app, model, retrieval_top_score, retrieval_s,
			embedding_model_version, index_version, output_foreign_chars, output_script_violation)
		SELECT concat('a', toString(i)), concat('r', toString(i)), t, 'docs-qa', 'Qwen/Qwen2.5-7B-Instruct-AWQ',
			0.8 + (h % 1000) / 6250, 0.02, 'bge-m3@1', 'idx-1', 0, h % 1000 = 2
		FROM (SELECT number AS i, {now:DateTime64(6, 'UTC')} - toIntervalMicrosecond(number * {step_us:UInt64}) AS t,
		             cityHash64(number, 7) AS h
		      FROM numbers({from:UInt64}, {n:UInt64}))`,
		`INSERT INTO engine_samples (event_id, ts, engine, model, up, num_requests_running, num_requests_waiting,
			kv_cache_usage_perc)
		SELECT concat('e', toString(i)), t, concat('http://vllm-', toString(i % 4), ':8000'),
			'Qwen/Qwen2.5-7B-Instruct-AWQ', true, 5 + h % 20, 0, 0.01 + (h % 100) / 5000
		FROM (SELECT number AS i, {now:DateTime64(6, 'UTC')} - toIntervalMicrosecond(number * {step_us:UInt64}) AS t,
		             cityHash64(number, 11) AS h
		      FROM numbers({from:UInt64}, {n:UInt64}))`,
	}
	for lo := from; lo < to; lo += chunk {
		n := min(chunk, to-lo)
		params := clickhouse.Parameters{
			"now":     now.Format("2006-01-02 15:04:05.000000"),
			"step_us": fmt.Sprint(step.Microseconds()),
			"from":    fmt.Sprint(lo),
			"n":       fmt.Sprint(n),
		}
		for _, q := range stmts {
			if err := conn.Exec(clickhouse.Context(ctx, clickhouse.WithParameters(params)), q); err != nil {
				return fmt.Errorf("generate history rows %d..%d: %w", lo, lo+n, err)
			}
		}
	}
	return nil
}
