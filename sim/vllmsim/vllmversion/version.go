// Package vllmversion names the vLLM releases whose wire formats vllmsim imitates — the API,
// errors and spans, the /metrics names, labels and units, and the log lines — so tests can feed
// servescope each shape a real deployment may send. Each predicate says which release changed the
// behaviour and where in vLLM's source the change lives.
package vllmversion

import (
	"fmt"
	"strings"
)

// Version is a vLLM release line. The zero value is Main, vllmsim's default.
type Version int

const (
	// Main is vLLM's main branch (V1 engine, nested error envelope, per-request timing object,
	// gen_ai.response.finish_reasons on spans).
	Main Version = iota
	// V0_8 is v0.8.5: V1 engine by default, but --otlp-traces-endpoint makes vLLM fall back to
	// the V0 engine (vllm/engine/arg_utils.py, _is_v1_supported_oracle), whose spans differ.
	V0_8
	// V0_10 is v0.10.2: V1 engine with tracing, nested error envelope (vLLM PR #22099, in
	// v0.10.1), return_token_ids fields, /v1/responses.
	V0_10
	// V0_8V0 is v0.8.5 on its V0 engine (VLLM_USE_V1=0, or any V1-unsupported setting such as
	// --otlp-traces-endpoint): vllm/engine/metrics.py's metrics labelled by model_name only,
	// num_requests_swapped, the "Running/Swapped/Pending" stats line, V0 spans, and penalties
	// applied to the model's float16 logits.
	V0_8V0
)

// All lists the versions, oldest first.
var All = []Version{V0_8V0, V0_8, V0_10, Main}

// APIs lists the versions whose API server differs, oldest first: V0_8V0 answers as V0_8 does,
// only the engine behind it (spans, /metrics, log) differs.
var APIs = []Version{V0_8, V0_10, Main}

// Parse reads "0.8-v0", "0.8", "0.8.5", "v0.8", "0.10", "0.10.2", "v0.10" or "main".
func Parse(s string) (Version, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "main" {
		return Main, nil
	}
	t = strings.TrimPrefix(t, "v")
	switch {
	case t == "0.8-v0":
		return V0_8V0, nil
	case t == "0.8" || strings.HasPrefix(t, "0.8."):
		return V0_8, nil
	case t == "0.10" || strings.HasPrefix(t, "0.10."):
		return V0_10, nil
	}
	return Main, fmt.Errorf("vLLM version %q: want 0.8-v0, 0.8, 0.10 or main", s)
}

// String is the flag spelling: "0.8-v0", "0.8", "0.10" or "main".
func (v Version) String() string {
	switch v {
	case V0_8V0:
		return "0.8-v0"
	case V0_8:
		return "0.8"
	case V0_10:
		return "0.10"
	default:
		return "main"
	}
}

// Release is the version string GET /version and the startup log report. Main reports a
// development build after 0.10.2 (a PEP 440 local version, so it sorts after every release
// vllmsim imitates).
func (v Version) Release() string {
	switch v {
	case V0_8, V0_8V0:
		return "0.8.5"
	case V0_10:
		return "0.10.2"
	default:
		return "0.14.0rc1.dev12+g3e342658"
	}
}

// is08 reports the 0.8 line, on either engine.
func (v Version) is08() bool { return v == V0_8 || v == V0_8V0 }

// V1Engine reports whether the release runs the V1 engine (vllm/v1/); V0_8V0 runs vllm/engine/.
func (v Version) V1Engine() bool { return v != V0_8V0 }

// NestedErrors: error bodies are {"error": {...}} instead of the flat {"object": "error", ...}
// (vLLM PR #22099, first released in v0.10.1; ErrorResponse in vllm/entrypoints/openai/protocol.py).
func (v Version) NestedErrors() bool { return !v.is08() }

// TokenIDFields: chunks and choices carry "prompt_token_ids"/"token_ids" (null unless the request
// sets return_token_ids), added in v0.10.2.
func (v Version) TokenIDFields() bool { return !v.is08() }

// ResponsesAPI: POST /v1/responses exists (vllm/entrypoints/openai/serving_responses.py).
func (v Version) ResponsesAPI() bool { return !v.is08() }

// ForceIncludeUsage: the --enable-force-include-usage server flag exists.
func (v Version) ForceIncludeUsage() bool { return !v.is08() }

// PerRequestMetrics: the --enable-per-request-metrics flag and the responses' "metrics" object
// (build_per_request_timing_metrics) exist; non-streaming bodies carry "metrics": null without it.
func (v Version) PerRequestMetrics() bool { return v == Main }

// V0Tracing: spans come from the V0 engine (vllm/engine/llm_engine.py, create_trace_span): one
// span per sequence group (n samples together), gen_ai.response.model, time_in_scheduler, no
// prefill/decode/inference latencies.
func (v Version) V0Tracing() bool { return v.is08() }

// FinishReasonsOnSpan: the llm_request span carries gen_ai.response.finish_reasons and reports
// the API request id (external_req_id) on every child of an n > 1 request
// (vllm/v1/engine/output_processor.py, do_tracing).
func (v Version) FinishReasonsOnSpan() bool { return v == Main }

// RefusesRunningDuplicateIDs: a request whose engine request id (chatcmpl-<X-Request-Id>, ...) is
// that of a request still running is refused: OutputProcessor.add_request raises
// ValueError("Request id <id> already running.") (vllm/v1/engine/output_processor.py, 0.8 to
// 0.13), a 400 for a whole answer and an error event in a 200 stream (the stream generator's
// first step adds the request). From 0.14 (vLLM PR #27987, vllm/v1/engine/input_processor.py
// assign_request_id) the engine's own id gets 8 random characters and both are served, each span
// carrying the caller's id (external_req_id). Every release serves a duplicate of a finished one.
func (v Version) RefusesRunningDuplicateIDs() bool { return v != Main }

// ContextLengthMessages returns vLLM's messages for a prompt at or over the context and for a
// prompt plus max_tokens over it (serving_engine.py _validate_input at 0.8 and 0.10; the
// renderer's input validation on main).
func (v Version) ContextLengthMessages(maxModelLen, promptTokens, maxTokens int) (promptTooLong, requestTooLong string) {
	if v == Main {
		return fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.",
				maxModelLen, promptTokens),
			fmt.Sprintf("'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).",
				maxTokens, maxModelLen, promptTokens, maxTokens, maxModelLen, promptTokens)
	}
	return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens in the messages, Please reduce the length of the messages.",
			maxModelLen, promptTokens),
		fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			maxModelLen, promptTokens+maxTokens, promptTokens, maxTokens)
}
