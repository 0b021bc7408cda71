// Package simtrace exports the llm_request spans vLLM exports with --otlp-traces-endpoint, in the
// shape of the vLLM version being imitated (vllmversion):
//
//   - 0.10 and main (V1 engine, vllm/v1/engine/output_processor.py do_tracing): one SERVER span per
//     engine request, so one per prompt and per sample of an n > 1 request. gen_ai.request.id is
//     the child's own id at 0.10 ("<i>_<id>" for the samples of n > 1) and the API request's id on
//     main (external_req_id: every sample of a prompt repeats it). Attributes: TTFT from arrival,
//     e2e, time in queue (engine queued to scheduled), prefill, decode, inference, prompt and
//     completion tokens, and top_p, max_tokens, temperature and n when truthy (a child's n is 1);
//     main adds gen_ai.response.finish_reasons, a JSON list in a string ('["stop"]'). No model.
//   - 0.8 (V0 engine, which vLLM 0.8 falls back to when tracing is on; vllm/engine/llm_engine.py
//     create_trace_span): one span per sequence group, i.e. per prompt with its n samples together,
//     with gen_ai.response.model, gen_ai.usage.num_sequences, time in queue from arrival and
//     time_in_scheduler, and no prefill/decode/inference latencies.
//
// The resource is what vLLM's Python OpenTelemetry SDK builds: service.name "unknown_service"
// unless OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) says otherwise, the
// telemetry.sdk.* attributes of the Python SDK, and on main vllm.instrumenting_module_name and
// vllm.process_id (vllm/tracing/otel.py init_tracer). The instrumentation scope is
// "vllm.llm_engine". Sampling is the SDK default, parent-based: a traceparent whose sampled flag
// is off yields no span. Latencies are simulated seconds; span start and end are the clock's
// timestamps of arrival and finish. Aborted requests have no span.
package simtrace

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// ScopeName is the instrumentation scope of vLLM's request spans (init_tracer("vllm.llm_engine", ...)).
const ScopeName = "vllm.llm_engine"

// PythonSDKVersion is the telemetry.sdk.version the spans' resource reports: the opentelemetry-sdk
// release vLLM's requirements pin as the minimum.
const PythonSDKVersion = "1.26.0"

// V0SchedulerStepS is the scheduler time the 0.8 (V0) span accounts per engine step that
// scheduled the sequence group (gen_ai.latency.time_in_scheduler sums the scheduler's own CPU time,
// a fraction of a millisecond per step on the RTX 3060 host of docs/measurements.md).
const V0SchedulerStepS = 0.0002

// Tag is what the API server attaches to an engine request (engine.Request.Tag): the span's parent,
// the id it reports and the request's effective sampling parameters (as vLLM resolved them, so a
// parameter the client left out has its default).
type Tag struct {
	Parent trace.SpanContext
	// RequestID is what the span reports as gen_ai.request.id; empty means the engine request id.
	RequestID string
	// Group identifies the sequence group (one prompt of one API request, with its n samples);
	// GroupSize is the number of samples. 0.8 spans combine a group into one span.
	Group     uint64
	GroupSize int
	Model     string // served model; only 0.8 spans carry it
	MaxTokens int    // resolved max_tokens; 0 for pooling requests
	// Temperature and TopP are the effective values (1.0 when the client sent none).
	Temperature float64
	TopP        float64
	N           int  // the request's n
	Pooling     bool // an embedding request: no sampling parameters
}

type config struct {
	version vllmversion.Version
	getenv  func(string) string
	pid     int
}

// Option configures an Exporter.
type Option func(*config)

// WithVersion selects the vLLM version whose spans are imitated (default main).
func WithVersion(v vllmversion.Version) Option { return func(c *config) { c.version = v } }

// WithGetenv replaces os.Getenv for OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (tests).
func WithGetenv(f func(string) string) Option { return func(c *config) { c.getenv = f } }

// WithPID sets vllm.process_id on main's resource (default the process's pid).
func WithPID(pid int) Option { return func(c *config) { c.pid = pid } }

