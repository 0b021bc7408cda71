// Package otlp receives the OTLP traces vLLM exports with --otlp-traces-endpoint, over gRPC
// (port 4317) and HTTP/protobuf (port 4318, POST /v1/traces), and turns each per-request span
// into a servescope engine.span event.
//
// vLLM (vllm/v1/engine/output_processor.py, vllm/tracing.py) ends one span named "llm_request"
// per finished request, with the engine's own timing as attributes: gen_ai.latency.time_in_queue,
// time_in_model_prefill, time_in_model_decode, time_in_model_inference, time_to_first_token, e2e
// (seconds), gen_ai.usage.prompt_tokens and completion_tokens, and gen_ai.request.id — the
// request id with vLLM's API prefix ("chatcmpl-<X-Request-Id>"). [RequestID] strips that prefix
// so the span joins the gateway's record of the same request.
package otlp

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/servescope/servescope/schema"
)

// SpanName is the name vLLM gives its per-request span.
const SpanName = "llm_request"

// vLLM's span attribute names (vllm/tracing.py SpanAttributes), and the OTel GenAI names newer
// exporters may use for the token counts.
const (
	AttrRequestID        = "gen_ai.request.id"
	AttrResponseModel    = "gen_ai.response.model"
	AttrRequestModel     = "gen_ai.request.model"
	AttrPromptTokens     = "gen_ai.usage.prompt_tokens"
	AttrCompletionTokens = "gen_ai.usage.completion_tokens"
	AttrInputTokens      = "gen_ai.usage.input_tokens"
	AttrOutputTokens     = "gen_ai.usage.output_tokens"
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

// completionIndexRE is the "-<prompt index>" vLLM's completions endpoint appends to each prompt's
// request id ("cmpl-<id>-0").
var completionIndexRE = regexp.MustCompile(`-\d{1,4}$`)

// RequestID returns the gateway's request id inside vLLM's engine request id: the API prefix
// removed ("chatcmpl-", "cmpl-", "embd-"), and for completions also the "-<prompt index>" suffix
// vLLM appends per prompt. vLLM builds the id from the X-Request-Id header when the request has
// one, so with the gateway in front the result equals the gateway's request_id. An id without a
// known prefix is returned unchanged.
func RequestID(engineRequestID string) string {
	id := engineRequestID
	switch {
	case strings.HasPrefix(id, "chatcmpl-"):
		id = id[len("chatcmpl-"):]
	case strings.HasPrefix(id, "cmpl-"):
		id = completionIndexRE.ReplaceAllString(id[len("cmpl-"):], "")
	case strings.HasPrefix(id, "embd-"):
		id = id[len("embd-"):]
	}
	if id == "" {
		return engineRequestID
	}
	return id
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

// Convert turns one request span into an engine.span event. engine names the engine when the
// resource has no service.name. It fails when the span has no request id.
func Convert(res pcommon.Resource, s ptrace.Span, engine string) (*schema.EngineSpan, error) {
	attrs := s.Attributes()
	engineID := str(attrs, AttrRequestID)
	if engineID == "" {
		return nil, fmt.Errorf("span %s (%q) has no %s", s.SpanID(), s.Name(), AttrRequestID)
	}
	end := s.EndTimestamp().AsTime()
	if s.EndTimestamp() == 0 {
		end = time.Now()
	}
	ev := schema.NewEngineSpan(schema.Truncate(RequestID(engineID), 128), end)
	ev.EngineRequestID = schema.Truncate(engineID, 256)
	if tid := s.TraceID(); !tid.IsEmpty() {
		ev.TraceID = tid.String()
	}
	if sid := s.SpanID(); !sid.IsEmpty() {
		ev.SpanID = sid.String()
	}
	if s.StartTimestamp() != 0 {
		ev.StartTS = s.StartTimestamp().AsTime().UTC()
	}
	if v := str(res.Attributes(), AttrServiceName); v != "" {
		engine = v
	}
	ev.Engine = schema.Truncate(engine, 1024)
	ev.Model = str(attrs, AttrResponseModel)
	if ev.Model == "" {
		ev.Model = str(attrs, AttrRequestModel)
	}
	ev.Model = schema.Truncate(ev.Model, 256)
	ev.QueueS = seconds(attrs, AttrQueue)
	ev.PrefillS = seconds(attrs, AttrPrefill)
	ev.DecodeS = seconds(attrs, AttrDecode)
	ev.InferenceS = seconds(attrs, AttrInference)
	ev.TTFTS = seconds(attrs, AttrTTFT)
	ev.E2ES = seconds(attrs, AttrE2E)
	ev.PromptTokens = count(attrs, AttrPromptTokens, AttrInputTokens)
	ev.CompletionTokens = count(attrs, AttrCompletionTokens, AttrOutputTokens)
	ev.MaxTokens = count(attrs, AttrMaxTokens)
	ev.N = count(attrs, AttrN)
	ev.Temperature = number(attrs, AttrTemperature)
	ev.TopP = number(attrs, AttrTopP)
	return ev, nil
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
		if _, err := fmt.Sscan(v.Str(), &f); err != nil {
			return nil
		}
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
