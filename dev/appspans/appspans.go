// Package appspans emits, with the OpenTelemetry Go SDK, the spans of one RAG request shaped
// attribute by attribute as the Python instrumentations servescope reads emit them, for tests
// that export real OTLP to the collector:
//
//   - LlamaIndex: a RetrieverQueryEngine query as openinference-instrumentation-llama-index 4.4.5
//     emits it (Arize-ai/openinference, python/instrumentation/openinference-instrumentation-
//     llama-index, src/.../_handler.py and tests/.../test_handler.py): span names, the CHAIN /
//     RETRIEVER / EMBEDDING / RERANKER / LLM kinds, flattened document lists, the OK and ERROR
//     statuses ("<ExceptionType>: <message>") and the exception events.
//   - GenAI: an application whose OpenAI calls are instrumented by opentelemetry-instrumentation-
//     openai-v2 (open-telemetry/opentelemetry-python-contrib, its tests/test_utils.py
//     assert_all_attributes) — default mode (semantic conventions v1.30: gen_ai.system) or
//     OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental (gen_ai.provider.name and the
//     cache-read tokens of opentelemetry-util-genai) — with a retrieval span as
//     open-telemetry/semantic-conventions v1.41.0 model/gen-ai/spans.yaml describes it
//     (span.gen_ai.retrieval.client), documents structured or as the JSON string the
//     convention allows.
//   - OpenLLMetry: a Pinecone query and an OpenAI chat as traceloop/openllmetry 0.62.1 emits them
//     (opentelemetry-instrumentation-pinecone query_handlers.py, traceloop-sdk tracing.py).
//
// The LLM call itself is the caller's (Request.Call): it runs inside an HTTP client span, as
// opentelemetry-instrumentation-httpx makes one under the OpenAI SDK, whose context it must send
// as traceparent (InjectTraceparent).
package appspans

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
)

// Doc is one retrieved or reranked document.
type Doc struct {
	ID      string
	Score   float64
	Content string
}

// Answer is what the LLM call returned.
type Answer struct {
	// ResponseID is the answer's id (vLLM: "chatcmpl-<X-Request-Id>").
	ResponseID string
	Model      string
	Text       string
	// PromptTokens, CompletionTokens and CachedTokens are the answer's usage; CachedTokens < 0
	// when the answer had no prompt_tokens_details.
	PromptTokens, CompletionTokens, CachedTokens int
	FinishReason                                 string
}

// Request is one RAG request.
type Request struct {
	Question string
	// Docs are the retriever's output in rank order; Reranked, when set, the reranker's.
	Docs, Reranked []Doc
	EmbeddingModel string
	Model          string
	// PromptVersion is the prompt template's version (OpenInference llm.prompt_template.version,
	// OpenLLMetry traceloop.prompt.version); empty leaves it out.
	PromptVersion string
	// DataSource is the GenAI retrieval span's gen_ai.data_source.id.
	DataSource string
	// Call makes the LLM call with ctx, which carries the HTTP client span to send as
	// traceparent; nil answers without a call.
	Call func(ctx context.Context) (Answer, error)
}

// PythonResource is the resource opentelemetry-python's Resource.create makes for service with
// OTEL_RESOURCE_ATTRIBUTES attrs.
func PythonResource(service string, attrs ...attribute.KeyValue) *resource.Resource {
	kv := []attribute.KeyValue{
		attribute.String("telemetry.sdk.language", "python"),
		attribute.String("telemetry.sdk.name", "opentelemetry"),
		attribute.String("telemetry.sdk.version", "1.39.1"),
		attribute.String("service.name", service),
	}
	return resource.NewSchemaless(append(kv, attrs...)...)
}

// InjectTraceparent puts ctx's span context into h as W3C traceparent (and tracestate).
func InjectTraceparent(ctx context.Context, h http.Header) {
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
}

