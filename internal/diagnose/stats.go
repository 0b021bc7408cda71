package diagnose

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// queries are the embedded SQL files as text/template templates, each named by its file name: a
// file takes another's text with {{template "name.sql"}}, so that a live read and hour_fill.sql
// aggregate the same rows (the *_rows.sql files). Parsed once, like a regexp: fixed text.
var queries = template.Must(template.New("").ParseFS(sqlFiles, "sql/*.sql"))

func query(name string) string { return queryWith(name, false) }

// queryWith is the query name, per window of the range (window_key.sql) when windowed.
func queryWith(name string, windowed bool) string {
	var b strings.Builder
	var dot any
	if windowed {
		dot = true
	}
	if err := queries.ExecuteTemplate(&b, name+".sql", dot); err != nil {
		// The files are embedded at build time; a missing one is a build defect, not a run-time condition.
		panic(fmt.Sprintf("diagnose: embedded query %s: %v", name, err))
	}
	return b.String()
}

// Range is a half-open time interval [From, To), in UTC.
type Range struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// Seconds is the length of the range in seconds.
func (r Range) Seconds() float64 { return r.To.Sub(r.From).Seconds() }

func (r Range) String() string {
	return r.From.UTC().Format(time.RFC3339) + " → " + r.To.UTC().Format(time.RFC3339)
}

