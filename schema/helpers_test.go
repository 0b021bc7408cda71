package schema_test

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/servescope/servescope/schema"
)

// now is the fixed "now" the tests decode and validate at. It is in the past, so the samples are
// also valid for Encode, which validates against the wall clock.
var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

// fullEvents returns one event of every kind with every field set, valid as of now. Event ids
// are fixed so that failures are reproducible.
func fullEvents() []schema.Event {
	arrival := now.Add(-3*time.Second - 123456789*time.Nanosecond)
	finished := now.Add(-1*time.Second - 987654321*time.Nanosecond)
	versions := schema.Versions{
		App: "support-bot", PromptVersion: "prompt-v12", ConfigVersion: "cfg-2026-11-30",
		IndexVersion: "faiss-idx-41", EmbeddingModelVersion: "bge-small-en-v1.5",
	}
	check := schema.OutputCheck{OutputForeignChars: ptr(uint32(3)), OutputScriptViolation: ptr(true)}

	rs := &schema.RequestStarted{
		Header:    schema.Header{Schema: "request.started/v1", EventID: "2Iq3zbAWBzsUvSnNtL1R4lSXpzh", RequestID: "2Iq3zZNkYd3wBpRc6Z6pW0Y1yTd", TS: arrival},
		Versions:  versions,
		ArrivalTS: arrival, Model: "Qwen/Qwen2.5-0.5B-Instruct", Endpoint: "/v1/chat/completions", Stream: true,
		MaxTokens: ptr(uint32(256)), PromptBytes: ptr(uint32(1834)),
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Gateway: "gw-1",
	}
	rf := &schema.RequestFinished{
		Header:      schema.Header{Schema: "request.finished/v1", EventID: "2Iq3zcR6nq1N2pDmEJT9Cvc0pR5", RequestID: "2Iq3zZNkYd3wBpRc6Z6pW0Y1yTd", TS: finished},
		Versions:    versions,
		OutputCheck: check,
		ArrivalTS:   arrival, FinishedTS: finished,
		Model: "Qwen/Qwen2.5-0.5B-Instruct", Endpoint: "/v1/chat/completions", Stream: true,
		StatusCode: 200, ErrorLayer: schema.LayerUpstream, ErrorCode: "BadRequestError",
		ErrorMessage: "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens (1844 in the messages, 256 in the completion).",
		TTFTSeconds:  ptr(0.041), TPOTSeconds: ptr(0.0123), E2ESeconds: ptr(1.136), QueueSeconds: ptr(0.002), PrefillSeconds: ptr(0.035),
		DecodeSeconds: ptr(1.09), ScheduledToFirstTokenSeconds: ptr(0.037), EngineITLSeconds: ptr(0.0121),
		PromptTokens: ptr(uint32(412)), CompletionTokens: ptr(uint32(88)), CachedTokens: ptr(uint32(256)),
		TokensEstimated: true, FinishReason: "length", FinishReasons: []string{"length", "stop"}, MaxTokens: ptr(uint32(256)),
		ResponseID: "chatcmpl-2Iq3zZNkYd3wBpRc6Z6pW0Y1yTd", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", TraceSampled: ptr(false),
		SpanID: "b7ad6b7169203331", ParentSpanID: "00f067aa0ba902b7",
		Upstream: "http://127.0.0.1:8000", Gateway: "gw-1",
		PromptText: "Résumé of <b>Q3</b> & \"Ünïcode\" — 日本語のテキスト", OutputText: "Here is the summary: ✓ done.",
	}
	ar := &schema.AppRecord{
		Header:           schema.Header{Schema: "app.record/v1", EventID: "2Iq3zfE8Fh6hvZ2gwA9eWl0j5bA", RequestID: "req-from-client-7f3a", TS: finished},
		Versions:         versions,
		OutputCheck:      check,
		Model:            "Qwen/Qwen2.5-0.5B-Instruct",
		RetrievalSeconds: ptr(0.084), CacheHit: ptr(false), CacheKind: "semantic",
		CitationCount: ptr(uint32(2)), CitationsMissing: ptr(false),
		ErrorLayer: schema.LayerRetrieval, ErrorMessage: "vector store timeout after 80ms (served from fallback index)",
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
	}
	ar.SetPassages([]schema.Passage{
		{ID: "doc-17#p3", Score: 0.83, Source: "https://docs.example.com/refunds"},
		{ID: "doc-4#p1", Score: 0.91, Source: "kb/shipping.md"},
		{ID: "doc-9#p12", Score: -0.05},
	})
	es := &schema.EngineSample{
		Header: schema.Header{Schema: "engine.sample/v1", EventID: "2Iq3zgPt7Zg8aXf0qkC6GjI2r8B", TS: now.Add(-500 * time.Millisecond)},
		Engine: "http://127.0.0.1:8000/metrics#1", Model: "Qwen/Qwen2.5-0.5B-Instruct", EngineIndex: "1", Engines: ptr(uint16(2)), Up: true,
		ScrapeError: "previous scrape: context deadline exceeded", ScrapeDurationSeconds: ptr(0.0042),
		NumRequestsRunning: ptr(7.0), NumRequestsWaiting: ptr(2.0), KVCacheUsagePerc: ptr(0.159),
		Gauges:   map[string]float64{"num_requests_swapped": 0, "lora_requests_info": 1},
		Counters: map[string]float64{"prompt_tokens_total": 182344, `request_success_total{finished_reason="length"}`: 17},
		Histograms: map[string]schema.Histogram{
			"time_to_first_token_seconds": {Sum: 12.5, Count: 300, Buckets: []schema.Bucket{
				{LE: 0.001, Count: 0}, {LE: 0.04, Count: 120}, {LE: 0.25, Count: 290}, {LE: schema.FloatOrInf(math.Inf(1)), Count: 300},
			}},
		},
	}
	sp := &schema.EngineSpan{
		Header:          schema.Header{Schema: "engine.span/v1", EventID: "2Iq3zhQ4yZb5cVx1n8D7HkJ3s9C", RequestID: "2Iq3zZNkYd3wBpRc6Z6pW0Y1yTd", TS: finished},
		EngineRequestID: "cmpl-2Iq3zZNkYd3wBpRc6Z6pW0Y1yTd-1", PromptIndex: ptr(uint32(1)), ChildIndex: ptr(uint32(0)), TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
		ParentSpanID: "b7ad6b7169203331", Engine: "vllm", Model: "Qwen/Qwen2.5-0.5B-Instruct", StartTS: arrival,
		QueueSeconds: ptr(0.002), PrefillSeconds: ptr(0.035), DecodeSeconds: ptr(1.09), InferenceSeconds: ptr(1.125), TTFTSeconds: ptr(0.037), E2ESeconds: ptr(1.127),
		PromptTokens: ptr(uint32(412)), CompletionTokens: ptr(uint32(88)), FinishReason: "length", MaxTokens: ptr(uint32(256)),
		Temperature: ptr(0.7), TopP: ptr(0.95), N: ptr(uint32(1)),
	}
	lg := &schema.EngineLog{
		Header: schema.Header{Schema: "engine.log/v1", EventID: "2Iq3zjR5zAc6dWy2o9E8IlK4t0D", RequestID: "chatcmpl-abc", TS: finished},
		Engine: "vllm-0", Source: "/var/log/vllm.log", Offset: ptr(uint64(1 << 33)),
		Line:  "ERROR 11-30 11:59:58 [core.py:588] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB.",
		Level: "ERROR", Process: "EngineCore_DP0 pid=233", Logger: "core.py:588", EngineIndex: "0", Engines: ptr(uint16(1)),
		Message:             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB.",
		PromptThroughputTPS: ptr(412.3), GenerationThroughputTPS: ptr(88.1), Running: ptr(uint32(7)), Waiting: ptr(uint32(2)),
		KVCacheUsagePerc: ptr(0.159), PrefixCacheHitRate: ptr(0.42), Preemptions: ptr(uint32(3)), ExceptionType: "torch.OutOfMemoryError",
		OOMBytesRequested: ptr(uint64(117440512)), OOMTotalCapacityBytes: ptr(uint64(12487168819)), OOMFreeBytes: ptr(uint64(89001492)),
		Frames: []string{"vllm/v1/sample/ops/penalties.py:apply_all_penalties", "vllm/model_executor/layers/utils.py:apply_penalties"},
	}
	hb := &schema.GatewayHeartbeat{
		Header:  schema.Header{Schema: "gateway.heartbeat/v1", EventID: "2Iq3zkS6aBd7eXz3p0F9JmL5u1E", TS: finished},
		Gateway: "gw-1", IntervalSeconds: 15, ListedAfterSeconds: 30, InFlight: 42,
		Open: []schema.OpenRequest{
			{RequestID: "2Iq3zZNkYd3wBpRc6Z6pW0Y1yTd", ArrivalTS: arrival.Add(-20 * time.Minute), Model: "Qwen/Qwen2.5-0.5B-Instruct",
				Endpoint: "/v1/chat/completions", Stream: true, Upstream: "http://127.0.0.1:8000", App: "support-bot", Phase: "responding"},
			{RequestID: "req-from-client-7f3a", ArrivalTS: arrival.Add(-time.Minute), Model: "Qwen/Qwen2.5-0.5B-Instruct",
				Endpoint: "/v1/completions", Upstream: "http://127.0.0.1:8001", Phase: "upstream"},
		},
		OpenOmitted: 3,
	}
	return []schema.Event{rs, rf, ar, es, sp, lg, hb}
}