// Exporter is an engine.Observer that exports spans; Shutdown flushes them.
type Exporter struct {
	tp      *sdktrace.TracerProvider
	tracer  trace.Tracer
	clock   *engine.Clock
	version vllmversion.Version

	mu     sync.Mutex
	groups map[uint64]*group // 0.8: sequence groups waiting for their last sample
}

type group struct {
	fins    []*engine.Finished
	aborted bool
}

// New connects an OTLP exporter to endpoint ("host:port" or an http(s) URL) with protocol "grpc"
// (default) or "http/protobuf", without TLS as vLLM's gRPC exporter does (insecure=True).
func New(ctx context.Context, endpoint, protocol string, clock *engine.Clock, opts ...Option) (*Exporter, error) {
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
	return NewWithExporter(exp, clock, opts...), nil
}

// NewWithExporter wraps any span exporter (tests use an in-memory one).
func NewWithExporter(exp sdktrace.SpanExporter, clock *engine.Clock, opts ...Option) *Exporter {
	c := config{getenv: os.Getenv, pid: os.Getpid()}
	for _, o := range opts {
		o(&c)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(Resource(c.version, c.getenv, c.pid)),
	)
	return &Exporter{tp: tp, tracer: tp.Tracer(ScopeName), clock: clock, version: c.version, groups: map[uint64]*group{}}
}

// Resource is the OTLP resource vLLM's spans carry at version v, reading OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES through getenv as the Python SDK's Resource.create does.
func Resource(v vllmversion.Version, getenv func(string) string, pid int) *resource.Resource {
	attrs := map[string]string{}
	for _, kv := range strings.Split(getenv("OTEL_RESOURCE_ATTRIBUTES"), ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			continue
		}
		if dv, err := url.QueryUnescape(strings.TrimSpace(val)); err == nil {
			val = dv
		}
		attrs[strings.TrimSpace(k)] = val
	}
	if name := getenv("OTEL_SERVICE_NAME"); name != "" {
		attrs["service.name"] = name
	}
	if v == vllmversion.Main {
		attrs["vllm.instrumenting_module_name"] = ScopeName
		attrs["vllm.process_id"] = strconv.Itoa(pid)
	}
	attrs["telemetry.sdk.language"] = "python"
	attrs["telemetry.sdk.name"] = "opentelemetry"
	attrs["telemetry.sdk.version"] = PythonSDKVersion
	if attrs["service.name"] == "" {
		attrs["service.name"] = "unknown_service"
	}
	kvs := make([]attribute.KeyValue, 0, len(attrs))
	for k, val := range attrs {
		kvs = append(kvs, attribute.String(k, val))
	}
	return resource.NewSchemaless(kvs...)
}

// Flush exports every span ended so far.
func (x *Exporter) Flush(ctx context.Context) error { return x.tp.ForceFlush(ctx) }

// Shutdown flushes pending spans and stops the exporter.
func (x *Exporter) Shutdown(ctx context.Context) error { return x.tp.Shutdown(ctx) }

// RequestFinished emits the request's llm_request span (0.8: once its sequence group is complete).
func (x *Exporter) RequestFinished(f *engine.Finished) {
	tag, _ := f.Tag.(*Tag)
	if tag == nil {
		tag = &Tag{}
	}
	if x.version.V0Tracing() {
		x.v0Finished(f, tag)
		return
	}
	if f.FinishReason == "abort" {
		return
	}
	id := tag.RequestID
	if id == "" {
		id = f.ID
	}
	attrs := []attribute.KeyValue{
		attribute.Float64("gen_ai.latency.time_to_first_token", f.TTFTSeconds()),
		attribute.Float64("gen_ai.latency.e2e", f.E2ESeconds()),
		attribute.Float64("gen_ai.latency.time_in_queue", f.QueueSeconds()),
		attribute.Int("gen_ai.usage.prompt_tokens", f.PromptTokens),
		attribute.Int("gen_ai.usage.completion_tokens", f.OutputTokens),
		attribute.Float64("gen_ai.latency.time_in_model_prefill", f.PrefillSeconds()),
		attribute.Float64("gen_ai.latency.time_in_model_decode", f.DecodeSeconds()),
		attribute.Float64("gen_ai.latency.time_in_model_inference", f.InferenceSeconds()),
		attribute.String("gen_ai.request.id", id),
	}
	if x.version.FinishReasonsOnSpan() {
		attrs = append(attrs, attribute.String("gen_ai.response.finish_reasons", `["`+f.FinishReason+`"]`))
	}
	// vLLM sets these only when truthy; a sample of an n > 1 request has n = 1.
	if !tag.Pooling {
		if tag.TopP != 0 {
			attrs = append(attrs, attribute.Float64("gen_ai.request.top_p", tag.TopP))
		}
		if tag.MaxTokens != 0 {
			attrs = append(attrs, attribute.Int("gen_ai.request.max_tokens", tag.MaxTokens))
		}
		if tag.Temperature != 0 {
			attrs = append(attrs, attribute.Float64("gen_ai.request.temperature", tag.Temperature))
		}
		attrs = append(attrs, attribute.Int("gen_ai.request.n", 1))
	}
	x.emit(tag.Parent, f.Arrival, f.Finish, attrs)
}

