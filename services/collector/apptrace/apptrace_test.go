package apptrace

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/servescope/servescope/dev/appspans"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/collector/otlp"
)

// records is a Publisher keeping what it is given, validated as the real publisher does.
type records struct {
	mu    sync.Mutex
	apps  []*schema.AppRecord
	spans []*schema.EngineSpan
}

func (r *records) Publish(e schema.Event) error {
	if err := e.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch v := e.(type) {
	case *schema.AppRecord:
		r.apps = append(r.apps, v)
	case *schema.EngineSpan:
		r.spans = append(r.spans, v)
	}
	return nil
}

func (r *records) all() []*schema.AppRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.apps)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// harness is a receiver with the application path on loopback OTLP listeners, and a tracer
// provider of the OpenTelemetry Go SDK exporting to it.
type harness struct {
	asm *Assembler
	pub *records
	reg *prometheus.Registry
	tp  *sdktrace.TracerProvider
}

type harnessOptions struct {
	cfg     Config
	res     *resource.Resource
	grpc    bool // OTLP/gRPC instead of OTLP/HTTP
	perSpan bool // export each span as it ends (SimpleSpanProcessor) instead of in batches
}

func newHarness(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	h := &harness{pub: &records{}, reg: prometheus.NewRegistry()}
	var err error
	h.asm, err = NewAssembler(o.cfg, h.pub, quiet(), h.reg)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := otlp.NewReceiver(h.pub, otlp.Naming{Default: "vllm"}, quiet(), h.reg, otlp.WithAppSpans(h.asm))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	var exp sdktrace.SpanExporter
	if o.grpc {
		go func() { served <- rcv.ServeGRPC(ctx, ln) }()
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(ln.Addr().String()), otlptracegrpc.WithInsecure())
	} else {
		go func() { served <- rcv.ServeHTTPOn(ctx, ln) }()
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(ln.Addr().String()), otlptracehttp.WithInsecure())
	}
	if err != nil {
		t.Fatal(err)
	}
	res := o.res
	if res == nil {
		res = appspans.PythonResource("support-bot", attribute.String(AttrIndexVersion, "kb-2026-11"))
	}
	proc := sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBatchTimeout(time.Hour))
	if o.perSpan {
		proc = sdktrace.NewSimpleSpanProcessor(exp)
	}
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(proc))
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := h.tp.Shutdown(sctx); err != nil {
			t.Errorf("tracer provider shutdown: %v", err)
		}
		cancel()
		if err := <-served; err != nil {
			t.Errorf("receiver: %v", err)
		}
	})
	return h
}

// flush exports every ended span and waits for the receiver to have read them.
func (h *harness) flush(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.tp.ForceFlush(ctx); err != nil {
		t.Fatalf("export: %v", err)
	}
}

