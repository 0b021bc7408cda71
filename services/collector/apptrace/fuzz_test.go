package apptrace

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/servescope/servescope/dev/appspans"
	"github.com/servescope/servescope/services/collector/otlp"
)

// capture is an AppSpans that keeps each export as OTLP JSON.
type capture struct {
	mu      sync.Mutex
	exports [][]byte
}

func (c *capture) Consume(td ptrace.Traces, _ func(ptrace.Span) bool) int {
	b, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	if err == nil {
		c.mu.Lock()
		c.exports = append(c.exports, b)
		c.mu.Unlock()
	}
	return 0
}

// sdkExports runs the instrumentations' shapes through the Go SDK's OTLP exporter and returns
// each export the receiver got, as OTLP JSON.
func sdkExports(tb testing.TB) [][]byte {
	tb.Helper()
	c := &capture{}
	rcv, err := otlp.NewReceiver(&records{}, otlp.Naming{Default: "vllm"}, quiet(), nil, otlp.WithAppSpans(c))
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- rcv.ServeHTTPOn(ctx, ln) }()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(ln.Addr().String()), otlptracehttp.WithInsecure())
	if err != nil {
		tb.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Hour)),
		sdktrace.WithResource(appspans.PythonResource("fuzz-app", attribute.String(AttrIndexVersion, "idx"))))
	req := appspans.Request{Question: "q", Docs: docs, Reranked: docs[:1], EmbeddingModel: "e", Model: "m", PromptVersion: "p", DataSource: "kb"}
	failing := req
	failing.Call = func(context.Context) (appspans.Answer, error) {
		return appspans.Answer{}, appspans.ErrCall{Status: 500}
	}
	for _, emit := range []func() error{
		func() error { return appspans.LlamaIndex(ctx, tp, req) },
		func() error { _ = appspans.LlamaIndex(ctx, tp, failing); return nil },
		func() error { return appspans.GenAI(ctx, tp, req, appspans.GenAIOptions{}) },
		func() error {
			return appspans.GenAI(ctx, tp, req, appspans.GenAIOptions{Latest: true, DocumentsJSON: true, ServerSpan: true,
				Attrs: []attribute.KeyValue{attribute.Bool(AttrCacheHit, true), attribute.Int(AttrOutputForeignChars, 2)}})
		},
		func() error { return appspans.OpenLLMetry(ctx, tp, req) },
	} {
		if err := emit(); err != nil {
			tb.Fatal(err)
		}
		if err := tp.ForceFlush(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	if err := tp.Shutdown(ctx); err != nil {
		tb.Fatal(err)
	}
	cancel()
	<-served
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exports
}

// FuzzConsume drives the span-to-record mapping with arbitrary OTLP JSON exports, seeded with
// the instrumentations' shapes as the Go SDK exports them: it never panics, never fails an
// export, keeps its bounds, and publishes only valid app.records (the publisher validates).
func FuzzConsume(f *testing.F) {
	for _, e := range sdkExports(f) {
		f.Add(e)
	}
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"x","attributes":[` +
		`{"key":"openinference.span.kind","value":{"stringValue":"RETRIEVER"}},` +
		`{"key":"retrieval.documents.999.document.score","value":{"stringValue":"NaN"}},` +
		`{"key":"retrieval.documents.-1.document.id","value":{"intValue":"7"}},` +
		`{"key":"retrieval.documents.0.document.score","value":{"doubleValue":1e308}},` +
		`{"key":"gen_ai.retrieval.documents","value":{"stringValue":"[{\"id\":null,\"score\":\"0.5\"},{\"score\":{}},7]"}},` +
		`{"key":"servescope.cache.hit","value":{"stringValue":"maybe"}},` +
		`{"key":"servescope.output.foreign_chars","value":{"doubleValue":-3.5}},` +
		`{"key":"gen_ai.response.id","value":{"stringValue":"chatcmpl-"}}]}]}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalJSON(body); err != nil {
			return
		}
		pub := &records{}
		asm, err := NewAssembler(Config{MaxTraces: 4, MaxSpansPerTrace: 8, MaxBytes: 2 << 20}, pub, quiet(), nil)
		if err != nil {
			t.Fatal(err)
		}
		asm.Consume(req.Traces(), otlp.IsRequestSpan)
		asm.mu.Lock()
		n := len(asm.traces)
		asm.mu.Unlock()
		if n > 4 {
			t.Fatalf("%d traces buffered, over the bound of 4", n)
		}
		asm.Close()
		asm.mu.Lock()
		left, bytes := len(asm.traces), asm.bytes
		asm.mu.Unlock()
		if left != 0 || bytes != 0 {
			t.Fatalf("after Close: %d traces, %d bytes", left, bytes)
		}
		var m dto.Metric
		if err := asm.records.WithLabelValues("rejected").Write(&m); err != nil {
			t.Fatal(err)
		}
		if rejected := m.GetCounter().GetValue(); rejected != 0 {
			t.Fatalf("%v records failed validation", rejected)
		}
	})
}

// FuzzDocuments drives the decoding of a document list sent as one JSON string (the GenAI
// conventions' gen_ai.retrieval.documents where a structured value is not supported), which
// FuzzConsume reaches only through an OTLP JSON string: it never panics, keeps at most 1,000
// documents, and every document has a finite score and a valid UTF-8 id of at most 512 bytes.
func FuzzDocuments(f *testing.F) {
	for _, s := range []string{
		`[{"id": "doc-17#3", "score": 0.88}, {"id": "doc-2#1", "score": 0.71}]`,
		`[{"document.id": 7, "document.score": "0.5"}, {"id": null, "score": 1e308}, {"score": "NaN"}, 7, "x", []]`,
		`[{"id_": "n1", "score": 0.2}, {"id": "\ud800", "score": -1}]`,
		` [ ] `, `{"id": "a", "score": 1}`, `[{"id": "` + strings.Repeat("é", 400) + `", "score": 0}]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v := pcommon.NewValueStr(raw)
		docs := documents(v)
		if len(docs) > maxDocumentsPerListAttr {
			t.Fatalf("%d documents, over %d", len(docs), maxDocumentsPerListAttr)
		}
		for _, d := range docs {
			if math.IsNaN(d.score) || math.IsInf(d.score, 0) {
				t.Fatalf("document %q has score %v", d.id, d.score)
			}
			if !utf8.ValidString(d.id) || len(d.id) > 512 || d.id == "" {
				t.Fatalf("document id %q (%d bytes)", d.id, len(d.id))
			}
		}
		// The same list as OTLP attribute values (strings of JSON objects) reads the same way
		// whether the JSON string held the array or the attribute did.
		var items []json.RawMessage
		if json.Unmarshal([]byte(strings.TrimSpace(raw)), &items) != nil || len(raw) > maxJSONBytes {
			return
		}
		sl := pcommon.NewValueSlice()
		for _, it := range items {
			sl.Slice().AppendEmpty().SetStr(string(it))
		}
		if got := documents(sl); len(got) != len(docs) {
			t.Fatalf("%d documents from the JSON string, %d from the attribute array", len(docs), len(got))
		}
	})
}
