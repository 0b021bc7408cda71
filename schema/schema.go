// Package schema is servescope's event contract, version 1.
//
// Every record that moves through servescope is one JSON event in one NATS message. The gateway
// publishes request.started and request.finished, and gateway.heartbeat (its open requests) on an
// interval; applications publish app.record, and the collector publishes engine.sample,
// engine.span and engine.log. The consumer decodes each message
// with [Decode] and writes it into the ClickHouse table of its kind.
//
// Conventions shared by every event:
//   - `schema` names the kind and version, e.g. "request.finished/v1"; an unknown version is refused.
//   - `event_id` is a KSUID and is also the message's Nats-Msg-Id, so JetStream drops a retried
//     publish within its duplicate window and the ClickHouse tables de-duplicate on it.
//   - `request_id` joins the layers: a KSUID for gateway-born requests, or the caller's X-Request-Id
//     exactly as given.
//   - `ts` is RFC 3339 in UTC with nanoseconds.
//   - Durations are seconds as float64 with `_s` in the name; token counts are integers.
//   - Unknown is absent (null), never 0: optional numbers are pointers.
//
// Applications in Go import this package to build and validate app.record events; other languages
// use the JSON Schema files under schema/jsonschema, generated from these types.
package schema

import (
	"time"

	"github.com/segmentio/ksuid"
)

// Version is the schema version carried by every event of this package.
const Version = "v1"

// Kind names an event type; it is the last part of the event's subject.
type Kind string

// The seven event kinds of schema v1.
const (
	KindRequestStarted   Kind = "request.started"
	KindRequestFinished  Kind = "request.finished"
	KindAppRecord        Kind = "app.record"
	KindEngineSample     Kind = "engine.sample"
	KindEngineSpan       Kind = "engine.span"
	KindEngineLog        Kind = "engine.log"
	KindGatewayHeartbeat Kind = "gateway.heartbeat"
)

// Kinds lists every kind of schema v1, in pipeline order.
func Kinds() []Kind {
	return []Kind{KindRequestStarted, KindRequestFinished, KindAppRecord, KindEngineSample, KindEngineSpan, KindEngineLog,
		KindGatewayHeartbeat}
}

// SchemaID is the value of the `schema` field for events of kind k, e.g. "app.record/v1".
func (k Kind) SchemaID() string { return string(k) + "/" + Version }

// Valid reports whether k is one of the kinds of schema v1.
func (k Kind) Valid() bool {
	for _, v := range Kinds() {
		if k == v {
			return true
		}
	}
	return false
}

// Header is the part every event shares. It is embedded in each event type, so its fields appear
// at the top level of the JSON object.
type Header struct {
	// Schema is the kind and version, e.g. "request.finished/v1".
	Schema string `json:"schema" jsonschema:"required"`
	// EventID is a KSUID unique to this event; it is the NATS message's Nats-Msg-Id.
	EventID string `json:"event_id" jsonschema:"required,maxLength=128"`
	// RequestID identifies the user request the event belongs to. Required for request.*,
	// app.record and engine.span; empty for engine.sample and gateway.heartbeat, and usually for
	// engine.log.
	RequestID string `json:"request_id,omitempty" jsonschema:"maxLength=128"`
	// TS is when the event happened (RFC 3339, UTC, nanoseconds).
	TS time.Time `json:"ts" jsonschema:"required"`
}

// Head returns the shared header; it lets code handle any event generically.
func (h *Header) Head() *Header { return h }

// Event is implemented by the seven event types of this package (as pointers).
type Event interface {
	// Kind is the event's kind.
	Kind() Kind
	// Head returns the shared header fields.
	Head() *Header
	// Validate checks the event as of now; see [ValidateAt].
	Validate() error
	// ValidateAt checks the event as of now: required fields, ranges, UTF-8, sizes and the
	// schema version. It returns a [ValidationErrors] naming each bad field.
	ValidateAt(now time.Time) error
}

// NewEventID returns a new KSUID string for an event_id.
func NewEventID() string { return ksuid.New().String() }

// NewRequestID returns a new KSUID string for a gateway-born request_id.
func NewRequestID() string { return ksuid.New().String() }

// newHeader fills a header for kind k at time ts (converted to UTC).
func newHeader(k Kind, requestID string, ts time.Time) Header {
	return Header{Schema: k.SchemaID(), EventID: NewEventID(), RequestID: requestID, TS: ts.UTC()}
}

// Versions says which system served a request: two requests with equal versions ran on the same
// system. Values are free-form labels set by the operator (e.g. "prompt-v12", a git SHA).
type Versions struct {
	// App is the application or service name (header X-Servescope-App).
	App string `json:"app,omitempty" jsonschema:"maxLength=256"`
	// PromptVersion is the prompt template's version (X-Servescope-Prompt-Version).
	PromptVersion string `json:"prompt_version,omitempty" jsonschema:"maxLength=256"`
	// ConfigVersion is the serving or application configuration's version (X-Servescope-Config-Version).
	ConfigVersion string `json:"config_version,omitempty" jsonschema:"maxLength=256"`
	// IndexVersion is the retrieval index (vector store) version (X-Servescope-Index-Version).
	IndexVersion string `json:"index_version,omitempty" jsonschema:"maxLength=256"`
	// EmbeddingModelVersion is the query-side embedding model version (X-Servescope-Embedding-Model).
	EmbeddingModelVersion string `json:"embedding_model_version,omitempty" jsonschema:"maxLength=256"`
}

