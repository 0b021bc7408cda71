// Package eventgen builds realistic, valid servescope events of every kind, and malformed ones,
// for the consumer's tests and benchmark. Values are deterministic in the index i except the
// event ids, which are fresh KSUIDs so that runs never collide.
package eventgen

import (
	"fmt"
	"time"

	"github.com/servescope/servescope/schema"
)

func ptr[T any](v T) *T { return &v }

// Event returns the i-th event of kind k with its timestamps at base plus i microseconds.
func Event(k schema.Kind, i int, base time.Time) schema.Event {
	ts := base.Add(time.Duration(i) * time.Microsecond).UTC()
	rid := fmt.Sprintf("req-%09d", i)
	switch k {
	case schema.KindRequestStarted:
		e := schema.NewRequestStarted(rid, ts.Add(-time.Second))
		e.TS = ts
		e.Model = "Qwen/Qwen2.5-7B-Instruct-AWQ"
		e.Endpoint = "/v1/chat/completions"
		e.Stream = i%2 == 0
		e.MaxTokens = ptr(uint32(128))
		e.PromptBytes = ptr(uint32(1000 + i%500))
		e.App = "ragdemo"
		e.PromptVersion = "prompt-v12"
		e.TraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		e.Gateway = "gw-1"
		return e
	case schema.KindRequestFinished:
		return RequestFinished(i, ts)
	case schema.KindAppRecord:
		e := schema.NewAppRecord(rid, "ragdemo", ts)
		e.Model = "Qwen/Qwen2.5-7B-Instruct-AWQ"
		e.SetPassages([]schema.Passage{
			{ID: fmt.Sprintf("doc-%d#3", i%100), Score: 0.82, Source: "handbook.md"},
			{ID: fmt.Sprintf("doc-%d#7", i%100), Score: 0.77},
		})
		e.RetrievalSeconds = ptr(0.012)
		e.EmbeddingModelVersion = "bge-small-v1.5"
		e.IndexVersion = "idx-2026-11-01"
		e.PromptVersion = "prompt-v12"
		e.CacheHit = ptr(i%5 == 0)
		e.CacheKind = "semantic"
		e.CitationCount = ptr(uint32(2))
		e.CitationsMissing = ptr(false)
		e.OutputForeignChars = ptr(uint32(0))
		e.OutputScriptViolation = ptr(false)
		e.TraceID = fmt.Sprintf("%032x", i+1)
		return e
	case schema.KindEngineSample:
		e := schema.NewEngineSample("http://vllm:8000/metrics", ts)
		e.Model = "Qwen/Qwen2.5-7B-Instruct-AWQ"
		e.Up = true
		e.ScrapeDurationSeconds = ptr(0.004)
		e.NumRequestsRunning = ptr(float64(i % 256))
		e.NumRequestsWaiting = ptr(float64(i % 7))
		e.KVCacheUsagePerc = ptr(0.28)
		e.Gauges = map[string]float64{"num_requests_swapped": 0}
		e.Counters = map[string]float64{"prompt_tokens_total": float64(i * 100), `request_success_total{finished_reason="length"}`: 3}
		e.Histograms = map[string]schema.Histogram{"time_to_first_token_seconds": {
			Sum: 12.5, Count: 100,
			Buckets: []schema.Bucket{{LE: 0.1, Count: 40}, {LE: 1, Count: 95}, {LE: schema.FloatOrInf(posInf()), Count: 100}},
		}}
		return e
	case schema.KindEngineSpan:
		e := schema.NewEngineSpan(rid, ts)
		e.EngineRequestID = "1_cmpl-" + rid + "-0" // vLLM v0.10: child 1 of prompt 0
		e.PromptIndex, e.ChildIndex = ptr(uint32(0)), ptr(uint32(1))
		e.FinishReason = "length"
		e.TraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		e.SpanID = "00f067aa0ba902b7"
		e.Engine = "vllm"
		e.Model = "Qwen/Qwen2.5-7B-Instruct-AWQ"
		e.StartTS = ts.Add(-2 * time.Second)
		e.QueueSeconds, e.PrefillSeconds, e.DecodeSeconds, e.InferenceSeconds = ptr(0.01), ptr(0.05), ptr(1.9), ptr(1.95)
		e.TTFTSeconds, e.E2ESeconds = ptr(0.07), ptr(1.97)
		e.PromptTokens, e.CompletionTokens, e.MaxTokens = ptr(uint32(700)), ptr(uint32(120)), ptr(uint32(128))
		e.Temperature, e.TopP, e.N = ptr(0.7), ptr(0.95), ptr(uint32(1))
		return e
	case schema.KindEngineLog:
		line := fmt.Sprintf("INFO 11-30 12:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 1200.5 tokens/s, Running: %d reqs, Waiting: 0 reqs, GPU KV cache usage: 15.9%%", i%256)
		e := schema.NewEngineLog("vllm", line, ts)
		e.Source = "/var/log/vllm.log"
		e.Offset = ptr(uint64(i) * 200)
		e.Level = "INFO"
		e.Process = "APIServer pid=1"
		e.Logger = "loggers.py:123"
		e.Message = line[37:]
		e.PromptThroughputTPS = ptr(1200.5)
		e.Running, e.Waiting = ptr(uint32(i%256)), ptr(uint32(0))
		e.KVCacheUsagePerc = ptr(0.159)
		return e
	case schema.KindGatewayHeartbeat:
		e := schema.NewGatewayHeartbeat("gw-1", ts)
		e.IntervalSeconds, e.ListedAfterSeconds, e.InFlight = 15, 30, uint32(i%50)
		e.Open = []schema.OpenRequest{{RequestID: rid, ArrivalTS: ts.Add(-45 * time.Second), Model: "Qwen/Qwen2.5-7B-Instruct-AWQ",
			Endpoint: "/v1/chat/completions", Stream: true, Upstream: "http://vllm:8000", App: "ragdemo", Phase: "responding"}}
		return e
	}
	panic("eventgen: unknown kind " + string(k))
}