// Stats are the quantities of docs/measurements.md's Four workloads table (and the fields only the
// application records: retrieval scores, output checks) over one time range. Pointers are nil when no record carried the quantity.
// Durations are seconds, token counts are tokens per request, shares are fractions 0..1.
type Stats struct {
	// Requests is the number of requests that arrived in the range (gateway records, or engine
	// requests, each the spans of its children combined, when no gateway record exists).
	// RatePerSecond is Requests ÷ the range's length.
	Requests      uint64   `json:"requests"`
	RatePerSecond *float64 `json:"rate_per_s,omitempty"`

	// PromptTokensMean and CompletionTokensMean are the mean input and output tokens per request.
	PromptTokensMean     *float64 `json:"prompt_tokens_mean,omitempty"`
	CompletionTokensMean *float64 `json:"completion_tokens_mean,omitempty"`
	// CachedShare is Σ cached_tokens ÷ Σ prompt_tokens over requests that report cached tokens:
	// the part of the prompts the prefix cache served.
	CachedShare *float64 `json:"cached_share,omitempty"`
	// MaxTokensMean is the mean requested max_tokens.
	MaxTokensMean *float64 `json:"max_tokens_mean,omitempty"`

	// Engine timings (mean over requests; p50/p95 only from per-request records).
	QueueMean   *float64 `json:"queue_s_mean,omitempty"`
	QueueP95    *float64 `json:"queue_s_p95,omitempty"`
	PrefillMean *float64 `json:"prefill_s_mean,omitempty"`
	TTFTMean    *float64 `json:"ttft_s_mean,omitempty"`
	TTFTP50     *float64 `json:"ttft_s_p50,omitempty"`
	TTFTP95     *float64 `json:"ttft_s_p95,omitempty"`
	// TPOTMean and TPOTP95 are vLLM's per-request TPOT — decode time ÷ (output tokens − 1), one
	// value per request that generated at least two tokens — averaged over requests, whatever the
	// source: the gateway's records, the engine's spans, or the engine's
	// vllm:request_time_per_output_token_seconds histogram (vLLM observes 0 there for a request of
	// at most one token; those are left out, counted by vllm:request_generation_tokens' le="1"
	// bucket). Never the token-weighted ITLMean: where no per-request source exists, TPOTMean is
	// nil and TPOTNote says why.
	TPOTMean *float64 `json:"tpot_s_mean,omitempty"`
	TPOTP95  *float64 `json:"tpot_s_p95,omitempty"`
	// TPOTNote, when TPOTMean is nil but the engine's /metrics had samples, says that the vLLM
	// release exposes no per-request TPOT, only the token-weighted inter-token latency.
	TPOTNote string `json:"tpot_note,omitempty"`
	// ITLMean is the token-weighted inter-token latency: the mean of every interval between two
	// consecutive output tokens of any request (vLLM's vllm:inter_token_latency_seconds, named
	// vllm:time_per_output_token_seconds before 0.11, one observation per decode step and
	// request), from the engine's histograms. A long answer weighs as many times as its tokens,
	// so a mix of one long answer and many short ones moves it without any request's TPOT moving:
	// it is shown beside TPOT, never read as TPOT.
	ITLMean    *float64 `json:"itl_s_mean,omitempty"`
	DecodeMean *float64 `json:"decode_s_mean,omitempty"`
	E2EMean    *float64 `json:"e2e_s_mean,omitempty"`
	E2EP50     *float64 `json:"e2e_s_p50,omitempty"`
	E2EP95     *float64 `json:"e2e_s_p95,omitempty"`
	// Sources names, per quantity key (e.g. "queue_s_mean"), where its value came from:
	// "requests" (gateway + engine spans), "engine_spans" (the spans alone, children combined),
	// or "engine_samples histograms".
	Sources map[string]string `json:"sources,omitempty"`

	// Instantaneous engine quantities: maxima over the range's samples of
	// vllm:num_requests_running, vllm:num_requests_waiting and vllm:kv_cache_usage_perc (fraction;
	// over the samples with requests running only, as kv_cache_pressure reads it).
	RunningMax *float64 `json:"running_max,omitempty"`
	WaitingMax *float64 `json:"waiting_max,omitempty"`
	KVMax      *float64 `json:"kv_cache_usage_max,omitempty"`
	// Preemptions is how many running requests vLLM preempted in the range (their KV blocks freed,
	// to be recomputed): the increase of vllm:num_preemptions_total summed over engines, else
	// what main's stats lines said ("Preemptions: N"). vLLM preempts exactly when a running
	// request needs a KV block and none is free, so any is the direct sign the KV cache ran out.
	// Nil when neither recorded it (the counter missing; a log without any "Preemptions:" says 0
	// only on main); PreemptionsSource names the source.
	Preemptions       *float64 `json:"preemptions,omitempty"`
	PreemptionsSource string   `json:"preemptions_source,omitempty"`
	// Samples counts engine scrapes; SamplesDown those that failed (up = 0), the first at FirstDown
	// on DownEngine.
	Samples     uint64     `json:"samples"`
	SamplesDown uint64     `json:"samples_down"`
	FirstDown   *time.Time `json:"first_down,omitempty"`
	DownEngine  string     `json:"down_engine,omitempty"`

	// StatusCodes counts requests by HTTP status; Share4xx and Share5xx are fractions of Requests.
	StatusCodes map[uint16]uint64 `json:"status_codes,omitempty"`
	Share4xx    *float64          `json:"share_4xx,omitempty"`
	Share5xx    *float64          `json:"share_5xx,omitempty"`
	// LengthShare is the share of finished requests whose finish_reason is "length" (cut at max_tokens).
	LengthShare *float64 `json:"length_share,omitempty"`

	// RetrievalTopP50 is the median top-passage retrieval score over RetrievalN application records.
	RetrievalTopP50 *float64 `json:"retrieval_top_score_p50,omitempty"`
	RetrievalN      uint64   `json:"retrieval_n"`
	// WrongScriptShare is the share of ScriptChecked answers with letters outside the allowed scripts.
	WrongScriptShare *float64 `json:"wrong_script_share,omitempty"`
	ScriptChecked    uint64   `json:"script_checked"`

	// Versions counts requests per value of each version label: "model", "embedding_model_version",
	// "index_version", "prompt_version", "config_version".
	Versions map[string]map[string]uint64 `json:"versions,omitempty"`
	// SampleFactor, when above 1, says ScriptChecked and the Versions counts are estimates: the
	// range held over 100,000 requests, and they were counted on the requests whose
	// xxh3(request_id) % SampleFactor is 0, times SampleFactor (migrations/000016). Absent: exact.
	SampleFactor uint64 `json:"sample_factor,omitempty"`
	// CountsByHour, when true, says ScriptChecked and the Versions counts are sums of each hour's
	// distinct requests (a baseline merged from diagnose_hourly): a request with records in two
	// hours (its application record a second after the hour it arrived in) counts in each, a few
	// in 10,000 more than the range's distinct requests.
	CountsByHour bool `json:"counts_by_hour,omitempty"`
	// scriptFactor and versionsFactor are the sample factors of the script checks' and the
	// versions' reads, noted into SampleFactor once every read is done (they run at once);
	// engineRequests is the engine's request count, Requests when no gateway record has one.
	scriptFactor, versionsFactor, engineRequests uint64

	// Started counts the requests that started in the range (requests_started) before its last
	// grace (UnfinishedGrace, or half a short range), Unfinished those of them not answered by the
	// range's end. Read for the window only: the unfinished branch has absolute thresholds.
	Started    uint64 `json:"started,omitempty"`
	Unfinished uint64 `json:"unfinished,omitempty"`

	// LogLines counts the engine log's lines (0: no log was kept for the range); OOMLines and
	// ExceptionLines its out-of-memory and exception lines, the latest of them at LastErrorTS on
	// LastErrorEngine.
	LogLines        uint64     `json:"log_lines"`
	OOMLines        uint64     `json:"oom_lines"`
	ExceptionLines  uint64     `json:"exception_lines"`
	LastErrorTS     *time.Time `json:"last_error_ts,omitempty"`
	LastErrorEngine string     `json:"last_error_engine,omitempty"`
	LastException   string     `json:"last_exception,omitempty"`
	LastOOMBytes    *uint64    `json:"last_oom_bytes,omitempty"`
}