// Error layers: which layer of the stack failed.
const (
	LayerGateway   = "gateway"   // the gateway itself (bad request body it could not parse, internal failure)
	LayerUpstream  = "upstream"  // the engine answered an error, was unreachable, or broke the stream
	LayerClient    = "client"    // the client went away (status 499)
	LayerApp       = "app"       // the application (retrieval, tool call, post-processing)
	LayerRetrieval = "retrieval" // the application's retrieval step specifically
)

// OutputCheck is the result of checking a generated answer's content.
type OutputCheck struct {
	// OutputForeignChars counts letters outside the allowed Unicode scripts (default Latin, plus
	// Common and Inherited) in the generated text.
	OutputForeignChars *uint32 `json:"output_foreign_chars,omitempty"`
	// OutputScriptViolation is true when OutputForeignChars > 0.
	OutputScriptViolation *bool `json:"output_script_violation,omitempty"`
}

// RequestStarted is published by the gateway when a request arrives, before it is forwarded.
// Together with RequestFinished it gives requests in flight (started, not finished).
type RequestStarted struct {
	Header
	Versions
	// ArrivalTS is when the gateway received the request (RFC 3339, UTC).
	ArrivalTS time.Time `json:"arrival_ts" jsonschema:"required"`
	// Model is the model the client asked for (OpenAI `model`).
	Model string `json:"model,omitempty" jsonschema:"maxLength=256"`
	// Endpoint is the request path, e.g. "/v1/chat/completions".
	Endpoint string `json:"endpoint" jsonschema:"required,maxLength=256"`
	// Stream is the OpenAI `stream` flag.
	Stream bool `json:"stream"`
	// MaxTokens is the requested `max_tokens` / `max_completion_tokens`; absent when not set.
	MaxTokens *uint32 `json:"max_tokens,omitempty"`
	// PromptBytes is the size of the prompt text (all messages' content) in bytes, as received.
	PromptBytes *uint32 `json:"prompt_bytes,omitempty"`
	// TraceID is the W3C trace id (32 hex) forwarded to the engine in traceparent.
	TraceID string `json:"trace_id,omitempty" jsonschema:"maxLength=32"`
	// Gateway is the gateway instance that saw the request.
	Gateway string `json:"gateway,omitempty" jsonschema:"maxLength=256"`
}

// Kind implements Event.
func (*RequestStarted) Kind() Kind { return KindRequestStarted }

// NewRequestStarted returns a request.started event with schema and event_id set.
func NewRequestStarted(requestID string, arrival time.Time) *RequestStarted {
	return &RequestStarted{Header: newHeader(KindRequestStarted, requestID, arrival), ArrivalTS: arrival.UTC()}
}