func (h *harness) metric(t *testing.T, name, label, value string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || hasLabel(m, label, value) {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return math.NaN()
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

var docs = []appspans.Doc{
	{ID: "9e4f2b1c-handbook#12", Score: 0.8512, Content: "Queue wait stays at zero until the batch is full."},
	{ID: "c0a1d7e3-handbook#4", Score: 0.8807, Content: "vLLM schedules up to max_num_seqs sequences."},
	{ID: "51be0a9f-handbook#31", Score: 0.7904, Content: "The KV cache holds the context of every running sequence."},
}

func approx(p *float64, want float64) bool { return p != nil && math.Abs(*p-want) < 1e-9 }

// TestLlamaIndex: a LlamaIndex query traced by OpenInference, exported by the Go SDK over
// OTLP/HTTP, is one app.record with the retriever's documents, the query embedding model, the
// prompt version, the prefix-cache read, the application's name and the resource's index version.
func TestLlamaIndex(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	err := appspans.LlamaIndex(context.Background(), h.tp, appspans.Request{
		Question: "Why does queue wait stay at zero?", Docs: docs, EmbeddingModel: "text-embedding-3-small",
		Model: "Qwen/Qwen2.5-7B-Instruct", PromptVersion: "rag-v3",
		Call: func(ctx context.Context) (appspans.Answer, error) {
			return appspans.Answer{ResponseID: "chatcmpl-2Zk4gateway", Text: "Because [1].", PromptTokens: 410, CompletionTokens: 12, CachedTokens: 384, FinishReason: "stop"}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.flush(t)
	got := h.pub.all()
	if len(got) != 1 {
		t.Fatalf("%d records, want 1: %+v", len(got), got)
	}
	r := got[0]
	if r.App != "support-bot" || r.IndexVersion != "kb-2026-11" || r.EmbeddingModelVersion != "text-embedding-3-small" ||
		r.PromptVersion != "rag-v3" || r.Model != "Qwen/Qwen2.5-7B-Instruct" {
		t.Errorf("labels: app %q index %q embedding %q prompt %q model %q", r.App, r.IndexVersion, r.EmbeddingModelVersion, r.PromptVersion, r.Model)
	}
	// OpenInference's LLM spans do not carry the answer's id: the trace id is the request id,
	// and the record joins the gateway's request by trace_id.
	if len(r.TraceID) != 32 || r.RequestID != r.TraceID {
		t.Errorf("trace_id %q request_id %q, want 32 hex, twice", r.TraceID, r.RequestID)
	}
	if !approx(r.RetrievalTopScore, 0.8807) || len(r.Passages) != 3 || r.Passages[0].ID != "c0a1d7e3-handbook#4" || r.Passages[2].Score != 0.7904 {
		t.Errorf("retrieval: top %v passages %+v", r.RetrievalTopScore, r.Passages)
	}
	if r.RetrievalSeconds == nil || *r.RetrievalSeconds < 0 {
		t.Errorf("retrieval_s %v", r.RetrievalSeconds)
	}
	if r.CacheHit == nil || !*r.CacheHit || r.CacheKind != "prefix" {
		t.Errorf("cache: %v %q, want the prefix cache's read of 384 tokens", r.CacheHit, r.CacheKind)
	}
	if r.ErrorLayer != "" {
		t.Errorf("error %q: %q", r.ErrorLayer, r.ErrorMessage)
	}
	if n := h.metric(t, "servescope_collector_app_trace_flushes_total", "reason", "root"); n != 1 {
		t.Errorf("flushes at root: %v", n)
	}
	// Every span is counted: 9 of LlamaIndex's plus the HTTP client span, which the
	// application path ignores.
	if used, ignored := h.metric(t, "servescope_collector_spans_total", "result", "app"), h.metric(t, "servescope_collector_spans_total", "result", "ignored"); used != 9 || ignored != 1 {
		t.Errorf("spans: %v used, %v ignored; want 9, 1", used, ignored)
	}
	if n := h.metric(t, "servescope_collector_app_traces_buffered", "", ""); n != 0 {
		t.Errorf("%v traces still buffered", n)
	}
}

// TestLlamaIndexReranked: with a reranker, the retriever's scores still make the record
// (retrieval similarity, the schema's passage score); the reranker's only stand in when no
// retriever reported scores.
func TestLlamaIndexReranked(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	reranked := []appspans.Doc{{ID: "51be0a9f-handbook#31", Score: 7.25}, {ID: "c0a1d7e3-handbook#4", Score: 3.5}}
	if err := appspans.LlamaIndex(context.Background(), h.tp, appspans.Request{Question: "q", Docs: docs, Reranked: reranked, EmbeddingModel: "e", Model: "m"}); err != nil {
		t.Fatal(err)
	}
	// A retriever whose documents carry no score (LlamaIndex's SummaryIndexRetriever).
	unscored := []appspans.Doc{{ID: "a"}, {ID: "b"}}
	ctx, root := h.tp.Tracer("test").Start(context.Background(), "RetrieverQueryEngine.query")
	root.SetAttributes(attribute.String(AttrOISpanKind, "CHAIN"))
	_, ret := h.tp.Tracer("test").Start(ctx, "SummaryIndexRetriever.retrieve")
	ret.SetAttributes(attribute.String(AttrOISpanKind, "RETRIEVER"),
		attribute.String("retrieval.documents.0.document.id", unscored[0].ID), attribute.String("retrieval.documents.1.document.id", unscored[1].ID))
	ret.End()
	_, rr := h.tp.Tracer("test").Start(ctx, "LLMRerank._postprocess_nodes")
	rr.SetAttributes(attribute.String(AttrOISpanKind, "RERANKER"),
		attribute.String("reranker.output_documents.0.document.id", "b"), attribute.Float64("reranker.output_documents.0.document.score", 9))
	rr.End()
	root.End()
	h.flush(t)
	got := h.pub.all()
	if len(got) != 2 {
		t.Fatalf("%d records, want 2", len(got))
	}
	if !approx(got[0].RetrievalTopScore, 0.8807) || len(got[0].Passages) != 3 {
		t.Errorf("retriever and reranker: top %v passages %+v, want the retriever's", got[0].RetrievalTopScore, got[0].Passages)
	}
	if !approx(got[1].RetrievalTopScore, 9) || len(got[1].Passages) != 1 || got[1].Passages[0].ID != "b" {
		t.Errorf("unscored retriever and reranker: top %v passages %+v, want the reranker's", got[1].RetrievalTopScore, got[1].Passages)
	}
}

// TestLlamaIndexFailure: the LLM call fails; OpenInference ends the LLM spans and their
// ancestors with ERROR. The record names the first span that failed, with its status.
func TestLlamaIndexFailure(t *testing.T) {
	h := newHarness(t, harnessOptions{grpc: true})
	err := appspans.LlamaIndex(context.Background(), h.tp, appspans.Request{
		Question: "q", Docs: docs, EmbeddingModel: "e", Model: "m",
		Call: func(context.Context) (appspans.Answer, error) {
			return appspans.Answer{}, appspans.ErrCall{Status: 400}
		},
	})
	if err == nil {
		t.Fatal("the call did not fail")
	}
	h.flush(t)
	got := h.pub.all()
	if len(got) != 1 {
		t.Fatalf("%d records, want 1", len(got))
	}
	r := got[0]
	if r.ErrorLayer != schema.LayerApp || r.ErrorMessage != "Error code: 400 - the gateway answered 400" {
		t.Errorf("error %q %q, want app and the HTTP client span's status", r.ErrorLayer, r.ErrorMessage)
	}
	if r.RequestID != r.TraceID || !approx(r.RetrievalTopScore, 0.8807) {
		t.Errorf("request_id %q (trace %q), top %v: without an answer the trace id is the request id", r.RequestID, r.TraceID, r.RetrievalTopScore)
	}
}

// TestGenAI: the GenAI conventions' shape in both modes of opentelemetry-instrumentation-openai-v2
// and both encodings of gen_ai.retrieval.documents, each span exported alone as a
// SimpleSpanProcessor does (the root arrives last, in its own export).
func TestGenAI(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    appspans.GenAIOptions
	}{
		{"v1.30 structured", appspans.GenAIOptions{}},
		{"latest JSON string", appspans.GenAIOptions{Latest: true, DocumentsJSON: true}},
		{"server root with servescope attributes", appspans.GenAIOptions{Latest: true, ServerSpan: true, Attrs: []attribute.KeyValue{
			attribute.Bool(AttrCacheHit, false), attribute.String(AttrCacheKind, "exact"),
			attribute.Int(AttrOutputForeignChars, 3), attribute.Bool(AttrOutputScriptViolation, true),
			attribute.Int(AttrOutputCitationCount, 0), attribute.String(AttrOutputCitationsMissing, "true"),
			attribute.String(AttrPromptVersion, "p-span"),
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{perSpan: true, res: appspans.PythonResource("kb-search",
				attribute.String(AttrPromptVersion, "p-resource"), attribute.String(AttrConfigVersion, "cfg-7"))})
			err := appspans.GenAI(context.Background(), h.tp, appspans.Request{
				Question: "q", Docs: docs, EmbeddingModel: "text-embedding-3-large", Model: "servescope/sim-7b", DataSource: "H7STPQYOND",
				Call: func(context.Context) (appspans.Answer, error) {
					return appspans.Answer{ResponseID: "chatcmpl-req-42", Model: "servescope/sim-7b", Text: "t", PromptTokens: 100, CompletionTokens: 5, CachedTokens: 0, FinishReason: "stop"}, nil
				},
			}, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			h.flush(t)
			got := h.pub.all()
			if len(got) != 1 {
				t.Fatalf("%d records, want 1", len(got))
			}
			r := got[0]
			if r.App != "kb-search" || r.EmbeddingModelVersion != "text-embedding-3-large" || r.IndexVersion != "H7STPQYOND" ||
				r.ConfigVersion != "cfg-7" || r.Model != "servescope/sim-7b" || r.RequestID != "req-42" {
				t.Errorf("labels: %+v", r)
			}
			if !approx(r.RetrievalTopScore, 0.8807) || len(r.Passages) != 3 || r.Passages[1].ID != "9e4f2b1c-handbook#12" {
				t.Errorf("retrieval: top %v passages %+v", r.RetrievalTopScore, r.Passages)
			}
			switch {
			case tc.o.ServerSpan:
				if r.CacheHit == nil || *r.CacheHit || r.CacheKind != "exact" || r.PromptVersion != "p-span" ||
					r.OutputForeignChars == nil || *r.OutputForeignChars != 3 || r.OutputScriptViolation == nil || !*r.OutputScriptViolation ||
					r.CitationCount == nil || *r.CitationCount != 0 || r.CitationsMissing == nil || !*r.CitationsMissing {
					t.Errorf("servescope attributes: cache %v %q prompt %q checks %v %v %v %v", r.CacheHit, r.CacheKind, r.PromptVersion,
						r.OutputForeignChars, r.OutputScriptViolation, r.CitationCount, r.CitationsMissing)
				}
			case tc.o.Latest:
				if r.CacheHit == nil || *r.CacheHit || r.CacheKind != "prefix" || r.PromptVersion != "p-resource" {
					t.Errorf("cache %v %q prompt %q, want no prefix-cache read and the resource's prompt version", r.CacheHit, r.CacheKind, r.PromptVersion)
				}
			default:
				if r.CacheHit != nil || r.PromptVersion != "p-resource" {
					t.Errorf("cache %v prompt %q, want none (v1.30 has no cache tokens) and the resource's prompt version", r.CacheHit, r.PromptVersion)
				}
			}
		})
	}
}

// TestOpenLLMetry: a Pinecone query's result events and the Traceloop SDK's prompt version.
func TestOpenLLMetry(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	if err := appspans.OpenLLMetry(context.Background(), h.tp, appspans.Request{Question: "q", Docs: docs, Model: "gpt-4o-mini", PromptVersion: "5"}); err != nil {
		t.Fatal(err)
	}
	h.flush(t)
	got := h.pub.all()
	if len(got) != 1 {
		t.Fatalf("%d records, want 1", len(got))
	}
	r := got[0]
	if !approx(r.RetrievalTopScore, 0.8807) || len(r.Passages) != 3 || r.PromptVersion != "5" || r.Model != "gpt-4o-mini" || r.RequestID != "local" {
		t.Errorf("record: top %v passages %+v prompt %q model %q request %q", r.RetrievalTopScore, r.Passages, r.PromptVersion, r.Model, r.RequestID)
	}
}

// TestNothingUseful: spans of other services on the same endpoint (an HTTP server, a database
// call) and a GenAI trace that says nothing an app.record holds are counted, not stored.
func TestNothingUseful(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tr := h.tp.Tracer("test")
	ctx, srv := tr.Start(context.Background(), "GET /health")
	_, db := tr.Start(ctx, "SELECT")
	db.SetAttributes(attribute.String("db.system", "postgresql"))
	db.End()
	srv.End()
	ctx, root := tr.Start(context.Background(), "agent")
	_, chat := tr.Start(ctx, "chat m")
	chat.SetAttributes(attribute.String(AttrGenAIOperationName, "chat"), attribute.String(AttrGenAIRequestModel, "m"))
	chat.End()
	root.End()
	h.flush(t)
	if got := h.pub.all(); len(got) != 0 {
		t.Fatalf("%d records, want none: %+v", len(got), got[0])
	}
	if n := h.metric(t, "servescope_collector_app_traces_total", "result", "empty"); n != 1 {
		t.Errorf("empty traces: %v, want 1 (the chat-only trace)", n)
	}
	if n := h.metric(t, "servescope_collector_spans_total", "result", "ignored"); n != 2 {
		t.Errorf("ignored spans: %v, want 2 (the health check's)", n)
	}
}

// fakeClock is the assembler's clock in tests of its wait.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestWaitAndBounds: a trace without its root is published after MaxWait; past MaxTraces the
// oldest trace is flushed early; a trace keeps at most MaxSpansPerTrace spans; the root of a
// trace at its limit still ends it.
func TestWaitAndBounds(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	h := newHarness(t, harnessOptions{cfg: Config{MaxTraces: 2, MaxSpansPerTrace: 3, MaxWait: 10 * time.Second}})
	h.asm.now = clock.Now
	tr := h.tp.Tracer("test")
	retrieval := func(ctx context.Context, score float64) {
		_, s := tr.Start(ctx, "retrieval kb")
		s.SetAttributes(attribute.String(AttrGenAIOperationName, "retrieval"),
			attribute.String(AttrGenAIRetrievalDocs, `[{"id":"d","score":`+formatFloat(score)+`}]`))
		s.End()
	}
	// Three traces whose roots never come: each a remote parent's child.
	var roots []context.Context
	for i := range 3 {
		ctx, root := tr.Start(context.Background(), "root")
		roots = append(roots, ctx)
		retrieval(ctx, 0.1*float64(i+1))
		_ = root // never ended: its children wait
	}
	h.flush(t)
	// The third trace pushed the first out early.
	got := h.pub.all()
	if len(got) != 1 || !approx(got[0].RetrievalTopScore, 0.1) {
		t.Fatalf("after 3 traces with room for 2: %d records %+v, want the first flushed early", len(got), got)
	}
	if n := h.metric(t, "servescope_collector_app_trace_flushes_total", "reason", "evicted"); n != 1 {
		t.Errorf("evicted: %v", n)
	}
	clock.Add(9 * time.Second)
	h.asm.expire(clock.Now())
	if n := len(h.pub.all()); n != 1 {
		t.Fatalf("%d records before the wait is over", n)
	}
	clock.Add(time.Second)
	h.asm.expire(clock.Now())
	if got := h.pub.all(); len(got) != 3 {
		t.Fatalf("%d records after the wait, want 3", len(got))
	}
	if n := h.metric(t, "servescope_collector_app_trace_flushes_total", "reason", "timeout"); n != 2 {
		t.Errorf("timeouts: %v", n)
	}

	// A trace over its span limit keeps 3 spans and is still ended by its root.
	ctx, root := tr.Start(context.Background(), "root")
	for range 5 {
		retrieval(ctx, 0.5)
	}
	root.End()
	h.flush(t)
	if got := h.pub.all(); len(got) != 4 {
		t.Fatalf("%d records, want 4", len(got))
	}
	// Two retrieval spans were over the limit, and the root took the place of a third.
	if n := h.metric(t, "servescope_collector_app_spans_total", "result", "dropped"); n != 3 {
		t.Errorf("dropped spans: %v, want 3", n)
	}
	// Shutdown publishes what waits.
	retrieval(roots[0], 0.7)
	h.flush(t)
	h.asm.Close()
	if got := h.pub.all(); len(got) != 5 || !approx(got[4].RetrievalTopScore, 0.7) {
		t.Fatalf("after Close: %d records", len(got))
	}
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// syntheticTrace is trace i of n retrieval spans without a root (their parent is never sent).
func syntheticTrace(i, n int) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "bench-app")
	ss := rs.ScopeSpans().AppendEmpty()
	var tid pcommon.TraceID
	binary.BigEndian.PutUint64(tid[8:], uint64(i)+1)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for k := range n {
		s := ss.Spans().AppendEmpty()
		s.SetTraceID(tid)
		s.SetSpanID(pcommon.SpanID{1, byte(k + 1)})
		s.SetParentSpanID(pcommon.SpanID{9})
		s.SetName("retrieval kb")
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(t0))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Millisecond)))
		s.Attributes().PutStr(AttrGenAIOperationName, OpRetrieval)
		s.Attributes().PutStr(AttrGenAIRetrievalDocs, `[{"id":"doc-`+strconv.Itoa(k)+`","score":0.5}]`)
	}
	return td
}

