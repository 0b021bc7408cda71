// Package history generates a long history of servescope data — the gateway's requests_started
// and requests rows, applications' app_records, the engine's engine_spans, and the collector's
// engine_samples and engine_logs — inside ClickHouse, with INSERT … SELECT FROM numbers(), so a
// month of a busy service takes server CPU time instead of days of publishing events: about
// 22 µs per request (its four rows) and 90 µs per engine sample, so 100 M requests with samples
// every second from four engines are about 50 CPU-minutes, and ~40 GB on disk.
//
// The traffic is shaped like dev/synth's normal day: arrivals follow a daily cycle (mean rate
// Requests ÷ Span, peaking at 14:00 UTC and lowest at 02:00 UTC, swinging by ±Amplitude), TTFT
// is log-normal around 0.05 s, the time between tokens around 0.016 s, answers about 128 tokens
// (2% stop at max_tokens), 1% of requests get a 400, 0.1% of answers are in a wrong script, the
// RAG application's top passage score is normal around 0.88. Ids have the shape of the real ones
// (27-character KSUIDs that sort by time, 32 and 16 hex digit trace and span ids, vLLM's
// chatcmpl-<id>), engine samples carry the keys and histogram buckets vllmsim's /metrics gives
// the collector (vLLM main), rising as the traffic does, and the engine log holds vLLM's
// periodic stats line. What the columns hold is therefore what production would compress and
// scan, not repeated constants.
//
// Every value is a pure function of the seed and the row's index, so a Spec generates the same
// rows every time, and Options.From generates exactly the rows of the whole history that fall in
// a later window: two databases can hold the same newest day, one of them with a month before it.
//
// Usage:
//
//	spec := history.Normal(end, 30*24*time.Hour, 100_000_000)
//	if err := history.ExtendRetention(ctx, conn, spec); err != nil { … }   // spans and samples keep 14 days by default
//	counts, err := spec.Generate(ctx, conn, history.Options{})
//
// The database must be migrated (servescope migrate up). dev/cmd/history is the command-line
// form.
package history

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
)

// Spec describes a history.
type Spec struct {
	// End is the end of the history: arrivals are in [End−Span, End). Requests still running at
	// End finish after it, as in a live system.
	End time.Time
	// Span is how far back the history goes.
	Span time.Duration
	// Requests is the number of requests over the whole Span.
	Requests uint64
	// Engines is the number of vLLM engines serving them (requests are spread evenly); each one
	// has its own engine samples and log.
	Engines int
	// SampleInterval is the collector's scrape period per engine (COLLECTOR_SCRAPE_INTERVAL).
	SampleInterval time.Duration
	// StatsLogInterval is vLLM's stats line period per engine (VLLM_LOG_STATS_INTERVAL).
	StatsLogInterval time.Duration
	// Amplitude is the daily swing of the arrival rate, a fraction of the mean (0 ≤ a < 1).
	Amplitude float64
	// AppShare is the share of requests that also have an app.record (from the RAG application).
	AppShare float64
	// Seed selects the random draws.
	Seed uint64
}

// Normal is a history of requests over span ending at end, with the normal day's shape: four
// engines scraped every second (the collector's default), vLLM's stats line every 10 s, a daily
// swing of ±60%, and every request from the RAG application (as dev/synth's normal day).
func Normal(end time.Time, span time.Duration, requests uint64) Spec {
	return Spec{
		End: end.UTC(), Span: span, Requests: requests, Engines: 4,
		SampleInterval: time.Second, StatsLogInterval: 10 * time.Second,
		Amplitude: 0.6, AppShare: 1, Seed: 1,
	}
}

// Start is the beginning of the history.
func (s Spec) Start() time.Time { return s.End.Add(-s.Span) }

// MeanRate is the mean arrival rate in requests per second.
func (s Spec) MeanRate() float64 { return float64(s.Requests) / s.Span.Seconds() }

// Validate says what is wrong with s, if anything.
func (s Spec) Validate() error {
	switch {
	case s.End.IsZero() || s.Span <= 0:
		return errors.New("history: End and a positive Span are required")
	case s.Requests == 0:
		return errors.New("history: Requests must be positive")
	case s.Engines <= 0 || s.Engines > 999:
		return fmt.Errorf("history: Engines %d, want 1..999", s.Engines)
	case s.SampleInterval < time.Millisecond || s.StatsLogInterval < time.Millisecond:
		return errors.New("history: SampleInterval and StatsLogInterval must be at least 1 ms")
	case s.Amplitude < 0 || s.Amplitude >= 1:
		return fmt.Errorf("history: Amplitude %v, want [0, 1)", s.Amplitude)
	case s.AppShare < 0 || s.AppShare > 1:
		return fmt.Errorf("history: AppShare %v, want [0, 1]", s.AppShare)
	}
	return nil
}

