package requestview

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/postmortem"
	"github.com/servescope/servescope/services/detector/rules"
)

// Sources of the figures, as the page and the CLI name them.
const (
	SourceGateway       = "gateway"
	SourceTimingObject  = "engine timing object"
	SourceEngineSpan    = "engine span"
	SourceEngineUsage   = "engine usage"
	SourceGatewayGuess  = "gateway estimate"
	SourceEngineMetrics = "engine /metrics"
	SourceEngineLog     = "engine log"
	SourceSlotRule      = "slot_limit rule"
)

// SourceNotes say what each source is, for the page's legend and the CLI's footer.
var SourceNotes = map[string]string{
	SourceGateway:       "measured by servescope's gateway on the request's own connection",
	SourceTimingObject:  "vLLM's per-request timing object in the response (metrics, --enable-per-request-metrics), copied by the gateway",
	SourceEngineSpan:    "vLLM's OpenTelemetry span of the request (llm_request), children combined",
	SourceEngineUsage:   "the usage the engine put in its answer",
	SourceGatewayGuess:  "the gateway's estimate: the engine gave no usage",
	SourceEngineMetrics: "the engine's /metrics gauges, scraped by the collector",
	SourceEngineLog:     "the engine's own log, followed by the collector",
	SourceSlotRule:      "the detector's slot_limit rule (its max_num_seqs parameter)",
}

// Seconds is a duration with its source; Value is nil when unknown.
type Seconds struct {
	Value  *float64 `json:"s"`
	Source string   `json:"source,omitempty"`
}

// Count is a token count with its source; Value is nil when unknown.
type Count struct {
	Value  *uint32 `json:"n"`
	Source string  `json:"source,omitempty"`
}

func secs(v *float64, source string) Seconds {
	if v == nil {
		return Seconds{}
	}
	return Seconds{Value: v, Source: source}
}

func count(v *uint32, source string) Count {
	if v == nil {
		return Count{}
	}
	return Count{Value: v, Source: source}
}

// firstSeconds is the first known of the candidates.
func firstSeconds(cands ...Seconds) Seconds {
	for _, c := range cands {
		if c.Value != nil {
			return c
		}
	}
	return Seconds{}
}

// Step is one moment or phase of the request's timeline, in seconds after its arrival at the
// gateway. A phase has Seconds; a moment has none. The engine's offsets count from the engine's
// own arrival, which follows the gateway's by the forwarding time (milliseconds).
type Step struct {
	Name    string   `json:"name"`
	Label   string   `json:"label"`
	At      *float64 `json:"at_s"`
	Seconds *float64 `json:"seconds,omitempty"`
	Source  string   `json:"source"`
	Note    string   `json:"note,omitempty"`
}

// Client is what the client saw.
type Client struct {
	Stream bool `json:"stream"`
	// TTFT is the gateway's time to the first content chunk of a stream; a non-streaming client
	// saw no first token (EngineTTFT is the engine's).
	TTFT       Seconds `json:"ttft"`
	EngineTTFT Seconds `json:"engine_ttft"`
	TPOT       Seconds `json:"tpot"`
	EngineTPOT Seconds `json:"engine_tpot"`
	E2E        Seconds `json:"e2e"`
	// Aborted: the client went away first (status 499, error layer client). Broken: the engine
	// broke off a stream after its 200 headers.
	Aborted bool `json:"aborted"`
	Broken  bool `json:"broken_stream"`
}

// Tokens are the request's token counts and stop reasons.
type Tokens struct {
	Prompt     Count   `json:"prompt"`
	Completion Count   `json:"completion"`
	Cached     Count   `json:"cached"`
	MaxTokens  *uint32 `json:"max_tokens,omitempty"`
	// FinishReason is choice 0's; FinishReasons every choice's (gateway), EngineFinishReasons
	// every engine child's.
	FinishReason        string   `json:"finish_reason"`
	FinishReasons       []string `json:"finish_reasons,omitempty"`
	EngineFinishReasons []string `json:"engine_finish_reasons,omitempty"`
}

// Status is how the request ended.
type Status struct {
	Code uint16 `json:"status_code"`
	// Layer is the failing layer (gateway, upstream, client); LayerNote says what it means.
	Layer     string `json:"error_layer,omitempty"`
	LayerNote string `json:"error_layer_note,omitempty"`
	ErrorCode string `json:"error_code,omitempty"`
	Message   string `json:"error_message,omitempty"`
}

var layerNotes = map[string]string{
	"gateway":   "the gateway itself failed (a body it could not read, its own limit or failure)",
	"upstream":  "the engine answered an error, could not be reached, or broke the stream",
	"client":    "the client went away before the answer ended",
	"app":       "the application failed",
	"retrieval": "the application's retrieval step failed",
}

// Versions say which system served the request.
type Versions struct {
	Prompt         string `json:"prompt_version,omitempty"`
	Config         string `json:"config_version,omitempty"`
	Index          string `json:"index_version,omitempty"`
	EmbeddingModel string `json:"embedding_model_version,omitempty"`
}

