// Package otlp receives the OTLP traces vLLM exports with --otlp-traces-endpoint, over gRPC
// (port 4317) and HTTP/protobuf (port 4318, POST /v1/traces), and turns each per-request span
// into a servescope engine.span event.
//
// What vLLM sends, by version (read in vLLM's source):
//
//   - v0.8: --otlp-traces-endpoint makes vLLM fall back to the V0 engine
//     (vllm/engine/arg_utils.py), whose LLMEngine.create_trace_span (vllm/engine/llm_engine.py)
//     ends one span named "llm_request" per finished sequence group, scope "vllm.llm_engine", with
//     gen_ai.response.model (the loaded model path), gen_ai.request.id, temperature, top_p,
//     max_tokens, n, gen_ai.usage.num_sequences, prompt_tokens, completion_tokens, and the
//     latencies time_in_queue, time_to_first_token and e2e (plus time_in_scheduler,
//     time_in_model_forward and time_in_model_execute with --collect-detailed-traces).
//   - v0.10: the V1 engine's OutputProcessor.do_tracing (vllm/v1/engine/output_processor.py)
//     ends "llm_request" per finished engine request, scope "vllm.llm_engine", with no model
//     attribute; latencies time_in_queue, time_to_first_token, e2e, time_in_model_prefill,
//     time_in_model_decode and time_in_model_inference; gen_ai.request.id is the engine
//     request's own id.
//   - main: the same span built by vllm.tracing.instrument_manual (scope "vllm.tracing.otel"),
//     gen_ai.request.id is the external request id, and gen_ai.response.finish_reasons holds a
//     JSON-encoded list (json.dumps(["stop"])).
//
// Every version: durations are seconds, the span starts at the request's arrival, and the
// resource comes from the OpenTelemetry SDK's Resource.create, whose service.name is
// "unknown_service" unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES set one. [Naming.Engine]
// states how the engine name is chosen.
//
// One API request can be several engine requests, each with its own span: each prompt of a
// multi-prompt /v1/completions request ("cmpl-<id>-<i>", vllm/entrypoints/openai/completion/
// serving.py), and each choice of an n > 1 request (vllm/v1/engine/parallel_sampling.py: child
// "<i>_<parent id>" up to v0.10, the parent's external id on main; V0: "<id>_parallel_sample_<i>",
// vllm/sequence.py). [ParseRequestID] finds the API request's id in all of these, so every child
// joins the gateway's record of the request; the ClickHouse view engine_requests combines them.
package otlp

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/servescope/servescope/schema"
)

// SpanName is the name vLLM gives its per-request span.
const SpanName = "llm_request"

// vLLM's span attribute names (SpanAttributes in vllm/tracing.py, vllm/tracing/utils.py on
// main), and the OTel GenAI names newer exporters may use for the token counts.
const (
	AttrRequestID        = "gen_ai.request.id"
	AttrResponseModel    = "gen_ai.response.model"
	AttrRequestModel     = "gen_ai.request.model"
	AttrPromptTokens     = "gen_ai.usage.prompt_tokens"
	AttrCompletionTokens = "gen_ai.usage.completion_tokens"
	AttrInputTokens      = "gen_ai.usage.input_tokens"
	AttrOutputTokens     = "gen_ai.usage.output_tokens"
	AttrFinishReasons    = "gen_ai.response.finish_reasons"
	AttrMaxTokens        = "gen_ai.request.max_tokens"
	AttrTemperature      = "gen_ai.request.temperature"
	AttrTopP             = "gen_ai.request.top_p"
	AttrN                = "gen_ai.request.n"
	AttrQueue            = "gen_ai.latency.time_in_queue"
	AttrPrefill          = "gen_ai.latency.time_in_model_prefill"
	AttrDecode           = "gen_ai.latency.time_in_model_decode"
	AttrInference        = "gen_ai.latency.time_in_model_inference"
	AttrTTFT             = "gen_ai.latency.time_to_first_token"
	AttrE2E              = "gen_ai.latency.e2e"
	AttrServiceName      = "service.name"
)