// The daily cycle: rate(t) = mean × (1 + a·cos(ω·t − φ)), t in Unix seconds, peaking at 14:00
// UTC. warp(t) = ∫ from Start to t of (1 + a·cos(ω·x − φ)) dx is the cumulative arrivals in units
// of the mean rate; request i arrives where warp reaches (i + jitter) × warp(End) ÷ Requests.
const (
	omega = 2 * math.Pi / 86400
	phase = 2 * math.Pi * 14 / 24
)

func (s Spec) warp(t float64) float64 {
	t0 := float64(s.Start().UnixMicro()) / 1e6
	a := s.Amplitude / omega
	return (t - t0) + a*(math.Sin(omega*t-phase)-math.Sin(omega*t0-phase))
}

// index is the first request index arriving at or after t.
func (s Spec) index(t time.Time) uint64 {
	if !t.After(s.Start()) {
		return 0
	}
	if !t.Before(s.End) {
		return s.Requests
	}
	x := s.warp(float64(t.UnixMicro())/1e6) / s.warp(float64(s.End.UnixMicro())/1e6) * float64(s.Requests)
	return uint64(math.Max(0, math.Floor(x)))
}

// Options say what part of a Spec to generate and how.
type Options struct {
	// From, when set, generates only the rows of the history from this time on: requests arriving
	// at or after it (a few just before it, so every request in the window is there), samples and
	// log lines at or after it. They are exactly the rows the whole Spec has there.
	From time.Time
	// To, when set, generates only the rows before it: requests arriving before it (with their
	// records, spans and app records, whenever those end), samples and log lines before it.
	// With From it generates a window of the history; windows that meet hold every row once.
	To time.Time
	// Tables, when set, are the only tables generated (of Tables): a history's samples can be
	// generated beside its requests, in another connection.
	Tables []string
	// ChunkRequests is the number of requests per INSERT (default 2,000,000): more is faster and
	// takes more server memory.
	ChunkRequests uint64
	// Progress, when set, is called after each INSERT with the table and the rows inserted so far.
	Progress func(table string, rows uint64)
}

// Counts are the rows a generation inserted per table.
type Counts map[string]uint64

// Tables are the tables a Spec fills.
var Tables = []string{"requests_started", "requests", "app_records", "engine_spans", "engine_samples", "engine_logs"}

// RetentionDays is the TTL, in days, every table needs to keep the whole history: a table's TTL
// applies when rows are written, so older rows would be dropped at once.
func (s Spec) RetentionDays() int {
	return int(math.Ceil(time.Since(s.Start()).Hours()/24)) + 1
}

// ExtendRetention raises the TTL of every table keeping fewer than s.RetentionDays() days (engine
// spans and samples keep 14 by default) with chstore.SetTTL, the statement of
// `servescope migrate ttl`; longer ones are left alone.
func ExtendRetention(ctx context.Context, conn driver.Conn, s Spec) error {
	days := s.RetentionDays()
	for _, t := range Tables {
		var engine string
		if err := conn.QueryRow(ctx, "SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = {t:String}",
			clickhouse.Named("t", t)).Scan(&engine); err != nil {
			return fmt.Errorf("read the TTL of %s: %w", t, err)
		}
		if m := ttlDays.FindStringSubmatch(engine); m != nil {
			if have, _ := strconv.Atoi(m[1]); have >= days {
				continue
			}
		}
		if err := chstore.SetTTL(ctx, conn, t, days); err != nil {
			return fmt.Errorf("extend the retention of %s to %d days: %w", t, days, err)
		}
	}
	return nil
}

// ttlDays reads a table's retention in days from its engine_full, as ClickHouse shows the TTL the
// migrations write: "TTL toDateTime(ts) + toIntervalDay(14)".
var ttlDays = regexp.MustCompile(`\bTTL toDateTime\(\w+\) \+ toIntervalDay\((\d+)\)`)