// Span is one engine child of the request (its vLLM llm_request span).
type Span struct {
	EngineRequestID  string     `json:"engine_request_id"`
	PromptIndex      *uint32    `json:"prompt_index,omitempty"`
	ChildIndex       *uint32    `json:"child_index,omitempty"`
	TraceID          string     `json:"trace_id,omitempty"`
	Engine           string     `json:"engine"`
	StartTS          *time.Time `json:"start_ts,omitempty"`
	EndTS            time.Time  `json:"end_ts"`
	Queue            *float64   `json:"queue_s,omitempty"`
	Prefill          *float64   `json:"prefill_s,omitempty"`
	Decode           *float64   `json:"decode_s,omitempty"`
	Inference        *float64   `json:"inference_s,omitempty"`
	TTFT             *float64   `json:"ttft_s,omitempty"`
	E2E              *float64   `json:"e2e_s,omitempty"`
	PromptTokens     *uint32    `json:"prompt_tokens,omitempty"`
	CompletionTokens *uint32    `json:"completion_tokens,omitempty"`
	FinishReason     string     `json:"finish_reason,omitempty"`
	MaxTokens        *uint32    `json:"max_tokens,omitempty"`
	// Other is true for a span of another trace than the request's: another request that reused
	// the same X-Request-Id.
	Other bool `json:"other_request,omitempty"`
}

// Engine is the engine's record of the request: its spans' children combined.
type Engine struct {
	Name             string     `json:"engine"`
	Model            string     `json:"model,omitempty"`
	TraceID          string     `json:"trace_id,omitempty"`
	StartTS          *time.Time `json:"start_ts,omitempty"`
	EndTS            time.Time  `json:"end_ts"`
	Children         uint32     `json:"children"`
	Prompts          uint32     `json:"prompts"`
	Queue            *float64   `json:"queue_s,omitempty"`
	Prefill          *float64   `json:"prefill_s,omitempty"`
	Decode           *float64   `json:"decode_s,omitempty"`
	Inference        *float64   `json:"inference_s,omitempty"`
	TTFT             *float64   `json:"ttft_s,omitempty"`
	E2E              *float64   `json:"e2e_s,omitempty"`
	TPOT             *float64   `json:"tpot_s,omitempty"`
	PromptTokens     *uint32    `json:"prompt_tokens,omitempty"`
	CompletionTokens *uint32    `json:"completion_tokens,omitempty"`
	FinishReasons    []string   `json:"finish_reasons,omitempty"`
	MaxTokens        *uint32    `json:"max_tokens,omitempty"`
	Spans            []Span     `json:"spans"`
}

// Sample is one /metrics sample of the engine near the request's arrival.
type Sample struct {
	Engine string    `json:"engine"`
	TS     time.Time `json:"ts"`
	// OffsetS is the sample's time minus the arrival, in seconds (negative: before it).
	OffsetS float64  `json:"offset_s"`
	Running *float64 `json:"running,omitempty"`
	Waiting *float64 `json:"waiting,omitempty"`
	// KV is the KV cache in use, a fraction 0..1.
	KV *float64 `json:"kv_cache_usage_perc,omitempty"`
}

// StatsLine is the engine's log stats line nearest the arrival.
type StatsLine struct {
	TS      time.Time `json:"ts"`
	OffsetS float64   `json:"offset_s"`
	Running *uint32   `json:"running,omitempty"`
	Waiting *uint32   `json:"waiting,omitempty"`
	KV      *float64  `json:"kv_cache_usage_perc,omitempty"`
}

// State is the engine's state when the request arrived.
type State struct {
	Engine string `json:"engine"`
	// EngineSource says how the engine was known: its span, or the only engine sampled then.
	EngineSource string `json:"engine_source"`
	// Before and After are the nearest /metrics samples at or before and after the arrival.
	Before *Sample    `json:"sample_before,omitempty"`
	After  *Sample    `json:"sample_after,omitempty"`
	Stats  *StatsLine `json:"stats_line,omitempty"`
	// SlotLimit is max_num_seqs: from the engine's start-up log line, else the slot_limit rule.
	SlotLimit       *int   `json:"slot_limit,omitempty"`
	SlotLimitSource string `json:"slot_limit_source,omitempty"`
	// Facts are what the figures say, in words ("running at the slot limit", ...).
	Facts []string `json:"facts,omitempty"`
}

// LogLine is one engine log line of the request.
type LogLine struct {
	TS      time.Time `json:"ts"`
	Engine  string    `json:"engine"`
	Level   string    `json:"level,omitempty"`
	Process string    `json:"process,omitempty"`
	Message string    `json:"message"`
	// NamesRequest: the line names the request's id. Fatal: an exception or out-of-memory line.
	NamesRequest bool `json:"names_request,omitempty"`
	Fatal        bool `json:"fatal,omitempty"`
}

// Crash is an engine death the request was caught in.
type Crash struct {
	Engine string    `json:"engine"`
	TS     time.Time `json:"ts"`
	// Relation says when the death came in the request's life.
	Relation string             `json:"relation"`
	Report   *postmortem.Report `json:"postmortem,omitempty"`
}