// RequestFinished is published by the gateway when a request ends, successfully or not.
type RequestFinished struct {
	Header
	Versions
	OutputCheck
	// ArrivalTS is when the gateway received the request (RFC 3339, UTC).
	ArrivalTS time.Time `json:"arrival_ts" jsonschema:"required"`
	// FinishedTS is when the gateway sent the last byte to the client or saw the failure.
	FinishedTS time.Time `json:"finished_ts" jsonschema:"required"`
	// Model is the model the engine served (response `model`), or the requested one when the
	// engine gave none.
	Model string `json:"model,omitempty" jsonschema:"maxLength=256"`
	// Endpoint is the request path, e.g. "/v1/chat/completions".
	Endpoint string `json:"endpoint" jsonschema:"required,maxLength=256"`
	// Stream is the OpenAI `stream` flag.
	Stream bool `json:"stream"`
	// StatusCode is the HTTP status the client received (499 when the client went away first).
	StatusCode uint16 `json:"status_code" jsonschema:"required,minimum=100,maximum=599"`
	// ErrorLayer is the layer that failed (see the Layer constants); empty on success.
	ErrorLayer string `json:"error_layer,omitempty" jsonschema:"enum=,enum=gateway,enum=upstream,enum=client,enum=app,enum=retrieval"`
	// ErrorCode is the error's type or code, e.g. "BadRequestError", "connection_refused".
	ErrorCode string `json:"error_code,omitempty" jsonschema:"maxLength=256"`
	// ErrorMessage is the error text (truncated to 8 KiB).
	ErrorMessage string `json:"error_message,omitempty" jsonschema:"maxLength=8192"`
	// TTFTSeconds is the time to first token: seconds, measured at the gateway from request arrival to
	// the first stream event carrying generated output of any kind, for any choice: text (`text`,
	// `delta.content`), reasoning (`delta.reasoning_content` up to vLLM 0.10, `delta.reasoning`
	// after), a tool-call delta, or for /v1/responses the first `response.*.delta` event with a
	// non-empty delta. Never the role-only first chunk. Streams only: absent for a non-streaming
	// answer, whose first token the gateway cannot see (request_facts derives one from queue_s +
	// scheduled_to_first_token_s or from the engine span).
	TTFTSeconds *float64 `json:"ttft_s,omitempty" jsonschema:"minimum=0"`
	// TPOTSeconds is the mean time per output token after the first, per choice: seconds, measured at
	// the gateway as Σc (lastc − firstc) ÷ (completion_tokens − k). For each of the k choices
	// that generated tokens, firstc is when its first chunk carrying tokens (any chunk but the
	// role-only one) arrived and lastc when its last chunk (the finish chunk included) arrived;
	// completion_tokens is the usage total, which vLLM sums over every choice and prompt. With one
	// choice that is (last − first) ÷ (completion_tokens − 1). The choices of n > 1 or of several
	// prompts are generated side by side, so this is each choice's inter-token time, as the
	// engine's; one timeline divided by every choice's tokens would be 1/n of it. For
	// /v1/responses the one output sequence is the choice. Streams only; absent when no choice
	// has two tokens.
	TPOTSeconds *float64 `json:"tpot_s,omitempty" jsonschema:"minimum=0"`
	// E2ESeconds is the end-to-end latency: seconds from arrival to the last byte sent to the client.
	E2ESeconds *float64 `json:"e2e_s,omitempty" jsonschema:"minimum=0"`
	// QueueSeconds is the engine's queue wait in seconds: vLLM's per-request timing object
	// `metrics.queue_time_ms` (scheduled − queued). vLLM sends that object only when started with
	// --enable-per-request-metrics, and only for a single prompt with n = 1.
	QueueSeconds *float64 `json:"queue_s,omitempty" jsonschema:"minimum=0"`
	// PrefillSeconds is an engine's prefill time in seconds. The gateway leaves it absent: no vLLM
	// response carries a prefill time (the timing object has none); the engine span's is in
	// engine_spans.prefill_s.
	PrefillSeconds *float64 `json:"prefill_s,omitempty" jsonschema:"minimum=0"`
	// DecodeSeconds is the engine's decode time in seconds: `metrics.generation_time_ms`, first output
	// token to last, without queue wait and prefill.
	DecodeSeconds *float64 `json:"decode_s,omitempty" jsonschema:"minimum=0"`
	// ScheduledToFirstTokenSeconds is seconds from the engine scheduling the request to its first output
	// token, as the engine reports it in its per-request timing object (vLLM `metrics.
	// time_to_first_token_ms`, built from scheduled_ts, not arrival). It excludes the queue wait, so
	// it is not a TTFT: queue_s + scheduled_to_first_token_s is the engine's time from arrival.
	// Events written before this name carried it as `engine_ttft_s`; decoders read both.
	ScheduledToFirstTokenSeconds *float64 `json:"scheduled_to_first_token_s,omitempty" jsonschema:"minimum=0"`
	// EngineITLSeconds is the engine's mean inter-token latency in seconds (`metrics.mean_itl_ms`).
	EngineITLSeconds *float64 `json:"engine_itl_s,omitempty" jsonschema:"minimum=0"`
	// PromptTokens is usage.prompt_tokens, summed over the prompts of a request (input_tokens for
	// /v1/responses; OTel gen_ai.usage.input_tokens).
	PromptTokens *uint32 `json:"prompt_tokens,omitempty"`
	// CompletionTokens is usage.completion_tokens, summed over every choice and prompt
	// (output_tokens for /v1/responses, reasoning included; 0 for /v1/embeddings as vLLM reports
	// it; OTel gen_ai.usage.output_tokens).
	CompletionTokens *uint32 `json:"completion_tokens,omitempty"`
	// CachedTokens is usage.prompt_tokens_details.cached_tokens, the prompt tokens served from the
	// prefix cache (input_tokens_details.cached_tokens for /v1/responses). Absent when unknown:
	// vLLM sends the details only with --enable-prompt-tokens-details and then leaves them null
	// when no token came from the cache, so a null means 0 only on such engines; the gateway
	// records that 0 when GATEWAY_ENGINE_PROMPT_TOKENS_DETAILS says every engine runs with the
	// flag. A cache-hit share is sum(cached_tokens) ÷ sum(prompt_tokens) over rows where
	// cached_tokens is not null.
	CachedTokens *uint32 `json:"cached_tokens,omitempty"`
	// TokensEstimated is true when the engine gave no usage and the gateway estimated the counts:
	// completion tokens from the number of chunks carrying tokens (a stream) or about four bytes
	// of text a token (a body), prompt tokens from prompt_bytes.
	TokensEstimated bool `json:"tokens_estimated,omitempty"`
	// FinishReason is OpenAI's finish_reason of choice index 0: "stop", "length", "tool_calls",
	// ... (FinishReasons has every choice's). For /v1/responses, "stop" for status completed,
	// "length" for incomplete with reason max_output_tokens (vLLM maps the engine's "length" to
	// that), otherwise the incomplete reason.
	FinishReason string `json:"finish_reason,omitempty" jsonschema:"maxLength=64"`
	// FinishReasons is the finish_reason of every choice by choice index, "" for a choice that
	// ended without one (the stream broke or the client left); OTel gen_ai.response.finish_reasons.
	// A completion with several prompts numbers its choices output index + prompt index × n. At
	// most 1024 entries (the first choices); absent when no choice reported one.
	// has(finish_reasons, 'length') says whether any choice was cut at max_tokens.
	FinishReasons []string `json:"finish_reasons,omitempty" jsonschema:"maxItems=1024,maxLength=64"`
	// ResponseID is the `id` the engine gave its answer (OTel gen_ai.response.id): for vLLM
	// "chatcmpl-<X-Request-Id>", "cmpl-<X-Request-Id>", "embd-<X-Request-Id>", or "resp_<uuid>"
	// for /v1/responses, which ignores X-Request-Id. vLLM's engine request ids, which its spans
	// carry as gen_ai.request.id, derive from it (docs/vllm-compatibility.md, section 2).
	ResponseID string `json:"response_id,omitempty" jsonschema:"maxLength=256"`
	// MaxTokens is the requested max_tokens; absent when not set.
	MaxTokens *uint32 `json:"max_tokens,omitempty"`
	// TraceID is the W3C trace id (32 hex) forwarded to the engine.
	TraceID string `json:"trace_id,omitempty" jsonschema:"maxLength=32"`
	// SpanID is the gateway's own span id for this request (16 hex): the parent-id of the
	// traceparent it forwarded, so vLLM's llm_request span for this request, and only for this
	// one, names it as its parent (engine_spans.parent_span_id). A caller's X-Request-Id may
	// repeat; this id does not, and it is what engine data joins on (docs/vllm-compatibility.md,
	// section 2). Absent in events written before it existed.
	SpanID string `json:"span_id,omitempty" jsonschema:"maxLength=16"`
	// ParentSpanID is the parent-id of the client's own valid traceparent (16 hex): the client's
	// span this request continues, whose child the gateway's span is. Absent when the client sent
	// none (the gateway then started the trace).
	ParentSpanID string `json:"parent_span_id,omitempty" jsonschema:"maxLength=16"`
	// TraceSampled is the sampled flag of the traceparent forwarded to the engine. False when the
	// client sent a traceparent with the flag off: the gateway forwards the client's decision, and
	// vLLM's parent-based sampling then records no span for the request, which is why its engine
	// phases are missing. The gateway's own traceparents are sampled.
	TraceSampled *bool `json:"trace_sampled,omitempty"`
	// Upstream is the engine base URL the request went to.
	Upstream string `json:"upstream,omitempty" jsonschema:"maxLength=1024"`
	// Gateway is the gateway instance that saw the request.
	Gateway string `json:"gateway,omitempty" jsonschema:"maxLength=256"`
	// PromptText is the prompt, only when content capture is on; redacted and truncated.
	PromptText string `json:"prompt_text,omitempty" jsonschema:"maxLength=262144"`
	// OutputText is the generated text, only when content capture is on; redacted and truncated.
	OutputText string `json:"output_text,omitempty" jsonschema:"maxLength=262144"`
}