// Generate inserts the history (or its part from opt.From) into conn's database.
func (s Spec) Generate(ctx context.Context, conn driver.Conn, opt Options) (Counts, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	for _, t := range opt.Tables {
		if !slices.Contains(Tables, t) {
			return nil, fmt.Errorf("history: no table %q, want some of %s", t, strings.Join(Tables, ", "))
		}
	}
	tmpl, err := SampleTemplate()
	if err != nil {
		return nil, err
	}
	if opt.ChunkRequests == 0 {
		opt.ChunkRequests = 2_000_000
	}
	counts := Counts{}
	note := func(table string, n uint64) {
		counts[table] += n
		if opt.Progress != nil {
			opt.Progress(table, counts[table])
		}
	}
	params := s.params()
	// Requests arriving up to a minute before From finish inside the window (E2E is seconds).
	lo := s.index(opt.From.Add(-time.Minute))
	if opt.From.IsZero() {
		lo = 0
	}
	hi := s.Requests
	if !opt.To.IsZero() {
		// The requests of the minute before To belong to the window from To on (see lo).
		hi = s.index(opt.To.Add(-time.Minute))
	}
	wanted := func(t string) bool { return len(opt.Tables) == 0 || slices.Contains(opt.Tables, t) }
	reqTables := slices.DeleteFunc(slices.Clone(requestTables), func(t tableQuery) bool { return !wanted(t.table) })
	if len(reqTables) == 0 {
		hi = lo
	}
	base := fmt.Sprintf("%s_%d", baseTable, time.Now().UnixNano())
	defer func() { _ = conn.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+base) }()
	for from := lo; from < hi; {
		n := min(opt.ChunkRequests, s.index(s.nextDay(s.at(from)))-from, hi-from)
		if n == 0 {
			n = min(opt.ChunkRequests, hi-from)
		}
		p := clone(params)
		p["from"], p["count"] = fmt.Sprint(from), fmt.Sprint(n)
		// The chunk's draws once, in memory; every request table reads them from there.
		if err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+base); err != nil {
			return counts, fmt.Errorf("generate requests %d..%d: %w", from, from+n, err)
		}
		if err := conn.Exec(clickhouse.Context(ctx, clickhouse.WithParameters(p)),
			"CREATE TABLE "+base+" ENGINE = Memory AS "+requestBaseQuery); err != nil {
			return counts, fmt.Errorf("generate requests %d..%d: %w", from, from+n, err)
		}
		for _, t := range reqTables {
			rows, err := insert(ctx, conn, p, t.table, strings.ReplaceAll(t.query, baseTable, base))
			if err != nil {
				return counts, fmt.Errorf("generate %s for requests %d..%d: %w", t.table, from, from+n, err)
			}
			note(t.table, rows)
		}
		from += n
	}
	if err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+base); err != nil {
		return counts, err
	}
	// Engine samples and log lines, by their step: step k of engine e is at Start + k×interval +
	// e×interval÷Engines (the engines' scrapes are spread over the interval).
	for _, t := range []struct {
		table    string
		interval time.Duration
		query    string
	}{{"engine_samples", s.SampleInterval, sampleQuery(tmpl)}, {"engine_logs", s.StatsLogInterval, logQuery}} {
		if !wanted(t.table) {
			continue
		}
		steps := uint64(s.Span / t.interval)
		step := func(at time.Time) uint64 { // the first step at or after at
			if !at.After(s.Start()) {
				return 0
			}
			return min(steps, uint64((at.Sub(s.Start())+t.interval-1)/t.interval))
		}
		first := uint64(0)
		if !opt.From.IsZero() {
			first = step(opt.From)
		}
		if !opt.To.IsZero() {
			steps = step(opt.To)
		}
		perChunk := max(1, maxChunkSamples/uint64(s.Engines))
		for k := first; k < steps; {
			at := s.Start().Add(time.Duration(k) * t.interval)
			n := min(perChunk, steps-k, max(1, step(s.nextDay(at))-k))
			p := clone(params)
			p["interval_us"] = fmt.Sprint(t.interval.Microseconds())
			p["from"], p["count"] = fmt.Sprint(k), fmt.Sprint(n)
			rows, err := insert(ctx, conn, p, t.table, t.query)
			if err != nil {
				return counts, fmt.Errorf("generate %s for steps %d..%d: %w", t.table, k, k+n, err)
			}
			note(t.table, rows)
			k += n
		}
	}
	return counts, nil
}

// nextDay is the UTC midnight after t: INSERTs stop there, so each writes one day's partition
// and a day's parts can merge while the next day is generated.
func (s Spec) nextDay(t time.Time) time.Time {
	return t.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
}