// fullEvent returns the fully populated event of kind k.
func fullEvent(t testing.TB, k schema.Kind) schema.Event {
	t.Helper()
	for _, e := range fullEvents() {
		if e.Kind() == k {
			return e
		}
	}
	t.Fatalf("no sample event of kind %s", k)
	return nil
}

// mustEncode encodes e with schema.Encode.
func mustEncode(t testing.TB, e schema.Event) []byte {
	t.Helper()
	b, err := schema.Encode(e)
	if err != nil {
		t.Fatalf("encode sample %s: %v", e.Kind(), err)
	}
	return b
}

// mutate decodes the JSON object b, applies f to it and encodes it again.
func mutate(t testing.TB, b []byte, f func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	f(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return out
}

// normalize returns a copy of the event v in a canonical form for reflect.DeepEqual: times in UTC,
// empty slices and maps as nil (omitempty encodes both as absent), and NaN bucket bounds as a
// marker value (NaN is never equal to itself).
func normalize(v any) any {
	return normValue(reflect.ValueOf(v)).Interface()
}

var (
	timeType       = reflect.TypeFor[time.Time]()
	floatOrInfType = reflect.TypeFor[schema.FloatOrInf]()
)

func normValue(v reflect.Value) reflect.Value {
	switch {
	case v.Type() == timeType:
		return reflect.ValueOf(v.Interface().(time.Time).UTC())
	case v.Type() == floatOrInfType:
		if math.IsNaN(v.Float()) {
			return reflect.ValueOf(schema.FloatOrInf(-math.MaxFloat64))
		}
		return v
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		out := reflect.New(v.Type().Elem())
		out.Elem().Set(normValue(v.Elem()))
		return out
	case reflect.Struct:
		out := reflect.New(v.Type()).Elem()
		for i := range v.NumField() {
			if out.Field(i).CanSet() {
				out.Field(i).Set(normValue(v.Field(i)))
			}
		}
		return out
	case reflect.Slice:
		if v.Len() == 0 {
			return reflect.Zero(v.Type())
		}
		out := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(normValue(v.Index(i)))
		}
		return out
	case reflect.Map:
		if v.Len() == 0 {
			return reflect.Zero(v.Type())
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(it.Key(), normValue(it.Value()))
		}
		return out
	}
	return v
}

// sameEvent reports whether a and b are the same event, in the sense of [normalize].
func sameEvent(a, b schema.Event) bool {
	return reflect.DeepEqual(normalize(a), normalize(b))
}

// fieldsOf returns the Field of every FieldError in err, or nil when err is not ValidationErrors.
func fieldsOf(err error) []string {
	ve, ok := err.(schema.ValidationErrors)
	if !ok {
		return nil
	}
	out := make([]string, len(ve))
	for i, fe := range ve {
		out[i] = fe.Field
	}
	return out
}