// Kind implements Event.
func (*RequestFinished) Kind() Kind { return KindRequestFinished }

// NewRequestFinished returns a request.finished event with schema and event_id set; ts is finished.
func NewRequestFinished(requestID string, arrival, finished time.Time) *RequestFinished {
	return &RequestFinished{
		Header:    newHeader(KindRequestFinished, requestID, finished),
		ArrivalTS: arrival.UTC(), FinishedTS: finished.UTC(),
	}
}

// Passage is one retrieved passage.
type Passage struct {
	// ID identifies the passage in the index.
	ID string `json:"id" jsonschema:"required,maxLength=512"`
	// Score is the retrieval similarity score (e.g. cosine similarity), higher is closer.
	Score float64 `json:"score"`
	// Source is an optional document name or URL.
	Source string `json:"source,omitempty" jsonschema:"maxLength=1024"`
}

// AppRecord is published by an application (directly to NATS, through the gateway's HTTP ingest, or
// with a Go publisher) once per user request. It carries what only the application knows:
// retrieval, cache, versions and output checks — the fields no engine metric provides.
type AppRecord struct {
	Header
	Versions
	OutputCheck
	// Model is the model the application asked for.
	Model string `json:"model,omitempty" jsonschema:"maxLength=256"`
	// Passages are the retrieved passages in rank order.
	Passages []Passage `json:"passages,omitempty" jsonschema:"maxItems=1000"`
	// RetrievalTopScore is the score of the top passage; absent when nothing was retrieved.
	RetrievalTopScore *float64 `json:"retrieval_top_score,omitempty"`
	// RetrievalSeconds is the time the retrieval step took, in seconds.
	RetrievalSeconds *float64 `json:"retrieval_s,omitempty" jsonschema:"minimum=0"`
	// CacheHit says whether the answer came from a cache; absent when the application has none.
	CacheHit *bool `json:"cache_hit,omitempty"`
	// CacheKind names the cache: "exact", "semantic", "prefix", ...
	CacheKind string `json:"cache_kind,omitempty" jsonschema:"maxLength=64"`
	// CitationCount is the number of citations found in the answer.
	CitationCount *uint32 `json:"citation_count,omitempty"`
	// CitationsMissing is true when the answer should cite passages and cites none.
	CitationsMissing *bool `json:"citations_missing,omitempty"`
	// ErrorLayer is the layer that failed in the application ("app", "retrieval", ...).
	ErrorLayer string `json:"error_layer,omitempty" jsonschema:"maxLength=64"`
	// ErrorMessage is the application's error text (truncated to 8 KiB).
	ErrorMessage string `json:"error_message,omitempty" jsonschema:"maxLength=8192"`
	// TraceID is the W3C trace id (32 lower-case hex) of the application's trace for this
	// request. An application that sends its trace context (traceparent) through the gateway
	// shares it with the gateway's request.finished and the engine's span, so the records join
	// on it as well as on request_id. The collector sets it on the records it builds from an
	// application's OpenTelemetry spans.
	TraceID string `json:"trace_id,omitempty" jsonschema:"maxLength=32"`
}