// at is about when request i arrives (the inverse of index, to a few requests).
func (s Spec) at(i uint64) time.Time {
	lo, hi := s.Start(), s.End
	for hi.Sub(lo) > time.Millisecond {
		mid := lo.Add(hi.Sub(lo) / 2)
		if s.index(mid) <= i {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// maxChunkSamples bounds the samples and log lines of one INSERT: a sample is about 4 KiB
// before compression (its histograms' buckets), so 100,000 of them are a few hundred MB of
// blocks to write, and the INSERT a minute or two of a loaded 2-core machine.
const maxChunkSamples = 100_000

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// insert runs one INSERT … SELECT and returns the rows it wrote (from ClickHouse's progress).
func insert(ctx context.Context, conn driver.Conn, params map[string]string, table, query string) (uint64, error) {
	var written uint64
	qctx := clickhouse.Context(ctx, clickhouse.WithParameters(params),
		clickhouse.WithProgress(func(p *clickhouse.Progress) { written += p.WroteRows }),
		clickhouse.WithSettings(insertSettings))
	if err := conn.Exec(qctx, query); err != nil {
		return 0, err
	}
	return written, nil
}

// insertSettings are the generator's INSERT … SELECT settings, measured on a loaded 2-core machine
// (system.query_log, 1 M requests and 100 k samples):
//   - optimize_on_insert = 0: the ReplacingMergeTree tables otherwise run a replacing merge over
//     every inserted block (MergeTreeDataWriterMergingBlocksMicroseconds was the largest share of
//     the INSERTs' time); the rows are unique by construction, and background merges replace as
//     ever;
//   - max_insert_threads: the generating SELECT and the part writing (sort, compression) run on
//     every core instead of one;
//   - min_insert_block_size_rows/bytes: fewer, larger parts per INSERT, so merges keep up;
//   - max_partitions_per_insert_block: a chunk that does cross a day (a history that starts
//     mid-day with Options.From) still goes in.
var insertSettings = clickhouse.Settings{
	"optimize_on_insert":              0,
	"max_insert_threads":              2,
	"min_insert_block_size_rows":      4_000_000,
	"min_insert_block_size_bytes":     512 << 20,
	"max_partitions_per_insert_block": 1000,
}

func (s Spec) params() map[string]string {
	start := float64(s.Start().UnixMicro()) / 1e6
	end := float64(s.End.UnixMicro()) / 1e6
	return map[string]string{
		"seed":      fmt.Sprint(s.Seed),
		"start_s":   fmt.Sprintf("%.6f", start),
		"total_w":   fmt.Sprintf("%.6f", s.warp(end)),
		"n":         fmt.Sprint(s.Requests),
		"amp":       fmt.Sprint(s.Amplitude),
		"engines":   fmt.Sprint(s.Engines),
		"app_share": fmt.Sprint(s.AppShare),
		"mean_rate": fmt.Sprint(s.MeanRate()),
	}
}

// ---- SQL building blocks ----

// The random draws: uniform in (0, 1) and standard normal (Box–Muller), by row and draw number k.
func unif(k int) string {
	return fmt.Sprintf("((cityHash64({seed:UInt64}, i, %d) %% 4294967296) + 0.5) / 4294967296", k)
}

func norm(k int) string {
	return fmt.Sprintf("(sqrt(-2 * ln(%s)) * cos(2 * pi() * %s))", unif(k), unif(k+1000))
}

// logNormal is median × exp(sigma × N(0,1)).
func logNormal(median, sigma float64, k int) string {
	return fmt.Sprintf("(%v * exp(%v * %s))", median, sigma, norm(k))
}

// ksuid is a 27-character KSUID-shaped id of a time (a DateTime64 expression) and draw k: 20
// bytes, the time in seconds since the KSUID epoch (big-endian, so ids of one second share
// their first five characters, as KSUIDs do) then 16 random bytes, spelt in 27 characters of a
// 64-letter alphabet (base64 with '+' and '/' read as 'x' and 'Y'), about KSUID's 6 bits a
// character. Real KSUIDs spell the same 160 bits in base 62, which ClickHouse would take five
// times longer to compute.
func ksuid(ts string, k int) string {
	return fmt.Sprintf("substring(translate(base64Encode(concat(reverse(reinterpretAsString(toUInt32(greatest(toUnixTimestamp(%s), 1400000000) - 1400000000))), "+
		"reinterpretAsString(cityHash64({seed:UInt64}, i, %d)), reinterpretAsString(cityHash64({seed:UInt64}, i, %d)))), '+/', 'xY'), 1, 27)", ts, k, k+1)
}

// hexID is 16×words lower-case hex digits from draw k on.
func hexID(words, k int) string {
	var parts []string
	for w := range words {
		parts = append(parts, fmt.Sprintf("leftPad(lower(hex(cityHash64({seed:UInt64}, i, %d))), 16, '0')", k+w))
	}
	return "concat(" + strings.Join(parts, ", ") + ")"
}

// requestBaseQuery computes every request's draws; each request table selects from it.
var requestBaseQuery = requestBase()

func requestBase() string {
	warp := func(t string) string {
		return fmt.Sprintf("((%[1]s - {start_s:Float64}) + {amp:Float64} / %[2]v * (sin(%[2]v * %[1]s - %[3]v) - sin(%[2]v * {start_s:Float64} - %[3]v)))", t, omega, phase)
	}
	rate := func(t string) string {
		return fmt.Sprintf("(1 + {amp:Float64} * cos(%v * %s - %v))", omega, t, phase)
	}
	newton := func(t string) string { return fmt.Sprintf("%s - (%s - u) / %s", t, warp(t), rate(t)) }
	return fmt.Sprintf(`
SELECT
    number AS i,
    {total_w:Float64} * (i + %[1]s) / {n:UInt64} AS u,
    {start_s:Float64} + u AS t0,
    %[2]s AS t1,
    %[3]s AS t2,
    %[4]s AS t3,
    toDateTime64(t3, 6, 'UTC') AS arrival,
    %[5]s AS u_status,
    multiIf(u_status < 0.01, 400, u_status < 0.0105, 500, 200) AS status,
    status = 200 AS ok,
    %[6]s < 0.02 AS cut,
    toUInt32(if(cut, 512, greatest(1, round(128 * exp(0.2 * %[7]s))))) AS tokens,
    %[8]s AS ttft,
    %[9]s AS tpot,
    if(ok, ttft + tpot * (tokens - 1), %[10]s) AS e2e,
    arrival + toIntervalMicrosecond(toInt64(e2e * 1e6)) AS finished,
    toUInt32(greatest(1, round(%[11]s))) AS prompt_tokens,
    toUInt32(cityHash64({seed:UInt64}, i, 18) %% {engines:UInt32}) AS engine_no,
    %[12]s AS queue,
    %[13]s < 0.001 AS violation,
    if(violation, toUInt32(1 + cityHash64({seed:UInt64}, i, 21) %% 40), toUInt32(0)) AS foreign,
    least(1, greatest(0, 0.88 + 0.04 * %[14]s)) AS top_score,
    %[15]s < {app_share:Float64} AS has_app,
    %[16]s AS retrieval,
    %[17]s AS request_id,
    %[18]s AS trace_id
FROM numbers({from:UInt64}, {count:UInt64})`,
		unif(1), newton("t0"), newton("t1"), newton("t2"),
		unif(10), unif(11), norm(12), logNormal(0.05, 0.15, 13), logNormal(0.016, 0.15, 14), logNormal(0.01, 0.3, 15),
		logNormal(600, 0.5, 17), logNormal(0.002, 0.5, 19), unif(20), norm(22), unif(24), logNormal(0.02, 0.3, 25),
		ksuid("arrival", 30), hexID(2, 40))
}

type tableQuery struct{ table, query string }

// ingestedAt is the time the consumer's insert of a row's batch arrived: the consumer flushes a
// table's batch once a second at these rates (CONSUMER_FLUSH_INTERVAL), a table's flushes at a
// phase of their own, and ClickHouse stamps every row of an insert with the same now64(6), 30 ms
// after the flush. ts is the row's event time, a DateTime64 expression.
func ingestedAt(ts string, phaseS float64) string {
	return fmt.Sprintf("fromUnixTimestamp64Micro(toInt64((intDiv(toUnixTimestamp64Micro(%s) + %d, 1000000) + 1) * 1000000 - %d + 30000), 'UTC')",
		ts, int64(phaseS*1e6), int64(phaseS*1e6))
}

// baseTable holds one chunk's request draws while the request tables are filled from it; each
// Generate names its own (baseTable + a suffix), so generations running side by side in one
// database, e.g. of its samples beside its requests, do not drop each other's.
const baseTable = "_history_requests"

var requestTables = func() []tableQuery {
	base := baseTable
	return []tableQuery{
		{"requests_started", fmt.Sprintf(`
INSERT INTO requests_started (event_id, request_id, ts, arrival_ts, model, endpoint, stream, max_tokens, prompt_bytes,
    app, prompt_version, config_version, index_version, embedding_model_version, trace_id, gateway, ingested_at)
SELECT %s, request_id, arrival, arrival, 'Qwen/Qwen2.5-7B-Instruct-AWQ', '/v1/chat/completions', true, 512,
    toUInt32(prompt_tokens * 4 + 180), 'docs-qa', 'rag-v12', '', 'idx-2026-11-01', 'bge-m3@1', trace_id,
    concat('gateway-', toString(i %% 2)), %s
FROM %s`, ksuid("arrival", 52), ingestedAt("arrival", 0.11), base)},
		{"requests", fmt.Sprintf(`
INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, stream, status_code,
    error_layer, error_code, error_message, ttft_s, tpot_s, e2e_s, prompt_tokens, completion_tokens,
    tokens_estimated, finish_reason, finish_reasons, response_id, max_tokens, output_foreign_chars,
    output_script_violation, app, prompt_version, config_version, index_version, embedding_model_version,
    trace_id, trace_sampled, upstream, gateway, ingested_at)
SELECT %s, request_id, finished, arrival, finished, 'Qwen/Qwen2.5-7B-Instruct-AWQ', '/v1/chat/completions', true,
    status, if(ok, '', 'upstream'), multiIf(status = 400, 'BadRequestError', status = 500, 'InternalServerError', ''),
    multiIf(status = 400, 'This model''s maximum context length is 4096 tokens.', status = 500, 'EngineCore encountered an issue.', ''),
    if(ok, toNullable(ttft), NULL), if(ok, toNullable(tpot), NULL), e2e,
    if(ok, toNullable(prompt_tokens), NULL), if(ok, toNullable(tokens), NULL), false,
    if(ok, if(cut, 'length', 'stop'), ''), if(ok, [if(cut, 'length', 'stop')], []),
    concat('chatcmpl-', request_id), 512, if(ok, toNullable(foreign), NULL), if(ok, toNullable(violation), NULL),
    'docs-qa', 'rag-v12', '', 'idx-2026-11-01', 'bge-m3@1', trace_id, true,
    concat('http://vllm-', toString(engine_no), ':8000'), concat('gateway-', toString(i %% 2)),
    %s
FROM %s`, ksuid("finished", 54), ingestedAt("finished", 0.23), base)},
		{"app_records", fmt.Sprintf(`
INSERT INTO app_records (event_id, request_id, ts, app, model, passage_ids, retrieval_scores, passage_sources,
    retrieval_top_score, retrieval_s, embedding_model_version, index_version, prompt_version, cache_hit, cache_kind,
    citation_count, citations_missing, output_foreign_chars, output_script_violation, ingested_at)
SELECT %s, request_id, finished, 'docs-qa', 'Qwen/Qwen2.5-7B-Instruct-AWQ',
    arrayMap(k -> concat('doc-', toString(cityHash64({seed:UInt64}, i, 60 + k) %% 20000), '#', toString(cityHash64({seed:UInt64}, i, 70 + k) %% 12)), range(3)),
    arrayMap(k -> round(top_score - k * 0.05 * ((cityHash64({seed:UInt64}, i, 80 + k) %% 1000) / 1000), 4), range(3)),
    arrayMap(k -> concat('kb/manual-', toString(cityHash64({seed:UInt64}, i, 60 + k) %% 20000 %% 300), '.md'), range(3)),
    round(top_score, 4), retrieval, 'bge-m3@1', 'idx-2026-11-01', 'rag-v12', false, '',
    toUInt32(cityHash64({seed:UInt64}, i, 90) %% 4), cityHash64({seed:UInt64}, i, 90) %% 4 = 0,
    if(ok, toNullable(foreign), NULL), if(ok, toNullable(violation), NULL),
    %s
FROM %s WHERE has_app`, ksuid("finished", 56), ingestedAt("finished", 0.37), base)},
		{"engine_spans", fmt.Sprintf(`
INSERT INTO engine_spans (event_id, request_id, engine_request_id, trace_id, span_id, ts, start_ts, engine, model,
    queue_s, prefill_s, decode_s, inference_s, ttft_s, e2e_s, prompt_tokens, completion_tokens, finish_reason,
    max_tokens, temperature, top_p, n, ingested_at)
SELECT %s, request_id, concat('chatcmpl-', request_id), trace_id, %s,
    start + toIntervalMicrosecond(toInt64(engine_e2e * 1e6)) AS span_end, start,
    concat('vllm-', toString(engine_no)), '',
    queue, engine_ttft - queue, engine_e2e - engine_ttft, engine_e2e - queue, engine_ttft, engine_e2e,
    prompt_tokens, tokens, if(cut, 'length', 'stop'), 512, 0.7, 0.95, 1,
    %s
FROM (SELECT *, arrival + toIntervalMicrosecond(400 + cityHash64({seed:UInt64}, i, 96) %% 300) AS start,
             greatest(ttft - 0.001, queue + 0.005) AS engine_ttft,
             greatest(e2e - 0.0012, engine_ttft) AS engine_e2e
      FROM %s WHERE ok)`, ksuid("finished", 58), hexID(1, 44), ingestedAt("span_end", 0.53), base)},
	}
}()

// ---- engine samples and logs ----

// Template is the shape of one engine sample as the collector stores vLLM main's /metrics (from
// vllmsim): the gauges kept in the map, the counter keys, and each histogram's bucket bounds.
type Template struct {
	Gauges     []string
	Counters   []string
	Histograms map[string][]float64
}

// metricShape is the log-normal distribution (median, sigma) a histogram's observations follow,
// and how many observations a request adds, in the normal day's traffic.
type metricShape struct {
	median, sigma float64
	perRequest    float64
}

// shapes follow the request draws above (TTFT 0.05 s, 16 ms per token, 128 tokens, ~600-token
// prompts); a histogram the traffic does not say is read as one observation per request around 1.
var shapes = map[string]metricShape{
	"e2e_request_latency_seconds":           {2.1, 0.25, 1},
	"request_queue_time_seconds":            {0.002, 0.5, 1},
	"request_prefill_time_seconds":          {0.045, 0.15, 1},
	"request_decode_time_seconds":           {2.0, 0.25, 1},
	"request_inference_time_seconds":        {2.05, 0.25, 1},
	"time_to_first_token_seconds":           {0.05, 0.15, 1},
	"request_time_per_output_token_seconds": {0.016, 0.15, 1},
	"inter_token_latency_seconds":           {0.016, 0.3, 138},
	"request_prompt_tokens":                 {600, 0.5, 1},
	"request_generation_tokens":             {128, 0.25, 1},
	"request_params_max_tokens":             {512, 0.001, 1},
	"iteration_tokens_total":                {20, 0.5, 7},
}

// counterPerRequest is how much each counter rises per request.
var counterPerRequest = map[string]float64{
	"generation_tokens_total":                         138,
	"prompt_tokens_total":                             680,
	"prefix_cache_queries_total":                      680,
	"prefix_cache_hits_total":                         204,
	`request_success_total{finished_reason="stop"}`:   0.97,
	`request_success_total{finished_reason="length"}`: 0.02,
	`request_success_total{finished_reason="abort"}`:  0.001,
}

func sampleQuery(t Template) string {
	// Requests finished by engine e up to the sample: the warp of its time, scaled.
	cum := "greatest(0, {n:UInt64} / {total_w:Float64} / {engines:UInt32} * ((t - {start_s:Float64}) + {amp:Float64} / " +
		fmt.Sprint(omega) + " * (sin(" + fmt.Sprint(omega) + " * t - " + fmt.Sprint(phase) + ") - sin(" + fmt.Sprint(omega) + " * {start_s:Float64} - " + fmt.Sprint(phase) + "))))"
	var gauges, counters, sums, counts, buckets []string
	for _, g := range t.Gauges {
		v := "0"
		if strings.Contains(g, `"awake"`) {
			v = "1"
		}
		gauges = append(gauges, fmt.Sprintf("'%s', %s", g, v))
	}
	for _, c := range t.Counters {
		counters = append(counters, fmt.Sprintf("'%s', floor(cum * %v)", strings.ReplaceAll(c, "'", "\\'"), counterPerRequest[c]))
	}
	names := make([]string, 0, len(t.Histograms))
	for h := range t.Histograms {
		names = append(names, h)
	}
	sort.Strings(names)
	for _, h := range names {
		sh, ok := shapes[h]
		if !ok {
			sh = metricShape{1, 0.5, 1}
		}
		n := fmt.Sprintf("floor(cum * %v)", sh.perRequest)
		mean := sh.median * math.Exp(sh.sigma*sh.sigma/2)
		counts = append(counts, fmt.Sprintf("'%s', %s", h, n))
		sums = append(sums, fmt.Sprintf("'%s', round(%s * %v, 3)", h, n, mean))
		// Each bucket's share of the observations is the distribution's CDF at its bound.
		var les, shares []string
		for _, le := range t.Histograms[h] {
			if math.IsInf(le, 1) {
				les, shares = append(les, "inf"), append(shares, "1")
				continue
			}
			les = append(les, fmt.Sprint(le))
			shares = append(shares, fmt.Sprint(0.5*(1+math.Erf((math.Log(le)-math.Log(sh.median))/(sh.sigma*math.Sqrt2)))))
		}
		// arrayZip of the constant bounds with a one-argument arrayMap: a two-array lambda
		// building tuples made the samples' INSERT three times slower (4,000 samples in 7.8 s
		// against 2.4 s on a loaded 2-core machine).
		buckets = append(buckets, fmt.Sprintf("'%s', arrayZip(CAST([%s], 'Array(Float64)'), arrayMap(share -> floor(%s * share), CAST([%s], 'Array(Float64)')))",
			h, strings.Join(les, ", "), n, strings.Join(shares, ", ")))
	}
	return fmt.Sprintf(`
INSERT INTO engine_samples (event_id, ts, engine, model, up, scrape_error, scrape_duration_s, num_requests_running,
    num_requests_waiting, kv_cache_usage_perc, gauges, counters, histogram_sum, histogram_count, histogram_buckets,
    ingested_at)
SELECT %s, ts, concat('vllm-', toString(e)), 'Qwen/Qwen2.5-7B-Instruct-AWQ', true, '', round(%s, 6),
    running, 0, round(0.005 + running * 0.001 + 0.0005 * %s, 6),
    map(%s), map(%s), map(%s), map(%s), map(%s),
    %s
FROM (
    SELECT %s,
           {start_s:Float64} + (k * {interval_us:UInt64} + e * intDiv({interval_us:UInt64}, {engines:UInt32})) / 1e6
               + (cityHash64({seed:UInt64}, i, 3) %% 20000) / 1e6 AS t,
           toDateTime64(t, 6, 'UTC') AS ts,
           %s AS cum,
           greatest(0, round({mean_rate:Float64} / {engines:UInt32} * (1 + {amp:Float64} * cos(%v * t - %v)) * 2.1 * (1 + 0.2 * %s))) AS running
    FROM numbers({count:UInt64} * {engines:UInt32}))`,
		ksuid("ts", 10), logNormal(0.004, 0.3, 4), norm(5),
		strings.Join(gauges, ", "), strings.Join(counters, ", "), strings.Join(sums, ", "), strings.Join(counts, ", "), strings.Join(buckets, ", "),
		ingestedAt("ts", 0.71), stepRows, cum, omega, phase, norm(6))
}

// stepRows numbers the engine rows of steps {from} to {from}+{count}: row i is engine e's step k,
// i = k×Engines + e as ever (so the draws do not depend on the chunks), enumerated engine by
// engine, which is the tables' ORDER BY (engine, ts): the INSERT's sort finds its block sorted.
const stepRows = "intDiv(number, {count:UInt64}) AS e, {from:UInt64} + number % {count:UInt64} AS k, k * {engines:UInt32} + e AS i"

// logQuery writes vLLM's periodic stats line (vllm/v1/metrics/loggers.py, LoggingStatLogger) as
// the collector parses it.
var logQuery = fmt.Sprintf(`
INSERT INTO engine_logs (event_id, ts, engine, source, offset, line, level, process, logger, engine_index, message,
    prompt_throughput_tps, generation_throughput_tps, running, waiting, kv_cache_usage_perc, prefix_cache_hit_rate,
    ingested_at)
SELECT %s, ts, concat('vllm-', toString(e)), concat('/var/log/vllm/vllm-', toString(e), '.log'), k * 231,
    concat('(APIServer pid=1) INFO ', formatDateTime(ts, '%%m-%%d %%H:%%i:%%S'), ' [loggers.py:236] ', message),
    'INFO', 'APIServer pid=1', 'loggers.py:236', '0', message, prompt_tps, gen_tps, running, 0, kv, hit_rate,
    %s
FROM (
    SELECT %s,
           toDateTime64({start_s:Float64} + (k * {interval_us:UInt64} + e * intDiv({interval_us:UInt64}, {engines:UInt32})) / 1e6, 6, 'UTC') AS ts,
           {mean_rate:Float64} / {engines:UInt32} * (1 + {amp:Float64} * cos(%v * toUnixTimestamp64Micro(ts) / 1e6 - %v)) AS r,
           round(r * 680 * (1 + 0.1 * %s), 1) AS prompt_tps,
           round(r * 138 * (1 + 0.1 * %s), 1) AS gen_tps,
           toUInt32(greatest(0, round(r * 2.1 * (1 + 0.2 * %s)))) AS running,
           round(0.005 + running * 0.001, 3) AS kv,
           round(0.3 + 0.02 * %s, 3) AS hit_rate,
           concat('Engine 000: Avg prompt throughput: ', toString(prompt_tps), ' tokens/s, Avg generation throughput: ',
                  toString(gen_tps), ' tokens/s, Running: ', toString(running), ' reqs, Waiting: 0 reqs, GPU KV cache usage: ',
                  toString(round(kv * 100, 1)), '%%, Prefix cache hit rate: ', toString(round(hit_rate * 100, 1)), '%%') AS message
    FROM numbers({count:UInt64} * {engines:UInt32}))`,
	ksuid("ts", 10), ingestedAt("ts", 0.89), stepRows, omega, phase, norm(1), norm(2), norm(3), norm(4))