// httpClientSpan runs call inside an HTTP client span shaped as opentelemetry-instrumentation-
// httpx makes one (HTTP semantic conventions: no GenAI attribute).
func httpClientSpan(ctx context.Context, tp trace.TracerProvider, call func(context.Context) (Answer, error)) (Answer, error) {
	ctx, span := tp.Tracer("opentelemetry.instrumentation.httpx", trace.WithInstrumentationVersion("0.60b1")).
		Start(ctx, "POST", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("http.request.method", "POST"),
			attribute.String("url.full", "http://gateway:8080/v1/chat/completions"),
			attribute.String("server.address", "gateway"),
			attribute.Int("server.port", 8080),
		))
	defer span.End()
	if call == nil {
		return Answer{ResponseID: "chatcmpl-local", Text: "an answer", PromptTokens: 40, CompletionTokens: 8, CachedTokens: -1, FinishReason: "stop"}, nil
	}
	ans, err := call(ctx)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(attribute.String("error.type", "HTTPStatusError"))
		return ans, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", 200))
	return ans, nil
}

// LlamaIndex emits a RetrieverQueryEngine.query of LlamaIndex as OpenInference's instrumentation
// does, over a VectorIndexRetriever (with its query embedding) and, when req.Reranked is set, a
// SentenceTransformerRerank postprocessor. A failed call ends the LLM spans and their ancestors
// with ERROR, as the exception travels up through each instrumented method.
func LlamaIndex(ctx context.Context, tp trace.TracerProvider, req Request) error {
	tr := tp.Tracer("openinference.instrumentation.llama_index", trace.WithInstrumentationVersion("4.4.5"))
	kind := func(k string) attribute.KeyValue { return attribute.String("openinference.span.kind", k) }
	start := func(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
		return tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	}
	// end sets OpenInference's status: OK, or ERROR "<type>: <message>" with the exception event.
	end := func(s trace.Span, err error) {
		if err == nil {
			s.SetStatus(codes.Ok, "")
		} else {
			s.AddEvent("exception", trace.WithAttributes(
				attribute.String("exception.type", "openai.BadRequestError"),
				attribute.String("exception.message", err.Error()),
				attribute.String("exception.stacktrace", "Traceback (most recent call last): ..."),
				attribute.String("exception.escaped", "False"),
			))
			s.SetStatus(codes.Error, "BadRequestError: "+err.Error())
		}
		s.End()
	}

	qctx, query := start(ctx, "RetrieverQueryEngine.query", kind("CHAIN"), attribute.String("input.value", req.Question))
	ictx, inner := start(qctx, "RetrieverQueryEngine._query", kind("CHAIN"), attribute.String("input.value", req.Question))

	rctx, retrieve := start(ictx, "VectorIndexRetriever.retrieve", kind("RETRIEVER"), attribute.String("input.value", req.Question))
	_, embed := start(rctx, "OpenAIEmbedding._get_query_embedding", kind("EMBEDDING"),
		attribute.String("embedding.model_name", req.EmbeddingModel),
		attribute.String("embedding.embeddings.0.embedding.text", req.Question),
		attribute.Float64Slice("embedding.embeddings.0.embedding.vector", []float64{0.0123, -0.0456, 0.0789}))
	end(embed, nil)
	retrieve.SetAttributes(documents("retrieval.documents", req.Docs)...)
	retrieve.SetAttributes(attribute.String("output.value", docsJSON(req.Docs)), attribute.String("output.mime_type", "application/json"))
	end(retrieve, nil)

	if req.Reranked != nil {
		_, rerank := start(ictx, "SentenceTransformerRerank._postprocess_nodes", kind("RERANKER"),
			attribute.String("reranker.query", req.Question),
			attribute.String("reranker.model_name", "cross-encoder/ms-marco-MiniLM-L-2-v2"),
			attribute.Int("reranker.top_k", len(req.Reranked)))
		rerank.SetAttributes(documents("reranker.input_documents", req.Docs)...)
		rerank.SetAttributes(documents("reranker.output_documents", req.Reranked)...)
		end(rerank, nil)
	}

	sctx, synth := start(ictx, "CompactAndRefine.synthesize", kind("CHAIN"), attribute.String("input.value", req.Question))
	gctx, get1 := start(sctx, "CompactAndRefine.get_response", kind("CHAIN"))
	gctx2, get2 := start(gctx, "CompactAndRefine.get_response", kind("CHAIN"))
	llmAttrs := []attribute.KeyValue{
		kind("LLM"),
		attribute.String("llm.model_name", req.Model),
		attribute.String("llm.invocation_parameters", `{"temperature": 0.1, "model": "`+req.Model+`"}`),
		attribute.String("llm.provider", "openai"),
		attribute.String("llm.system", "openai"),
	}
	pctx, predict := start(gctx2, "OpenAI.predict", append(llmAttrs,
		attribute.String("llm.prompt_template.template", "Context information is below.\n{context_str}\nQuery: {query_str}\nAnswer: "),
		attribute.String("llm.prompt_template.variables", `{"context_str": "...", "query_str": `+strconv.Quote(req.Question)+`}`),
		attribute.String("input.value", req.Question), attribute.String("input.mime_type", "text/plain"))...)
	if req.PromptVersion != "" {
		predict.SetAttributes(attribute.String("llm.prompt_template.version", req.PromptVersion))
	}
	cctx, chat := start(pctx, "OpenAI.chat", append(llmAttrs,
		attribute.String("llm.input_messages.0.message.role", "system"),
		attribute.String("llm.input_messages.0.message.content", "You are an expert Q&A system."),
		attribute.String("llm.input_messages.1.message.role", "user"),
		attribute.String("llm.input_messages.1.message.content", req.Question),
		attribute.String("input.value", req.Question), attribute.String("input.mime_type", "application/json"))...)
	ans, err := httpClientSpan(cctx, tp, req.Call)
	if err == nil {
		chat.SetAttributes(
			attribute.String("output.value", "assistant: "+ans.Text),
			attribute.String("llm.output_messages.0.message.role", "assistant"),
			attribute.String("llm.output_messages.0.message.content", ans.Text),
			attribute.Int("llm.token_count.prompt", ans.PromptTokens),
			attribute.Int("llm.token_count.completion", ans.CompletionTokens),
			attribute.Int("llm.token_count.total", ans.PromptTokens+ans.CompletionTokens))
		if ans.CachedTokens >= 0 {
			chat.SetAttributes(attribute.Int("llm.token_count.prompt_details.cache_read", ans.CachedTokens))
		}
		predict.SetAttributes(attribute.String("output.value", ans.Text))
	}
	for _, s := range []trace.Span{chat, predict, get2, get1, synth} {
		end(s, err)
	}
	if err == nil {
		for _, s := range []trace.Span{inner, query} {
			s.SetAttributes(attribute.String("output.value", ans.Text))
		}
	}
	end(inner, err)
	end(query, err)
	return err
}