// DefaultServiceName is what the OpenTelemetry SDKs put in service.name when nothing names the
// service ("unknown_service", or "unknown_service:<process.executable.name>" when the process
// resource detector ran): Resource.create in opentelemetry-python, which vLLM uses.
const DefaultServiceName = "unknown_service"

// IsDefaultServiceName reports whether name is empty or the SDK's default service name.
func IsDefaultServiceName(name string) bool {
	return name == "" || name == DefaultServiceName || strings.HasPrefix(name, DefaultServiceName+":")
}

// Naming chooses the engine name of a span. The rule: configuration names engines; a span's
// service.name picks among them, and a default service name never beats configuration.
//
//  1. A service.name equal to one of the Configured names is that engine.
//  2. Otherwise, when the collector is configured for one engine, the span is that engine's: a
//     service.name the collector was not told about (the SDK's "unknown_service", or a generic
//     OTEL_SERVICE_NAME such as "vllm") never renames it, so the spans, samples and log lines of
//     one engine carry one name.
//  3. Otherwise (several engines configured, or none) an explicitly set service.name is kept: it
//     is the only thing telling the engines apart.
//  4. Otherwise (the SDK's default service name, or none) the span gets Default.
type Naming struct {
	// Default is the collector's engine name (COLLECTOR_ENGINE, else its only target's name,
	// else "vllm").
	Default string
	// Configured are the engine names the collector was given: COLLECTOR_ENGINE, the names of
	// COLLECTOR_TARGETS and of COLLECTOR_LOG_FILES.
	Configured []string
}

// Engine returns the engine name of a span whose resource is res, and whether the resource's
// explicitly set service.name was overridden by configuration (rule 2).
func (n Naming) Engine(res pcommon.Resource) (engine string, overridden bool) {
	svc := str(res.Attributes(), AttrServiceName)
	switch {
	case svc != "" && slices.Contains(n.Configured, svc):
		return svc, false
	case len(n.Configured) == 1:
		return n.Configured[0], !IsDefaultServiceName(svc)
	case !IsDefaultServiceName(svc):
		return svc, false
	default:
		return n.Default, false
	}
}

// apiPrefixes are the prefixes vLLM's OpenAI server puts before the request id it takes from
// X-Request-Id (OpenAIServing._base_request_id); withPromptIndex marks the endpoints that run one
// engine request per prompt and append "-<prompt index>".
var apiPrefixes = []struct {
	prefix          string
	withPromptIndex bool
}{
	{"chatcmpl-", false}, // vllm/entrypoints/openai/serving_chat.py, chat_completion/serving.py
	{"cmpl-", true},      // serving_completion.py (≤ v0.10), completion/serving.py (main)
	{"embd-", true},      // serving_embedding.py
}

var (
	// v1ChildRE is the "<index>_" the V1 engine put before a child's id up to v0.10
	// (ParentRequest.get_child_info: f"{index}_{self.request_id}").
	v1ChildRE = regexp.MustCompile(`^(\d{1,6})_`)
	// v0ChildRE is the V0 engine's "_parallel_sample_<index>" (ParallelSampleSequenceGroup).
	v0ChildRE = regexp.MustCompile(`_parallel_sample_(\d{1,6})$`)
	// promptIndexRE is the "-<prompt index>" of multi-prompt endpoints.
	promptIndexRE = regexp.MustCompile(`-(\d{1,6})$`)
)

// EngineID is what an engine request id says about the API request it belongs to.
type EngineID struct {
	// RequestID is the API request's id: the gateway's request_id when the gateway is in front
	// (vLLM builds its id from the X-Request-Id header the gateway sends).
	RequestID string
	// PromptIndex is the prompt's position in a multi-prompt request; nil for other endpoints.
	PromptIndex *uint32
	// ChildIndex is the choice's index among n > 1 children; nil when the id does not tell.
	ChildIndex *uint32
}

