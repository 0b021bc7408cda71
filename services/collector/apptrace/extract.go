package apptrace

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/servescope/servescope/schema"
)

// role is what a span does in a RAG request, as its convention says.
type role uint8

const (
	roleOther     role = iota
	roleRetriever      // OpenInference RETRIEVER, GenAI retrieval, an OpenLLMetry vector-store query
	roleReranker       // OpenInference RERANKER
	roleEmbedding      // OpenInference EMBEDDING, GenAI embeddings
	roleLLM            // OpenInference LLM, GenAI chat / text_completion / generate_content
)

// doc is one scored document of a retriever's or a reranker's output.
type doc struct {
	id    string
	score float64
}

// resourceFacts are what a resource says about every span it holds.
type resourceFacts struct {
	app, index, embedding, prompt, config string
}

// tri is an optional bool: 0 unknown, 1 false, 2 true.
type tri uint8

func triOf(b bool) tri {
	if b {
		return 2
	}
	return 1
}

func (t tri) ptr() *bool {
	if t == 0 {
		return nil
	}
	b := t == 2
	return &b
}

// spanFacts is what one span contributes to its trace's app.record; only these facts are kept
// while the trace waits, never the span.
type spanFacts struct {
	res *resourceFacts
	// genAI is set when a convention recognised the span; other spans count only as the trace's
	// root, or for an error, when the trace has GenAI spans.
	genAI bool
	root  bool
	role  role
	// start and end are the span's times, Unix nanoseconds.
	start, end int64

	retrieved, reranked []doc
	topScore            float64 // OpenLLMetry's db.vector.query.top_score, when hasTop
	hasTop              bool

	dataSource, model, embeddingModel, responseID string
	promptVersion, indexVersion, configVersion    string

	cacheHit     tri
	cacheKind    string
	prefixTokens int64 // prompt tokens read from the provider's or engine's prefix cache, when hasPrefix
	hasPrefix    bool
	foreignChars uint32
	hasForeign   bool
	citations    uint32
	hasCitations bool
	violation    tri
	citesMissing tri
	failed       bool
	errorMessage string
}

// size estimates the bytes a spanFacts holds, for the assembler's memory bound.
func (f *spanFacts) size() int64 {
	n := int64(256 + len(f.dataSource) + len(f.model) + len(f.embeddingModel) + len(f.responseID) +
		len(f.promptVersion) + len(f.indexVersion) + len(f.configVersion) + len(f.cacheKind) + len(f.errorMessage))
	for _, d := range f.retrieved {
		n += int64(40 + len(d.id))
	}
	for _, d := range f.reranked {
		n += int64(40 + len(d.id))
	}
	return n
}

// Span flags of OTLP (opentelemetry/proto/trace/v1/trace.proto, SpanFlags): the exporter knows
// whether the parent is remote, and it is.
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// isLocalRoot reports whether s is its process's root: no parent, or a parent in another
// process (a traceparent the application received).
func isLocalRoot(s ptrace.Span) bool {
	if s.ParentSpanID().IsEmpty() {
		return true
	}
	f := s.Flags()
	return f&flagHasIsRemote != 0 && f&flagIsRemote != 0
}

// readResource extracts the resource's facts.
func readResource(res pcommon.Resource) *resourceFacts {
	a := res.Attributes()
	r := &resourceFacts{
		app:       label(str(a, attrServiceName), schema.MaxLabelBytes),
		index:     label(str(a, AttrIndexVersion), schema.MaxLabelBytes),
		embedding: label(str(a, AttrEmbeddingModel), schema.MaxLabelBytes),
		prompt:    label(str(a, AttrPromptVersion), schema.MaxLabelBytes),
		config:    label(str(a, AttrConfigVersion), schema.MaxLabelBytes),
	}
	return r
}

