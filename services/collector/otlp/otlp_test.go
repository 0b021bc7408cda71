package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"flag"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/servescope/servescope/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// collected is a Publisher that keeps what it is given, after validating it as the real
// publisher does.
type collected struct {
	mu     sync.Mutex
	events []*schema.EngineSpan
}

func (c *collected) Publish(e schema.Event) error {
	if err := e.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e.(*schema.EngineSpan))
	return nil
}

func (c *collected) all() []*schema.EngineSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*schema.EngineSpan(nil), c.events...)
}

func loadRequest(t testing.TB) ptraceotlp.ExportRequest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "vllm_llm_request.json"))
	if err != nil {
		t.Fatal(err)
	}
	req := ptraceotlp.NewExportRequest()
	if err := req.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	return req
}

func newReceiver(t *testing.T) (*Receiver, *collected) {
	t.Helper()
	c := &collected{}
	r, err := NewReceiver(c, Naming{Default: "fallback-engine"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r, c
}

// TestGolden converts a vLLM-shaped OTLP export and compares the events (without their random
// event_id) with the reviewed golden file.
func TestGolden(t *testing.T) {
	r, c := newReceiver(t)
	if n, reason := r.Consume(loadRequest(t).Traces()); n != 0 {
		t.Fatalf("%d rejected: %s", n, reason)
	}
	evs := c.all()
	for _, e := range evs {
		if e.EventID == "" {
			t.Fatal("event without event_id")
		}
		e.EventID = ""
	}
	got, _ := json.MarshalIndent(evs, "", "  ")
	golden := filepath.Join("testdata", "vllm_llm_request.golden.json")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if string(bytes.TrimSpace(want)) != string(got) {
		t.Errorf("events differ from %s:\n%s", golden, got)
	}
}

func TestConvertFields(t *testing.T) {
	r, c := newReceiver(t)
	r.Consume(loadRequest(t).Traces())
	evs := c.all()
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2 (the HTTP span is not a request span)", len(evs))
	}
	e := evs[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"request_id", e.RequestID, "2Z1xq8TnUe3RvI6hHbWzX9yA0kQ"},
		{"engine_request_id", e.EngineRequestID, "chatcmpl-2Z1xq8TnUe3RvI6hHbWzX9yA0kQ"},
		{"trace_id", e.TraceID, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"span_id", e.SpanID, "00f067aa0ba902b7"},
		{"engine", e.Engine, "fallback-engine"},
		{"queue_s", *e.QueueSeconds, 0.472},
		{"prefill_s", *e.PrefillSeconds, 0.288},
		{"decode_s", *e.DecodeSeconds, 18.61},
		{"inference_s", *e.InferenceSeconds, 18.898},
		{"ttft_s", *e.TTFTSeconds, 0.853},
		{"e2e_s", *e.E2ESeconds, 19.46},
		{"prompt_tokens", *e.PromptTokens, uint32(44)},
		{"completion_tokens", *e.CompletionTokens, uint32(128)},
		{"max_tokens", *e.MaxTokens, uint32(128)},
		{"ts", e.TS, time.Unix(1757606011, 460000000).UTC()},
		{"start_ts", e.StartTS, time.Unix(1757605992, 0).UTC()},
		{"second request_id", evs[1].RequestID, "req-42"},
		{"second has no queue", evs[1].QueueSeconds == nil, true},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestRejectsSpanWithoutID(t *testing.T) {
	r, c := newReceiver(t)
	req := loadRequest(t)
	span := req.Traces().ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(1)
	span.Attributes().Remove(AttrRequestID)
	n, reason := r.Consume(req.Traces())
	if n != 1 || !strings.Contains(reason, AttrRequestID) {
		t.Errorf("rejected %d (%q), want 1 naming %s", n, reason, AttrRequestID)
	}
	if len(c.all()) != 1 {
		t.Errorf("%d published, want the other request span", len(c.all()))
	}
}

func TestFutureSpanMovedToArrival(t *testing.T) {
	r, c := newReceiver(t)
	arrival := time.Date(2025, 9, 11, 12, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return arrival }
	// The golden spans end at 15:53:31.46 and 15:53:15, hours after "now": the engine's clock
	// is ahead (vllmsim under --time-scale, or a skewed host).
	if n, reason := r.Consume(loadRequest(t).Traces()); n != 0 {
		t.Fatalf("rejected %d: %s", n, reason)
	}
	evs := c.all()
	if len(evs) != 2 {
		t.Fatalf("%d events", len(evs))
	}
	e := evs[0]
	if !e.TS.Equal(arrival) || e.TS.Sub(e.StartTS) != 19460*time.Millisecond || *e.E2ESeconds != 19.46 {
		t.Errorf("ts %s start %s e2e %v; want the span moved to end at %s, its duration kept", e.TS, e.StartTS, *e.E2ESeconds, arrival)
	}
}

func TestGRPC(t *testing.T) {
	r, c := newReceiver(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- r.ServeGRPC(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	resp, err := client.Export(rctx, loadRequest(t), grpc.UseCompressor("gzip"))
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	if resp.PartialSuccess().RejectedSpans() != 0 {
		t.Errorf("rejected %d", resp.PartialSuccess().RejectedSpans())
	}
	if n := len(c.all()); n != 2 {
		t.Errorf("%d events, want 2", n)
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
}

func TestHTTP(t *testing.T) {
	r, c := newReceiver(t)
	srv := httptest.NewServer(r)
	defer srv.Close()
	proto, err := loadRequest(t).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	js, _ := loadRequest(t).MarshalJSON()
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write(proto)
	_ = w.Close()

	tests := []struct {
		name, contentType, encoding string
		body                        []byte
		status, published           int
	}{
		{"protobuf", "application/x-protobuf", "", proto, 200, 2},
		{"gzip protobuf", "application/x-protobuf", "gzip", gz.Bytes(), 200, 2},
		{"json", "application/json", "", js, 200, 2},
		{"garbage", "application/x-protobuf", "", []byte("\xff\xff\xff not proto"), 400, 0},
		{"wrong type", "text/plain", "", proto, 415, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(c.all())
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/traces", bytes.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.contentType)
			if tc.encoding != "" {
				req.Header.Set("Content-Encoding", tc.encoding)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if got := len(c.all()) - before; got != tc.published {
				t.Errorf("published %d, want %d", got, tc.published)
			}
		})
	}
}

func FuzzExportProto(f *testing.F) {
	proto, err := loadRequest(f).MarshalProto()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(proto)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(data); err != nil {
			return
		}
		c := &collected{}
		r, err := NewReceiver(c, Naming{Default: "e"}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Consume(req.Traces())
		for _, e := range c.all() {
			if e.RequestID == "" || e.Validate() != nil {
				t.Fatalf("invalid event published: %+v", e)
			}
		}
	})
}