// Kind implements Event.
func (*AppRecord) Kind() Kind { return KindAppRecord }

// NewAppRecord returns an app.record event with schema and event_id set.
func NewAppRecord(requestID, app string, ts time.Time) *AppRecord {
	r := &AppRecord{Header: newHeader(KindAppRecord, requestID, ts)}
	r.App = app
	return r
}

// SetPassages sets Passages and RetrievalTopScore (the highest score) together.
func (r *AppRecord) SetPassages(p []Passage) {
	r.Passages = p
	r.RetrievalTopScore = nil
	for i := range p {
		if r.RetrievalTopScore == nil || p[i].Score > *r.RetrievalTopScore {
			s := p[i].Score
			r.RetrievalTopScore = &s
		}
	}
}

// Histogram is one Prometheus histogram as read in one scrape: cumulative since the engine started.
type Histogram struct {
	// Sum is the sum of observed values (seconds or tokens, as the metric's name says).
	Sum float64 `json:"sum"`
	// Count is the number of observations.
	Count float64 `json:"count"`
	// Buckets are the cumulative bucket counts by upper bound, +Inf last.
	Buckets []Bucket `json:"buckets,omitempty" jsonschema:"maxItems=200"`
}

// Bucket is one cumulative histogram bucket.
type Bucket struct {
	// LE is the bucket's upper bound ("le"); +Inf is encoded as the JSON string "+Inf".
	LE FloatOrInf `json:"le"`
	// Count is the cumulative count of observations ≤ LE.
	Count float64 `json:"count"`
}

// EngineSample is one scrape of an engine's Prometheus /metrics, published by the collector.
// Gauges are instantaneous; counters and histograms are cumulative since the engine started
// (take differences between two samples to get a window's values; a drop means a restart).
type EngineSample struct {
	Header
	// Engine names the scrape target (by default its /metrics URL).
	Engine string `json:"engine" jsonschema:"required,maxLength=1024"`
	// Model is the served model (label model_name).
	Model string `json:"model,omitempty" jsonschema:"maxLength=256"`
	// EngineIndex is the value of vLLM's `engine` label for the engine core this sample is about
	// ("0", "1", ...): a data-parallel server (--data-parallel-size N) exposes one series per
	// engine core in one exposition, and the collector makes one sample of each. Empty when the
	// series have no engine label (vLLM's V0 engine) and on failed scrapes.
	EngineIndex string `json:"engine_index,omitempty" jsonschema:"maxLength=16"`
	// Engines is how many engine cores the scrape exposed (the distinct `engine` label values),
	// 1 for a server without data parallelism; absent on failed scrapes.
	Engines *uint16 `json:"engines,omitempty"`
	// Up is false when the scrape failed; then ScrapeError says why and the metrics are absent.
	Up bool `json:"up"`
	// ScrapeError is the failure of a failed scrape.
	ScrapeError string `json:"scrape_error,omitempty" jsonschema:"maxLength=8192"`
	// ScrapeDurationSeconds is how long the scrape took, in seconds.
	ScrapeDurationSeconds *float64 `json:"scrape_duration_s,omitempty" jsonschema:"minimum=0"`
	// NumRequestsRunning is vllm:num_requests_running (sequences in the running batch).
	NumRequestsRunning *float64 `json:"num_requests_running,omitempty" jsonschema:"minimum=0"`
	// NumRequestsWaiting is vllm:num_requests_waiting (requests queued for a slot).
	NumRequestsWaiting *float64 `json:"num_requests_waiting,omitempty" jsonschema:"minimum=0"`
	// KVCacheUsagePerc is vllm:kv_cache_usage_perc (older: gpu_cache_usage_perc), a fraction 0..1
	// despite the name, as vLLM reports it.
	KVCacheUsagePerc *float64 `json:"kv_cache_usage_perc,omitempty" jsonschema:"minimum=0"`
	// Gauges holds the other gauges by vLLM V1 name without the "vllm:" prefix.
	Gauges map[string]float64 `json:"gauges,omitempty"`
	// Counters holds counters by vLLM V1 name without the "vllm:" prefix; a counter with a
	// distinguishing label is keyed name{label="value"}, e.g. request_success_total{finished_reason="length"}.
	Counters map[string]float64 `json:"counters,omitempty"`
	// Histograms holds histograms by vLLM V1 name without the prefix, e.g. "time_to_first_token_seconds".
	Histograms map[string]Histogram `json:"histograms,omitempty"`
}