// TestMemoryBound: traces that never end, far more than the buffer holds, leave it within
// MaxBytes and MaxTraces; every trace is published once, early or at shutdown.
func TestMemoryBound(t *testing.T) {
	pub := &records{}
	asm, err := NewAssembler(Config{MaxTraces: 1000, MaxBytes: 2 << 20}, pub, quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	const traces = 5000
	for i := range traces {
		td := syntheticTrace(i, 20)
		asm.Consume(td, nil)
		asm.mu.Lock()
		n, b := len(asm.traces), asm.bytes
		asm.mu.Unlock()
		if n > 1000 || b > 2<<20 {
			t.Fatalf("after trace %d: %d traces, %d bytes buffered", i, n, b)
		}
	}
	asm.Close()
	if got := len(pub.all()); got != traces {
		t.Errorf("%d records, want %d", got, traces)
	}
}

// TestPublishErrors: a publisher's refusal is counted, not returned to the exporter.
func TestPublishErrors(t *testing.T) {
	asm, err := NewAssembler(Config{}, refusing{}, quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if used := asm.Consume(syntheticTrace(1, 3), nil); used != 3 {
		t.Fatalf("used %d", used)
	}
	asm.Close()
	var m dto.Metric
	if err := asm.records.WithLabelValues("rejected").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Errorf("rejected: %v %v", m.GetCounter().GetValue(), err)
	}
}

type refusing struct{}

func (refusing) Publish(schema.Event) error { return errors.New("spool full") }
