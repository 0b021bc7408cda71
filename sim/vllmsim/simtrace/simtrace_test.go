package simtrace

import (
	"context"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// receiver is a real OTLP/gRPC trace receiver that keeps what it is sent.
type receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu        sync.Mutex
	spans     []*tracepb.Span
	resources []*resourcepb.Resource
	scopes    []string
}

func (r *receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		r.resources = append(r.resources, rs.GetResource())
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
			r.scopes = append(r.scopes, ss.GetScope().GetName())
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
	x, err := New(ctx, ln.Addr().String(), "grpc", clock, WithGetenv(func(string) string { return "" }), WithPID(4242))
	if err != nil {
		t.Fatal(err)
	}
	x.RequestFinished(&engine.Finished{ID: "chatcmpl-1", Arrival: 1, Queued: 1.01, Scheduled: 1.5, FirstToken: 1.6, LastToken: 3, Finish: 3,
		PromptTokens: 2905, CachedTokens: 2896, OutputTokens: 64, MaxTokens: 64, FinishReason: "length", Tag: &Tag{MaxTokens: 64, Temperature: 1, TopP: 1, N: 1}})
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
	res := map[string]string{}
	for _, kv := range rec.resources[0].GetAttributes() {
		res[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	wantRes := map[string]string{"service.name": "unknown_service", "telemetry.sdk.language": "python", "telemetry.sdk.name": "opentelemetry",
		"vllm.instrumenting_module_name": "vllm.llm_engine", "vllm.process_id": "4242"}
	for k, v := range wantRes {
		if res[k] != v {
			t.Errorf("resource %s = %q, want %q (all: %v)", k, res[k], v, res)
		}
	}
	if rec.scopes[0] != "vllm.llm_engine" {
		t.Errorf("scope %q", rec.scopes[0])
	}
}

// finished builds an engine record of one sample; times are seconds on the simulator's clock.
func finished(id string, tag *Tag, out int, reason string) *engine.Finished {
	return &engine.Finished{ID: id, Arrival: 10, Queued: 10.2, Scheduled: 10.5, FirstToken: 10.9, LastToken: 12, Finish: 12,
		PromptTokens: 30, OutputTokens: out, MaxTokens: 16, FinishReason: reason, ScheduledSteps: out, Tag: tag}
}

func spanAttrs(s tracetest.SpanStub) map[string]any {
	m := map[string]any{}
	for _, a := range s.Attributes {
		m[string(a.Key)] = a.Value.AsInterface()
	}
	return m
}

// TestAttributesPerVersion feeds the two samples of an n = 2 request and checks each version's
// span count, request ids and attribute set against vLLM's tracing code.
func TestAttributesPerVersion(t *testing.T) {
	tests := []struct {
		version   vllmversion.Version
		wantIDs   []string
		wantAttrs map[string]any
		absent    []string
	}{
		{
			version: vllmversion.Main, wantIDs: []string{"chatcmpl-x", "chatcmpl-x"},
			wantAttrs: map[string]any{"gen_ai.response.finish_reasons": `["length"]`, "gen_ai.request.n": int64(1), "gen_ai.request.max_tokens": int64(16),
				"gen_ai.latency.time_in_queue": 0.3, "gen_ai.latency.time_to_first_token": 0.9, "gen_ai.latency.time_in_model_prefill": 0.4},
			absent: []string{"gen_ai.response.model", "gen_ai.request.temperature", "gen_ai.usage.num_sequences"},
		},
		{
			version: vllmversion.V0_10, wantIDs: []string{"0_chatcmpl-x", "1_chatcmpl-x"},
			wantAttrs: map[string]any{"gen_ai.request.n": int64(1), "gen_ai.latency.time_in_model_decode": 1.1},
			absent:    []string{"gen_ai.response.model", "gen_ai.response.finish_reasons"},
		},
		{
			version: vllmversion.V0_8, wantIDs: []string{"chatcmpl-x"},
			wantAttrs: map[string]any{"gen_ai.response.model": "m", "gen_ai.usage.num_sequences": int64(2), "gen_ai.request.n": int64(2),
				"gen_ai.usage.completion_tokens": int64(16 + 9), "gen_ai.latency.time_in_queue": 0.5, "gen_ai.request.temperature": 0.0,
				"gen_ai.latency.time_in_scheduler": 16 * V0SchedulerStepS},
			absent: []string{"gen_ai.latency.time_in_model_prefill", "gen_ai.response.finish_reasons"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.version.String(), func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			x := NewWithExporter(exp, engine.NewClock(1), WithVersion(tc.version))
			for j, out := range []int{16, 9} {
				id := "chatcmpl-x"
				if tc.version == vllmversion.V0_10 {
					id = []string{"0_chatcmpl-x", "1_chatcmpl-x"}[j]
				}
				tag := &Tag{RequestID: id, Group: 7, GroupSize: 2, Model: "m", MaxTokens: 16, TopP: 1, Temperature: 0, N: 2}
				x.RequestFinished(finished([]string{"0_chatcmpl-x", "1_chatcmpl-x"}[j], tag, out, map[bool]string{true: "length", false: "stop"}[out == 16]))
			}
			// An aborted request has no span.
			x.RequestFinished(finished("chatcmpl-gone", &Tag{RequestID: "chatcmpl-gone", Group: 8, GroupSize: 1}, 1, "abort"))
			if err := x.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := exp.GetSpans()
			if len(spans) != len(tc.wantIDs) {
				t.Fatalf("%d spans, want %d", len(spans), len(tc.wantIDs))
			}
			for i, sp := range spans {
				a := spanAttrs(sp)
				if a["gen_ai.request.id"] != tc.wantIDs[i] {
					t.Errorf("span %d request id %v, want %s", i, a["gen_ai.request.id"], tc.wantIDs[i])
				}
				if i > 0 {
					continue
				}
				for k, v := range tc.wantAttrs {
					got, ok := a[k]
					if f, isF := v.(float64); isF {
						if g, _ := got.(float64); !ok || math.Abs(g-f) > 1e-9 {
							t.Errorf("%s = %v, want %v", k, got, v)
						}
						continue
					}
					if got != v {
						t.Errorf("%s = %v (%T), want %v", k, got, got, v)
					}
				}
				for _, k := range tc.absent {
					if _, ok := a[k]; ok {
						t.Errorf("%s present; vLLM %s has no such attribute", k, tc.version)
					}
				}
			}
		})
	}
}

func TestParentBasedSampling(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	x := NewWithExporter(exp, engine.NewClock(1))
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, Remote: true})
	sampled := unsampled.WithTraceFlags(trace.FlagsSampled)
	x.RequestFinished(finished("cmpl-a-0", &Tag{Parent: unsampled, MaxTokens: 16, TopP: 1, Temperature: 1, N: 1}, 3, "length"))
	x.RequestFinished(finished("cmpl-b-0", &Tag{Parent: sampled, MaxTokens: 16, TopP: 1, Temperature: 1, N: 1}, 3, "length"))
	if err := x.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spanAttrs(spans[0])["gen_ai.request.id"] != "cmpl-b-0" || spans[0].Parent.SpanID() != sid || spans[0].SpanContext.TraceID() != tid {
		t.Fatalf("spans %+v: want only the sampled parent's child", spans)
	}
}

func TestResourceServiceName(t *testing.T) {
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	name := func(v vllmversion.Version) string {
		r := Resource(v, get, 1)
		val, _ := r.Set().Value("service.name")
		return val.AsString()
	}
	if got := name(vllmversion.V0_10); got != "unknown_service" {
		t.Errorf("default service.name %q", got)
	}
	env["OTEL_RESOURCE_ATTRIBUTES"] = "service.name=from-attrs,deployment.environment=prod%20a"
	if got := name(vllmversion.V0_10); got != "from-attrs" {
		t.Errorf("service.name from OTEL_RESOURCE_ATTRIBUTES: %q", got)
	}
	env["OTEL_SERVICE_NAME"] = "vllm-a"
	if got := name(vllmversion.Main); got != "vllm-a" {
		t.Errorf("OTEL_SERVICE_NAME does not win: %q", got)
	}
	r := Resource(vllmversion.V0_10, get, 1)
	if v, _ := r.Set().Value("deployment.environment"); v.AsString() != "prod a" {
		t.Errorf("deployment.environment %q", v.AsString())
	}
	if _, ok := r.Set().Value("vllm.process_id"); ok {
		t.Error("0.10 resource carries vllm.process_id (main only)")
	}
}
