package otlp

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/servescope/servescope/schema"
)

// The spans below are built attribute by attribute as vLLM emits them, in vLLM's own order and
// with the OTLP value types its Python values take (int → intValue, float → doubleValue,
// str → stringValue; a None attribute is dropped by the SDK):
//
//   - v08: vllm/engine/llm_engine.py LLMEngine.create_trace_span at v0.8.5 (the V0 engine, which
//     --otlp-traces-endpoint selects in 0.8), n > 1 children from vllm/sequence.py
//     ParallelSampleSequenceGroup ("<id>_parallel_sample_<i>").
//   - v010: vllm/v1/engine/output_processor.py OutputProcessor.do_tracing at v0.10.2, child ids
//     from vllm/v1/engine/parallel_sampling.py ParentRequest.get_child_info ("<i>_<id>").
//   - main: the same method on main, built by vllm.tracing.instrument_manual; gen_ai.request.id
//     is req_state.external_req_id (the parent's id for every child) and
//     gen_ai.response.finish_reasons is json.dumps([str(finish_reason)]).
//
// Every version's resource comes from opentelemetry-python's Resource.create (service.name
// "unknown_service" without OTEL_SERVICE_NAME); main adds vllm.instrumenting_module_name and
// vllm.process_id (vllm/tracing/otel.py init_otel_tracer).

type vllmVersion string

const (
	v08   vllmVersion = "v0.8.5"
	v010  vllmVersion = "v0.10.2"
	vMain vllmVersion = "main"
)

// child is one engine request's numbers.
type child struct {
	engineID                     string
	queue, prefill, decode, ttft float64
	e2e                          float64
	prompt, completion           int64
	finish                       string
	arrival                      time.Time
}

// export builds one OTLP export of the given children as vLLM version v sends it; service is the
// resource's service.name ("" leaves the SDK default).
func export(v vllmVersion, service string, children ...child) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	ra := rs.Resource().Attributes()
	ra.PutStr("telemetry.sdk.language", "python")
	ra.PutStr("telemetry.sdk.name", "opentelemetry")
	ra.PutStr("telemetry.sdk.version", "1.26.0")
	if v == vMain {
		ra.PutStr("vllm.instrumenting_module_name", "vllm.llm_engine")
		ra.PutStr("vllm.process_id", "4242")
	}
	if service == "" {
		service = DefaultServiceName
	}
	ra.PutStr("service.name", service)
	ss := rs.ScopeSpans().AppendEmpty()
	if v == vMain {
		ss.Scope().SetName("vllm.tracing.otel")
	} else {
		ss.Scope().SetName("vllm.llm_engine")
	}
	for i, c := range children {
		s := ss.Spans().AppendEmpty()
		s.SetName("llm_request")
		s.SetKind(ptrace.SpanKindServer)
		s.SetTraceID(pcommon.TraceID([16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}))
		s.SetSpanID(pcommon.SpanID([8]byte{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, byte(i)}))
		s.SetParentSpanID(pcommon.SpanID([8]byte{0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}))
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(c.arrival))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(c.arrival.Add(time.Duration(c.e2e * float64(time.Second)))))
		a := s.Attributes()
		switch v {
		case v08:
			a.PutStr("gen_ai.response.model", "/models/Qwen2.5-7B-Instruct-AWQ")
			a.PutStr("gen_ai.request.id", c.engineID)
			a.PutDouble("gen_ai.request.temperature", 0.7)
			a.PutDouble("gen_ai.request.top_p", 1.0)
			a.PutInt("gen_ai.request.max_tokens", 128)
			a.PutInt("gen_ai.request.n", 1) // a child's own params: n = 1
			a.PutInt("gen_ai.usage.num_sequences", 1)
			a.PutInt("gen_ai.usage.prompt_tokens", c.prompt)
			a.PutInt("gen_ai.usage.completion_tokens", c.completion)
			a.PutDouble("gen_ai.latency.time_in_queue", c.queue)
			a.PutDouble("gen_ai.latency.time_to_first_token", c.ttft)
			a.PutDouble("gen_ai.latency.e2e", c.e2e)
		case v010, vMain:
			a.PutDouble("gen_ai.latency.time_to_first_token", c.ttft)
			a.PutDouble("gen_ai.latency.e2e", c.e2e)
			a.PutDouble("gen_ai.latency.time_in_queue", c.queue)
			a.PutInt("gen_ai.usage.prompt_tokens", c.prompt)
			a.PutInt("gen_ai.usage.completion_tokens", c.completion)
			a.PutDouble("gen_ai.latency.time_in_model_prefill", c.prefill)
			a.PutDouble("gen_ai.latency.time_in_model_decode", c.decode)
			a.PutDouble("gen_ai.latency.time_in_model_inference", c.prefill+c.decode)
			a.PutStr("gen_ai.request.id", c.engineID)
			if v == vMain {
				a.PutStr("gen_ai.response.finish_reasons", `["`+c.finish+`"]`)
			}
			a.PutDouble("gen_ai.request.top_p", 0.9)
			a.PutInt("gen_ai.request.max_tokens", 128)
			a.PutDouble("gen_ai.request.temperature", 0.7)
			a.PutInt("gen_ai.request.n", 1)
		}
	}
	return td
}