// extract reads one span. It never fails: an attribute of an unexpected type or shape is
// skipped, the rest of the span still counts.
func extract(res *resourceFacts, s ptrace.Span) spanFacts {
	f := spanFacts{res: res, root: isLocalRoot(s), start: int64(s.StartTimestamp()), end: int64(s.EndTimestamp())}
	var (
		oiKind, op, olType          string
		requestModel, responseModel string
		oiModel, oiEmbeddingModel   string
		provider                    bool
		errorType                   string
		retrieved, reranked         docList
		genAIDocs                   []doc
		haveGenAIDocs               bool
	)
	s.Attributes().Range(func(k string, v pcommon.Value) bool {
		switch k {
		case AttrOISpanKind:
			oiKind = v.AsString()
		case AttrGenAIOperationName:
			op = v.AsString()
		case AttrGenAIRetrievalDocs:
			genAIDocs, haveGenAIDocs = documents(v), true
		case AttrGenAIDataSourceID:
			f.dataSource = label(v.AsString(), schema.MaxLabelBytes)
		case AttrGenAIRequestModel:
			requestModel = v.AsString()
		case AttrGenAIResponseModel:
			responseModel = v.AsString()
		case AttrGenAIResponseID:
			f.responseID = label(v.AsString(), schema.MaxLabelBytes)
		case AttrGenAIProviderName, AttrGenAISystem:
			provider = true
		case AttrGenAICacheReadTokens, AttrOICacheReadTokens, AttrOLCacheReadTokens:
			if n, ok := integer(v); ok && n >= 0 {
				f.prefixTokens, f.hasPrefix = n, true
			}
		case AttrErrorType:
			errorType = v.AsString()
		case AttrOIEmbeddingModelName:
			oiEmbeddingModel = v.AsString()
		case AttrOIModelName:
			oiModel = v.AsString()
		case AttrOIPromptTemplateVer, AttrOLPromptVersion, AttrPromptVersion:
			if p := v.AsString(); p != "" {
				f.promptVersion = label(p, schema.MaxLabelBytes)
			}
		case AttrOIRetrievalDocs:
			retrieved.setList(documents(v))
		case AttrOIRerankerOutputDocs:
			reranked.setList(documents(v))
		case AttrOLTopScore:
			if x, ok := number(v); ok {
				f.topScore, f.hasTop = x, true
			}
		case AttrOLRequestType:
			olType = v.AsString()
		case AttrIndexVersion:
			f.indexVersion = label(v.AsString(), schema.MaxLabelBytes)
		case AttrEmbeddingModel:
			f.embeddingModel = label(v.AsString(), schema.MaxLabelBytes)
		case AttrConfigVersion:
			f.configVersion = label(v.AsString(), schema.MaxLabelBytes)
		case AttrCacheHit:
			if b, ok := boolean(v); ok {
				f.cacheHit = triOf(b)
			}
		case AttrCacheKind:
			f.cacheKind = label(v.AsString(), 64)
		case AttrOutputForeignChars:
			if n, ok := integer(v); ok && n >= 0 && n <= math.MaxUint32 {
				f.foreignChars, f.hasForeign = uint32(n), true
			}
		case AttrOutputCitationCount:
			if n, ok := integer(v); ok && n >= 0 && n <= math.MaxUint32 {
				f.citations, f.hasCitations = uint32(n), true
			}
		case AttrOutputScriptViolation:
			if b, ok := boolean(v); ok {
				f.violation = triOf(b)
			}
		case AttrOutputCitationsMissing:
			if b, ok := boolean(v); ok {
				f.citesMissing = triOf(b)
			}
		default:
			if rest, ok := strings.CutPrefix(k, AttrOIRetrievalDocs+"."); ok {
				retrieved.setFlat(rest, v)
			} else if rest, ok := strings.CutPrefix(k, AttrOIRerankerOutputDocs+"."); ok {
				reranked.setFlat(rest, v)
			}
		}
		if !f.genAI && recognised(k) {
			f.genAI = true
		}
		return true
	})

	events := s.Events()
	var exception string
	for i := 0; i < events.Len(); i++ {
		e := events.At(i)
		name := e.Name()
		switch {
		case name == exceptionEvent:
			if exception == "" {
				a := e.Attributes()
				exception = joinNonEmpty(str(a, attrExceptionType), str(a, attrExceptionMessage))
			}
		case strings.HasSuffix(name, olResultSuffixQuery) || strings.HasSuffix(name, olResultSuffixSearch):
			a := e.Attributes()
			sv, ok := a.Get(name + olResultAttrScore)
			if !ok {
				continue
			}
			score, ok := number(sv)
			if !ok {
				continue
			}
			retrieved.add(str(a, name+olResultAttrID), score)
			f.genAI = true
		}
	}

	f.retrieved = retrieved.docs()
	if haveGenAIDocs {
		f.retrieved = append(f.retrieved, genAIDocs...)
	}
	f.reranked = reranked.docs()

	switch {
	case oiKind != "":
		f.genAI = true
		switch oiKind {
		case KindRetriever:
			f.role = roleRetriever
		case KindReranker:
			f.role = roleReranker
		case KindEmbedding:
			f.role = roleEmbedding
		case KindLLM:
			f.role = roleLLM
		}
	case op != "":
		switch op {
		case OpRetrieval:
			f.role = roleRetriever
		case OpEmbeddings:
			f.role = roleEmbedding
		case OpChat, OpTextCompletion, OpGenerate:
			f.role = roleLLM
		}
	case len(f.reranked) > 0:
		f.role = roleReranker
	case len(f.retrieved) > 0 || f.hasTop:
		f.role = roleRetriever
	case olType != "" || provider:
		f.role = roleLLM
	}
	switch f.role {
	case roleLLM:
		f.model = label(firstNonEmpty(requestModel, oiModel, responseModel), schema.MaxLabelBytes)
	case roleEmbedding:
		if f.embeddingModel == "" {
			f.embeddingModel = label(firstNonEmpty(oiEmbeddingModel, requestModel, responseModel), schema.MaxLabelBytes)
		}
	}

	if s.Status().Code() == ptrace.StatusCodeError || errorType != "" {
		f.failed = true
		f.errorMessage = label(firstNonEmpty(s.Status().Message(), exception, errorType, "span "+s.Name()+" ended with an error"), schema.MaxMessageBytes)
	}
	return f
}