// Passage is one retrieved passage.
type Passage struct {
	Rank   int     `json:"rank"`
	ID     string  `json:"id"`
	Score  float64 `json:"score"`
	Source string  `json:"source,omitempty"`
}

// AppRecord is one application record of the request.
type AppRecord struct {
	TS                    time.Time `json:"ts"`
	App                   string    `json:"app,omitempty"`
	Model                 string    `json:"model,omitempty"`
	Passages              []Passage `json:"passages,omitempty"`
	TopScore              *float64  `json:"retrieval_top_score,omitempty"`
	RetrievalS            *float64  `json:"retrieval_s,omitempty"`
	Versions              Versions  `json:"versions"`
	CacheHit              *bool     `json:"cache_hit,omitempty"`
	CacheKind             string    `json:"cache_kind,omitempty"`
	CitationCount         *uint32   `json:"citation_count,omitempty"`
	CitationsMissing      *bool     `json:"citations_missing,omitempty"`
	OutputForeignChars    *uint32   `json:"output_foreign_chars,omitempty"`
	OutputScriptViolation *bool     `json:"output_script_violation,omitempty"`
	ErrorLayer            string    `json:"error_layer,omitempty"`
	ErrorMessage          string    `json:"error_message,omitempty"`
	TraceID               string    `json:"trace_id,omitempty"`
	// JoinedBy is request_id or trace_id: how the record names the request.
	JoinedBy string `json:"joined_by"`
}

// Check is the gateway's output check of the answer.
type Check struct {
	ForeignChars    *uint32 `json:"output_foreign_chars,omitempty"`
	ScriptViolation *bool   `json:"output_script_violation,omitempty"`
}

// Content is the captured text.
type Content struct {
	Prompt string `json:"prompt_text"`
	Output string `json:"output_text"`
}

