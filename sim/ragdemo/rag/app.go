// Package rag is the demo application: retrieval-augmented answers over a small built-in corpus,
// sent through the servescope gateway, describing each request with what only the application
// knows (passages and scores, versions, cache, citation and language checks) in either or both of
// two ways: one app.record published with schema/publish, and OpenTelemetry spans shaped by the
// GenAI semantic conventions (otel.go), which the collector turns into the same app.record.
package rag

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/schema/scriptcheck"
)

// Publisher is what the app needs of schema/publish.Publisher.
type Publisher interface {
	Publish(schema.Event) error
}

// Config configures the application.
type Config struct {
	// GatewayURL is the servescope gateway's base URL (the OpenAI-compatible endpoint).
	GatewayURL string
	// Model is the model asked for.
	Model string
	// IndexEmbeddingModel is the embedding model the index is built with.
	IndexEmbeddingModel string
	// QueryEmbeddingModel is the embedding model queries are embedded with; setting it to another
	// version than the index's reproduces the silent retrieval failure.
	QueryEmbeddingModel string
	// EmbeddingDim is the embedding size.
	EmbeddingDim int
	// CorpusVersion names the corpus snapshot; the index version is "<corpus>@<embedding model>".
	CorpusVersion string
	// TopK is how many passages go into the prompt.
	TopK int
	// MaxTokens is the answer's max_tokens.
	MaxTokens int
	// PromptVersion and ConfigVersion label the prompt template and the app configuration.
	PromptVersion string
	ConfigVersion string
	// CacheSize is the answer cache's size in entries (0 disables it).
	CacheSize int
	// Timeout bounds one call to the gateway.
	Timeout time.Duration
	// TracerProvider, when set, gets the spans of each request (otel.go); nil sends none.
	TracerProvider trace.TracerProvider
}

// App answers questions.
type App struct {
	cfg      Config
	index    *Index
	queryEmb atomic.Pointer[HashEmbedder]
	cache    *answerCache
	client   *http.Client
	pub      Publisher
	script   *scriptcheck.Checker
	tracer   trace.Tracer
}

// New builds the index with the configured index embedding model. pub, when not nil, gets one
// app.record per request.
func New(cfg Config, pub Publisher, client *http.Client) (*App, error) {
	if cfg.EmbeddingDim <= 0 || cfg.TopK <= 0 || cfg.MaxTokens <= 0 {
		return nil, fmt.Errorf("ragdemo: embedding dim, top k and max tokens must be positive")
	}
	checker, err := scriptcheck.New()
	if err != nil {
		return nil, err
	}
	a := &App{
		cfg:    cfg,
		index:  BuildIndex(Corpus(), HashEmbedder{Version: cfg.IndexEmbeddingModel, Dim: cfg.EmbeddingDim}, cfg.CorpusVersion),
		cache:  newAnswerCache(cfg.CacheSize),
		client: client,
		pub:    pub,
		script: checker,
		tracer: tracer(cfg.TracerProvider),
	}
	a.SetQueryEmbeddingModel(cfg.QueryEmbeddingModel)
	return a, nil
}

// SetQueryEmbeddingModel switches the query-side embedding model without re-indexing.
func (a *App) SetQueryEmbeddingModel(version string) {
	a.queryEmb.Store(&HashEmbedder{Version: version, Dim: a.cfg.EmbeddingDim})
}

// QueryEmbeddingModel returns the query-side embedding model in use.
func (a *App) QueryEmbeddingModel() string { return a.queryEmb.Load().Version }

// Answer is the result of one question.
type Answer struct {
	RequestID string      `json:"request_id"`
	Answer    string      `json:"answer"`
	Passages  []HitResult `json:"passages"`
	TopScore  float64     `json:"top_score"`
	CacheHit  bool        `json:"cache_hit"`
	Citations int         `json:"citations"`
}

// HitResult is a retrieved passage as returned to the caller.
type HitResult struct {
	ID    string  `json:"id"`
	Title string  `json:"title"`
	Score float64 `json:"score"`
}

var citationRE = regexp.MustCompile(`\[(\d{1,2})\]`)