// recognised reports whether an attribute key belongs to a convention this package reads.
func recognised(k string) bool {
	for _, p := range []string{"gen_ai.", "llm.", "openinference.", "retrieval.", "reranker.", "embedding.", "traceloop.", "db.vector.", servescopePrefix} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// docList gathers a flattened OpenInference list ("<i>.document.id", "<i>.document.score") in
// index order, then whole lists and OpenLLMetry's result events in arrival order.
type docList struct {
	byIndex map[int]*partialDoc
	extra   []doc
}

type partialDoc struct {
	id       string
	score    float64
	hasScore bool
}

// setFlat reads one "<i>.document.<field>" attribute; indexes past the schema's passage limit
// are ignored.
func (l *docList) setFlat(rest string, v pcommon.Value) {
	idx, field, ok := strings.Cut(rest, ".")
	if !ok {
		return
	}
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || i >= maxDocumentsPerListAttr {
		return
	}
	at := func() *partialDoc {
		if l.byIndex == nil {
			l.byIndex = map[int]*partialDoc{}
		}
		p := l.byIndex[i]
		if p == nil {
			p = &partialDoc{}
			l.byIndex[i] = p
		}
		return p
	}
	switch field {
	case AttrOIDocumentID:
		at().id = v.AsString()
	case AttrOIDocumentScore:
		if x, ok := number(v); ok {
			p := at()
			p.score, p.hasScore = x, true
		}
	}
}

func (l *docList) setList(d []doc) { l.extra = append(l.extra, d...) }

// add appends one document of an OpenLLMetry result event; one without an id is named by its
// position, "#<n>".
func (l *docList) add(id string, score float64) {
	if len(l.extra) >= maxDocumentsPerListAttr {
		return
	}
	if id == "" {
		id = "#" + strconv.Itoa(len(l.extra))
	}
	l.extra = append(l.extra, doc{id: label(id, 512), score: score})
}

// docs returns the scored documents; a flattened one without an id is named by its index, "#<i>".
func (l *docList) docs() []doc {
	if len(l.byIndex) == 0 {
		return l.extra
	}
	idx := make([]int, 0, len(l.byIndex))
	for i, p := range l.byIndex {
		if p.hasScore {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	out := make([]doc, 0, len(idx)+len(l.extra))
	for _, i := range idx {
		p := l.byIndex[i]
		id := p.id
		if id == "" {
			id = "#" + strconv.Itoa(i)
		}
		out = append(out, doc{id: label(id, 512), score: p.score})
	}
	return append(out, l.extra...)
}

// documents reads a whole list of documents: an OTLP array of maps ({"id", "score"} as the GenAI
// conventions name them, or OpenInference's {"document.id", "document.score"}), an array of JSON
// object strings, or one JSON string holding the array (the GenAI conventions allow it where a
// structured value is not supported). Documents without a numeric score are left out.
func documents(v pcommon.Value) []doc {
	var out []doc
	add := func(id string, score float64, i int) {
		if len(out) >= maxDocumentsPerListAttr {
			return
		}
		if id == "" {
			id = "#" + strconv.Itoa(i)
		}
		out = append(out, doc{id: label(id, 512), score: score})
	}
	switch v.Type() {
	case pcommon.ValueTypeSlice:
		sl := v.Slice()
		for i := 0; i < sl.Len() && i < maxDocumentsPerListAttr; i++ {
			e := sl.At(i)
			switch e.Type() {
			case pcommon.ValueTypeMap:
				m := e.Map()
				sv, ok := m.Get("score")
				if !ok {
					sv, ok = m.Get(AttrOIDocumentScore)
				}
				if !ok {
					continue
				}
				score, ok := number(sv)
				if !ok {
					continue
				}
				id := str(m, "id")
				if id == "" {
					id = str(m, AttrOIDocumentID)
				}
				add(id, score, i)
			case pcommon.ValueTypeStr:
				if d, ok := jsonDocument([]byte(e.Str())); ok {
					add(d.id, d.score, i)
				}
			}
		}
	case pcommon.ValueTypeStr:
		raw := strings.TrimSpace(v.Str())
		if len(raw) > maxJSONBytes || !strings.HasPrefix(raw, "[") {
			return nil
		}
		var items []json.RawMessage
		if err := json.Unmarshal([]byte(raw), &items); err != nil {
			return nil
		}
		for i, it := range items {
			if d, ok := jsonDocument(it); ok {
				add(d.id, d.score, i)
			}
		}
	}
	return out
}

// maxJSONBytes bounds a JSON-encoded document list the receiver decodes.
const maxJSONBytes = 4 << 20

// jsonDocument reads {"id": ..., "score": ...} (or OpenInference's names); the id may be a
// string or a number, the score a number or a numeric string.
func jsonDocument(raw []byte) (doc, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return doc{}, false
	}
	sr, ok := m["score"]
	if !ok {
		sr, ok = m[AttrOIDocumentScore]
	}
	if !ok {
		return doc{}, false
	}
	score, ok := jsonNumber(sr)
	if !ok {
		return doc{}, false
	}
	ir, ok := m["id"]
	if !ok {
		ir = m[AttrOIDocumentID]
	}
	return doc{id: jsonText(ir), score: score}, true
}

func jsonNumber(raw json.RawMessage) (float64, bool) {
	s := strings.TrimSpace(string(raw))
	if uq, err := strconv.Unquote(s); err == nil {
		s = strings.TrimSpace(uq)
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, false
	}
	return x, true
}

func jsonText(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return ""
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return str
	}
	return s
}

func str(m pcommon.Map, key string) string {
	v, ok := m.Get(key)
	if !ok {
		return ""
	}
	return v.AsString()
}

// label makes s valid UTF-8 of at most max bytes, copied so that it keeps nothing of the export
// request alive.
func label(s string, max int) string {
	if s == "" {
		return ""
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.Clone(schema.Truncate(s, max))
}

// number reads a finite number: a double, an int, or a numeric string.
func number(v pcommon.Value) (float64, bool) {
	var x float64
	switch v.Type() {
	case pcommon.ValueTypeDouble:
		x = v.Double()
	case pcommon.ValueTypeInt:
		x = float64(v.Int())
	case pcommon.ValueTypeStr:
		p, err := strconv.ParseFloat(strings.TrimSpace(v.Str()), 64)
		if err != nil {
			return 0, false
		}
		x = p
	default:
		return 0, false
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, false
	}
	return x, true
}

// integer reads a whole number (an int, an integral double, or a decimal string).
func integer(v pcommon.Value) (int64, bool) {
	switch v.Type() {
	case pcommon.ValueTypeInt:
		return v.Int(), true
	case pcommon.ValueTypeDouble:
		d := v.Double()
		if d != math.Trunc(d) || math.IsNaN(d) || math.Abs(d) > 1<<53 {
			return 0, false
		}
		return int64(d), true
	case pcommon.ValueTypeStr:
		n, err := strconv.ParseInt(strings.TrimSpace(v.Str()), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// boolean reads a bool, or the strings "true" and "false" (a Python application may set either).
func boolean(v pcommon.Value) (bool, bool) {
	switch v.Type() {
	case pcommon.ValueTypeBool:
		return v.Bool(), true
	case pcommon.ValueTypeStr:
		b, err := strconv.ParseBool(strings.TrimSpace(v.Str()))
		return b, err == nil
	}
	return false, false
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func joinNonEmpty(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + ": " + b
}