// documents flattens docs as OpenInference does: <prefix>.<i>.document.id, .score, .content.
func documents(prefix string, docs []Doc) []attribute.KeyValue {
	var out []attribute.KeyValue
	for i, d := range docs {
		p := prefix + "." + strconv.Itoa(i) + ".document."
		out = append(out, attribute.String(p+"id", d.ID))
		if d.Content != "" {
			out = append(out, attribute.String(p+"content", d.Content))
		}
		out = append(out, attribute.Float64(p+"score", d.Score), attribute.String(p+"metadata", `{"file_name": "handbook.md"}`))
	}
	return out
}

func docsJSON(docs []Doc) string {
	type node struct {
		ID    string  `json:"id_"`
		Score float64 `json:"score"`
	}
	out := make([]node, len(docs))
	for i, d := range docs {
		out[i] = node{d.ID, d.Score}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// GenAIOptions chooses how the GenAI-shaped application reports.
type GenAIOptions struct {
	// Latest is OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental: gen_ai.provider.name
	// and gen_ai.usage.cache_read.input_tokens; otherwise v1.30's gen_ai.system and no cache
	// tokens.
	Latest bool
	// DocumentsJSON records gen_ai.retrieval.documents as a JSON string instead of structured.
	DocumentsJSON bool
	// ServerSpan makes the root an HTTP server span (the request the application serves), with
	// Attrs on it; otherwise the root is the retrieval's caller, an internal span.
	ServerSpan bool
	Attrs      []attribute.KeyValue
}

// GenAI emits an application's RAG request with GenAI-convention spans: the query embedding
// (openai-v2's embeddings span), the retrieval (span.gen_ai.retrieval.client) and the chat
// (openai-v2's chat span), under one root.
func GenAI(ctx context.Context, tp trace.TracerProvider, req Request, o GenAIOptions) error {
	app := tp.Tracer("ragapp")
	openai := tp.Tracer("opentelemetry.instrumentation.openai_v2", trace.WithInstrumentationVersion("2.4b0"))
	provider := attribute.String("gen_ai.system", "openai")
	if o.Latest {
		provider = attribute.String("gen_ai.provider.name", "openai")
	}
	rootKind, rootName := trace.SpanKindInternal, "rag.answer"
	rootAttrs := o.Attrs
	if o.ServerSpan {
		rootKind, rootName = trace.SpanKindServer, "POST /ask"
		rootAttrs = append([]attribute.KeyValue{attribute.String("http.request.method", "POST"), attribute.String("http.route", "/ask"),
			attribute.String("url.path", "/ask"), attribute.String("url.scheme", "http")}, rootAttrs...)
	}
	ctx, root := app.Start(ctx, rootName, trace.WithSpanKind(rootKind), trace.WithAttributes(rootAttrs...))

	_, emb := openai.Start(ctx, "embeddings "+req.EmbeddingModel, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "embeddings"), provider,
		attribute.String("gen_ai.request.model", req.EmbeddingModel),
		attribute.String("server.address", "api.openai.com")))
	emb.SetAttributes(attribute.String("gen_ai.response.model", req.EmbeddingModel), attribute.Int("gen_ai.usage.input_tokens", 9))
	emb.End()

	_, ret := app.Start(ctx, "retrieval "+req.DataSource, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "retrieval"),
		attribute.String("gen_ai.data_source.id", req.DataSource),
		attribute.Int("gen_ai.request.top_k", len(req.Docs))))
	if o.DocumentsJSON {
		type d struct {
			ID    string  `json:"id"`
			Score float64 `json:"score"`
		}
		list := make([]d, len(req.Docs))
		for i, x := range req.Docs {
			list[i] = d{x.ID, x.Score}
		}
		b, _ := json.Marshal(list)
		ret.SetAttributes(attribute.String("gen_ai.retrieval.documents", string(b)))
	} else {
		docs := make([]attribute.Value, len(req.Docs))
		for i, x := range req.Docs {
			docs[i] = attribute.MapValue(attribute.String("id", x.ID), attribute.Float64("score", x.Score))
		}
		ret.SetAttributes(attribute.KeyValue{Key: "gen_ai.retrieval.documents", Value: attribute.SliceValue(docs...)})
	}
	ret.End()

	cctx, chat := openai.Start(ctx, "chat "+req.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "chat"), provider,
		attribute.String("gen_ai.request.model", req.Model),
		attribute.Int("gen_ai.request.max_tokens", 128),
		attribute.String("server.address", "gateway"), attribute.Int("server.port", 8080)))
	ans, err := httpClientSpan(cctx, tp, req.Call)
	if err != nil {
		// opentelemetry-instrumentation-openai-v2 utils.py handle_span_exception
		chat.SetStatus(codes.Error, err.Error())
		chat.SetAttributes(attribute.String("error.type", "APIStatusError"))
	} else {
		chat.SetAttributes(
			attribute.String("gen_ai.response.id", ans.ResponseID),
			attribute.String("gen_ai.response.model", ans.Model),
			attribute.StringSlice("gen_ai.response.finish_reasons", []string{ans.FinishReason}),
			attribute.Int("gen_ai.usage.input_tokens", ans.PromptTokens),
			attribute.Int("gen_ai.usage.output_tokens", ans.CompletionTokens))
		if o.Latest && ans.CachedTokens >= 0 {
			chat.SetAttributes(attribute.Int("gen_ai.usage.cache_read.input_tokens", ans.CachedTokens))
		}
	}
	chat.End()
	if err != nil {
		root.SetStatus(codes.Error, err.Error())
	}
	root.End()
	return err
}