// ParseRequestID reads vLLM's engine request id: the child marker of n > 1 removed ("<i>_" in
// V1 up to v0.10, "_parallel_sample_<i>" in V0), then the API prefix ("chatcmpl-", "cmpl-",
// "embd-") and, for the multi-prompt endpoints, the "-<prompt index>" suffix. An id without a
// known API prefix is returned whole: it was not made by vLLM's OpenAI server, so no part of it
// can be told from the caller's own id.
func ParseRequestID(engineRequestID string) EngineID {
	id := engineRequestID
	var child *uint32
	if m := v0ChildRE.FindStringSubmatch(id); m != nil && hasAPIPrefix(id) {
		child = index(m[1])
		id = id[:len(id)-len(m[0])]
	}
	if m := v1ChildRE.FindStringSubmatch(id); m != nil && hasAPIPrefix(id[len(m[0]):]) {
		child = index(m[1])
		id = id[len(m[0]):]
	}
	out := EngineID{RequestID: engineRequestID}
	for _, p := range apiPrefixes {
		if !strings.HasPrefix(id, p.prefix) {
			continue
		}
		rest := id[len(p.prefix):]
		if p.withPromptIndex {
			if m := promptIndexRE.FindStringSubmatch(rest); m != nil {
				out.PromptIndex = index(m[1])
				rest = rest[:len(rest)-len(m[0])]
			}
		}
		if rest == "" { // vLLM's prefix around an empty id: keep the whole id
			return EngineID{RequestID: engineRequestID}
		}
		out.RequestID = rest
		out.ChildIndex = child
		return out
	}
	return out
}

func hasAPIPrefix(id string) bool {
	for _, p := range apiPrefixes {
		if strings.HasPrefix(id, p.prefix) {
			return true
		}
	}
	return false
}

func index(digits string) *uint32 {
	v, err := strconv.ParseUint(digits, 10, 32)
	if err != nil {
		return nil
	}
	u := uint32(v)
	return &u
}

// IsRequestSpan reports whether a span is vLLM's per-request span: named llm_request, or
// carrying gen_ai.request.id (an engine that renames the span still sets it).
func IsRequestSpan(s ptrace.Span) bool {
	if s.Name() == SpanName {
		return true
	}
	_, ok := s.Attributes().Get(AttrRequestID)
	return ok
}

// Convert turns one request span into an engine.span event, its engine named by naming. It fails
// when the span has no request id.
func Convert(res pcommon.Resource, s ptrace.Span, naming Naming) (*schema.EngineSpan, error) {
	attrs := s.Attributes()
	engineID := str(attrs, AttrRequestID)
	if engineID == "" {
		return nil, fmt.Errorf("span %s (%q) has no %s", s.SpanID(), s.Name(), AttrRequestID)
	}
	end := s.EndTimestamp().AsTime()
	if s.EndTimestamp() == 0 {
		end = time.Now()
	}
	id := ParseRequestID(engineID)
	ev := schema.NewEngineSpan(schema.Truncate(id.RequestID, 128), end)
	ev.EngineRequestID = schema.Truncate(engineID, 256)
	ev.PromptIndex, ev.ChildIndex = id.PromptIndex, id.ChildIndex
	if tid := s.TraceID(); !tid.IsEmpty() {
		ev.TraceID = tid.String()
	}
	if sid := s.SpanID(); !sid.IsEmpty() {
		ev.SpanID = sid.String()
	}
	// The parent is the traceparent the request brought: for a request through the gateway, the
	// gateway's span for exactly that request (schema.RequestFinished.SpanID).
	if pid := s.ParentSpanID(); !pid.IsEmpty() {
		ev.ParentSpanID = pid.String()
	}
	if s.StartTimestamp() != 0 {
		ev.StartTS = s.StartTimestamp().AsTime().UTC()
	}
	engine, _ := naming.Engine(res)
	ev.Engine = schema.Truncate(engine, 1024)
	ev.Model = str(attrs, AttrResponseModel)
	if ev.Model == "" {
		ev.Model = str(attrs, AttrRequestModel)
	}
	ev.Model = schema.Truncate(ev.Model, 256)
	ev.QueueSeconds = seconds(attrs, AttrQueue)
	ev.PrefillSeconds = seconds(attrs, AttrPrefill)
	ev.DecodeSeconds = seconds(attrs, AttrDecode)
	ev.InferenceSeconds = seconds(attrs, AttrInference)
	ev.TTFTSeconds = seconds(attrs, AttrTTFT)
	ev.E2ESeconds = seconds(attrs, AttrE2E)
	ev.PromptTokens = count(attrs, AttrPromptTokens, AttrInputTokens)
	ev.CompletionTokens = count(attrs, AttrCompletionTokens, AttrOutputTokens)
	ev.FinishReason = schema.Truncate(finishReason(attrs), 64)
	ev.MaxTokens = count(attrs, AttrMaxTokens)
	ev.N = count(attrs, AttrN)
	ev.Temperature = number(attrs, AttrTemperature)
	ev.TopP = number(attrs, AttrTopP)
	return ev, nil
}