// Request is one request's whole story. Fields that the records do not hold are nil or empty.
type Request struct {
	Match
	Endpoint string `json:"endpoint,omitempty"`
	App      string `json:"app,omitempty"`
	Gateway  string `json:"gateway,omitempty"`
	// Upstream is the engine URL the gateway sent the request to.
	Upstream     string   `json:"upstream,omitempty"`
	TraceSampled *bool    `json:"trace_sampled,omitempty"`
	Versions     Versions `json:"versions"`
	// Status is nil while the request has not finished.
	Status   *Status `json:"status,omitempty"`
	Client   Client  `json:"client"`
	Tokens   Tokens  `json:"tokens"`
	Check    Check   `json:"output_check"`
	Timeline []Step  `json:"timeline"`
	// Engine is nil when no engine span was recorded; EngineNote says why that may be.
	Engine     *Engine     `json:"engine,omitempty"`
	EngineNote string      `json:"engine_note,omitempty"`
	State      *State      `json:"engine_state_at_arrival,omitempty"`
	Logs       []LogLine   `json:"engine_log"`
	LogsCapped bool        `json:"engine_log_capped,omitempty"`
	Crash      *Crash      `json:"crash,omitempty"`
	Records    []AppRecord `json:"app_records"`
	// Content is set only when Options.Content asked for it and capture recorded text.
	Content *Content `json:"content,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// Options steer Load.
type Options struct {
	// Content reads the captured prompt and output text: set it only for a viewer allowed to see
	// content (the console's content-token rule); the account must be able to read the columns.
	Content bool
	// SlotLimit is the slot_limit rule's max_num_seqs, used when the engine's log names none
	// (0: none).
	SlotLimit int
	// Now ends the reads of a request that has not finished (zero: time.Now()).
	Now time.Time
	// LogLines bounds the engine log lines read (default 300).
	LogLines int
}

// Load reads everything recorded of the request m names.
func Load(ctx context.Context, conn driver.Conn, m Match, opts Options) (*Request, error) {
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	if opts.LogLines <= 0 {
		opts.LogLines = 300
	}
	r := &Request{Match: m, Logs: []LogLine{}, Records: []AppRecord{}, Timeline: []Step{}}
	g, err := loadGateway(ctx, conn, m)
	if err != nil {
		return nil, err
	}
	if g == nil {
		// No request.finished: what request.started says.
		st, err := loadStarted(ctx, conn, m)
		if err != nil {
			return nil, err
		}
		if st == nil {
			return nil, fmt.Errorf("%w: request %s arriving at %s has no row in requests or requests_started", ErrNotFound, m.RequestID, m.Key())
		}
		r.fromStarted(st, opts.Now)
	} else {
		r.fromGateway(g)
	}
	end := r.end(opts.Now)

	eng, err := loadEngine(ctx, conn, r.RequestID, r.TraceID, r.ArrivalTS, end)
	if err != nil {
		return nil, err
	}
	r.Engine = eng
	r.combine(g)

	engineName := ""
	if r.Engine != nil {
		engineName = r.Engine.Name
	}
	if r.State, err = loadState(ctx, conn, engineName, r.ArrivalTS, opts.SlotLimit); err != nil {
		return nil, err
	}
	if r.State != nil {
		engineName = r.State.Engine
	}
	if r.Logs, r.LogsCapped, err = loadLogs(ctx, conn, engineName, r.RequestID, r.logFrom(), end, opts.LogLines); err != nil {
		return nil, err
	}
	if r.Crash, err = loadCrash(ctx, conn, engineName, r, end); err != nil {
		return nil, err
	}
	if r.Records, err = loadApp(ctx, conn, r.RequestID, r.TraceID, r.ArrivalTS, end); err != nil {
		return nil, err
	}
	if opts.Content && r.Finished {
		c, err := loadContent(ctx, conn, m)
		if err != nil {
			return nil, err
		}
		r.Content = c
	}
	r.notes()
	return r, nil
}

// end is when the request's records can end: its finish, or now for one that has not finished.
func (r *Request) end(now time.Time) time.Time {
	if r.FinishedTS != nil {
		return *r.FinishedTS
	}
	return now.UTC()
}

// logFrom is where the request's engine log starts: the engine's start of its span, else arrival.
func (r *Request) logFrom() time.Time {
	if r.Engine != nil && r.Engine.StartTS != nil && r.Engine.StartTS.Before(r.ArrivalTS) {
		return *r.Engine.StartTS
	}
	return r.ArrivalTS
}

// gatewayRow is requests' row of the request.
type gatewayRow struct {
	requestID                                           string
	arrival, finished                                   time.Time
	model, endpoint                                     string
	stream                                              bool
	status                                              uint16
	errLayer, errCode, errMessage                       string
	queue, prefill, decode, ttft, tpot, e2e, sched, itl *float64
	prompt, completion, cached                          *uint32
	estimated                                           bool
	finish                                              string
	finishes                                            []string
	responseID                                          string
	maxTokens, foreign                                  *uint32
	violation                                           *bool
	app, promptVersion, configVersion, index, embedding string
	traceID                                             string
	traceSampled                                        *bool
	upstream, gateway                                   string
}

func params(m Match) map[string]string {
	return map[string]string{"id": chstore.StringParam(m.RequestID), "arrival": chTime(m.ArrivalTS)}
}

func chTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }

func loadGateway(ctx context.Context, conn driver.Conn, m Match) (*gatewayRow, error) {
	var g gatewayRow
	err := conn.QueryRow(chstore.WithParams(ctx, params(m)), query("request")).Scan(
		&g.requestID, &g.arrival, &g.finished, &g.model, &g.endpoint, &g.stream, &g.status,
		&g.errLayer, &g.errCode, &g.errMessage,
		&g.queue, &g.prefill, &g.decode, &g.ttft, &g.tpot, &g.e2e, &g.sched, &g.itl,
		&g.prompt, &g.completion, &g.cached, &g.estimated, &g.finish, &g.finishes, &g.responseID, &g.maxTokens,
		&g.foreign, &g.violation, &g.app, &g.promptVersion, &g.configVersion, &g.index, &g.embedding,
		&g.traceID, &g.traceSampled, &g.upstream, &g.gateway)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read request %s from requests: %w", m.RequestID, err)
	}
	return &g, nil
}

type startedRow struct {
	model, endpoint                                     string
	stream                                              bool
	maxTokens, promptBytes                              *uint32
	app, promptVersion, configVersion, index, embedding string
	traceID, gateway                                    string
}

func loadStarted(ctx context.Context, conn driver.Conn, m Match) (*startedRow, error) {
	var s startedRow
	var id string
	var arrival time.Time
	err := conn.QueryRow(chstore.WithParams(ctx, params(m)), query("started")).Scan(&id, &arrival, &s.model, &s.endpoint,
		&s.stream, &s.maxTokens, &s.promptBytes, &s.app, &s.promptVersion, &s.configVersion, &s.index, &s.embedding,
		&s.traceID, &s.gateway)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read request %s from requests_started: %w", m.RequestID, err)
	}
	return &s, nil
}

func (r *Request) fromStarted(s *startedRow, now time.Time) {
	r.Finished, r.FinishedTS = false, nil
	r.Model, r.Endpoint, r.App, r.Gateway = s.model, s.endpoint, s.app, s.gateway
	if r.TraceID == "" {
		r.TraceID = s.traceID
	}
	r.Client.Stream = s.stream
	r.Tokens.MaxTokens = s.maxTokens
	r.Versions = Versions{Prompt: s.promptVersion, Config: s.configVersion, Index: s.index, EmbeddingModel: s.embedding}
	r.Notes = append(r.Notes, fmt.Sprintf("No request.finished: the request was in flight %s after it arrived (at %s), or its gateway died before it ended.",
		shortSeconds(now.Sub(r.ArrivalTS).Seconds()), now.UTC().Format(time.RFC3339)))
}

func (r *Request) fromGateway(g *gatewayRow) {
	fin := g.finished.UTC()
	r.Finished, r.FinishedTS = true, &fin
	r.Model, r.Endpoint, r.App, r.Gateway, r.Upstream = g.model, g.endpoint, g.app, g.gateway, g.upstream
	r.ResponseID, r.TraceID, r.TraceSampled = g.responseID, g.traceID, g.traceSampled
	code := g.status
	r.StatusCode = &code
	r.Versions = Versions{Prompt: g.promptVersion, Config: g.configVersion, Index: g.index, EmbeddingModel: g.embedding}
	r.Status = &Status{Code: g.status, Layer: g.errLayer, LayerNote: layerNotes[g.errLayer], ErrorCode: g.errCode, Message: g.errMessage}
	r.Client = Client{Stream: g.stream, Aborted: g.errLayer == "client" || g.status == 499,
		Broken: g.errLayer == "upstream" && g.status < 400}
	r.Client.TTFT = secs(g.ttft, SourceGateway)
	r.Client.TPOT = secs(g.tpot, SourceGateway)
	r.Client.E2E = secs(g.e2e, SourceGateway)
	tokenSource := SourceEngineUsage
	if g.estimated {
		tokenSource = SourceGatewayGuess
	}
	r.Tokens = Tokens{Prompt: count(g.prompt, tokenSource), Completion: count(g.completion, tokenSource),
		Cached: count(g.cached, SourceEngineUsage), MaxTokens: g.maxTokens, FinishReason: g.finish, FinishReasons: g.finishes}
	r.Check = Check{ForeignChars: g.foreign, ScriptViolation: g.violation}
}

// combine builds the timeline and fills what the gateway lacks from the engine's record, each
// figure with its source.
func (r *Request) combine(g *gatewayRow) {
	e := r.Engine
	var espan struct{ queue, prefill, decode, ttft, e2e, tpot *float64 }
	if e != nil {
		espan.queue, espan.prefill, espan.decode, espan.ttft, espan.e2e, espan.tpot = e.Queue, e.Prefill, e.Decode, e.TTFT, e.E2E, e.TPOT
		if r.Tokens.Prompt.Value == nil {
			r.Tokens.Prompt = count(e.PromptTokens, SourceEngineSpan)
		}
		if r.Tokens.Completion.Value == nil {
			r.Tokens.Completion = count(e.CompletionTokens, SourceEngineSpan)
		}
		if r.Tokens.MaxTokens == nil {
			r.Tokens.MaxTokens = e.MaxTokens
		}
		r.Tokens.EngineFinishReasons = e.FinishReasons
		r.Client.EngineTPOT = secs(e.TPOT, SourceEngineSpan)
	}
	var gw struct{ queue, prefill, decode, sched *float64 }
	if g != nil {
		gw.queue, gw.prefill, gw.decode, gw.sched = g.queue, g.prefill, g.decode, g.sched
	}
	queue := firstSeconds(secs(gw.queue, SourceTimingObject), secs(espan.queue, SourceEngineSpan))
	prefill := firstSeconds(secs(gw.prefill, SourceTimingObject), secs(espan.prefill, SourceEngineSpan))
	decode := firstSeconds(secs(gw.decode, SourceTimingObject), secs(espan.decode, SourceEngineSpan))
	var timingTTFT *float64
	if gw.queue != nil && gw.sched != nil {
		v := *gw.queue + *gw.sched
		timingTTFT = &v
	}
	engineTTFT := firstSeconds(secs(espan.ttft, SourceEngineSpan), secs(timingTTFT, SourceTimingObject))
	r.Client.EngineTTFT = engineTTFT

	zero := 0.0
	r.Timeline = append(r.Timeline, Step{Name: "arrival", Label: "arrival at the gateway", At: &zero, Source: SourceGateway,
		Note: r.ArrivalTS.Format("2006-01-02 15:04:05.000000 UTC")})
	if queue.Value != nil {
		r.Timeline = append(r.Timeline, Step{Name: "queue", Label: "queue (waiting for a slot)", At: &zero, Seconds: queue.Value, Source: queue.Source})
	}
	at := func(parts ...Seconds) *float64 {
		s := 0.0
		for _, p := range parts {
			if p.Value != nil {
				s += *p.Value
			}
		}
		return &s
	}
	if prefill.Value != nil {
		r.Timeline = append(r.Timeline, Step{Name: "prefill", Label: "prefill (the prompt)", At: at(queue), Seconds: prefill.Value, Source: prefill.Source})
	}
	switch {
	case r.Client.TTFT.Value != nil:
		r.Timeline = append(r.Timeline, Step{Name: "first_token", Label: "first token at the client", At: r.Client.TTFT.Value, Source: SourceGateway})
		if engineTTFT.Value != nil {
			r.Timeline = append(r.Timeline, Step{Name: "engine_first_token", Label: "first token in the engine", At: engineTTFT.Value, Source: engineTTFT.Source})
		}
	case engineTTFT.Value != nil:
		note := ""
		if !r.Client.Stream {
			note = "not streamed: the client got no token before the whole answer"
		}
		r.Timeline = append(r.Timeline, Step{Name: "engine_first_token", Label: "first token in the engine", At: engineTTFT.Value, Source: engineTTFT.Source, Note: note})
	}
	if decode.Value != nil {
		start := engineTTFT.Value
		if start == nil && queue.Value != nil && prefill.Value != nil {
			start = at(queue, prefill)
		}
		if start == nil {
			start = r.Client.TTFT.Value
		}
		r.Timeline = append(r.Timeline, Step{Name: "decode", Label: "decode (the output tokens)", At: start, Seconds: decode.Value, Source: decode.Source})
	}
	if espan.e2e != nil {
		r.Timeline = append(r.Timeline, Step{Name: "engine_end", Label: "end in the engine", At: espan.e2e, Source: SourceEngineSpan})
	}
	if r.Client.E2E.Value != nil {
		label := "end: last byte to the client"
		switch {
		case r.Client.Aborted:
			label = "end: the client went away"
		case r.Status != nil && r.Status.Code >= 400:
			label = fmt.Sprintf("end: error %d to the client", r.Status.Code)
		case r.Client.Broken:
			label = "end: the stream broke off"
		}
		r.Timeline = append(r.Timeline, Step{Name: "end", Label: label, At: r.Client.E2E.Value, Source: SourceGateway})
	}
}

// notes say what is missing and why it may be.
func (r *Request) notes() {
	if r.Engine == nil && r.Finished {
		switch {
		case r.Crash != nil:
			r.EngineNote = "No engine span: the engine died before it ended the request (" + r.Crash.Relation + ")."
		case r.TraceSampled != nil && !*r.TraceSampled:
			r.EngineNote = "No engine span: the client's traceparent said not to sample, so vLLM recorded none."
		case r.Status != nil && r.Status.Code >= 400 && r.Status.Layer != "":
			r.EngineNote = "No engine span: the request failed (" + r.Status.Layer + "), and an engine that refused or never ran it ends no span."
		default:
			r.EngineNote = "No engine span: vLLM's tracing is off (--otlp-traces-endpoint) or its spans do not reach the collector."
		}
	}
	if r.Engine != nil {
		others := 0
		for _, s := range r.Engine.Spans {
			if s.Other {
				others++
			}
		}
		if others > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%d of the engine's spans under request id %s belong to another trace: the caller reused its X-Request-Id. The engine figures above combine every span of the id and may hold another request's.", others, r.RequestID))
		}
	}
}

func loadEngine(ctx context.Context, conn driver.Conn, id, traceID string, arrival, end time.Time) (*Engine, error) {
	// As request_facts_window reads spans: from a minute before the arrival to an hour after the end.
	p := map[string]string{"id": chstore.StringParam(id), "from": chTime(arrival.Add(-time.Minute)), "to": chTime(end.Add(time.Hour))}
	qctx := chstore.WithParams(ctx, p)
	var e Engine
	err := conn.QueryRow(qctx, query("engine")).Scan(&e.Name, &e.Model, &e.TraceID, &e.StartTS, &e.EndTS, &e.Children, &e.Prompts,
		&e.Queue, &e.Prefill, &e.Decode, &e.Inference, &e.TTFT, &e.E2E, &e.TPOT, &e.PromptTokens, &e.CompletionTokens,
		&e.FinishReasons, &e.MaxTokens)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the engine's record of request %s (engine_requests): %w", id, err)
	}
	if e.Children == 0 {
		return nil, nil
	}
	rows, err := conn.Query(qctx, query("engine_spans"))
	if err != nil {
		return nil, fmt.Errorf("read the engine spans of request %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var s Span
		if err := rows.Scan(&s.EngineRequestID, &s.PromptIndex, &s.ChildIndex, &s.TraceID, &s.Engine, &s.StartTS, &s.EndTS,
			&s.Queue, &s.Prefill, &s.Decode, &s.Inference, &s.TTFT, &s.E2E, &s.PromptTokens, &s.CompletionTokens,
			&s.FinishReason, &s.MaxTokens); err != nil {
			return nil, fmt.Errorf("read an engine span of request %s: %w", id, err)
		}
		s.Other = traceID != "" && s.TraceID != "" && s.TraceID != traceID
		e.Spans = append(e.Spans, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the engine spans of request %s: %w", id, err)
	}
	if e.Spans == nil {
		e.Spans = []Span{}
	}
	return &e, nil
}

func loadState(ctx context.Context, conn driver.Conn, engine string, arrival time.Time, ruleSlots int) (*State, error) {
	p := map[string]string{"engine": chstore.StringParam(engine), "at": chTime(arrival)}
	qctx := chstore.WithParams(ctx, p)
	rows, err := conn.Query(qctx, query("samples"))
	if err != nil {
		return nil, fmt.Errorf("read the engine samples around %s: %w", arrival.Format(time.RFC3339), err)
	}
	byEngine := map[string][]Sample{}
	var engines []string
	for rows.Next() {
		var s Sample
		var before bool
		if err := rows.Scan(&s.Engine, &s.TS, &before, &s.Running, &s.Waiting, &s.KV); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read an engine sample: %w", err)
		}
		s.TS = s.TS.UTC()
		s.OffsetS = s.TS.Sub(arrival).Seconds()
		if _, ok := byEngine[s.Engine]; !ok {
			engines = append(engines, s.Engine)
		}
		byEngine[s.Engine] = append(byEngine[s.Engine], s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the engine samples: %w", err)
	}
	st := &State{Engine: engine, EngineSource: SourceEngineSpan}
	if engine == "" {
		if len(engines) != 1 {
			if len(engines) > 1 {
				return &State{EngineSource: fmt.Sprintf("unknown: no engine span, and %d engines were sampled then", len(engines))}, nil
			}
			return nil, nil
		}
		st.Engine, st.EngineSource = engines[0], "the only engine sampled at its arrival (no engine span)"
	}
	for i := range byEngine[st.Engine] {
		s := byEngine[st.Engine][i]
		if s.OffsetS <= 0 {
			st.Before = &s
		} else {
			st.After = &s
		}
	}
	var line StatsLine
	err = conn.QueryRow(chstore.WithParams(ctx, map[string]string{"engine": chstore.StringParam(st.Engine), "at": chTime(arrival)}),
		query("stats_line")).Scan(&line.TS, &line.Running, &line.Waiting, &line.KV)
	switch {
	case err == nil:
		line.TS = line.TS.UTC()
		line.OffsetS = line.TS.Sub(arrival).Seconds()
		st.Stats = &line
	case !errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("read the engine's stats line around %s: %w", arrival.Format(time.RFC3339), err)
	}
	var ts time.Time
	var msg string
	err = conn.QueryRow(chstore.WithParams(ctx, map[string]string{"engine": chstore.StringParam(st.Engine), "at": chTime(arrival)}),
		query("slot_limit")).Scan(&ts, &msg)
	switch {
	case err == nil:
		if n, convErr := strconv.Atoi(postmortem.MaxNumSeqs(msg)); convErr == nil {
			st.SlotLimit, st.SlotLimitSource = &n, SourceEngineLog+" (start-up line at "+ts.UTC().Format(time.RFC3339)+")"
		}
	case !errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("read the engine's slot limit from its log: %w", err)
	}
	if st.SlotLimit == nil && ruleSlots > 0 {
		n := ruleSlots
		st.SlotLimit, st.SlotLimitSource = &n, SourceSlotRule
	}
	st.facts()
	return st, nil
}

// facts say what the state means for the request, from the sample at or before its arrival
// (else the stats line).
func (s *State) facts() {
	var running, waiting, kv *float64
	src := ""
	switch {
	case s.Before != nil:
		running, waiting, kv, src = s.Before.Running, s.Before.Waiting, s.Before.KV, SourceEngineMetrics
	case s.Stats != nil:
		if s.Stats.Running != nil {
			v := float64(*s.Stats.Running)
			running = &v
		}
		if s.Stats.Waiting != nil {
			v := float64(*s.Stats.Waiting)
			waiting = &v
		}
		kv, src = s.Stats.KV, SourceEngineLog
	default:
		return
	}
	if running != nil && s.SlotLimit != nil {
		if int(*running) >= *s.SlotLimit {
			s.Facts = append(s.Facts, fmt.Sprintf("%d running: every slot was taken (max_num_seqs %d), so the request had to wait for one (%s)", int(*running), *s.SlotLimit, src))
		} else {
			s.Facts = append(s.Facts, fmt.Sprintf("%d running of %d slots (%s)", int(*running), *s.SlotLimit, src))
		}
	}
	if waiting != nil && *waiting > 0 {
		s.Facts = append(s.Facts, fmt.Sprintf("%d requests were already waiting ahead of it (%s)", int(*waiting), src))
	}
	if kv != nil && *kv >= 0.9 {
		s.Facts = append(s.Facts, fmt.Sprintf("the KV cache was %.1f%% full (%s)", *kv*100, src))
	}
}

func loadLogs(ctx context.Context, conn driver.Conn, engine, id string, from, to time.Time, limit int) ([]LogLine, bool, error) {
	// Lines naming the request are searched for only with an id long enough not to be a common word.
	named := id
	if len(named) < 8 {
		named = ""
	}
	p := map[string]string{"engine": chstore.StringParam(engine), "id": chstore.StringParam(named),
		"from": chTime(from.Add(-time.Second)), "to": chTime(to.Add(time.Second)), "limit": strconv.Itoa(limit + 1)}
	rows, err := conn.Query(chstore.WithParams(ctx, p), query("logs"))
	if err != nil {
		return nil, false, fmt.Errorf("read the engine log of request %s: %w", id, err)
	}
	defer rows.Close()
	out := []LogLine{}
	for rows.Next() {
		var l LogLine
		var running, waiting *uint32
		var kv *float64
		var exc string
		var oom *uint64
		if err := rows.Scan(&l.TS, &l.Engine, &l.Level, &l.Process, &l.Message, &running, &waiting, &kv, &exc, &oom, &l.NamesRequest); err != nil {
			return nil, false, fmt.Errorf("read an engine log line: %w", err)
		}
		l.TS = l.TS.UTC()
		l.Fatal = exc != "" || oom != nil
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("read the engine log of request %s: %w", id, err)
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

func loadCrash(ctx context.Context, conn driver.Conn, engine string, r *Request, end time.Time) (*Crash, error) {
	// A death from a minute before the arrival (the request may have met a dying or dead engine)
	// to 10 s after the end (the gateway sees a broken stream as soon as the engine dies; log
	// and gateway clocks may differ by a little).
	from, to := r.ArrivalTS.Add(-time.Minute), end.Add(10*time.Second)
	var c Crash
	err := conn.QueryRow(chstore.WithParams(ctx, map[string]string{"engine": chstore.StringParam(engine), "from": chTime(from), "to": chTime(to)}),
		query("crash")).Scan(&c.Engine, &c.TS)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look for an engine death around request %s: %w", r.RequestID, err)
	}
	c.TS = c.TS.UTC()
	failed := r.Status != nil && (r.Status.Code >= 500 || r.Status.Layer == "upstream")
	switch d := c.TS.Sub(r.ArrivalTS).Seconds(); {
	case d >= 0 && (!r.Finished || !c.TS.After(end)):
		c.Relation = fmt.Sprintf("the engine died %s after the request arrived, while it was in flight", shortSeconds(d))
	case d >= 0:
		c.Relation = fmt.Sprintf("the engine died %s after the request arrived, %s after it ended", shortSeconds(d), shortSeconds(c.TS.Sub(end).Seconds()))
		if !failed {
			return nil, nil
		}
	default:
		if !failed {
			// The engine died before and the request was served: by a restarted engine.
			return nil, nil
		}
		c.Relation = fmt.Sprintf("the request arrived %s after the engine died, and failed", shortSeconds(-d))
	}
	lines, model, err := postmortem.Load(ctx, conn, c.Engine, c.TS)
	switch {
	case errors.Is(err, postmortem.ErrNoData):
		return &c, nil
	case err != nil:
		return nil, err
	}
	rep := postmortem.Analyze(lines, postmortem.Options{At: c.TS, Model: model})
	rep.Source = "engine_logs"
	c.Report = &rep
	return &c, nil
}

func loadApp(ctx context.Context, conn driver.Conn, id, traceID string, arrival, end time.Time) ([]AppRecord, error) {
	// As request_facts_window reads records: an hour either side.
	p := map[string]string{"id": chstore.StringParam(id), "trace_id": chstore.StringParam(traceID),
		"from": chTime(arrival.Add(-time.Hour)), "to": chTime(end.Add(time.Hour))}
	rows, err := conn.Query(chstore.WithParams(ctx, p), query("app"))
	if err != nil {
		return nil, fmt.Errorf("read the application records of request %s: %w", id, err)
	}
	defer rows.Close()
	var byID, byTrace []AppRecord
	for rows.Next() {
		var a AppRecord
		var ids, sources []string
		var scores []float64
		var byRequest bool
		if err := rows.Scan(&a.TS, &a.App, &a.Model, &ids, &scores, &sources, &a.TopScore, &a.RetrievalS,
			&a.Versions.EmbeddingModel, &a.Versions.Index, &a.Versions.Prompt, &a.Versions.Config, &a.CacheHit, &a.CacheKind,
			&a.CitationCount, &a.CitationsMissing, &a.OutputForeignChars, &a.OutputScriptViolation, &a.ErrorLayer,
			&a.ErrorMessage, &a.TraceID, &byRequest); err != nil {
			return nil, fmt.Errorf("read an application record: %w", err)
		}
		a.TS = a.TS.UTC()
		for i, pid := range ids {
			ps := Passage{Rank: i + 1, ID: pid}
			if i < len(scores) {
				ps.Score = scores[i]
			}
			if i < len(sources) {
				ps.Source = sources[i]
			}
			a.Passages = append(a.Passages, ps)
		}
		if byRequest {
			a.JoinedBy = "request_id"
			byID = append(byID, a)
		} else {
			a.JoinedBy = "trace_id"
			byTrace = append(byTrace, a)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the application records of request %s: %w", id, err)
	}
	// A record naming the request wins over those of its trace, as in request_facts_window.
	if len(byID) > 0 {
		return byID, nil
	}
	if byTrace == nil {
		return []AppRecord{}, nil
	}
	return byTrace, nil
}

func loadContent(ctx context.Context, conn driver.Conn, m Match) (*Content, error) {
	var c Content
	err := conn.QueryRow(chstore.WithParams(ctx, params(m)), query("content")).Scan(&c.Prompt, &c.Output)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the captured text of request %s: %w", m.RequestID, err)
	}
	if c.Prompt == "" && c.Output == "" {
		return nil, nil
	}
	return &c, nil
}

// shortSeconds prints seconds as "0.47 s", "12.3 s", "4 min 5 s".
func shortSeconds(s float64) string {
	switch {
	case s < 1:
		return strconv.FormatFloat(s, 'f', 3, 64) + " s"
	case s < 10:
		return strconv.FormatFloat(s, 'f', 2, 64) + " s"
	case s < 120:
		return strconv.FormatFloat(s, 'f', 1, 64) + " s"
	}
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	return d.String()
}

// RuleSlotLimit is the max_num_seqs parameter of the slot_limit rule among defs (the slot limit
// the detector was told), 0 when there is none.
func RuleSlotLimit(defs []*rules.Definition) int {
	for _, d := range defs {
		if d.Name != "slot_limit" {
			continue
		}
		switch v := d.Params["max_num_seqs"].(type) {
		case int:
			return v
		case int64:
			return int(v)
		case float64:
			return int(v)
		}
	}
	return 0
}
