// Package simserver is vllmsim's HTTP front end: vLLM's OpenAI-compatible API server on the
// wire, in the shape of one vLLM version (Config.Version), in front of the simulated engine.
//
// Routes: POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses (not at
// 0.8), GET /v1/models, GET /health (503 once the engine is dead), GET /version, POST /tokenize,
// POST /detokenize, GET /metrics. Unknown paths answer FastAPI's 404 {"detail":"Not Found"}.
//
// A request's id is "chatcmpl-", "cmpl-" or "embd-" and its base: the X-Request-Id header, else
// the body's request_id, else 32 random hex digits (vLLM's _base_request_id). Like vLLM, the
// completion and embedding endpoints run one engine request per prompt, "<id>-<i>", and chat one
// engine request; an n > 1 request becomes n engine requests "<j>_<prompt request id>"
// (vllm/v1/engine/parallel_sampling.py). The X-Request-Id response header is set only with
// EnableRequestIDHeaders, to the request's header or a fresh uuid hex, as vLLM's middleware does.
package simserver

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/servescope/servescope/sim/openaiwire"
	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/simmetrics"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// Config holds the API server's settings and fault modes. Zero values are vLLM's defaults.
type Config struct {
	Model string // served model name
	// Version is the vLLM version whose wire formats are served (default main).
	Version vllmversion.Version
	// PerRequestMetrics is vLLM main's --enable-per-request-metrics: a "metrics" timing object on
	// non-streaming responses and on the final usage chunk of streams, for requests with one
	// prompt and n = 1. Other versions have no such object; the setting is ignored there.
	PerRequestMetrics bool
	// EnablePromptTokensDetails is --enable-prompt-tokens-details: usage.prompt_tokens_details
	// {"cached_tokens": N} when N > 0 prompt tokens came from the prefix cache (null otherwise).
	EnablePromptTokensDetails bool
	// EnableForceIncludeUsage is --enable-force-include-usage (0.10 and later): every stream ends
	// with a usage chunk, as if stream_options.include_usage were true.
	EnableForceIncludeUsage bool
	// EnableRequestIDHeaders is --enable-request-id-headers: every response carries X-Request-Id.
	EnableRequestIDHeaders bool
	// EmbeddingDim is the length of /v1/embeddings vectors (default 384).
	EmbeddingDim int
	// SlowShare is the share of requests (0..1) delayed by SlowDelaySeconds simulated seconds in the
	// API server before they reach the engine (a slow upstream).
	SlowShare        float64
	SlowDelaySeconds float64
	// DropShare is the share of streaming requests whose connection is cut after about half of
	// their tokens (connection dropped mid-stream).
	DropShare float64
	Log       *slog.Logger
}

// Engine is what the API server needs of the engine behind it: an *engine.Engine, or the
// *engine.Group of a data-parallel server.
type Engine interface {
	Config() engine.Config
	Clock() *engine.Clock
	Tokenizer() *engine.Tokenizer
	SubmitAll([]engine.Request) ([]*engine.Seq, error)
	Abort(*engine.Seq)
	Dead() <-chan struct{}
}

// Server serves the API. Build with New; it is an http.Handler.
type Server struct {
	cfg     Config
	eng     Engine
	tok     *engine.Tokenizer
	mux     *http.ServeMux
	created int64
	prop    propagation.TextMapPropagator
	groups  atomic.Uint64 // sequence-group keys for span tags
	// running holds the engine request ids in flight, for the releases that refuse a duplicate
	// of a running one (vllmversion.RefusesRunningDuplicateIDs): the API server's
	// OutputProcessor.request_states.
	mu      sync.Mutex
	running map[string]int
}

