package simtrace

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/servescope/servescope/services/vllmsim/engine"
)

// receiver is a real OTLP/gRPC trace receiver that keeps what it is sent.
type receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func TestExportOverOTLPGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rec := &receiver{}
	coltracepb.RegisterTraceServiceServer(srv, rec)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	clock := engine.NewClock(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	x, err := New(ctx, ln.Addr().String(), "grpc", clock)
	if err != nil {
		t.Fatal(err)
	}
	maxTokens := 64
	x.RequestFinished(&engine.Finished{ID: "chatcmpl-1", Arrival: 1, Queued: 1.01, Scheduled: 1.5, FirstToken: 1.6, LastToken: 3, Finish: 3,
		PromptTokens: 2905, CachedTokens: 2896, OutputTokens: 64, MaxTokens: 64, FinishReason: "length", Tag: &Tag{MaxTokens: &maxTokens}})
	x.RequestFinished(&engine.Finished{ID: "chatcmpl-2", FinishReason: "abort"})
	if err := x.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.spans) != 1 {
		t.Fatalf("%d spans received, want 1 (aborted requests have none)", len(rec.spans))
	}
	sp := rec.spans[0]
	if sp.GetName() != "llm_request" || sp.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Fatalf("span %s kind %v", sp.GetName(), sp.GetKind())
	}
	attrs := map[string]any{}
	for _, kv := range sp.GetAttributes() {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			attrs[kv.GetKey()] = v.GetStringValue()
		case v.GetDoubleValue() != 0:
			attrs[kv.GetKey()] = v.GetDoubleValue()
		default:
			attrs[kv.GetKey()] = v.GetIntValue()
		}
	}
	want := map[string]any{
		"gen_ai.request.id": "chatcmpl-1", "gen_ai.usage.prompt_tokens": int64(2905), "gen_ai.usage.completion_tokens": int64(64),
		"gen_ai.request.max_tokens": int64(64), "gen_ai.latency.e2e": 2.0, "gen_ai.latency.time_in_model_decode": 1.4,
	}
	for k, v := range want {
		got, ok := attrs[k]
		if f, isF := v.(float64); isF {
			if g, _ := got.(float64); !ok || g < f-1e-9 || g > f+1e-9 {
				t.Errorf("%s = %v, want %v", k, got, v)
			}
			continue
		}
		if !ok || got != v {
			t.Errorf("%s = %v, want %v", k, got, v)
		}
	}
	if d := time.Duration(sp.GetEndTimeUnixNano() - sp.GetStartTimeUnixNano()); d != 2*time.Second {
		t.Errorf("span lasts %s, want the 2 s from arrival to finish", d)
	}
}
