// Package simserver is vllmsim's HTTP front end: vLLM's OpenAI-compatible API server on the
// wire (routes, JSON shapes, SSE framing, error envelope, status codes) in front of the
// simulated engine.
//
// Routes: POST /v1/chat/completions, POST /v1/completions (streaming and not), GET /v1/models,
// GET /health (503 once the engine is dead), GET /version, POST /tokenize, POST /detokenize,
// GET /metrics. A request's id is "chatcmpl-<X-Request-Id>" ("cmpl-" for completions) when the
// header is sent, else a random hex id; the header is echoed back.
package simserver

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/servescope/servescope/services/internal/openaiwire"
	"github.com/servescope/servescope/services/vllmsim/engine"
	"github.com/servescope/servescope/services/vllmsim/simmetrics"
	"github.com/servescope/servescope/services/vllmsim/simtrace"
	"github.com/servescope/servescope/services/vllmsim/vllmlog"
)

// Config holds the API server's settings and fault modes.
type Config struct {
	Model string // served model name
	// PerRequestMetrics adds the "metrics" object (queue_time_ms, time_to_first_token_ms, ...)
	// to responses.
	PerRequestMetrics bool
	// SlowShare is the share of requests (0..1) delayed by SlowDelayS simulated seconds in the
	// API server before they reach the engine (a slow upstream).
	SlowShare  float64
	SlowDelayS float64
	// DropShare is the share of streaming requests whose connection is cut after about half of
	// their tokens (connection dropped mid-stream).
	DropShare float64
	Log       *slog.Logger
}

// Server serves the API. Build with New; it is an http.Handler.
type Server struct {
	cfg     Config
	eng     *engine.Engine
	tok     *engine.Tokenizer
	mux     *http.ServeMux
	created int64
	prop    propagation.TextMapPropagator
}

// New wires the routes over eng, serving metrics from m.
func New(cfg Config, eng *engine.Engine, m *simmetrics.Metrics) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, eng: eng, tok: eng.Tokenizer(), mux: http.NewServeMux(), created: time.Now().Unix(), prop: propagation.TraceContext{}}
	s.mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	s.mux.HandleFunc("POST /v1/completions", s.handleCompletion)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("GET /health", s.handleHealth)
	s.mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": vllmlog.Version})
	})
	s.mux.HandleFunc("POST /tokenize", s.handleTokenize)
	s.mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	s.mux.Handle("GET /metrics", m.Handler())
	s.mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	})
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func errorBody(status int, typ, msg string, param string) openaiwire.ErrorResponse {
	var p *string
	if param != "" {
		p = &param
	}
	return openaiwire.ErrorResponse{Error: openaiwire.ErrorBody{Message: msg, Type: typ, Param: p, Code: status}}
}

func writeError(w http.ResponseWriter, status int, typ, msg, param string) {
	writeJSON(w, status, errorBody(status, typ, msg, param))
}

// writeDecodeError answers a body that failed to decode: 400 for client errors, 500 otherwise.
func writeDecodeError(w http.ResponseWriter, err error) {
	var re *openaiwire.RequestError
	if errors.As(err, &re) {
		if re.TooLarge {
			writeError(w, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", re.Message, "")
			return
		}
		writeError(w, http.StatusBadRequest, "BadRequestError", re.Message, re.Param)
		return
	}
	writeError(w, http.StatusInternalServerError, "InternalServerError", err.Error(), "")
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, openaiwire.ModelList{Object: "list", Data: []openaiwire.Model{{
		ID: s.cfg.Model, Object: "model", Created: s.created, OwnedBy: "vllm", Root: s.cfg.Model,
		MaxModelLen: s.eng.Config().MaxModelLen,
	}}})
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-s.eng.Dead():
		w.WriteHeader(http.StatusServiceUnavailable)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	req, err := openaiwire.DecodeTokenizeRequest(r.Body)
	if err != nil {
		writeDecodeError(w, err)
		return
	}
	if req.Model != "" && req.Model != s.cfg.Model {
		s.writeModelNotFound(w, req.Model)
		return
	}
	var ids []int
	if req.Prompt != nil {
		ids = s.tok.Encode(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	} else {
		gen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		ids = s.tok.Encode(engine.ApplyChatTemplate(chatMessages(req.Messages), gen), true)
	}
	writeJSON(w, http.StatusOK, openaiwire.TokenizeResponse{Count: len(ids), MaxModelLen: s.eng.Config().MaxModelLen, Tokens: ids})
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	req, err := openaiwire.DecodeDetokenizeRequest(r.Body)
	if err != nil {
		writeDecodeError(w, err)
		return
	}
	for _, id := range req.Tokens {
		if id < 0 || id >= s.tok.VocabSize() {
			writeError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("token id %d is out of vocabulary", id), "tokens")
			return
		}
	}
	writeJSON(w, http.StatusOK, openaiwire.DetokenizeResponse{Prompt: s.tok.Decode(req.Tokens, true)})
}

