// Package simtrace exports one OTLP span per finished request, as vLLM does with
// --otlp-traces-endpoint: a SERVER span named "llm_request" carrying vLLM's gen_ai.* attributes
// (latencies in simulated seconds), parented on the request's incoming traceparent when there is
// one. Span start and end are the clock's simulated timestamps of arrival and finish.
package simtrace

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/servescope/servescope/services/vllmsim/engine"
)

// Tag is what the API server attaches to an engine request (engine.Request.Tag) so the span can
// be parented and carry the request's sampling parameters; nil pointers are parameters the
// client did not set.
type Tag struct {
	Parent      trace.SpanContext
	Model       string
	MaxTokens   *int
	Temperature *float64
	TopP        *float64
	N           *int
}

// Exporter is an engine.Observer that exports spans; Shutdown flushes them.
type Exporter struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	clock  *engine.Clock
}

// New connects an OTLP exporter to endpoint ("host:port" or an http(s) URL) with protocol "grpc"
// (default) or "http/protobuf", without TLS as vLLM's collector sidecars usually run.
func New(ctx context.Context, endpoint, protocol string, clock *engine.Clock) (*Exporter, error) {
	var exp sdktrace.SpanExporter
	var err error
	hostPort := strings.TrimPrefix(strings.TrimPrefix(endpoint, "http://"), "https://")
	switch protocol {
	case "", "grpc":
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(hostPort), otlptracegrpc.WithInsecure())
	case "http/protobuf", "http":
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(hostPort), otlptracehttp.WithInsecure())
	default:
		return nil, fmt.Errorf("otlp protocol %q: want grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("create otlp %s exporter for %s: %w", protocol, endpoint, err)
	}
	return NewWithExporter(exp, clock), nil
}

// NewWithExporter wraps any span exporter (tests use an in-memory one).
func NewWithExporter(exp sdktrace.SpanExporter, clock *engine.Clock) *Exporter {
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("vllm"))),
	)
	return &Exporter{tp: tp, tracer: tp.Tracer("vllm.llm_engine"), clock: clock}
}

// Flush exports every span ended so far.
func (x *Exporter) Flush(ctx context.Context) error { return x.tp.ForceFlush(ctx) }

// Shutdown flushes pending spans and stops the exporter.
func (x *Exporter) Shutdown(ctx context.Context) error { return x.tp.Shutdown(ctx) }

// RequestFinished emits the request's llm_request span.
func (x *Exporter) RequestFinished(f *engine.Finished) {
	if f.FinishReason == "abort" {
		return
	}
	ctx := context.Background()
	tag, _ := f.Tag.(*Tag)
	if tag != nil && tag.Parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, tag.Parent)
	}
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.request.id", f.ID),
		attribute.Int("gen_ai.usage.prompt_tokens", f.PromptTokens),
		attribute.Int("gen_ai.usage.completion_tokens", f.OutputTokens),
		attribute.Float64("gen_ai.latency.time_in_queue", f.QueueS()),
		attribute.Float64("gen_ai.latency.time_to_first_token", f.TTFTS()),
		attribute.Float64("gen_ai.latency.e2e", f.E2ES()),
		attribute.Float64("gen_ai.latency.time_in_scheduler", f.QueueS()),
		attribute.Float64("gen_ai.latency.time_in_model_prefill", f.PrefillS()),
		attribute.Float64("gen_ai.latency.time_in_model_decode", f.DecodeS()),
		attribute.Float64("gen_ai.latency.time_in_model_inference", f.InferenceS()),
	}
	if tag != nil {
		if tag.Model != "" {
			attrs = append(attrs, attribute.String("gen_ai.response.model", tag.Model))
		}
		if tag.MaxTokens != nil {
			attrs = append(attrs, attribute.Int("gen_ai.request.max_tokens", *tag.MaxTokens))
		}
		if tag.Temperature != nil {
			attrs = append(attrs, attribute.Float64("gen_ai.request.temperature", *tag.Temperature))
		}
		if tag.TopP != nil {
			attrs = append(attrs, attribute.Float64("gen_ai.request.top_p", *tag.TopP))
		}
		if tag.N != nil {
			attrs = append(attrs, attribute.Int("gen_ai.request.n", *tag.N))
		}
	}
	_, span := x.tracer.Start(ctx, "llm_request",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(x.clock.Time(f.Arrival)),
		trace.WithAttributes(attrs...))
	span.End(trace.WithTimestamp(x.clock.Time(f.Finish)))
}

// StepDone is part of engine.Observer.
func (x *Exporter) StepDone(engine.StepStats) {}

// Stats is part of engine.Observer.
func (x *Exporter) Stats(engine.IntervalStats) {}

// Crashed is part of engine.Observer.
func (x *Exporter) Crashed(engine.CrashInfo) {}

// PrefixCache is part of engine.Observer.
func (x *Exporter) PrefixCache(int, int) {}