var arrival = time.Date(2026, 9, 11, 15, 53, 0, 0, time.UTC)

// children returns the engine requests vLLM version v runs for an API request with X-Request-Id
// id: chat (endpoint "chat") with n choices, or completions with prompts prompts × n choices.
func children(v vllmVersion, endpoint, id string, prompts, n int) []child {
	var out []child
	for p := range prompts {
		for c := range n {
			base := "chatcmpl-" + id
			if endpoint == "completions" {
				base = "cmpl-" + id + "-" + itoa(p) // request_id_item = f"{request_id}-{i}"
			}
			eid := base
			if n > 1 {
				switch v {
				case v08:
					eid = base + "_parallel_sample_" + itoa(c)
				case v010:
					eid = itoa(c) + "_" + base
				case vMain: // every child carries the parent's external id
				}
			}
			k := float64(p*n + c)
			out = append(out, child{
				engineID: eid, queue: 0.4 + 0.01*k, prefill: 0.3, decode: 2 + k, ttft: 0.75 + 0.01*k,
				e2e: 2.8 + k, prompt: int64(40 + p), completion: int64(100 + c), finish: []string{"stop", "length"}[c%2],
				arrival: arrival.Add(time.Duration(p) * time.Millisecond),
			})
		}
	}
	return out
}

func itoa(i int) string { return string(rune('0' + i)) }