func (s *Server) writeModelNotFound(w http.ResponseWriter, model string) {
	writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", model), "")
}

func chatMessages(msgs []openaiwire.ChatMessage) []engine.ChatMessage {
	out := make([]engine.ChatMessage, len(msgs))
	for i, m := range msgs {
		out[i] = engine.ChatMessage{Role: m.Role, Content: string(m.Content)}
	}
	return out
}

// job is a decoded completion request of either endpoint.
type job struct {
	chat         bool
	id           string
	model        string
	stream       bool
	includeUsage bool
	promptIDs    []int
	maxTokens    int
	tag          *simtrace.Tag
	chunkPrefix  []byte
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	req, err := openaiwire.DecodeChatCompletionRequest(r.Body)
	if err != nil {
		writeDecodeError(w, err)
		return
	}
	ids := s.tok.Encode(engine.ApplyChatTemplate(chatMessages(req.Messages), true), true)
	j := &job{chat: true, model: req.Model, stream: req.Stream, includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage, promptIDs: ids}
	j.tag = &simtrace.Tag{MaxTokens: req.MaxTokens, Temperature: req.Temperature, TopP: req.TopP, N: req.N}
	seed := uint64(0)
	if req.Seed != nil {
		seed = uint64(*req.Seed)
	}
	s.serve(w, r, j, req.MaxTokens, req.MinTokens, req.IgnoreEOS, seed)
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	req, err := openaiwire.DecodeCompletionRequest(r.Body)
	if err != nil {
		writeDecodeError(w, err)
		return
	}
	ids := s.tok.Encode(string(req.Prompt), true)
	j := &job{model: req.Model, stream: req.Stream, includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage, promptIDs: ids}
	j.tag = &simtrace.Tag{MaxTokens: req.MaxTokens, Temperature: req.Temperature, TopP: req.TopP, N: req.N}
	seed := uint64(0)
	if req.Seed != nil {
		seed = uint64(*req.Seed)
	}
	s.serve(w, r, j, req.MaxTokens, req.MinTokens, req.IgnoreEOS, seed)
}