// New wires the routes over eng, serving metrics from m.
func New(cfg Config, eng Engine, m *simmetrics.Metrics) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.EmbeddingDim <= 0 {
		cfg.EmbeddingDim = 384
	}
	if !cfg.Version.PerRequestMetrics() {
		cfg.PerRequestMetrics = false
	}
	if !cfg.Version.ForceIncludeUsage() {
		cfg.EnableForceIncludeUsage = false
	}
	s := &Server{cfg: cfg, eng: eng, tok: eng.Tokenizer(), mux: http.NewServeMux(), created: time.Now().Unix(), running: map[string]int{},
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{})}
	s.route("POST", "/v1/chat/completions", s.handleChat)
	s.route("POST", "/v1/completions", s.handleCompletion)
	s.route("POST", "/v1/embeddings", s.handleEmbeddings)
	if cfg.Version.ResponsesAPI() {
		s.route("POST", "/v1/responses", s.handleResponses)
	}
	s.route("GET", "/v1/models", s.handleModels)
	s.route("GET", "/health", s.handleHealth)
	s.route("GET", "/version", func(w http.ResponseWriter, _ *http.Request) {
		e := &enc{}
		e.open()
		e.str("version", cfg.Version.Release())
		e.close()
		writeBody(w, http.StatusOK, e.b)
	})
	s.route("POST", "/tokenize", s.handleTokenize)
	s.route("POST", "/detokenize", s.handleDetokenize)
	s.route("GET", "/metrics", m.Handler().ServeHTTP)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeBody(w, http.StatusNotFound, []byte(`{"detail":"Not Found"}`))
	})
	return s
}

// route registers a path for one method; other methods get FastAPI's 405.
func (s *Server) route(method, path string, h http.HandlerFunc) {
	s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == "GET" && r.Method == http.MethodHead) {
			w.Header().Set("Allow", method)
			writeBody(w, http.StatusMethodNotAllowed, []byte(`{"detail":"Method Not Allowed"}`))
			return
		}
		h(w, r)
	})
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Server", "uvicorn")
	if s.cfg.EnableRequestIDHeaders {
		// vllm/entrypoints/openai/api_server.py XRequestIdMiddleware: the request's header, or a
		// fresh uuid4 hex unrelated to the response body's id.
		rid := r.Header.Get("X-Request-Id")
		if rid == "" {
			rid = randomHex()
		}
		w.Header().Set("X-Request-Id", rid)
	}
	s.mux.ServeHTTP(w, r)
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// apiError is an error answered before any response byte: status, vLLM's error type, message and
// the offending parameter (main names it; 0.8 and 0.10 send null).
type apiError struct {
	status int
	typ    string
	msg    string
	param  string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(msg, param string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", msg: msg, param: param}
}

// errorBody is vLLM's error body at the configured version: {"object":"error","message",...} up
// to 0.10.0, {"error":{"message",...}} since (ErrorResponse in protocol.py). code is the status.
func (s *Server) errorBody(e *apiError) []byte {
	b := &enc{}
	b.open()
	if s.cfg.Version.NestedErrors() {
		b.openKey("error")
	} else {
		b.str("object", "error")
	}
	b.str("message", e.msg)
	b.str("type", e.typ)
	if e.param != "" && s.cfg.Version == vllmversion.Main {
		b.str("param", e.param)
	} else {
		b.null("param")
	}
	b.int("code", e.status)
	if s.cfg.Version.NestedErrors() {
		b.close()
	}
	b.close()
	return b.b
}

func (s *Server) writeError(w http.ResponseWriter, e *apiError) {
	writeBody(w, e.status, s.errorBody(e))
}

// writeEngineDead answers a request the dead engine cannot serve as vLLM's server does while it
// shuts down: the EngineDeadError handler returns a bare 500 (vllm/entrypoints/launcher.py).
func writeEngineDead(w http.ResponseWriter) {
	w.WriteHeader(http.StatusInternalServerError)
}

// writeDecodeError answers a body that failed to decode: 400 for client errors (413 for an
// oversized body), 500 otherwise.
func (s *Server) writeDecodeError(w http.ResponseWriter, err error) {
	var re *openaiwire.RequestError
	if errors.As(err, &re) {
		if re.TooLarge {
			s.writeError(w, &apiError{status: http.StatusRequestEntityTooLarge, typ: "RequestEntityTooLarge", msg: re.Message})
			return
		}
		s.writeError(w, badRequest(re.Message, re.Param))
		return
	}
	s.writeError(w, &apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: err.Error()})
}

