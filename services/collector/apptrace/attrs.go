package apptrace

// The attribute names read from applications' spans, by convention. docs/otel-app-spans.md lists
// each with the file and version it was checked against and the test that feeds its shape.

// OpenTelemetry GenAI semantic conventions (status: development), model/gen-ai/registry.yaml and
// spans.yaml at open-telemetry/semantic-conventions v1.41.0 (the conventions later moved to
// their own repository, open-telemetry/semantic-conventions-genai).
const (
	AttrGenAIOperationName   = "gen_ai.operation.name"      // retrieval, embeddings, chat, text_completion, generate_content, ...
	AttrGenAIRetrievalDocs   = "gen_ai.retrieval.documents" // opt-in: [{"id": ..., "score": ...}], structured or a JSON string
	AttrGenAIDataSourceID    = "gen_ai.data_source.id"
	AttrGenAIRequestModel    = "gen_ai.request.model"
	AttrGenAIResponseModel   = "gen_ai.response.model"
	AttrGenAIResponseID      = "gen_ai.response.id"
	AttrGenAIProviderName    = "gen_ai.provider.name"
	AttrGenAISystem          = "gen_ai.system" // the provider's name before v1.37, still sent without gen_ai_latest_experimental
	AttrGenAICacheReadTokens = "gen_ai.usage.cache_read.input_tokens"
	AttrErrorType            = "error.type"

	OpRetrieval      = "retrieval"
	OpEmbeddings     = "embeddings"
	OpChat           = "chat"
	OpTextCompletion = "text_completion"
	OpGenerate       = "generate_content"
)

// OpenInference semantic conventions, spec/semantic_conventions.md and
// python/openinference-semantic-conventions (0.1.32) of Arize-ai/openinference. Lists of objects
// are flattened with zero-based indexes: retrieval.documents.0.document.id.
const (
	AttrOISpanKind           = "openinference.span.kind" // RETRIEVER, RERANKER, EMBEDDING, LLM, CHAIN, ...
	AttrOIRetrievalDocs      = "retrieval.documents"
	AttrOIRerankerOutputDocs = "reranker.output_documents"
	AttrOIDocumentID         = "document.id"
	AttrOIDocumentScore      = "document.score"
	AttrOIEmbeddingModelName = "embedding.model_name"
	AttrOIModelName          = "llm.model_name"
	AttrOIPromptTemplateVer  = "llm.prompt_template.version"
	AttrOICacheReadTokens    = "llm.token_count.prompt_details.cache_read"

	KindRetriever = "RETRIEVER"
	KindReranker  = "RERANKER"
	KindEmbedding = "EMBEDDING"
	KindLLM       = "LLM"
)

// OpenLLMetry (traceloop/openllmetry 0.62.1, packages/opentelemetry-semantic-conventions-ai):
// vector-store spans carry one event per match, "db.query.result" with "db.query.result.id" and
// "db.query.result.score" (opentelemetry-instrumentation-pinecone), and the best score as
// db.vector.query.top_score; the SDK's Traceloop.set_prompt puts traceloop.prompt.version on the
// LLM span.
const (
	EventOLQueryResult      = "db.query.result"
	AttrOLTopScore          = "db.vector.query.top_score"
	AttrOLPromptVersion     = "traceloop.prompt.version"
	AttrOLSpanKind          = "traceloop.span.kind"
	AttrOLRequestType       = "llm.request.type"
	AttrOLCacheReadTokens   = "gen_ai.usage.cache_read_input_tokens"
	olResultSuffixQuery     = "query.result"
	olResultSuffixSearch    = "search.result"
	olResultAttrID          = ".id"
	olResultAttrScore       = ".score"
	exceptionEvent          = "exception"
	attrExceptionType       = "exception.type"
	attrExceptionMessage    = "exception.message"
	attrServiceName         = "service.name"
	defaultServiceName      = "unknown_service"
	maxDocumentsPerListAttr = 1000
)

// servescope's own attributes, for what no convention names: a span or resource attribute (a
// span's value wins over its resource's). Python applications set the resource ones with
// OTEL_RESOURCE_ATTRIBUTES, e.g. servescope.index.version=kb-2026-11.
const (
	// AttrIndexVersion is the retrieval index (vector store) version: app_records.index_version.
	AttrIndexVersion = "servescope.index.version"
	// AttrEmbeddingModel is the query-side embedding model version, for applications whose
	// embedding call is not instrumented.
	AttrEmbeddingModel = "servescope.embedding_model.version"
	// AttrPromptVersion and AttrConfigVersion label the prompt template and the configuration.
	AttrPromptVersion = "servescope.prompt.version"
	AttrConfigVersion = "servescope.config.version"
	// AttrCacheHit (bool) says the answer came from the application's own cache, of the kind
	// AttrCacheKind names ("exact", "semantic", ...).
	AttrCacheHit  = "servescope.cache.hit"
	AttrCacheKind = "servescope.cache.kind"
	// The application's checks of its answer: letters outside the allowed scripts, and citations.
	AttrOutputForeignChars     = "servescope.output.foreign_chars"
	AttrOutputScriptViolation  = "servescope.output.script_violation"
	AttrOutputCitationCount    = "servescope.output.citation_count"
	AttrOutputCitationsMissing = "servescope.output.citations_missing"
	servescopePrefix           = "servescope."
	cacheKindPrefix            = "prefix"
)