func randomHex() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// serve validates limits, submits to the engine and writes the response.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, j *job, maxTokens *int, minTokens int, ignoreEOS bool, seed uint64) {
	if j.model == "" {
		j.model = s.cfg.Model
	}
	if j.model != s.cfg.Model {
		s.writeModelNotFound(w, j.model)
		return
	}
	prefix := "cmpl-"
	if j.chat {
		prefix = "chatcmpl-"
	}
	if rid := r.Header.Get("X-Request-Id"); rid != "" {
		w.Header().Set("X-Request-Id", rid)
		j.id = prefix + rid
	} else {
		j.id = prefix + randomHex()
	}
	maxLen := s.eng.Config().MaxModelLen
	n := len(j.promptIDs)
	what := "prompt"
	if j.chat {
		what = "messages"
	}
	if n >= maxLen {
		writeError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, you requested %d tokens in the %s. Please reduce the length of the %s.", maxLen, n, what, what), "")
		return
	}
	if maxTokens == nil {
		j.maxTokens = maxLen - n
	} else {
		j.maxTokens = *maxTokens
	}
	if n+j.maxTokens > maxLen {
		writeError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the %s, %d in the completion). Please reduce the length of the %s or completion.",
			maxLen, n+j.maxTokens, n, what, j.maxTokens, what), "")
		return
	}
	j.tag.Parent = trace.SpanContextFromContext(s.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
	j.tag.Model = s.cfg.Model
	if s.cfg.SlowShare > 0 && s.cfg.SlowDelayS > 0 && mrand.Float64() < s.cfg.SlowShare {
		select {
		case <-time.After(s.eng.Clock().WallDuration(s.cfg.SlowDelayS)):
		case <-r.Context().Done():
			return
		}
	}
	seq, err := s.eng.Submit(engine.Request{
		ID: j.id, PromptIDs: j.promptIDs, MaxTokens: j.maxTokens, MinTokens: minTokens,
		IgnoreEOS: ignoreEOS, Seed: seed, Tag: j.tag,
	})
	if err != nil {
		writeError(w, http.StatusInternalServerError, "InternalServerError", err.Error(), "")
		return
	}
	if j.stream {
		s.stream(w, r, j, seq)
		return
	}
	s.whole(w, r, j, seq)
}

func (s *Server) requestMetrics(f *engine.Finished) *openaiwire.RequestMetrics {
	if !s.cfg.PerRequestMetrics || f == nil {
		return nil
	}
	m := &openaiwire.RequestMetrics{
		QueueTimeMs:        1000 * f.QueueS(),
		TimeToFirstTokenMs: 1000 * f.TTFTS(),
		GenerationTimeMs:   1000 * f.DecodeS(),
	}
	if f.OutputTokens > 1 {
		m.MeanITLMs = 1000 * f.DecodeS() / float64(f.OutputTokens-1)
	}
	if inf := f.InferenceS(); inf > 0 {
		m.TokensPerSecond = float64(f.OutputTokens) / inf
	}
	return m
}

func usageOf(f *engine.Finished) openaiwire.Usage {
	u := openaiwire.Usage{PromptTokens: f.PromptTokens, CompletionTokens: f.OutputTokens, TotalTokens: f.PromptTokens + f.OutputTokens}
	if f.CachedTokens > 0 {
		u.PromptTokensDetails = &openaiwire.PromptTokensDetails{CachedTokens: f.CachedTokens}
	}
	return u
}

// whole answers a non-streaming request once the sequence finished.
func (s *Server) whole(w http.ResponseWriter, r *http.Request, j *job, seq *engine.Seq) {
	var text []byte
	buf := make([]engine.Token, 0, 64)
	for {
		toks, fin, done, err := seq.Wait(r.Context(), buf[:0])
		for _, t := range toks {
			text = append(text, t.Text...)
		}
		if err != nil {
			if r.Context().Err() != nil {
				s.eng.Abort(seq)
				return
			}
			writeError(w, http.StatusInternalServerError, "InternalServerError", err.Error(), "")
			return
		}
		if !done {
			continue
		}
		created := time.Now().Unix()
		if j.chat {
			writeJSON(w, http.StatusOK, openaiwire.ChatCompletion{
				ID: j.id, Object: "chat.completion", Created: created, Model: j.model,
				Choices: []openaiwire.ChatChoice{{Message: openaiwire.ResponseMessage{Role: "assistant", Content: string(text), ToolCalls: []any{}}, FinishReason: fin.FinishReason}},
				Usage:   usageOf(fin), Metrics: s.requestMetrics(fin),
			})
			return
		}
		reason := fin.FinishReason
		u := usageOf(fin)
		writeJSON(w, http.StatusOK, openaiwire.Completion{
			ID: j.id, Object: "text_completion", Created: created, Model: j.model,
			Choices: []openaiwire.CompletionChoice{{Text: string(text), FinishReason: &reason}},
			Usage:   &u, Metrics: s.requestMetrics(fin),
		})
		return
	}
}