// TestVLLMRequestSpans feeds each version's spans for n = 1 and n = 3 chat and a two-prompt,
// n = 2 completion, and checks that every child is published with the API request's id (the one
// the gateway sent as X-Request-Id), its prompt and child index where the id tells, and its
// numbers.
func TestVLLMRequestSpans(t *testing.T) {
	const id = "2Z1xq8TnUe3RvI6hHbWzX9yA0kQ"
	for _, v := range []vllmVersion{v08, v010, vMain} {
		for _, tc := range []struct {
			name       string
			endpoint   string
			prompts, n int
		}{
			{"chat n=1", "chat", 1, 1},
			{"chat n=3", "chat", 1, 3},
			{"completions 2 prompts n=2", "completions", 2, 2},
		} {
			t.Run(string(v)+"/"+tc.name, func(t *testing.T) {
				r, c := newReceiver(t)
				kids := children(v, tc.endpoint, id, tc.prompts, tc.n)
				if n, reason := r.Consume(export(v, "", kids...)); n != 0 {
					t.Fatalf("%d rejected: %s", n, reason)
				}
				evs := c.all()
				if len(evs) != len(kids) {
					t.Fatalf("%d events for %d engine requests", len(evs), len(kids))
				}
				for i, e := range evs {
					k := kids[i]
					if e.RequestID != id || e.EngineRequestID != k.engineID {
						t.Errorf("child %d: request_id %q (engine %q), want %q", i, e.RequestID, e.EngineRequestID, id)
					}
					wantPrompt, wantChild := -1, -1
					if tc.endpoint == "completions" {
						wantPrompt = i / tc.n
					}
					if tc.n > 1 && v != vMain {
						wantChild = i % tc.n
					}
					if got := idx(e.PromptIndex); got != wantPrompt {
						t.Errorf("child %d (%s): prompt_index %d, want %d", i, k.engineID, got, wantPrompt)
					}
					if got := idx(e.ChildIndex); got != wantChild {
						t.Errorf("child %d (%s): child_index %d, want %d", i, k.engineID, got, wantChild)
					}
					if *e.QueueSeconds != k.queue || *e.TTFTSeconds != k.ttft || *e.E2ESeconds != k.e2e ||
						*e.PromptTokens != uint32(k.prompt) || *e.CompletionTokens != uint32(k.completion) {
						t.Errorf("child %d: numbers %+v, want %+v", i, e, k)
					}
					if v == v08 {
						if e.PrefillSeconds != nil || e.DecodeSeconds != nil || e.Model != "/models/Qwen2.5-7B-Instruct-AWQ" {
							t.Errorf("V0 span: prefill %v decode %v model %q", e.PrefillSeconds, e.DecodeSeconds, e.Model)
						}
					} else if e.PrefillSeconds == nil || *e.DecodeSeconds != k.decode || e.Model != "" {
						t.Errorf("V1 span: prefill %v decode %v model %q", e.PrefillSeconds, e.DecodeSeconds, e.Model)
					}
					wantFinish := ""
					if v == vMain {
						wantFinish = k.finish
					}
					if e.FinishReason != wantFinish {
						t.Errorf("child %d: finish_reason %q, want %q", i, e.FinishReason, wantFinish)
					}
					if e.Engine != "fallback-engine" {
						t.Errorf("engine %q: the SDK's default service.name must not name the engine", e.Engine)
					}
					if !e.StartTS.Equal(k.arrival) {
						t.Errorf("start_ts %s, want the arrival %s", e.StartTS, k.arrival)
					}
					// Every child is the child of the traceparent its API request brought: the
					// gateway's span for that one request (what engine data joins on).
					if e.ParentSpanID != "a3ce929d0e0e4736" {
						t.Errorf("child %d: parent_span_id %q, want the traceparent's a3ce929d0e0e4736", i, e.ParentSpanID)
					}
				}
			})
		}
	}
}

func idx(p *uint32) int {
	if p == nil {
		return -1
	}
	return int(*p)
}

func TestParseRequestID(t *testing.T) {
	for _, tc := range []struct {
		in            string
		want          string
		prompt, child int
	}{
		{"chatcmpl-2Z1xq8TnUe3RvI6hHbWzX9yA0kQ", "2Z1xq8TnUe3RvI6hHbWzX9yA0kQ", -1, -1},
		{"chatcmpl-9f1c2d3e-aaaa-bbbb-cccc-0123456789ab", "9f1c2d3e-aaaa-bbbb-cccc-0123456789ab", -1, -1},
		{"cmpl-2Z1xq8TnUe3RvI6hHbWzX9yA0kQ-0", "2Z1xq8TnUe3RvI6hHbWzX9yA0kQ", 0, -1},
		{"cmpl-abc-12", "abc", 12, -1},
		{"cmpl-req-42-3", "req-42", 3, -1},
		{"embd-xyz-0", "xyz", 0, -1},
		// An X-Request-Id that itself ends in -<digits>, on chat, is kept whole.
		{"chatcmpl-req-42", "req-42", -1, -1},
		// n > 1 children: V1 up to v0.10, V0.
		{"2_chatcmpl-abc", "abc", -1, 2},
		{"1_cmpl-abc-1", "abc", 1, 1},
		{"chatcmpl-abc_parallel_sample_4", "abc", -1, 4},
		{"cmpl-abc-2_parallel_sample_0", "abc", 2, 0},
		// Not from vLLM's OpenAI server: nothing can be told from the caller's own id.
		{"my-own-id", "my-own-id", -1, -1},
		{"3_my-own-id", "3_my-own-id", -1, -1},
		{"x_parallel_sample_1", "x_parallel_sample_1", -1, -1},
		{"chatcmpl-", "chatcmpl-", -1, -1},
		{"cmpl--1", "cmpl--1", -1, -1},
	} {
		got := ParseRequestID(tc.in)
		if got.RequestID != tc.want || idx(got.PromptIndex) != tc.prompt || idx(got.ChildIndex) != tc.child {
			t.Errorf("ParseRequestID(%q) = %q prompt %d child %d, want %q prompt %d child %d",
				tc.in, got.RequestID, idx(got.PromptIndex), idx(got.ChildIndex), tc.want, tc.prompt, tc.child)
		}
	}
}

