package rag

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/collector/apptrace"
	"github.com/servescope/servescope/services/collector/otlp"
)

// appRecords keeps the app.records published to it, validated as the publisher validates them.
type appRecords struct {
	mu   sync.Mutex
	recs []*schema.AppRecord
}

func (r *appRecords) Publish(e schema.Event) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if a, ok := e.(*schema.AppRecord); ok {
		r.mu.Lock()
		r.recs = append(r.recs, a)
		r.mu.Unlock()
	}
	return nil
}

func (r *appRecords) all() []*schema.AppRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*schema.AppRecord(nil), r.recs...)
}

// vllmChat answers chat completions as vLLM's OpenAI server does (id "chatcmpl-<X-Request-Id>",
// usage with prompt_tokens_details) and remembers the traceparent headers it got.
type vllmChat struct {
	mu          sync.Mutex
	answer      string
	traceparent map[string]string // X-Request-Id → traceparent
}

func (v *vllmChat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	id := r.Header.Get("X-Request-Id")
	v.mu.Lock()
	v.traceparent[id] = r.Header.Get("Traceparent")
	answer := v.answer
	v.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-" + id, "object": "chat.completion", "model": "m",
		"choices": []map[string]any{{"index": 0, "message": map[string]string{"role": "assistant", "content": answer}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": 120, "completion_tokens": 9, "total_tokens": 129, "prompt_tokens_details": map[string]int{"cached_tokens": 64}},
	})
}

// TestSpansMakeTheRecordAskPublishes runs questions through the app with both reports on: its
// OpenTelemetry spans go over OTLP/HTTP (the Go SDK's exporter) to the collector's receiver and
// apptrace, and the record apptrace makes of each request must say what the app's own
// app.record says — passages and top score, versions, cache result, output checks, trace id —
// while the chat call carries the trace to the gateway as traceparent.
func TestSpansMakeTheRecordAskPublishes(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fromSpans := &appRecords{}
	asm, err := apptrace.NewAssembler(apptrace.Config{}, fromSpans, quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := otlp.NewReceiver(fromSpans, otlp.Naming{Default: "vllm"}, quiet, nil, otlp.WithAppSpans(asm))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- rcv.ServeHTTPOn(ctx, ln) }()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(ln.Addr().String()), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Hour)),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "ragdemo"))))

	model := &vllmChat{answer: "The KV cache stores keys and values [1].", traceparent: map[string]string{}}
	gw := httptest.NewServer(model)
	defer gw.Close()
	own := &appRecords{}
	app, err := New(Config{
		GatewayURL: gw.URL, Model: "m", IndexEmbeddingModel: "hash-embed-v1", QueryEmbeddingModel: "hash-embed-v1",
		EmbeddingDim: 192, CorpusVersion: "c1", TopK: 4, MaxTokens: 64, PromptVersion: "p1", ConfigVersion: "cfg1",
		CacheSize: 8, Timeout: 5 * time.Second, TracerProvider: tp,
	}, own, gw.Client())
	if err != nil {
		t.Fatal(err)
	}
	q := Questions()["kv-cache-01"]
	if _, err := app.Ask(ctx, "req-1", q); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Ask(ctx, "req-2", q); err != nil { // a cache hit
		t.Fatal(err)
	}
	model.mu.Lock()
	model.answer = "The cache 缓存 stores keys."
	model.mu.Unlock()
	app.SetQueryEmbeddingModel("hash-embed-v2")
	if _, err := app.Ask(ctx, "req-3", q); err != nil {
		t.Fatal(err)
	}
	gw.Close() // the next call fails: an app-layer error
	if _, err := app.Ask(ctx, "req-4", "a question never asked before"); err == nil {
		t.Fatal("req-4 succeeded with the gateway down")
	}
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatalf("export: %v", err)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("receiver: %v", err)
	}
	asm.Close()

	byTrace := map[string]*schema.AppRecord{}
	for _, r := range fromSpans.all() {
		if byTrace[r.TraceID] != nil {
			t.Errorf("trace %s made two records", r.TraceID)
		}
		byTrace[r.TraceID] = r
	}
	ownRecs := own.all()
	if len(ownRecs) != 4 || len(byTrace) != 4 {
		t.Fatalf("%d own records, %d from spans; want 4 and 4", len(ownRecs), len(byTrace))
	}
	for _, want := range ownRecs {
		got := byTrace[want.TraceID]
		if len(want.TraceID) != 32 || got == nil {
			t.Errorf("%s: own record's trace id %q has no record from spans", want.RequestID, want.TraceID)
			continue
		}
		cacheHit := want.CacheHit != nil && *want.CacheHit
		wantID := want.RequestID
		if cacheHit || want.ErrorLayer != "" {
			wantID = want.TraceID // no answer from the gateway: no gen_ai.response.id
		}
		if got.RequestID != wantID || got.App != want.App || got.EmbeddingModelVersion != want.EmbeddingModelVersion ||
			got.IndexVersion != want.IndexVersion || got.PromptVersion != want.PromptVersion || got.ConfigVersion != want.ConfigVersion ||
			!eqBool(got.CacheHit, want.CacheHit) || got.CacheKind != want.CacheKind || got.ErrorLayer != want.ErrorLayer ||
			!eqU32(got.OutputForeignChars, want.OutputForeignChars) || !eqBool(got.OutputScriptViolation, want.OutputScriptViolation) ||
			!eqU32(got.CitationCount, want.CitationCount) || !eqBool(got.CitationsMissing, want.CitationsMissing) {
			t.Errorf("%s:\nfrom spans %+v\nown        %+v", want.RequestID, got, want)
		}
		if want.ErrorLayer != "" && got.ErrorMessage != want.ErrorMessage {
			t.Errorf("%s: error %q from spans, %q own", want.RequestID, got.ErrorMessage, want.ErrorMessage)
		}
		if (got.RetrievalSeconds == nil) != (want.RetrievalSeconds == nil) {
			t.Errorf("%s: retrieval_s from spans %v, own %v", want.RequestID, got.RetrievalSeconds, want.RetrievalSeconds)
		}
		{
			if len(got.Passages) != len(want.Passages) || (want.RetrievalTopScore == nil) != (got.RetrievalTopScore == nil) ||
				want.RetrievalTopScore != nil && *got.RetrievalTopScore != *want.RetrievalTopScore {
				t.Errorf("%s: passages from spans %+v, own %+v", want.RequestID, got.Passages, want.Passages)
			} else {
				for i := range want.Passages {
					if got.Passages[i].ID != want.Passages[i].ID || got.Passages[i].Score != want.Passages[i].Score {
						t.Errorf("%s: passage %d from spans %+v, own %+v", want.RequestID, i, got.Passages[i], want.Passages[i])
					}
				}
			}
			if !cacheHit && got.Model != "m" {
				t.Errorf("%s: model %q from spans", want.RequestID, got.Model)
			}
		}
		if want.RequestID == "req-1" || want.RequestID == "req-3" {
			model.mu.Lock()
			tp := model.traceparent[want.RequestID]
			model.mu.Unlock()
			if len(tp) != 55 || tp[3:35] != want.TraceID {
				t.Errorf("%s: traceparent %q sent to the gateway, want trace %s", want.RequestID, tp, want.TraceID)
			}
		}
	}
}

func eqBool(a, b *bool) bool  { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
func eqU32(a, b *uint32) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