func (s *Server) modelNotFound(model string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "NotFoundError", msg: fmt.Sprintf("The model `%s` does not exist.", model)}
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	e := &enc{}
	e.open()
	e.str("object", "list")
	e.arr("data")
	e.open()
	e.str("id", s.cfg.Model)
	e.str("object", "model")
	e.int64("created", s.created)
	e.str("owned_by", "vllm")
	e.str("root", s.cfg.Model)
	e.null("parent")
	e.int("max_model_len", s.eng.Config().MaxModelLen)
	e.arr("permission")
	e.open()
	e.str("id", "modelperm-"+randomHex())
	e.str("object", "model_permission")
	e.int64("created", s.created)
	e.bool("allow_create_engine", false)
	e.bool("allow_sampling", true)
	e.bool("allow_logprobs", true)
	e.bool("allow_search_indices", false)
	e.bool("allow_view", true)
	e.bool("allow_fine_tuning", false)
	e.str("organization", "*")
	e.null("group")
	e.bool("is_blocking", false)
	e.close()
	e.endArr()
	e.close()
	e.endArr()
	e.close()
	writeBody(w, http.StatusOK, e.b)
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
		s.writeDecodeError(w, err)
		return
	}
	if req.Model != "" && req.Model != s.cfg.Model {
		s.writeError(w, s.modelNotFound(req.Model))
		return
	}
	var ids []int
	if req.Prompt != nil {
		ids = s.tok.Encode(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	} else {
		gen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		ids = s.tok.Encode(engine.ApplyChatTemplate(chatMessages(req.Messages), gen), true)
	}
	e := &enc{}
	e.open()
	e.int("count", len(ids))
	e.int("max_model_len", s.eng.Config().MaxModelLen)
	e.key("tokens")
	e.b = appendIntList(e.b, ids)
	e.more = true
	e.null("token_strs")
	e.close()
	writeBody(w, http.StatusOK, e.b)
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	req, err := openaiwire.DecodeDetokenizeRequest(r.Body)
	if err != nil {
		s.writeDecodeError(w, err)
		return
	}
	if err := s.checkVocab(req.Tokens); err != nil {
		s.writeError(w, err)
		return
	}
	e := &enc{}
	e.open()
	e.str("prompt", s.tok.Decode(req.Tokens, true))
	e.close()
	writeBody(w, http.StatusOK, e.b)
}

func (s *Server) checkVocab(ids []int) *apiError {
	for _, id := range ids {
		if id < 0 || id >= s.tok.VocabSize() {
			return badRequest(fmt.Sprintf("Token id %d is out of vocabulary", id), "prompt")
		}
	}
	return nil
}

func appendIntList(b []byte, ids []int) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d", id)
	}
	return append(b, ']')
}

func chatMessages(msgs []openaiwire.ChatMessage) []engine.ChatMessage {
	out := make([]engine.ChatMessage, len(msgs))
	for i, m := range msgs {
		out[i] = engine.ChatMessage{Role: m.Role, Content: string(m.Content)}
	}
	return out
}

func randomHex() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// baseRequestID is vLLM's _base_request_id: the X-Request-Id header, else the body's request_id,
// else a random uuid hex.
func baseRequestID(r *http.Request, bodyID string) string {
	if rid := r.Header.Get("X-Request-Id"); rid != "" {
		return rid
	}
	if strings.TrimSpace(bodyID) != "" {
		return bodyID
	}
	return randomHex()
}
