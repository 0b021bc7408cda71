package apptrace

import (
	"encoding/hex"
	"slices"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/collector/otlp"
)

// maxPassages is the schema's limit on an app.record's passages.
const maxPassages = 1000

// build turns the facts of one trace into its app.record. ok is false when the trace says
// nothing an app.record holds (no span of a known convention, or none with a retrieval, an
// embedding model, a prompt version, a cache result, an output check or an error): such a trace
// is counted, not stored. The rules, field by field, are in docs/otel-app-spans.md.
func build(id pcommon.TraceID, spans []spanFacts, now time.Time) (*schema.AppRecord, bool) {
	var genAI bool
	for i := range spans {
		if spans[i].genAI {
			genAI = true
			break
		}
	}
	if !genAI {
		return nil, false
	}
	// Spans in start order: "the first embedding span" and "the last LLM span" mean that.
	spans = slices.Clone(spans)
	slices.SortStableFunc(spans, func(a, b spanFacts) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return 0
	})

	var (
		root                         *spanFacts
		firstGenAI                   *spanFacts
		end                          int64
		retrieved, reranked          []doc
		retrievalStart, retrievalEnd int64
		haveRetrieval                bool
		top                          float64
		haveTop                      bool
		spanEmbedding, inferredEmbed string
		spanIndex, dataSource        string
		spanPrompt, spanConfig       string
		model, responseID            string
		cacheHit                     tri
		cacheKind                    string
		prefixRead                   bool
		havePrefix                   bool
		foreign, citations           *uint32
		violation, citesMissing      tri
		failure                      *spanFacts
	)
	for i := range spans {
		f := &spans[i]
		if f.end > end {
			end = f.end
		}
		if f.root && (root == nil || f.end > root.end) {
			root = f
		}
		if f.failed && (failure == nil || f.end < failure.end || f.end == failure.end && f.start > failure.start) {
			failure = f
		}
		if !f.genAI {
			continue
		}
		if firstGenAI == nil {
			firstGenAI = f
		}
		switch f.role {
		case roleRetriever:
			retrieved = append(retrieved, f.retrieved...)
			if f.hasTop && (!haveTop || f.topScore > top) {
				top, haveTop = f.topScore, true
			}
			// A retriever span marked servescope.cache.hit=true reports the documents of an
			// answer served from the application's cache: they count, its duration is no
			// retrieval time.
			if f.cacheHit != triOf(true) {
				if !haveRetrieval || f.start < retrievalStart {
					retrievalStart = f.start
				}
				if !haveRetrieval || f.end > retrievalEnd {
					retrievalEnd = f.end
				}
				haveRetrieval = true
			}
			if dataSource == "" {
				dataSource = f.dataSource
			}
		case roleReranker:
			reranked = append(reranked, f.reranked...)
		case roleEmbedding:
			if inferredEmbed == "" {
				inferredEmbed = f.embeddingModel
			}
		case roleLLM:
			if f.model != "" {
				model = f.model
			}
			if f.responseID != "" {
				if rid := otlp.ParseRequestID(f.responseID); rid.RequestID != f.responseID {
					responseID = rid.RequestID
				}
			}
		}
		if f.role != roleEmbedding && f.embeddingModel != "" && spanEmbedding == "" {
			spanEmbedding = f.embeddingModel // servescope.embedding_model.version on any other span
		}
		if f.indexVersion != "" && spanIndex == "" {
			spanIndex = f.indexVersion
		}
		if f.promptVersion != "" {
			spanPrompt = f.promptVersion
		}
		if f.configVersion != "" && spanConfig == "" {
			spanConfig = f.configVersion
		}
		if f.cacheHit != 0 {
			cacheHit, cacheKind = f.cacheHit, f.cacheKind
		}
		if f.hasPrefix {
			havePrefix = true
			prefixRead = prefixRead || f.prefixTokens > 0
		}
		if f.hasForeign {
			v := f.foreignChars
			foreign = &v
		}
		if f.hasCitations {
			v := f.citations
			citations = &v
		}
		if f.violation != 0 {
			violation = f.violation
		}
		if f.citesMissing != 0 {
			citesMissing = f.citesMissing
		}
	}

	// The resource of the root, else of the first GenAI span, names the application and its
	// deployment's versions.
	res := firstGenAI.res
	if root != nil && root.res != nil {
		res = root.res
	}
	if res == nil {
		res = &resourceFacts{}
	}
	ts := end
	if root != nil {
		ts = root.end
	}
	// A time the schema refuses (a clock far ahead, an end before the year 2000 or none) is
	// replaced by the record's arrival.
	at := time.Unix(0, ts).UTC()
	if at.Year() < 2000 || at.After(now.Add(otlp.MaxClockAhead)) {
		at = now.UTC()
	}

	traceID := hex.EncodeToString(id[:])
	requestID := traceID
	if responseID != "" {
		requestID = schema.Truncate(responseID, schema.MaxIDBytes)
	}
	app := res.app
	if app == "" {
		app = defaultServiceName
	}
	rec := schema.NewAppRecord(requestID, app, at)
	rec.TraceID = traceID
	rec.Model = model

	// The retriever's similarity scores win over a reranker's: app_records' scores are retrieval
	// scores (schema.Passage), and a cross-encoder's relevance is another scale. A reranker's
	// output counts only when no retriever in the trace reported scores.
	docs := retrieved
	if len(docs) == 0 {
		docs = reranked
	}
	if len(docs) > 0 {
		rec.SetPassages(rank(docs))
	} else if haveTop {
		rec.RetrievalTopScore = &top
	}
	if haveRetrieval && retrievalEnd >= retrievalStart && retrievalStart > 0 {
		d := time.Duration(retrievalEnd - retrievalStart).Seconds()
		rec.RetrievalSeconds = &d
	}
	rec.EmbeddingModelVersion = firstNonEmpty(spanEmbedding, res.embedding, inferredEmbed)
	rec.IndexVersion = firstNonEmpty(spanIndex, res.index, dataSource)
	rec.PromptVersion = firstNonEmpty(spanPrompt, res.prompt)
	rec.ConfigVersion = firstNonEmpty(spanConfig, res.config)
	switch {
	case cacheHit != 0:
		rec.CacheHit, rec.CacheKind = cacheHit.ptr(), cacheKind
	case havePrefix:
		rec.CacheHit, rec.CacheKind = &prefixRead, cacheKindPrefix
	}
	rec.OutputForeignChars, rec.CitationCount = foreign, citations
	rec.OutputScriptViolation, rec.CitationsMissing = violation.ptr(), citesMissing.ptr()
	if failure != nil {
		rec.ErrorLayer = schema.LayerApp
		switch failure.role {
		case roleRetriever, roleReranker, roleEmbedding:
			rec.ErrorLayer = schema.LayerRetrieval
		}
		rec.ErrorMessage = failure.errorMessage
	}

	useful := rec.RetrievalTopScore != nil || rec.EmbeddingModelVersion != "" || spanPrompt != "" ||
		rec.CacheHit != nil || rec.ErrorLayer != "" || foreign != nil || citations != nil ||
		violation != 0 || citesMissing != 0
	return rec, useful
}

// rank orders documents by score, highest first, one per id (its best score), at most the
// schema's limit.
func rank(docs []doc) []schema.Passage {
	best := make(map[string]float64, len(docs))
	order := make([]string, 0, len(docs))
	for _, d := range docs {
		if s, ok := best[d.id]; !ok {
			best[d.id] = d.score
			order = append(order, d.id)
		} else if d.score > s {
			best[d.id] = d.score
		}
	}
	out := make([]schema.Passage, 0, len(order))
	for _, id := range order {
		out = append(out, schema.Passage{ID: id, Score: best[id]})
	}
	slices.SortStableFunc(out, func(a, b schema.Passage) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		}
		return 0
	})
	if len(out) > maxPassages {
		out = out[:maxPassages]
	}
	return out
}