// Empty reports whether no table held a record for the range.
func (s *Stats) Empty() bool {
	return s.Requests == 0 && s.Samples == 0 && s.RetrievalN == 0 && s.ScriptChecked == 0 &&
		s.OOMLines == 0 && s.ExceptionLines == 0 && len(s.Versions) == 0 && s.Preemptions == nil
}

// histogramNames maps vLLM V1 histogram names (without "vllm:") to the Stats key whose mean
// they give; the first name present wins when several map to one key. The per-request TPOT
// (request_time_per_output_token_seconds) and the token-weighted inter-token latency
// (inter_token_latency_seconds; time_per_output_token_seconds is its name before 0.11, which
// the collector maps, kept for rows stored before that) are different quantities and fill
// different keys (readHistograms).
var histogramNames = []struct{ name, key string }{
	{"request_queue_time_seconds", "queue_s_mean"},
	{"request_prefill_time_seconds", "prefill_s_mean"},
	{"time_to_first_token_seconds", "ttft_s_mean"},
	{"request_time_per_output_token_seconds", "tpot_s_mean"},
	{"inter_token_latency_seconds", "itl_s_mean"},
	{"time_per_output_token_seconds", "itl_s_mean"},
	{"request_decode_time_seconds", "decode_s_mean"},
	{"e2e_request_latency_seconds", "e2e_s_mean"},
	{"request_prompt_tokens", "prompt_tokens_mean"},
	{"request_generation_tokens", "completion_tokens_mean"},
}

// Histogram names readHistograms reads besides their means.
const (
	histRequestTPOT      = "request_time_per_output_token_seconds"
	histGenerationTokens = "request_generation_tokens"
)

// Source labels of Stats.Sources.
const (
	SourceRequests   = "requests"
	SourceSpans      = "engine_spans"
	SourceHistograms = "engine_samples histograms"
)

func params(ctx context.Context, r Range, model string) context.Context {
	return paramsWith(ctx, r, model, nil)
}

// paramsWith is params with more parameters (a context holds one set: the last one given wins).
func paramsWith(ctx context.Context, r Range, model string, more map[string]string) context.Context {
	p := map[string]string{
		"from_us": fmt.Sprint(r.From.UnixMicro()),
		"to_us":   fmt.Sprint(r.To.UnixMicro()),
		"model":   chstore.StringParam(model),
	}
	for k, v := range more {
		p[k] = v
	}
	return chstore.WithParams(ctx, p)
}

// collect reads every quantity of the range from ClickHouse.
func collect(ctx context.Context, conn driver.Conn, r Range, model string) (Stats, error) {
	return collectWith(ctx, conn, r, model, func(s *Stats) []reader {
		return []reader{s.readRequestsOrSpans, s.readStatus, s.readRetrieval, s.readScript, s.readVersions}
	})
}