// Kind implements Event.
func (*EngineSample) Kind() Kind { return KindEngineSample }

// NewEngineSample returns an engine.sample event with schema and event_id set.
func NewEngineSample(engine string, ts time.Time) *EngineSample {
	return &EngineSample{Header: newHeader(KindEngineSample, "", ts), Engine: engine}
}

// EngineSpan is the engine's own per-request timing, from vLLM's OTLP `llm_request` span.
//
// vLLM ends one span per engine request, and an API request can be several engine requests: each
// prompt of a multi-prompt /v1/completions (or /v1/embeddings) request, and each of the n choices
// when n > 1 (vllm/v1/engine/parallel_sampling.py; vllm/sequence.py ParallelSampleSequenceGroup in
// the V0 engine). Each of those children is one engine.span event with the API request's
// RequestID; PromptIndex and ChildIndex say which child it is when the engine's id tells. Readers
// combine the children of a request (the ClickHouse view engine_requests).
type EngineSpan struct {
	Header
	// EngineRequestID is the engine's id as the span carries it (gen_ai.request.id, e.g.
	// "chatcmpl-<id>", "cmpl-<id>-1", "0_chatcmpl-<id>"); RequestID is the API request's id inside
	// it, with vLLM's prefix and child markers removed, matching the gateway's.
	EngineRequestID string `json:"engine_request_id,omitempty" jsonschema:"maxLength=256"`
	// PromptIndex is the position of this child's prompt in a multi-prompt /v1/completions or
	// /v1/embeddings request (vLLM's "cmpl-<id>-<index>"); absent for other endpoints.
	PromptIndex *uint32 `json:"prompt_index,omitempty"`
	// ChildIndex is this child's index among the n choices of its prompt when the engine's id
	// carries it ("<index>_cmpl-…" in V1 up to v0.10, "…_parallel_sample_<index>" in V0); absent
	// when the id does not tell (vLLM main gives every child the parent's id).
	ChildIndex *uint32 `json:"child_index,omitempty"`
	// TraceID and SpanID are the span's W3C ids in hex.
	TraceID string `json:"trace_id,omitempty" jsonschema:"maxLength=32"`
	SpanID  string `json:"span_id,omitempty" jsonschema:"maxLength=16"`
	// ParentSpanID is the span's parent span id in hex: the parent-id of the traceparent the
	// request brought to vLLM (vLLM starts its llm_request span as a child of that context), so
	// for a request that came through the gateway it is the gateway's request.finished span_id.
	// That, not the caller's id, ties the span to one gateway request: a caller's X-Request-Id may
	// repeat, and vLLM's span carries that id. Empty for a root span.
	ParentSpanID string `json:"parent_span_id,omitempty" jsonschema:"maxLength=16"`
	// Engine names the engine: the collector's configured name, or the span's service.name
	// resource attribute when that picks one of several configured engines (package
	// services/collector/otlp states the rule).
	Engine string `json:"engine,omitempty" jsonschema:"maxLength=1024"`
	// Model is gen_ai.response.model or gen_ai.request.model when the span has one. vLLM's V1
	// engine sets neither; its V0 engine sets gen_ai.response.model to the model path it loaded
	// (--model), which differs from the served name (--served-model-name) clients ask for.
	Model string `json:"model,omitempty" jsonschema:"maxLength=256"`
	// StartTS is the span start (the engine's request arrival).
	StartTS time.Time `json:"start_ts"`
	// QueueSeconds is gen_ai.latency.time_in_queue, seconds.
	QueueSeconds *float64 `json:"queue_s,omitempty" jsonschema:"minimum=0"`
	// PrefillSeconds is gen_ai.latency.time_in_model_prefill, seconds (V1 engine only).
	PrefillSeconds *float64 `json:"prefill_s,omitempty" jsonschema:"minimum=0"`
	// DecodeSeconds is gen_ai.latency.time_in_model_decode, seconds (V1 engine only).
	DecodeSeconds *float64 `json:"decode_s,omitempty" jsonschema:"minimum=0"`
	// InferenceSeconds is gen_ai.latency.time_in_model_inference, seconds (V1 engine only).
	InferenceSeconds *float64 `json:"inference_s,omitempty" jsonschema:"minimum=0"`
	// TTFTSeconds is gen_ai.latency.time_to_first_token: seconds from the engine's arrival of the
	// request to its first output token (it includes the queue wait).
	TTFTSeconds *float64 `json:"ttft_s,omitempty" jsonschema:"minimum=0"`
	// E2ESeconds is gen_ai.latency.e2e, seconds from the engine's arrival to the request's end.
	E2ESeconds *float64 `json:"e2e_s,omitempty" jsonschema:"minimum=0"`
	// PromptTokens is gen_ai.usage.prompt_tokens (input tokens).
	PromptTokens *uint32 `json:"prompt_tokens,omitempty"`
	// CompletionTokens is gen_ai.usage.completion_tokens (output tokens).
	CompletionTokens *uint32 `json:"completion_tokens,omitempty"`
	// FinishReason is the engine's reason this child ended, from gen_ai.response.finish_reasons:
	// "stop", "length", "abort", "error" (vLLM's FinishReason); empty when the span has none.
	FinishReason string `json:"finish_reason,omitempty" jsonschema:"maxLength=64"`
	// MaxTokens, Temperature, TopP and N are the request parameters the span carries when set.
	// N is the child's own n: 1 for every child of an n > 1 request.
	MaxTokens   *uint32  `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	N           *uint32  `json:"n,omitempty"`
}

// Kind implements Event.
func (*EngineSpan) Kind() Kind { return KindEngineSpan }

// NewEngineSpan returns an engine.span event with schema and event_id set; ts is the span's end.
func NewEngineSpan(requestID string, end time.Time) *EngineSpan {
	return &EngineSpan{Header: newHeader(KindEngineSpan, requestID, end)}
}

// EngineLog is one line of the engine's log, shipped by the collector so the log outlives the
// engine. Periodic stats lines and error lines are parsed into the optional fields.
type EngineLog struct {
	Header
	// Engine names the log's source engine.
	Engine string `json:"engine" jsonschema:"required,maxLength=1024"`
	// Source is the file path the line came from, or "-" for standard input.
	Source string `json:"source,omitempty" jsonschema:"maxLength=1024"`
	// Offset is the line's byte offset in Source (with TS and Engine, it makes the line unique).
	Offset *uint64 `json:"offset,omitempty"`
	// Line is the raw line (truncated to 16 KiB).
	Line string `json:"line" jsonschema:"required,maxLength=16384"`
	// Level is the log level: DEBUG, INFO, WARNING, ERROR, CRITICAL; empty when the line has none.
	Level string `json:"level,omitempty" jsonschema:"maxLength=16"`
	// Process is vLLM's process prefix, e.g. "APIServer pid=1" or "EngineCore_DP0 pid=233".
	Process string `json:"process,omitempty" jsonschema:"maxLength=256"`
	// Logger is the file:line the line names, e.g. "loggers.py:123".
	Logger string `json:"logger,omitempty" jsonschema:"maxLength=256"`
	// EngineIndex is the engine the line is about, as vLLM's `engine` metric label spells it ("0",
	// "1", ...): the stats line's "Engine 001:", else the data-parallel rank of the engine-core
	// process that wrote it ("EngineCore_DP1 pid=..."). Empty when the line names no engine (the
	// API server's lines, V0's stats lines, main's "N Engines Aggregated:" lines).
	EngineIndex string `json:"engine_index,omitempty" jsonschema:"maxLength=16"`
	// Engines is how many engines a stats line describes: N for vLLM's "N Engines Aggregated:"
	// line (--aggregate-engine-logging with --data-parallel-size N, vllm/v1/metrics/loggers.py
	// AggregatedLoggingStatLogger), whose Running and Waiting are then sums over the N engines
	// and whose KV cache usage is their mean; 1 for a line about one engine ("Engine 001:", a
	// scheduler dump); absent on other lines and on V0's stats lines, which name no engine.
	Engines *uint16 `json:"engines,omitempty"`
	// Message is the line without its prefix.
	Message string `json:"message,omitempty" jsonschema:"maxLength=16384"`
	// Stats fields, from vLLM's periodic stats line (and from the scheduler state vLLM dumps when
	// a model step raised: "Dumping scheduler stats: SchedulerStats(num_running_reqs=...)").
	PromptThroughputTPS     *float64 `json:"prompt_throughput_tps,omitempty" jsonschema:"minimum=0"`
	GenerationThroughputTPS *float64 `json:"generation_throughput_tps,omitempty" jsonschema:"minimum=0"`
	Running                 *uint32  `json:"running,omitempty"`
	Waiting                 *uint32  `json:"waiting,omitempty"`
	// KVCacheUsagePerc is the printed "GPU KV cache usage" as a fraction 0..1 (15.9% → 0.159).
	KVCacheUsagePerc *float64 `json:"kv_cache_usage_perc,omitempty" jsonschema:"minimum=0"`
	// PrefixCacheHitRate is the printed prefix cache hit rate as a fraction 0..1.
	PrefixCacheHitRate *float64 `json:"prefix_cache_hit_rate,omitempty" jsonschema:"minimum=0"`
	// Preemptions is the stats line's "Preemptions: N": requests the scheduler preempted (their
	// KV blocks freed because a running request needed a block and none was free) during the
	// logging interval, summed over the engines of an aggregated line. vLLM main prints it only
	// when N > 0, so on a main stats line its absence means 0; older releases never print it
	// (the counter vllm:num_preemptions_total has it).
	Preemptions *uint32 `json:"preemptions,omitempty"`
	// ExceptionType is the exception of an error line, e.g. "torch.OutOfMemoryError".
	ExceptionType string `json:"exception_type,omitempty" jsonschema:"maxLength=256"`
	// OOMBytesRequested, OOMTotalCapacityBytes and OOMFreeBytes are read from a CUDA
	// out-of-memory message ("Tried to allocate 112.00 MiB. GPU 0 has a total capacity of
	// 11.63 GiB of which 84.88 MiB is free"), in bytes.
	OOMBytesRequested     *uint64 `json:"oom_bytes_requested,omitempty"`
	OOMTotalCapacityBytes *uint64 `json:"oom_total_capacity_bytes,omitempty"`
	OOMFreeBytes          *uint64 `json:"oom_free_bytes,omitempty"`
	// Frames are the innermost project frames of the traceback that ended in this line,
	// innermost last, e.g. "vllm/model_executor/layers/utils.py:apply_penalties".
	Frames []string `json:"frames,omitempty" jsonschema:"maxItems=64"`
}

// Kind implements Event.
func (*EngineLog) Kind() Kind { return KindEngineLog }

// NewEngineLog returns an engine.log event with schema and event_id set.
func NewEngineLog(engine, line string, ts time.Time) *EngineLog {
	return &EngineLog{Header: newHeader(KindEngineLog, "", ts), Engine: engine, Line: line}
}

// MaxOpenListed bounds GatewayHeartbeat.Open: the oldest open requests are listed, the others
// counted in OpenOmitted.
const MaxOpenListed = 1000

// GatewayHeartbeat is the gateway's own view of its open requests, published every interval
// (GATEWAY_HEARTBEAT_INTERVAL) through the same publisher and spool as its request records. A
// request is open from its request.started to its request.finished; the heartbeat says which are
// open now, whatever their age, so a reader needs no lookback over requests_started to find a
// request that hangs, and a gateway that stops sending heartbeats (it died, and its open requests
// with it) stops holding them open. Open requests younger than ListedAfterSeconds are only
// counted (InFlight), so a busy gateway's heartbeat stays small.
type GatewayHeartbeat struct {
	Header
	// Gateway names the gateway instance (GATEWAY_NAME), as request records do.
	Gateway string `json:"gateway" jsonschema:"required,maxLength=256"`
	// IntervalSeconds is the gateway's heartbeat interval, in seconds: the next heartbeat is due
	// that long after TS. A reader that has seen none for three intervals takes the gateway's
	// requests as abandoned.
	IntervalSeconds float64 `json:"interval_s" jsonschema:"required,minimum=0"`
	// ListedAfterSeconds is the age, in seconds since arrival, from which an open request is
	// listed in Open.
	ListedAfterSeconds float64 `json:"listed_after_s" jsonschema:"minimum=0"`
	// InFlight is the number of recorded requests open at TS, listed or not.
	InFlight uint32 `json:"in_flight"`
	// Open lists the open requests that arrived at least ListedAfterSeconds before TS, oldest
	// first, at most MaxOpenListed.
	Open []OpenRequest `json:"open,omitempty" jsonschema:"maxItems=1000"`
	// OpenOmitted counts the open requests old enough to be listed that Open leaves out (beyond
	// MaxOpenListed): the youngest of them.
	OpenOmitted uint32 `json:"open_omitted,omitempty"`
}

// OpenRequest is one request a gateway has not finished.
type OpenRequest struct {
	// RequestID is the request's id, as in its request.started.
	RequestID string `json:"request_id" jsonschema:"required,maxLength=128"`
	// ArrivalTS is when the gateway received it (RFC 3339, UTC).
	ArrivalTS time.Time `json:"arrival_ts" jsonschema:"required"`
	// Model is the model the client asked for.
	Model string `json:"model,omitempty" jsonschema:"maxLength=256"`
	// Endpoint is the request path, e.g. "/v1/chat/completions".
	Endpoint string `json:"endpoint,omitempty" jsonschema:"maxLength=256"`
	// Stream is the OpenAI `stream` flag.
	Stream bool `json:"stream"`
	// Upstream is the engine base URL the request went to.
	Upstream string `json:"upstream,omitempty" jsonschema:"maxLength=1024"`
	// App is the application (X-Servescope-App), when the client named one.
	App string `json:"app,omitempty" jsonschema:"maxLength=256"`
	// Phase is how far the exchange has come: "request" (reading the client's body), "upstream"
	// (sent to the engine, no response headers yet) or "responding" (the answer is being
	// copied to the client).
	Phase string `json:"phase,omitempty" jsonschema:"enum=,enum=request,enum=upstream,enum=responding"`
}

// Kind implements Event.
func (*GatewayHeartbeat) Kind() Kind { return KindGatewayHeartbeat }

// NewGatewayHeartbeat returns a gateway.heartbeat event with schema and event_id set.
func NewGatewayHeartbeat(gateway string, ts time.Time) *GatewayHeartbeat {
	return &GatewayHeartbeat{Header: newHeader(KindGatewayHeartbeat, "", ts), Gateway: gateway}
}

// New returns a zero event of kind k (with only Schema set), for decoding; nil for an unknown kind.
func New(k Kind) Event {
	var e Event
	switch k {
	case KindRequestStarted:
		e = &RequestStarted{}
	case KindRequestFinished:
		e = &RequestFinished{}
	case KindAppRecord:
		e = &AppRecord{}
	case KindEngineSample:
		e = &EngineSample{}
	case KindEngineSpan:
		e = &EngineSpan{}
	case KindEngineLog:
		e = &EngineLog{}
	case KindGatewayHeartbeat:
		e = &GatewayHeartbeat{}
	default:
		return nil
	}
	e.Head().Schema = k.SchemaID()
	return e
}