// v0Finished collects the samples of a sequence group and emits the group's one span.
func (x *Exporter) v0Finished(f *engine.Finished, tag *Tag) {
	if tag.Pooling {
		return // V0 traces sequence groups with sampling parameters only
	}
	size := max(1, tag.GroupSize)
	x.mu.Lock()
	g := x.groups[tag.Group]
	if g == nil {
		g = &group{}
		x.groups[tag.Group] = g
	}
	g.fins = append(g.fins, f)
	g.aborted = g.aborted || f.FinishReason == "abort"
	complete := len(g.fins) >= size
	if complete {
		delete(x.groups, tag.Group)
	}
	x.mu.Unlock()
	if !complete || g.aborted {
		return
	}
	first := g.fins[0]
	arrival, scheduled, firstTok, finish := first.Arrival, first.Scheduled, first.FirstToken, first.Finish
	completion, steps := 0, 0
	for _, c := range g.fins {
		arrival = min(arrival, c.Arrival)
		scheduled = min(scheduled, c.Scheduled)
		firstTok = min(firstTok, c.FirstToken)
		finish = max(finish, c.Finish)
		completion += c.OutputTokens
		steps = max(steps, c.ScheduledSteps)
	}
	id := tag.RequestID
	if id == "" {
		id = first.ID
	}
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.response.model", tag.Model),
		attribute.String("gen_ai.request.id", id),
		attribute.Float64("gen_ai.request.temperature", tag.Temperature),
		attribute.Float64("gen_ai.request.top_p", tag.TopP),
		attribute.Int("gen_ai.request.max_tokens", tag.MaxTokens),
		attribute.Int("gen_ai.request.n", size),
		attribute.Int("gen_ai.usage.num_sequences", size),
		attribute.Int("gen_ai.usage.prompt_tokens", first.PromptTokens),
		attribute.Int("gen_ai.usage.completion_tokens", completion),
		attribute.Float64("gen_ai.latency.time_in_queue", scheduled-arrival),
		attribute.Float64("gen_ai.latency.time_to_first_token", firstTok-arrival),
		attribute.Float64("gen_ai.latency.e2e", finish-arrival),
		attribute.Float64("gen_ai.latency.time_in_scheduler", float64(steps)*V0SchedulerStepS),
	}
	x.emit(tag.Parent, arrival, finish, attrs)
}

func (x *Exporter) emit(parent trace.SpanContext, start, end float64, attrs []attribute.KeyValue) {
	ctx := context.Background()
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	_, span := x.tracer.Start(ctx, "llm_request",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(x.clock.Time(start)),
		trace.WithAttributes(attrs...))
	span.End(trace.WithTimestamp(x.clock.Time(end)))
}

// StepDone is part of engine.Observer.
func (x *Exporter) StepDone(engine.StepStats) {}

// Stats is part of engine.Observer.
func (x *Exporter) Stats(engine.IntervalStats) {}

// Crashed is part of engine.Observer.
func (x *Exporter) Crashed(engine.CrashInfo) {}

// PrefixCache is part of engine.Observer.
func (x *Exporter) PrefixCache(int, int) {}