// reader reads some of a range's quantities into the Stats it belongs to. The readers of one
// collectWith run at once: each writes fields no other one writes.
type reader func(ctx context.Context, conn driver.Conn) error

// readConcurrency is how many of a range's reads run at once: most are short, so a few at once
// keep ClickHouse's cores busy where one after the other leaves them waiting on round trips.
const readConcurrency = 3

// collectWith reads the range's quantities: records' readers fill the per-request ones (requests,
// status codes, retrieval, output checks, versions) from params(ctx, r, model) at the same time
// as the engine's samples and log lines are read, then the engine's histograms give the means
// records left empty.
func collectWith(ctx context.Context, conn driver.Conn, r Range, model string, records func(*Stats) []reader) (Stats, error) {
	s := Stats{Sources: map[string]string{}}
	pctx := params(ctx, r, model)
	reads := append(records(&s), s.readSamples, s.readCrash, s.readPreemptions)
	fns := make([]func() error, len(reads))
	for i, read := range reads {
		fns[i] = func() error { return read(pctx, conn) }
	}
	if err := concurrently(readConcurrency, fns...); err != nil {
		return s, err
	}
	s.noteSample(s.scriptFactor)
	s.noteSample(s.versionsFactor)
	if s.PreemptionsSource != "" {
		s.Sources["preemptions"] = s.PreemptionsSource
	}
	// The request count: the gateway's records by status code (exact), else the engine's.
	for _, n := range s.StatusCodes {
		s.Requests += n
	}
	if s.Requests == 0 {
		s.Requests = s.engineRequests
	}
	if err := s.readHistograms(ctx, conn, r, model); err != nil {
		return s, err
	}
	if s.Requests > 0 && r.Seconds() > 0 {
		rate := float64(s.Requests) / r.Seconds()
		s.RatePerSecond = &rate
	}
	return s, nil
}

