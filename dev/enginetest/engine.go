// Package enginetest is a small deterministic OpenAI-compatible engine that speaks vLLM's wire
// format (chunks, usage chunk, per-request metrics, both error shapes), for the gateway's tests
// and benchmark. Given the same request and X-Request-Id it answers the same bytes, so a test can
// compare what a client receives with and without the gateway. Fixed is its counterpart for
// benchmarks: the same answer to every request, precomputed.
//
// Behaviour is chosen by markers in the last message (or prompt):
//
//	[cjk]           the answer contains Chinese characters
//	[error-stream]  a stream sends two content chunks, then a nested error event
//	[error-flat]    a stream sends one content chunk, then an older flat error event
//	[slow]          content chunks are 100 ms apart (for disconnect tests)
//
// A prompt longer than MaxModelLen tokens (4 bytes a token) gets vLLM's 400 BadRequestError.
package enginetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/servescope/servescope/sim/openaiwire"
)

// Engine is the test engine; the zero value is not usable, use New.
type Engine struct {
	// Model is the served model name.
	Model string
	// Words are the answer's tokens, one per chunk.
	Words []string
	// FirstTokenDelay is the simulated prefill time before the first content chunk.
	FirstTokenDelay time.Duration
	// TokenDelay is the time between content chunks.
	TokenDelay time.Duration
	// MaxModelLen is the context length in tokens.
	MaxModelLen int
	// Created is the `created` value of every response (fixed for byte comparisons).
	Created int64

	mu   sync.Mutex
	ttft map[string]time.Duration // by X-Request-Id: arrival to the write of the first content chunk
}

// New returns an engine answering with words.
func New(words []string, firstTokenDelay, tokenDelay time.Duration) *Engine {
	return &Engine{
		Model: "Qwen/Qwen2.5-7B-Instruct-AWQ", Words: words,
		FirstTokenDelay: firstTokenDelay, TokenDelay: tokenDelay,
		MaxModelLen: 4096, Created: 1764460000, ttft: map[string]time.Duration{},
	}
}

// DefaultWords is a short English answer.
var DefaultWords = []string{"The", " capital", " of", " France", " is", " Paris", ".", " It", " is", " known", " for", " the", " Eiffel", " Tower", "."}

// TTFT returns the engine's own time to first content chunk for a request id.
func (e *Engine) TTFT(requestID string) (time.Duration, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	d, ok := e.ttft[requestID]
	return d, ok
}

type request struct {
	chat         bool
	stream       bool
	includeUsage bool
	maxTokens    int
	prompt       string
}