// OpenLLMetry emits a request of an application traced by the Traceloop SDK: its workflow span,
// a Pinecone query (one db.query.result event per match, db.vector.query.top_score) and an
// OpenAI chat span with the prompt version Traceloop.set_prompt gave it.
func OpenLLMetry(ctx context.Context, tp trace.TracerProvider, req Request) error {
	tl := tp.Tracer("traceloop.sdk")
	ctx, wf := tl.Start(ctx, "rag_pipeline.workflow", trace.WithAttributes(
		attribute.String("traceloop.span.kind", "workflow"),
		attribute.String("traceloop.workflow.name", "rag_pipeline"),
		attribute.String("traceloop.entity.name", "rag_pipeline")))
	_, q := tp.Tracer("opentelemetry.instrumentation.pinecone", trace.WithInstrumentationVersion("0.62.1")).
		Start(ctx, "pinecone.query", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("db.system", "pinecone"),
			attribute.String("db.operation", "query"),
			attribute.Int("pinecone.query.top_k", len(req.Docs)),
			attribute.Int("db.vector.query.top_k", len(req.Docs)),
			attribute.Int("db.vector.query.result_count", len(req.Docs))))
	top := 0.0
	for i, d := range req.Docs {
		if i == 0 || d.Score > top {
			top = d.Score
		}
		q.AddEvent("db.query.result", trace.WithAttributes(
			attribute.String("db.query.result.id", d.ID),
			attribute.Float64("db.query.result.score", d.Score),
			attribute.String("db.query.result.metadata", "{'file_name': 'handbook.md'}")))
	}
	if len(req.Docs) > 0 {
		q.SetAttributes(attribute.Float64("db.vector.query.top_score", top))
	}
	q.End()
	cctx, chat := tp.Tracer("opentelemetry.instrumentation.openai", trace.WithInstrumentationVersion("0.62.1")).
		Start(ctx, "openai.chat", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("llm.request.type", "chat"),
			attribute.String("gen_ai.system", "openai"),
			attribute.String("gen_ai.request.model", req.Model)))
	if req.PromptVersion != "" {
		// traceloop-sdk tracing.py: set on LLM spans after Traceloop.set_prompt(..., version)
		chat.SetAttributes(attribute.String("traceloop.prompt.key", "rag-answer"), attribute.String("traceloop.prompt.version", req.PromptVersion))
	}
	ans, err := httpClientSpan(cctx, tp, req.Call)
	if err != nil {
		chat.SetStatus(codes.Error, err.Error())
	} else {
		chat.SetAttributes(attribute.String("gen_ai.response.id", ans.ResponseID),
			attribute.String("gen_ai.response.model", ans.Model),
			attribute.Int("gen_ai.usage.input_tokens", ans.PromptTokens),
			attribute.Int("gen_ai.usage.output_tokens", ans.CompletionTokens))
		if ans.CachedTokens >= 0 {
			chat.SetAttributes(attribute.Int("gen_ai.usage.cache_read_input_tokens", ans.CachedTokens))
		}
	}
	chat.End()
	wf.End()
	return err
}

// ErrCall is a failed LLM call for tests.
type ErrCall struct{ Status int }

func (e ErrCall) Error() string {
	return fmt.Sprintf("Error code: %d - the gateway answered %d", e.Status, e.Status)
}