// concurrently runs fns, at most limit at once, and returns their errors joined in fns' order.
func concurrently(limit int, fns ...func() error) error {
	errs := make([]error, len(fns))
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = fn()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// readRequestsOrSpans reads the per-request quantities from the gateway's records, or from the
// engine's spans alone when the range holds no gateway record.
func (s *Stats) readRequestsOrSpans(ctx context.Context, conn driver.Conn) error {
	sampled, err := s.readRequests(ctx, conn)
	if err != nil || sampled > 0 {
		return err
	}
	return s.readSpans(ctx, conn)
}

// perRequest lists the pointers the requests and spans queries fill, in their column order after
// the count, with the key each one has in Sources.
func (s *Stats) perRequest(withGatewayOnly bool) ([]any, []string) {
	dest := []any{&s.PromptTokensMean, &s.CompletionTokensMean}
	keys := []string{"prompt_tokens_mean", "completion_tokens_mean"}
	if withGatewayOnly {
		dest = append(dest, &s.CachedShare)
		keys = append(keys, "cached_share")
	}
	dest = append(dest, &s.QueueMean, &s.QueueP95, &s.PrefillMean, &s.TTFTMean, &s.TTFTP50, &s.TTFTP95,
		&s.TPOTMean, &s.TPOTP95, &s.DecodeMean, &s.E2EMean, &s.E2EP50, &s.E2EP95)
	keys = append(keys, "queue_s_mean", "queue_s_p95", "prefill_s_mean", "ttft_s_mean", "ttft_s_p50", "ttft_s_p95",
		"tpot_s_mean", "tpot_s_p95", "decode_s_mean", "e2e_s_mean", "e2e_s_p50", "e2e_s_p95")
	if withGatewayOnly {
		dest = append(dest, &s.LengthShare)
		keys = append(keys, "length_share")
	}
	dest = append(dest, &s.MaxTokensMean)
	keys = append(keys, "max_tokens_mean")
	return dest, keys
}

func (s *Stats) markSources(dest []any, keys []string, source string) {
	for i, d := range dest {
		if p, ok := d.(**float64); ok && *p != nil {
			s.Sources[keys[i]] = source
		}
	}
}

// readRequests reads the per-request quantities of the gateway's records; sampled is how many
// rows they were computed from (0: the range holds no gateway record).
func (s *Stats) readRequests(ctx context.Context, conn driver.Conn) (sampled uint64, err error) {
	dest, keys := s.perRequest(true)
	if err := conn.QueryRow(ctx, query("requests")).Scan(append([]any{&sampled}, dest...)...); err != nil {
		return 0, fmt.Errorf("read request quantities from requests and engine_requests: %w", err)
	}
	s.markSources(dest, keys, SourceRequests)
	return sampled, nil
}

func (s *Stats) readSpans(ctx context.Context, conn driver.Conn) error {
	dest, keys := s.perRequest(false)
	if err := conn.QueryRow(ctx, query("spans")).Scan(append([]any{&s.engineRequests}, dest...)...); err != nil {
		return fmt.Errorf("read request quantities from engine_requests: %w", err)
	}
	s.markSources(dest, keys, SourceSpans)
	return nil
}

// readHistograms fills the means that no per-request record gave from the engine's cumulative
// histograms over the range, and the token-weighted inter-token latency, which only they give.
//
// TPOT from the histograms is vllm:request_time_per_output_token_seconds' increase of sum over
// its increase of count less the requests of at most one output token (the le="1" bucket of
// vllm:request_generation_tokens, observed for the same finished requests in the same loop of
// vllm/v1/metrics/loggers.py PrometheusStatLogger.record): vLLM observes 0 for those
// (vllm/v1/metrics/stats.py, mean_time_per_output_token), where the gateway and the spans have no
// TPOT at all, so the mean is over the same requests as theirs. Releases without that histogram
// (before vLLM PR #24015: 0.8, 0.10, 0.11.0) have no per-request TPOT in /metrics; TPOTMean then
// stays nil and TPOTNote says so rather than read the token-weighted latency as TPOT.
func (s *Stats) readHistograms(ctx context.Context, conn driver.Conn, r Range, model string) error {
	targets := map[string]**float64{
		"queue_s_mean": &s.QueueMean, "prefill_s_mean": &s.PrefillMean, "ttft_s_mean": &s.TTFTMean,
		"tpot_s_mean": &s.TPOTMean, "itl_s_mean": &s.ITLMean, "decode_s_mean": &s.DecodeMean, "e2e_s_mean": &s.E2EMean,
		"prompt_tokens_mean": &s.PromptTokensMean, "completion_tokens_mean": &s.CompletionTokensMean,
	}
	var names []string
	for _, h := range histogramNames {
		if *targets[h.key] == nil {
			names = append(names, h.name)
		}
	}
	if s.TPOTMean == nil && !slices.Contains(names, histGenerationTokens) {
		names = append(names, histGenerationTokens)
	}
	if len(names) == 0 {
		return nil
	}
	ctx = chstore.WithParams(ctx, map[string]string{
		"from_us": fmt.Sprint(r.From.UnixMicro()),
		"to_us":   fmt.Sprint(r.To.UnixMicro()),
		"model":   chstore.StringParam(model),
		"names":   arrayParam(names),
	})
	rows, err := conn.Query(ctx, query("histograms"))
	if err != nil {
		return fmt.Errorf("read histogram window averages from engine_samples: %w", err)
	}
	defer rows.Close()
	type increase struct{ sum, count, le1 float64 }
	got := map[string]increase{}
	for rows.Next() {
		var name string
		var in increase
		if err := rows.Scan(&name, &in.sum, &in.count, &in.le1); err != nil {
			return fmt.Errorf("scan histogram window average: %w", err)
		}
		got[name] = in
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read histogram window averages from engine_samples: %w", err)
	}
	for _, h := range histogramNames {
		in, ok := got[h.name]
		if !ok || *targets[h.key] != nil {
			continue
		}
		n := in.count
		if h.name == histRequestTPOT {
			n -= got[histGenerationTokens].le1
		}
		if n <= 0 {
			continue
		}
		m := in.sum / n
		*targets[h.key] = &m
		s.Sources[h.key] = SourceHistograms + " (" + h.name + ")"
	}
	if s.TPOTMean == nil && len(got) > 0 {
		s.TPOTNote = "no per-request TPOT: this vLLM's /metrics has no vllm:request_time_per_output_token_seconds (added by vLLM PR #24015, after 0.11.0)"
		if s.ITLMean != nil {
			s.TPOTNote += fmt.Sprintf(", only the token-weighted inter-token latency (%s), in which a long answer weighs as many times as its tokens: it is not TPOT", secs(*s.ITLMean))
		}
		s.TPOTNote += "; per-request TPOT needs the gateway's records, vLLM's spans or a release with that histogram"
	}
	return nil
}

// arrayParam renders names as a ClickHouse Array(String) literal for a bound parameter; names are
// the fixed metric names above, and quotes are escaped regardless.
func arrayParam(names []string) string {
	out := "["
	for i, n := range names {
		if i > 0 {
			out += ","
		}
		esc := ""
		for _, c := range n {
			if c == '\'' || c == '\\' {
				esc += `\`
			}
			esc += string(c)
		}
		out += "'" + esc + "'"
	}
	return out + "]"
}

func (s *Stats) readSamples(ctx context.Context, conn driver.Conn) error {
	var sc sampleScan
	if err := conn.QueryRow(ctx, query("samples")).Scan(sc.dest(s)...); err != nil {
		return fmt.Errorf("read engine quantities from engine_samples: %w", err)
	}
	sc.done(s)
	return nil
}

// sampleScan holds the columns of samples.sql that are not Stats fields as they come.
type sampleScan struct {
	engines   uint64
	firstDown time.Time
}

func (sc *sampleScan) dest(s *Stats) []any {
	return []any{&s.Samples, &s.SamplesDown, &sc.engines, &s.RunningMax, &s.WaitingMax, &s.KVMax, &sc.firstDown, &s.DownEngine}
}

func (sc *sampleScan) done(s *Stats) {
	if s.SamplesDown > 0 {
		fd := sc.firstDown.UTC()
		s.FirstDown = &fd
	}
}

// readPreemptions reads the range's preemptions: the engines' counter, else the log's stats lines
// (which count one only where they printed it).
func (s *Stats) readPreemptions(ctx context.Context, conn driver.Conn) error {
	var fromSamples, fromLogs *float64
	if err := conn.QueryRow(ctx, query("preemptions")).Scan(&fromSamples, &fromLogs); err != nil {
		return fmt.Errorf("read preemptions from engine_samples and engine_logs: %w", err)
	}
	switch {
	case fromSamples != nil:
		s.Preemptions, s.PreemptionsSource = fromSamples, "engine_samples (vllm:num_preemptions_total)"
	case fromLogs != nil && *fromLogs > 0:
		s.Preemptions, s.PreemptionsSource = fromLogs, "engine_logs (the stats lines' Preemptions)"
	}
	return nil
}

func (s *Stats) readStatus(ctx context.Context, conn driver.Conn) error {
	rows, err := conn.Query(ctx, query("status"))
	if err != nil {
		return fmt.Errorf("read status codes from requests: %w", err)
	}
	defer rows.Close()
	codes := map[uint16]uint64{}
	for rows.Next() {
		var code uint16
		var n uint64
		if err := rows.Scan(&code, &n); err != nil {
			return fmt.Errorf("scan status code: %w", err)
		}
		codes[code] = n
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read status codes from requests: %w", err)
	}
	s.setStatusCodes(codes)
	return nil
}

// setStatusCodes records the requests per status code and the 4xx and 5xx shares.
func (s *Stats) setStatusCodes(codes map[uint16]uint64) {
	var total, c4, c5 uint64
	for code, n := range codes {
		if n == 0 {
			continue
		}
		if s.StatusCodes == nil {
			s.StatusCodes = map[uint16]uint64{}
		}
		s.StatusCodes[code] = n
		total += n
		switch {
		case code >= 500:
			c5 += n
		case code >= 400:
			c4 += n
		}
	}
	if total > 0 {
		f4, f5 := float64(c4)/float64(total), float64(c5)/float64(total)
		s.Share4xx, s.Share5xx = &f4, &f5
	}
}

func (s *Stats) readRetrieval(ctx context.Context, conn driver.Conn) error {
	if err := conn.QueryRow(ctx, query("retrieval")).Scan(&s.RetrievalN, &s.RetrievalTopP50); err != nil {
		return fmt.Errorf("read retrieval scores from app_records: %w", err)
	}
	return nil
}

func (s *Stats) readScript(ctx context.Context, conn driver.Conn) error {
	var sc scriptScan
	if err := conn.QueryRow(ctx, query("script")).Scan(sc.dest()...); err != nil {
		return fmt.Errorf("read output script checks from requests and app_records: %w", err)
	}
	sc.done(s)
	return nil
}

// scriptScan holds script.sql's columns.
type scriptScan struct{ checked, violations, factor uint64 }

func (sc *scriptScan) dest() []any { return []any{&sc.checked, &sc.violations, &sc.factor} }

func (sc *scriptScan) done(s *Stats) {
	s.setScript(sc.checked, sc.violations)
	s.scriptFactor = sc.factor
}

// setScript records the output script checks: checked answers and the violations among them.
func (s *Stats) setScript(checked, violations uint64) {
	s.ScriptChecked = checked
	if checked > 0 {
		f := float64(violations) / float64(checked)
		s.WrongScriptShare = &f
	}
}

// noteSample records that a count was scaled from a 1-in-factor sample (factor > 1).
func (s *Stats) noteSample(factor uint64) {
	if factor > 1 {
		s.SampleFactor = max(s.SampleFactor, factor)
	}
}

func (s *Stats) readVersions(ctx context.Context, conn driver.Conn) error {
	rows, err := conn.Query(ctx, query("versions"))
	if err != nil {
		return fmt.Errorf("read versions from requests and app_records: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, value string
		var n, factor uint64
		if err := rows.Scan(&kind, &value, &n, &factor); err != nil {
			return fmt.Errorf("scan version: %w", err)
		}
		s.versionsFactor = max(s.versionsFactor, factor)
		s.addVersion(kind, value, n)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read versions from requests and app_records: %w", err)
	}
	return nil
}

// addVersion records n requests with value for the version label kind.
func (s *Stats) addVersion(kind, value string, n uint64) {
	if s.Versions == nil {
		s.Versions = map[string]map[string]uint64{}
	}
	if s.Versions[kind] == nil {
		s.Versions[kind] = map[string]uint64{}
	}
	s.Versions[kind][value] += n
}

// readUnfinished reads Started and Unfinished; ctx holds params(r) and grace_us.
func (s *Stats) readUnfinished(ctx context.Context, conn driver.Conn) error {
	if err := conn.QueryRow(ctx, query("unfinished")).Scan(&s.Started, &s.Unfinished); err != nil {
		return fmt.Errorf("read unfinished requests from requests_started and requests: %w", err)
	}
	return nil
}

// UnfinishedGrace is how long a request may run before it counts as unfinished at a window's
// end (or half the window, when shorter): the long-output workload's 26.6 s E2E is well inside.
const UnfinishedGrace = time.Minute

func graceOf(r Range) time.Duration { return min(UnfinishedGrace, r.To.Sub(r.From)/2) }

func (s *Stats) readCrash(ctx context.Context, conn driver.Conn) error {
	var sc crashScan
	if err := conn.QueryRow(ctx, query("crash")).Scan(sc.dest(s)...); err != nil {
		return fmt.Errorf("read errors from engine_logs: %w", err)
	}
	sc.done(s)
	return nil
}

// crashScan holds the columns of crash.sql that are not Stats fields as they come.
type crashScan struct{ last time.Time }

func (sc *crashScan) dest(s *Stats) []any {
	return []any{&s.LogLines, &s.OOMLines, &s.ExceptionLines, &sc.last, &s.LastErrorEngine, &s.LastException, &s.LastOOMBytes}
}

func (sc *crashScan) done(s *Stats) {
	if s.OOMLines+s.ExceptionLines > 0 {
		l := sc.last.UTC()
		s.LastErrorTS = &l
	}
}

// sortedValues returns the values of one version kind, most requests first.
func sortedValues(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		if m[out[i]] != m[out[j]] {
			return m[out[i]] > m[out[j]]
		}
		return out[i] < out[j]
	})
	return out
}