func FuzzParseRequestID(f *testing.F) {
	for _, s := range []string{"chatcmpl-abc", "1_cmpl-abc-1", "cmpl-abc-2_parallel_sample_0", "embd-x-0", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := ParseRequestID(s)
		if got.RequestID == "" && s != "" {
			t.Fatalf("ParseRequestID(%q) lost the id", s)
		}
		if !strings.Contains(s, got.RequestID) {
			t.Fatalf("ParseRequestID(%q) = %q, not a part of the engine's id", s, got.RequestID)
		}
		if got.RequestID != s && !hasAPIPrefix(strings.TrimLeft(s, "0123456789_")) {
			t.Fatalf("ParseRequestID(%q) = %q changed an id vLLM's server did not make", s, got.RequestID)
		}
	})
}

// TestNaming: configuration names engines; service.name only picks among them, and the SDK's
// default never names one.
func TestNaming(t *testing.T) {
	one := Naming{Default: "qwen-a", Configured: []string{"qwen-a"}}
	two := Naming{Default: "vllm", Configured: []string{"qwen-a", "llama-b"}}
	none := Naming{Default: "vllm"}
	for _, tc := range []struct {
		name       string
		naming     Naming
		service    string
		want       string
		overridden bool
	}{
		{"one engine, SDK default", one, "unknown_service", "qwen-a", false},
		{"one engine, SDK default with executable", one, "unknown_service:python3", "qwen-a", false},
		{"one engine, no service.name", one, "", "qwen-a", false},
		{"one engine, generic OTEL_SERVICE_NAME", one, "vllm", "qwen-a", true},
		{"one engine, its own name", one, "qwen-a", "qwen-a", false},
		{"two engines, picks one", two, "llama-b", "llama-b", false},
		{"two engines, SDK default", two, "unknown_service", "vllm", false},
		{"two engines, unknown explicit name kept", two, "mistral-c", "mistral-c", false},
		{"nothing configured, explicit name kept", none, "qwen-a", "qwen-a", false},
		{"nothing configured, SDK default", none, "unknown_service", "vllm", false},
	} {
		res := pcommon.NewResource()
		if tc.service != "" {
			res.Attributes().PutStr("service.name", tc.service)
		}
		got, over := tc.naming.Engine(res)
		if got != tc.want || over != tc.overridden {
			t.Errorf("%s: Engine = %q overridden %v, want %q %v", tc.name, got, over, tc.want, tc.overridden)
		}
	}
}

