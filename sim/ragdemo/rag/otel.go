package rag

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/servescope/servescope/schema"
)

// The spans of one request, as an application instrumented with the OpenTelemetry GenAI semantic
// conventions (open-telemetry/semantic-conventions v1.41.0, model/gen-ai/spans.yaml) reports it,
// so that the collector's apptrace makes of them the app.record Ask publishes itself:
//
//	ragdemo.ask                (root, internal)  servescope.{index,embedding_model,prompt,config}.version,
//	                                             servescope.cache.{hit,kind}, servescope.output.*
//	├── embeddings <model>     (internal)        gen_ai.operation.name=embeddings, gen_ai.request.model
//	├── retrieval <corpus>     (internal)        gen_ai.operation.name=retrieval, gen_ai.data_source.id,
//	│                                            gen_ai.request.top_k, gen_ai.retrieval.documents [{id, score}]
//	└── chat <model>           (client)          gen_ai.operation.name=chat, gen_ai.request.model, gen_ai.response.id,
//	                                             gen_ai.response.model, gen_ai.response.finish_reasons, gen_ai.usage.*
//
// The chat span's context goes to the gateway as W3C traceparent, so the gateway's request and
// vLLM's span share the trace; gen_ai.response.id ("chatcmpl-<X-Request-Id>") gives the record
// the request id the gateway's record has. A cache hit has no embedding or chat span, and
// reports the cached answer's passages, as ragdemo's own record does, in a retrieval span marked
// servescope.cache.hit=true (apptrace counts its documents, not its duration).
const (
	tracerName = "github.com/servescope/servescope/sim/ragdemo/rag"
	// genAIProvider is gen_ai.provider.name of the chat span: the gateway serves vLLM's
	// OpenAI-compatible API, and "openai" is the convention's value for that API.
	genAIProvider = "openai"
)

func tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(tracerName)
}

// traceID is ctx's trace id in hex, or "" when ctx has no recording span.
func traceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// startRequest starts the request's root span with what is known before retrieval.
func (a *App) startRequest(ctx context.Context, requestID, embeddingModel string) (context.Context, trace.Span) {
	return a.tracer.Start(ctx, "ragdemo.ask", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String("ragdemo.request_id", requestID),
		attribute.String("servescope.index.version", a.index.Version),
		attribute.String("servescope.embedding_model.version", embeddingModel),
		attribute.String("servescope.prompt.version", a.cfg.PromptVersion),
		attribute.String("servescope.config.version", a.cfg.ConfigVersion),
	))
}

// endRequest puts what the record says of the answer on the root span and ends it.
func endRequest(root trace.Span, rec *schema.AppRecord) {
	if !root.IsRecording() {
		root.End()
		return
	}
	var attrs []attribute.KeyValue
	if rec.CacheHit != nil {
		attrs = append(attrs, attribute.Bool("servescope.cache.hit", *rec.CacheHit), attribute.String("servescope.cache.kind", rec.CacheKind))
	}
	if rec.OutputForeignChars != nil {
		attrs = append(attrs, attribute.Int64("servescope.output.foreign_chars", int64(*rec.OutputForeignChars)))
	}
	if rec.OutputScriptViolation != nil {
		attrs = append(attrs, attribute.Bool("servescope.output.script_violation", *rec.OutputScriptViolation))
	}
	if rec.CitationCount != nil {
		attrs = append(attrs, attribute.Int64("servescope.output.citation_count", int64(*rec.CitationCount)))
	}
	if rec.CitationsMissing != nil {
		attrs = append(attrs, attribute.Bool("servescope.output.citations_missing", *rec.CitationsMissing))
	}
	root.SetAttributes(attrs...)
	if rec.ErrorMessage != "" {
		root.SetStatus(codes.Error, rec.ErrorMessage)
	}
	root.End()
}

// embedSpan reports the query's embedding (done in process: the span covers no remote call).
func (a *App) embedSpan(ctx context.Context, model string) {
	_, s := a.tracer.Start(ctx, "embeddings "+model, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "embeddings"),
		attribute.String("gen_ai.request.model", model),
	))
	s.End()
}

// retrievalSpan reports the index search that started at start and returned hits, best first.
func (a *App) retrievalSpan(ctx context.Context, start time.Time, hits []HitResult) {
	a.documentsSpan(ctx, "retrieval "+a.cfg.CorpusVersion, start, hits)
}

// cachedRetrievalSpan reports the passages of an answer served from the cache.
func (a *App) cachedRetrievalSpan(ctx context.Context, hits []HitResult) {
	a.documentsSpan(ctx, "retrieval "+a.cfg.CorpusVersion+" (cached)", time.Now(), hits,
		attribute.Bool("servescope.cache.hit", true), attribute.String("servescope.cache.kind", "exact"))
}

func (a *App) documentsSpan(ctx context.Context, name string, start time.Time, hits []HitResult, extra ...attribute.KeyValue) {
	_, s := a.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(start),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "retrieval"),
			attribute.String("gen_ai.data_source.id", a.cfg.CorpusVersion),
			attribute.Int("gen_ai.request.top_k", a.cfg.TopK),
		), trace.WithAttributes(extra...))
	if s.IsRecording() {
		docs := make([]attribute.Value, len(hits))
		for i, h := range hits {
			docs[i] = attribute.MapValue(attribute.String("id", h.ID), attribute.Float64("score", h.Score))
		}
		s.SetAttributes(attribute.KeyValue{Key: "gen_ai.retrieval.documents", Value: attribute.SliceValue(docs...)})
	}
	s.End()
}

// startChat starts the chat span of the call to the gateway.
func (a *App) startChat(ctx context.Context) (context.Context, trace.Span) {
	return a.tracer.Start(ctx, "chat "+a.cfg.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", genAIProvider),
		attribute.String("gen_ai.request.model", a.cfg.Model),
		attribute.Int("gen_ai.request.max_tokens", a.cfg.MaxTokens),
	))
}

// endChat records the answer (or the failure) on the chat span and ends it.
func endChat(s trace.Span, res chatResult, err error) {
	defer s.End()
	if err != nil {
		s.SetStatus(codes.Error, err.Error())
		s.SetAttributes(attribute.String("error.type", "gateway_error"))
		return
	}
	if !s.IsRecording() {
		return
	}
	if res.id != "" {
		s.SetAttributes(attribute.String("gen_ai.response.id", res.id))
	}
	if res.model != "" {
		s.SetAttributes(attribute.String("gen_ai.response.model", res.model))
	}
	if res.finishReason != "" {
		s.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{res.finishReason}))
	}
	if res.haveUsage {
		s.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", res.promptTokens), attribute.Int("gen_ai.usage.output_tokens", res.completionTokens))
		if res.cachedTokens >= 0 {
			s.SetAttributes(attribute.Int("gen_ai.usage.cache_read.input_tokens", res.cachedTokens))
		}
	}
}