// finishReason reads gen_ai.response.finish_reasons: the OTel GenAI convention's string array,
// or the JSON-encoded list vLLM main sets as a string ('["stop"]'), or a bare string. vLLM ends
// one span per engine request, so the list has one reason; the first non-empty one is returned.
func finishReason(m pcommon.Map) string {
	v, ok := m.Get(AttrFinishReasons)
	if !ok {
		return ""
	}
	var reasons []string
	switch v.Type() {
	case pcommon.ValueTypeSlice:
		for i := 0; i < v.Slice().Len(); i++ {
			reasons = append(reasons, v.Slice().At(i).AsString())
		}
	case pcommon.ValueTypeStr:
		raw := strings.TrimSpace(v.Str())
		if strings.HasPrefix(raw, "[") {
			if err := json.Unmarshal([]byte(raw), &reasons); err != nil {
				return ""
			}
		} else {
			reasons = []string{raw}
		}
	default:
		return ""
	}
	for _, r := range reasons {
		if r = strings.ToValidUTF8(strings.TrimSpace(r), "\uFFFD"); r != "" {
			return r
		}
	}
	return ""
}

func str(m pcommon.Map, key string) string {
	v, ok := m.Get(key)
	if !ok {
		return ""
	}
	return strings.ToValidUTF8(v.AsString(), "\uFFFD")
}

// number reads a finite numeric attribute (double, int, or a numeric string).
func number(m pcommon.Map, key string) *float64 {
	v, ok := m.Get(key)
	if !ok {
		return nil
	}
	var f float64
	switch v.Type() {
	case pcommon.ValueTypeDouble:
		f = v.Double()
	case pcommon.ValueTypeInt:
		f = float64(v.Int())
	case pcommon.ValueTypeStr:
		p, err := strconv.ParseFloat(strings.TrimSpace(v.Str()), 64)
		if err != nil {
			return nil
		}
		f = p
	default:
		return nil
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

// seconds reads a duration attribute; a negative one (clock trouble in the engine) is dropped.
func seconds(m pcommon.Map, key string) *float64 {
	f := number(m, key)
	if f == nil || *f < 0 {
		return nil
	}
	return f
}

// count reads the first present of keys as a token count.
func count(m pcommon.Map, keys ...string) *uint32 {
	for _, k := range keys {
		f := number(m, k)
		if f == nil {
			continue
		}
		if *f < 0 || *f > math.MaxUint32 {
			return nil
		}
		v := uint32(*f)
		return &v
	}
	return nil
}