// TestSpansOfVLLMWithoutServiceName is the reproducer: vLLM without OTEL_SERVICE_NAME sends
// service.name "unknown_service", and every engine became "unknown_service".
func TestSpansOfVLLMWithoutServiceName(t *testing.T) {
	c := &collected{}
	r, err := NewReceiver(c, Naming{Default: "qwen-a", Configured: []string{"qwen-a"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Consume(export(vMain, "", children(vMain, "chat", "abc", 1, 1)...))
	if evs := c.all(); len(evs) != 1 || evs[0].Engine != "qwen-a" {
		t.Fatalf("events %+v, want one of engine qwen-a", evs)
	}
}

func TestFinishReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(pcommon.Map)
		want string
	}{
		{"vLLM main: JSON-encoded list", func(m pcommon.Map) { m.PutStr(AttrFinishReasons, `["length"]`) }, "length"},
		{"OTel convention: string array", func(m pcommon.Map) {
			s := m.PutEmptySlice(AttrFinishReasons)
			s.AppendEmpty().SetStr("")
			s.AppendEmpty().SetStr("stop")
		}, "stop"},
		{"bare string", func(m pcommon.Map) { m.PutStr(AttrFinishReasons, "abort") }, "abort"},
		{"broken JSON", func(m pcommon.Map) { m.PutStr(AttrFinishReasons, `["sto`) }, ""},
		{"wrong type", func(m pcommon.Map) { m.PutInt(AttrFinishReasons, 1) }, ""},
		{"absent", func(pcommon.Map) {}, ""},
	} {
		m := pcommon.NewMap()
		tc.set(m)
		if got := finishReason(m); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestNoSpanDroppedSilently: spans that are not request spans are counted and logged at debug;
// spans that cannot be converted are counted, logged and reported to the exporter.
func TestNoSpanDroppedSilently(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	c := &collected{}
	r, err := NewReceiver(c, Naming{Default: "e"}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	td := export(vMain, "", children(vMain, "chat", "abc", 1, 2)...)
	ss := td.ResourceSpans().At(0).ScopeSpans().At(0)
	other := ss.Spans().AppendEmpty() // vLLM main's start-up tracing: a function's span
	other.SetName("GPUModelRunner.load_model")
	other.Attributes().PutStr("code.function", "GPUModelRunner.load_model")
	broken := ss.Spans().AppendEmpty()
	broken.SetName("llm_request")
	n, reason := r.Consume(td)
	if n != 1 || !strings.Contains(reason, AttrRequestID) {
		t.Errorf("rejected %d (%q), want the span without a request id", n, reason)
	}
	for result, want := range map[string]float64{"published": 2, "ignored": 1, "rejected": 1} {
		var m dto.Metric
		if err := r.spans.WithLabelValues(result).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetCounter().GetValue(); got != want {
			t.Errorf("spans_total{result=%q} = %v, want %v", result, got, want)
		}
	}
	if !strings.Contains(logs.String(), "span ignored") || !strings.Contains(logs.String(), "GPUModelRunner.load_model") {
		t.Errorf("ignored span not logged at debug:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "span rejected") {
		t.Errorf("rejected span not logged:\n%s", logs.String())
	}
}

// TestOverrideNoticedOnce: an explicit service.name overridden by the configured engine is said
// once, not per span.
func TestOverrideNoticedOnce(t *testing.T) {
	var logs bytes.Buffer
	c := &collected{}
	r, err := NewReceiver(c, Naming{Default: "qwen-a", Configured: []string{"qwen-a"}}, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r.Consume(export(vMain, "vllm", children(vMain, "chat", "abc", 1, 1)...))
	}
	if n := strings.Count(logs.String(), "service_name=vllm"); n != 1 {
		t.Errorf("override noticed %d times, want once:\n%s", n, logs.String())
	}
	for _, e := range c.all() {
		if e.Engine != "qwen-a" {
			t.Errorf("engine %q, want the configured qwen-a", e.Engine)
		}
	}
}

// The events of every version validate as the publisher would check them.
func TestVersionsValidate(t *testing.T) {
	for _, v := range []vllmVersion{v08, v010, vMain} {
		c := &collected{}
		r, err := NewReceiver(c, Naming{Default: "e"}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.now = func() time.Time { return arrival.Add(time.Hour) }
		if n, reason := r.Consume(export(v, "", children(v, "completions", "abc", 3, 2)...)); n != 0 {
			t.Fatalf("%s: %d rejected: %s", v, n, reason)
		}
		for _, e := range c.all() {
			if err := e.ValidateAt(arrival.Add(time.Hour)); err != nil {
				t.Errorf("%s: %v", v, err)
			}
			var _ schema.Event = e
		}
	}
}