// ServeHTTP implements http.Handler.
func (e *Engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	if r.Method == http.MethodGet && r.URL.Path == "/health" {
		// vLLM's GET /health: 200 with an empty body while its engine runs
		// (vllm/entrypoints/serve/instrumentator/health.py on main); the gateway's /readyz asks it.
		w.WriteHeader(http.StatusOK)
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
		writeJSON(w, http.StatusOK, openaiwire.ModelList{Object: "list", Data: []openaiwire.Model{{ID: e.Model, Object: "model", Created: e.Created, OwnedBy: "vllm", Root: e.Model, MaxModelLen: e.MaxModelLen}}})
		return
	}
	var req request
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
		cr, err := openaiwire.DecodeChatCompletionRequest(r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		req = request{chat: true, stream: cr.Stream, includeUsage: cr.StreamOptions != nil && cr.StreamOptions.IncludeUsage}
		if cr.MaxTokens != nil {
			req.maxTokens = *cr.MaxTokens
		}
		for _, m := range cr.Messages {
			req.prompt += string(m.Content)
		}
	case r.Method == http.MethodPost && r.URL.Path == "/v1/completions":
		cr, err := openaiwire.DecodeCompletionRequest(r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		req = request{stream: cr.Stream, includeUsage: cr.StreamOptions != nil && cr.StreamOptions.IncludeUsage, prompt: string(cr.Prompt)}
		if cr.MaxTokens != nil {
			req.maxTokens = *cr.MaxTokens
		}
	default:
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	promptTokens := (len(req.prompt) + 3) / 4
	if promptTokens > e.MaxModelLen {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens in the messages. Please reduce the length of the messages.", e.MaxModelLen, promptTokens))
		return
	}
	words := e.Words
	if strings.Contains(req.prompt, "[cjk]") {
		words = []string{"The", " answer", " is", " 北京", "。", " It", " is", " the", " capital", "."}
	}
	finish := "stop"
	if req.maxTokens > 0 && req.maxTokens < len(words) {
		words, finish = words[:req.maxTokens], "length"
	}
	delay := e.TokenDelay
	if strings.Contains(req.prompt, "[slow]") {
		delay = 100 * time.Millisecond
	}
	id := r.Header.Get("X-Request-Id")
	usage := openaiwire.Usage{PromptTokens: promptTokens, CompletionTokens: len(words), TotalTokens: promptTokens + len(words)}
	if !req.stream {
		e.sleep(r, e.FirstTokenDelay+time.Duration(len(words))*delay)
		text := strings.Join(words, "")
		metrics := e.metrics(len(words), delay)
		if req.chat {
			writeJSON(w, http.StatusOK, openaiwire.ChatCompletion{ID: "chatcmpl-" + id, Object: "chat.completion", Created: e.Created, Model: e.Model,
				Choices: []openaiwire.ChatChoice{{Message: openaiwire.ResponseMessage{Role: "assistant", Content: text, ToolCalls: []any{}}, FinishReason: finish}},
				Usage:   usage, Metrics: metrics})
		} else {
			writeJSON(w, http.StatusOK, openaiwire.Completion{ID: "cmpl-" + id, Object: "text_completion", Created: e.Created, Model: e.Model,
				Choices: []openaiwire.CompletionChoice{{Text: text, FinishReason: &finish}}, Usage: &usage, Metrics: metrics})
		}
		return
	}

	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	chatChunk := func(d openaiwire.Delta, fin *string) openaiwire.ChatCompletionChunk {
		return openaiwire.ChatCompletionChunk{ID: "chatcmpl-" + id, Object: "chat.completion.chunk", Created: e.Created, Model: e.Model,
			Choices: []openaiwire.ChatChunkChoice{{Delta: d, FinishReason: fin}}}
	}
	if req.chat {
		empty := ""
		if !send(chatChunk(openaiwire.Delta{Role: "assistant", Content: &empty}, nil)) {
			return
		}
	}
	if !e.sleep(r, e.FirstTokenDelay) {
		return
	}
	for i, word := range words {
		if i > 0 && !e.sleep(r, delay) {
			return
		}
		if strings.Contains(req.prompt, "[error-stream]") && i == 2 {
			send(openaiwire.ErrorResponse{Error: openaiwire.ErrorBody{Message: "engine step failed: CUDA error", Type: "InternalServerError", Code: 500}})
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		if strings.Contains(req.prompt, "[error-flat]") && i == 1 {
			send(map[string]any{"object": "error", "message": "Out of memory in the KV cache", "type": "InternalServerError", "param": nil, "code": 500})
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		var fin *string
		if i == len(words)-1 {
			fin = &finish
		}
		if i == 0 {
			// Stamped before the write, so it never trails the moment the chunk left.
			e.mu.Lock()
			e.ttft[id] = time.Since(arrival)
			e.mu.Unlock()
		}
		w := word
		var ok bool
		if req.chat {
			ok = send(chatChunk(openaiwire.Delta{Content: &w}, fin))
		} else {
			ok = send(openaiwire.Completion{ID: "cmpl-" + id, Object: "text_completion", Created: e.Created, Model: e.Model,
				Choices: []openaiwire.CompletionChoice{{Text: w, FinishReason: fin}}})
		}
		if !ok {
			return
		}
	}
	if req.includeUsage {
		metrics := e.metrics(len(words), delay)
		if req.chat {
			send(openaiwire.ChatCompletionChunk{ID: "chatcmpl-" + id, Object: "chat.completion.chunk", Created: e.Created, Model: e.Model,
				Choices: []openaiwire.ChatChunkChoice{}, Usage: &usage, Metrics: metrics})
		} else {
			send(openaiwire.Completion{ID: "cmpl-" + id, Object: "text_completion", Created: e.Created, Model: e.Model,
				Choices: []openaiwire.CompletionChoice{}, Usage: &usage, Metrics: metrics})
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

func (e *Engine) metrics(tokens int, delay time.Duration) *openaiwire.RequestMetrics {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	gen := time.Duration(max(tokens-1, 0)) * delay
	return &openaiwire.RequestMetrics{QueueTimeMs: 0.5, TimeToFirstTokenMs: ms(e.FirstTokenDelay), GenerationTimeMs: ms(gen), MeanITLMs: ms(delay)}
}

// sleep waits d unless the client went away; false when it did.
func (e *Engine) sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	typ := "BadRequestError"
	if status == http.StatusNotFound {
		typ = "NotFoundError"
	}
	writeJSON(w, status, openaiwire.ErrorResponse{Error: openaiwire.ErrorBody{Message: msg, Type: typ, Code: status}})
}
