// Package requestfixture writes whole demo-shaped requests into ClickHouse — the gateway's
// request.started and request.finished, the engine's span, its /metrics samples and log lines
// around the request, the application's record — as schema events through the consumer's own
// sink (the rows the pipeline writes), for the tests of the request page and `servescope request`.
//
// The shapes follow the demo (scripts/demo, docs/demo.md) and the measurements of
// docs/measurements.md: an overload request waits 0.472 s in the engine's queue while 256 run
// and 44 wait, and is answered without streaming (loadgen's --stream-share 0.5), so its TTFT
// comes from the engine's span; the log lines are vLLM's own text, parsed by the collector's
// parser (internal/vllmlog).
package requestfixture

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/postmortem"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/consumer/sink"
)

// Story is one request and the events that tell it.
type Story struct {
	RequestID, ResponseID, TraceID, EngineRequestID string
	Arrival, Finished                               time.Time
	Events                                          []schema.Event
}

// Shape is what a story's request looks like.
type Shape struct {
	// Engine names the engine (engine.* events), Upstream its URL (the gateway's requests row).
	Engine, Upstream, Model, App string
	// RequestID is the caller's X-Request-Id (empty: a new KSUID, as the gateway gives).
	RequestID string
	// TraceID is the W3C trace id (empty: a new random one).
	TraceID string
	Stream  bool
	// Queue, Prefill, Decode are the engine's phases, in seconds; E2E is the gateway's.
	Queue, Prefill, Decode, E2E float64
	PromptTokens, OutputTokens  uint32
	// Running, Waiting, KV are the engine's gauges around the arrival.
	Running, Waiting, KV float64
	// Status and ErrorLayer as the gateway recorded them; NoSpan leaves the engine span out (an
	// engine that died, or refused the request).
	Status     uint16
	ErrorLayer string
	ErrorCode  string
	NoSpan     bool
	// TopScore > 0 adds the application's record with three passages.
	TopScore float64
}

// Overload is the demo's overload request (docs/measurements.md, Four workloads): not streamed,
// queued 0.472 s, prefill 0.288 s, decode 18.61 s, 44 tokens in and 128 out, 256 running and 44
// waiting at its arrival with the KV cache 28% full.
func Overload(engine string) Shape {
	return Shape{Engine: engine, Upstream: "http://127.0.0.1:19600", Model: "Qwen/Qwen2.5-7B-Instruct-AWQ", App: "docs-qa",
		Queue: 0.472, Prefill: 0.288, Decode: 18.61, E2E: 19.46, PromptTokens: 44, OutputTokens: 128,
		Running: 256, Waiting: 44, KV: 0.28, Status: 200, TopScore: 0.86}
}