func posInf() float64 {
	var zero float64
	return 1 / zero
}

// RequestFinished returns a typical successful request.finished event, about 350 bytes of JSON:
// gateway timings and usage, millisecond timestamps.
func RequestFinished(i int, ts time.Time) *schema.RequestFinished {
	ts = ts.Truncate(time.Millisecond)
	e := schema.NewRequestFinished(fmt.Sprintf("req-%09d", i), ts.Add(-2013*time.Millisecond), ts)
	e.Model = "qwen2.5-7b"
	e.Endpoint = "/v1/chat/completions"
	e.Stream = true
	e.StatusCode = 200
	e.TTFTSeconds, e.E2ESeconds = ptr(0.0712), ptr(2.0133)
	e.PromptTokens, e.CompletionTokens = ptr(uint32(712+i%100)), ptr(uint32(123))
	e.FinishReason = "stop"
	return e
}

// Encode returns e's JSON, panicking on an invalid event (the generator only builds valid ones).
func Encode(e schema.Event) []byte {
	b, err := schema.Encode(e)
	if err != nil {
		panic(fmt.Sprintf("eventgen: encode %s: %v", e.Kind(), err))
	}
	return b
}

// Malformed is one message the consumer must refuse.
type Malformed struct {
	// Name describes the defect.
	Name string
	// Data is the message body.
	Data []byte
	// Reason is a substring the refusal's reason must contain.
	Reason string
}

// MalformedFor returns bad messages for a subject of kind k: not JSON, invalid UTF-8, the wrong
// schema, a missing required field and a bad value.
func MalformedFor(k schema.Kind, i int, base time.Time) []Malformed {
	good := Encode(Event(k, i, base))
	other := schema.KindRequestStarted
	if k == other {
		other = schema.KindEngineLog
	}
	return []Malformed{
		{Name: "not_json", Data: []byte(`{"schema": "` + k.SchemaID() + `", "event_id": `), Reason: "invalid_json"},
		{Name: "invalid_utf8", Data: append(append([]byte{}, good[:len(good)-1]...), []byte(`,"x":"`+"\xff\xfe"+`"}`)...), Reason: "invalid_utf8"},
		{Name: "wrong_schema", Data: replaceOnce(good, `"`+k.SchemaID()+`"`, `"`+other.SchemaID()+`"`), Reason: "does not match subject kind"},
		{Name: "future_version", Data: replaceOnce(good, `"`+k.SchemaID()+`"`, `"`+string(k)+`/v9"`), Reason: "unknown schema version"},
		{Name: "missing_event_id", Data: replaceOnce(good, `"event_id":"`, `"event_idx":"`), Reason: "event_id: missing"},
		{Name: "ts_far_future", Data: replaceOnce(good, `"ts":"`, `"ts":"2999-01-01T00:00:00Z","ts_was":"`), Reason: "in the future"},
	}
}

func replaceOnce(b []byte, old, new string) []byte {
	s := string(b)
	for j := 0; j+len(old) <= len(s); j++ {
		if s[j:j+len(old)] == old {
			return []byte(s[:j] + new + s[j+len(old):])
		}
	}
	panic(fmt.Sprintf("eventgen: %q not found in %s", old, s))
}