// Ask answers question: retrieve, prompt the model through the gateway with requestID as
// X-Request-Id (and the chat span's W3C trace context), check the answer, and report the request
// whatever happened: one app.record and the request's spans.
func (a *App) Ask(ctx context.Context, requestID, question string) (Answer, error) {
	start := time.Now()
	emb := a.queryEmb.Load()
	ctx, root := a.startRequest(ctx, requestID, emb.Version)
	rec := schema.NewAppRecord(requestID, "ragdemo", start)
	rec.Model = a.cfg.Model
	rec.EmbeddingModelVersion = emb.Version
	rec.IndexVersion = a.index.Version
	rec.PromptVersion = a.cfg.PromptVersion
	rec.ConfigVersion = a.cfg.ConfigVersion
	rec.TraceID = traceID(ctx)
	defer func() {
		endRequest(root, rec)
		if a.pub != nil {
			rec.TS = time.Now().UTC()
			_ = a.pub.Publish(rec) // invalid only by a bug here; Publish logs and never blocks
		}
	}()

	key := emb.Version + "\x00" + strings.Join(Words(question), " ")
	hit := false
	if cached, ok := a.cache.get(key); ok {
		hit = true
		rec.CacheHit, rec.CacheKind = &hit, "exact"
		cached.RequestID, cached.CacheHit = requestID, true
		a.describe(rec, cached)
		a.cachedRetrievalSpan(ctx, cached.Passages)
		return cached, nil
	}
	rec.CacheHit, rec.CacheKind = &hit, "exact"

	a.embedSpan(ctx, emb.Version)
	qv := emb.Embed(question)
	t0 := time.Now()
	hits := a.index.Search(qv, a.cfg.TopK)
	retrieval := time.Since(t0).Seconds()
	rec.RetrievalSeconds = &retrieval
	ans := Answer{RequestID: requestID}
	passages := make([]schema.Passage, len(hits))
	for i, h := range hits {
		passages[i] = schema.Passage{ID: h.Passage.ID, Score: h.Score, Source: h.Passage.Title}
		ans.Passages = append(ans.Passages, HitResult{ID: h.Passage.ID, Title: h.Passage.Title, Score: h.Score})
	}
	a.retrievalSpan(ctx, t0, ans.Passages)
	rec.SetPassages(passages)
	if len(hits) > 0 {
		ans.TopScore = hits[0].Score
	}

	text, err := a.complete(ctx, requestID, question, hits)
	if err != nil {
		rec.ErrorLayer = schema.LayerApp
		rec.ErrorMessage = schema.Truncate(err.Error(), 8<<10)
		return ans, err
	}
	ans.Answer = text
	a.describe(rec, ans)
	ans.Citations = int(*rec.CitationCount)
	a.cache.put(key, ans)
	return ans, nil
}

// describe fills the record's output checks from the answer text.
func (a *App) describe(rec *schema.AppRecord, ans Answer) {
	cites := uint32(0)
	for _, m := range citationRE.FindAllStringSubmatch(ans.Answer, -1) {
		if n, _ := strconv.Atoi(m[1]); n >= 1 && n <= a.cfg.TopK {
			cites++
		}
	}
	missing := cites == 0
	foreign := uint32(a.script.ForeignLetters(ans.Answer))
	violation := foreign > 0
	rec.CitationCount, rec.CitationsMissing = &cites, &missing
	rec.OutputForeignChars, rec.OutputScriptViolation = &foreign, &violation
	if ans.CacheHit && len(ans.Passages) > 0 {
		ps := make([]schema.Passage, len(ans.Passages))
		for i, p := range ans.Passages {
			ps[i] = schema.Passage{ID: p.ID, Score: p.Score, Source: p.Title}
		}
		rec.SetPassages(ps)
	}
}

// complete sends the prompt to the gateway's chat completions endpoint, inside the chat span.
func (a *App) complete(ctx context.Context, requestID, question string, hits []Hit) (string, error) {
	ctx, span := a.startChat(ctx)
	res, err := a.chat(ctx, requestID, question, hits)
	endChat(span, res, err)
	return res.text, err
}

// chatResult is what the gateway's answer says.
type chatResult struct {
	text, id, model, finishReason  string
	promptTokens, completionTokens int
	cachedTokens                   int // -1: no usage.prompt_tokens_details
	haveUsage                      bool
}

// chat makes the call of complete.
func (a *App) chat(ctx context.Context, requestID, question string, hits []Hit) (chatResult, error) {
	var sb strings.Builder
	sb.WriteString("Answer the question using only the passages below. Cite passages as [n].\n\n")
	for i, h := range hits {
		fmt.Fprintf(&sb, "[%d] %s: %s\n", i+1, h.Passage.Title, h.Passage.Text)
	}
	body, err := json.Marshal(map[string]any{
		"model":      a.cfg.Model,
		"max_tokens": a.cfg.MaxTokens,
		"messages": []map[string]string{
			{"role": "system", "content": sb.String()},
			{"role": "user", "content": question},
		},
	})
	if err != nil {
		return chatResult{}, fmt.Errorf("encode chat request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(a.cfg.GatewayURL, "/")+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return chatResult{}, fmt.Errorf("build chat request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", requestID)
	req.Header.Set("X-Servescope-App", "ragdemo")
	req.Header.Set("X-Servescope-Prompt-Version", a.cfg.PromptVersion)
	req.Header.Set("X-Servescope-Config-Version", a.cfg.ConfigVersion)
	req.Header.Set("X-Servescope-Index-Version", a.index.Version)
	req.Header.Set("X-Servescope-Embedding-Model", a.queryEmb.Load().Version)
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := a.client.Do(req)
	if err != nil {
		return chatResult{}, fmt.Errorf("call gateway: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return chatResult{}, fmt.Errorf("read gateway answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return chatResult{}, fmt.Errorf("gateway answered %d: %s", resp.StatusCode, schema.Truncate(string(raw), 512))
	}
	var out struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens        int `json:"prompt_tokens"`
			CompletionTokens    int `json:"completion_tokens"`
			PromptTokensDetails *struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return chatResult{}, fmt.Errorf("decode gateway answer: %w", err)
	}
	if len(out.Choices) == 0 {
		return chatResult{}, errors.New("gateway answer has no choices")
	}
	res := chatResult{text: out.Choices[0].Message.Content, id: out.ID, model: out.Model, finishReason: out.Choices[0].FinishReason, cachedTokens: -1}
	if u := out.Usage; u != nil {
		res.haveUsage, res.promptTokens, res.completionTokens = true, u.PromptTokens, u.CompletionTokens
		if u.PromptTokensDetails != nil {
			res.cachedTokens = u.PromptTokensDetails.CachedTokens
		}
	}
	return res, nil
}