// NewID is a random id of n bytes in hex (a trace id is 16).
func NewID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Tell makes the events of a request of shape s arriving at arrival.
func Tell(s Shape, arrival time.Time) Story {
	arrival = arrival.UTC().Truncate(time.Microsecond)
	id := s.RequestID
	if id == "" {
		id = schema.NewRequestID()
	}
	trace := s.TraceID
	if trace == "" {
		trace = NewID(16)
	}
	st := Story{RequestID: id, ResponseID: "chatcmpl-" + id, EngineRequestID: "chatcmpl-" + id, TraceID: trace, Arrival: arrival}
	st.Finished = arrival.Add(time.Duration(s.E2E * float64(time.Second)))
	maxTokens := s.OutputTokens
	p := func(v float64) *float64 { return &v }
	u := func(v uint32) *uint32 { return &v }

	started := schema.NewRequestStarted(id, arrival)
	started.Model, started.Endpoint, started.Stream, started.MaxTokens = s.Model, "/v1/chat/completions", s.Stream, &maxTokens
	started.App, started.TraceID, started.Gateway, started.PromptVersion = s.App, trace, "demo-gateway", "p12"

	fin := schema.NewRequestFinished(id, arrival, st.Finished)
	fin.Model, fin.Endpoint, fin.Stream, fin.StatusCode, fin.MaxTokens = s.Model, "/v1/chat/completions", s.Stream, s.Status, &maxTokens
	fin.App, fin.TraceID, fin.Gateway, fin.Upstream, fin.PromptVersion = s.App, trace, "demo-gateway", s.Upstream, "p12"
	fin.E2ESeconds = p(s.E2E)
	fin.ErrorLayer, fin.ErrorCode = s.ErrorLayer, s.ErrorCode
	if s.ErrorLayer != "" {
		fin.ErrorMessage = "the engine broke off the stream: unexpected EOF"
	}
	if s.Status < 400 {
		fin.ResponseID = st.ResponseID
	}
	engineTTFT := s.Queue + s.Prefill + 0.093
	if s.Status == 200 && s.ErrorLayer == "" {
		fin.PromptTokens, fin.CompletionTokens, fin.FinishReason, fin.FinishReasons = u(s.PromptTokens), u(s.OutputTokens), "length", []string{"length"}
		if s.Stream {
			// The gateway's own TTFT and TPOT: a stream's first content chunk and its chunks' gaps.
			fin.TTFTSeconds = p(engineTTFT + 0.002)
			fin.TPOTSeconds = p(s.Decode / float64(max(1, s.OutputTokens-1)))
		}
		v, n := false, uint32(0)
		fin.OutputScriptViolation, fin.OutputForeignChars = &v, &n
	}
	st.Events = append(st.Events, started, fin)

	engineArrival := arrival.Add(2 * time.Millisecond)
	if !s.NoSpan {
		span := schema.NewEngineSpan(id, st.Finished.Add(-time.Millisecond))
		span.EngineRequestID, span.TraceID, span.SpanID, span.Engine, span.StartTS = st.EngineRequestID, trace, NewID(8), s.Engine, engineArrival
		span.QueueSeconds, span.PrefillSeconds, span.DecodeSeconds = p(s.Queue), p(s.Prefill), p(s.Decode)
		span.InferenceSeconds, span.TTFTSeconds = p(s.Prefill+s.Decode), p(engineTTFT)
		span.E2ESeconds = p(s.Queue + s.Prefill + s.Decode + 0.004)
		span.PromptTokens, span.CompletionTokens, span.FinishReason, span.MaxTokens = u(s.PromptTokens), u(s.OutputTokens), "length", &maxTokens
		st.Events = append(st.Events, span)
	}

	// The engine's gauges just before and after the arrival (the collector scrapes every 0.5 s).
	for _, d := range []time.Duration{-300 * time.Millisecond, 200 * time.Millisecond} {
		smp := schema.NewEngineSample(s.Engine, arrival.Add(d))
		smp.Model, smp.Up = s.Model, true
		smp.NumRequestsRunning, smp.NumRequestsWaiting, smp.KVCacheUsagePerc = p(s.Running), p(s.Waiting), p(s.KV)
		st.Events = append(st.Events, smp)
	}

	// vLLM's own lines: the stats line before the arrival and, with request logging on, the
	// request's "Added request" line (vllm/v1/engine/async_llm.py).
	stamp := func(t time.Time) string { return t.UTC().Format("01-02 15:04:05") }
	raw := []string{
		fmt.Sprintf("(APIServer pid=4242) INFO %s [loggers.py:123] Engine 000: Avg prompt throughput: 616.0 tokens/s, Avg generation throughput: 1742.0 tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: 0.0%%",
			stamp(arrival.Add(-4*time.Second)), int(s.Running), int(s.Waiting), s.KV*100),
		fmt.Sprintf("(APIServer pid=4242) INFO %s [async_llm.py:271] Added request %s.", stamp(engineArrival), st.EngineRequestID),
	}
	lines, err := postmortem.ReadLog(strings.NewReader(strings.Join(raw, "\n")+"\n"), s.Engine, "vllm.log", arrival.Add(time.Minute), time.UTC)
	if err != nil {
		panic(err)
	}
	for i := range lines {
		l := lines[i]
		l.Header = schema.Header{Schema: schema.KindEngineLog.SchemaID(), EventID: schema.NewEventID(), TS: l.TS}
		st.Events = append(st.Events, &l)
	}

	if s.TopScore > 0 {
		a := schema.NewAppRecord(id, s.App, st.Finished.Add(5*time.Millisecond))
		a.Model, a.TraceID, a.PromptVersion = s.Model, trace, "p12"
		a.EmbeddingModelVersion, a.IndexVersion = "bge-m3@1", "idx-2026-11-01"
		a.SetPassages([]schema.Passage{
			{ID: "kb/overload.md#2", Score: s.TopScore, Source: "kb/overload.md"},
			{ID: "kb/slots.md#1", Score: s.TopScore - 0.04, Source: "kb/slots.md"},
			{ID: "kb/kv-cache.md#4", Score: s.TopScore - 0.09, Source: "kb/kv-cache.md"},
		})
		a.RetrievalSeconds = p(0.021)
		n, missing, v, fc := uint32(2), false, false, uint32(0)
		a.CitationCount, a.CitationsMissing, a.OutputScriptViolation, a.OutputForeignChars = &n, &missing, &v, &fc
		st.Events = append(st.Events, a)
	}
	return st
}

// Insert writes events through the consumer's sink, one batch per kind.
func Insert(ctx context.Context, conn driver.Conn, events ...schema.Event) error {
	byKind := map[schema.Kind][]schema.Event{}
	var kinds []schema.Kind
	for _, e := range events {
		if err := e.Validate(); err != nil {
			return fmt.Errorf("fixture event %s: %w", e.Kind(), err)
		}
		if _, ok := byKind[e.Kind()]; !ok {
			kinds = append(kinds, e.Kind())
		}
		byKind[e.Kind()] = append(byKind[e.Kind()], e)
	}
	s := sink.New(conn)
	for _, k := range kinds {
		keys := make([]string, len(byKind[k]))
		for i, e := range byKind[k] {
			keys[i] = e.Head().EventID
		}
		table, _ := sink.TableFor(k)
		if err := s.InsertEvents(ctx, k, byKind[k], sink.Token(table, keys)); err != nil {
			return fmt.Errorf("insert the fixture's %s events: %w", k, err)
		}
	}
	return nil
}

// CrashLog reads a vLLM log holding an engine's death (e.g. internal/postmortem/testdata's) as
// engine's engine.log events, moved so that its last words fall at death.
func CrashLog(path, engine string, death time.Time) ([]schema.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	lines, err := postmortem.ReadLog(f, engine, "vllm.log", death, time.UTC)
	if err != nil {
		return nil, err
	}
	rep := postmortem.Analyze(lines, postmortem.Options{})
	if !rep.Crashed {
		return nil, fmt.Errorf("%s holds no crash", path)
	}
	shift := death.Sub(rep.LastWords.TS)
	out := make([]schema.Event, len(lines))
	for i := range lines {
		l := lines[i]
		l.Header = schema.Header{Schema: schema.KindEngineLog.SchemaID(), EventID: schema.NewEventID(), TS: l.TS.Add(shift).UTC()}
		out[i] = &l
	}
	return out, nil
}
