package simserver

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/servescope/servescope/sim/openaiwire"
	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/simtrace"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

type endpoint int

const (
	chatEP endpoint = iota
	completionEP
	responsesEP
	embeddingsEP
)

// call is one API request and the engine requests it became: one per prompt and sample.
type call struct {
	ep      endpoint
	id      string // response id: chatcmpl-…, cmpl-…, resp_…, embd-…
	model   string
	created int64
	stream  bool
	// includeUsage and continuousUsage are vLLM's should_include_usage outcome.
	includeUsage, continuousUsage bool
	n                             int
	prompts                       [][]int
	maxTokens                     []int // resolved per prompt
	minTokens                     int
	ignoreEOS                     bool
	seed                          *int64
	temperature, topP             float64 // effective values
	children                      []*child
	registered                    []string // engine request ids held in Server.running
	notify                        chan struct{}
	responses                     *openaiwire.ResponsesRequest
}

// child is one engine request of a call.
type child struct {
	seq    *engine.Seq
	prompt int // index of the prompt in the call
	sample int // index within n
	index  int // choice index in the response: sample + prompt × n
	tokens int
	text   []byte
	fin    *engine.Finished
	done   bool
	order  int // finishing order, 1-based
}

// sampling holds a request's sampling fields as sent.
type sampling struct {
	maxTokens   *int
	minTokens   int
	ignoreEOS   bool
	seed        *int64
	temperature *float64
	topP        *float64
	n           *int
}

func (s *Server) newCall(ep endpoint, r *http.Request, model, bodyID string, stream bool, opts *openaiwire.StreamOptions, sp sampling) (*call, *apiError) {
	if model == "" {
		model = s.cfg.Model
	}
	if model != s.cfg.Model {
		return nil, s.modelNotFound(model)
	}
	prefix := map[endpoint]string{chatEP: "chatcmpl-", completionEP: "cmpl-", embeddingsEP: "embd-"}[ep]
	c := &call{ep: ep, id: prefix + baseRequestID(r, bodyID), model: model, created: time.Now().Unix(), stream: stream,
		n: 1, minTokens: sp.minTokens, ignoreEOS: sp.ignoreEOS, seed: sp.seed, temperature: 1, topP: 1, notify: make(chan struct{}, 1)}
	if sp.n != nil {
		c.n = *sp.n
	}
	if sp.temperature != nil {
		c.temperature = *sp.temperature
	}
	if sp.topP != nil {
		c.topP = *sp.topP
	}
	// vllm/entrypoints/utils.py should_include_usage (the flag exists from 0.10).
	switch {
	case !stream:
	case opts != nil:
		c.includeUsage = opts.IncludeUsage || s.cfg.EnableForceIncludeUsage
		c.continuousUsage = c.includeUsage && opts.ContinuousUsageStats
	default:
		c.includeUsage = s.cfg.EnableForceIncludeUsage
	}
	return c, nil
}

// setPrompts validates the prompts against the context length and resolves max_tokens per
// prompt, as vLLM's _validate_input does before anything reaches the engine.
func (s *Server) setPrompts(c *call, prompts [][]int, maxTokens *int) *apiError {
	maxLen := s.eng.Config().MaxModelLen
	c.prompts = prompts
	c.maxTokens = make([]int, len(prompts))
	for i, p := range prompts {
		if err := s.checkVocab(p); err != nil {
			return err
		}
		if c.ep == embeddingsEP {
			if len(p) > maxLen {
				return badRequest(s.embeddingTooLong(maxLen, len(p)), "input")
			}
			continue
		}
		tooLong, overLimit := s.cfg.Version.ContextLengthMessages(maxLen, len(p), derefOr(maxTokens, 0))
		// Main checks the prompt alone first; 0.8 and 0.10 check it alone only when max_tokens
		// is absent (a prompt of max_model_len tokens plus max_tokens gets the second message).
		if len(p) >= maxLen && (maxTokens == nil || s.cfg.Version == vllmversion.Main) {
			return badRequest(tooLong, "input_tokens")
		}
		if maxTokens != nil && len(p)+*maxTokens > maxLen {
			return badRequest(overLimit, "max_tokens")
		}
		c.maxTokens[i] = derefOr(maxTokens, maxLen-len(p))
	}
	return nil
}

func (s *Server) embeddingTooLong(maxLen, n int) string {
	if s.cfg.Version == vllmversion.Main {
		tooLong, _ := s.cfg.Version.ContextLengthMessages(maxLen, n, 0)
		return tooLong
	}
	return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens in the input for embedding generation. Please reduce the length of the input.", maxLen, n)
}

func derefOr(p *int, d int) int {
	if p == nil {
		return d
	}
	return *p
}

// promptRequestID is the engine request id vLLM gives prompt i: the completion and embedding
// endpoints append "-<i>" to every prompt (even a single one), chat and Responses use the id.
func (c *call) promptRequestID(i int) string {
	if c.ep == completionEP || c.ep == embeddingsEP {
		return c.id + "-" + strconv.Itoa(i)
	}
	return c.id
}

// submit delays a slow request, then hands every prompt × sample to the engine. It returns false
// when the request ended (client gone, engine dead: answered here).
func (s *Server) submit(w http.ResponseWriter, r *http.Request, c *call) bool {
	if s.cfg.SlowShare > 0 && s.cfg.SlowDelaySeconds > 0 && mrand.Float64() < s.cfg.SlowShare {
		select {
		case <-time.After(s.eng.Clock().WallDuration(s.cfg.SlowDelaySeconds)):
		case <-r.Context().Done():
			return false
		}
	}
	parent := trace.SpanContextFromContext(s.prop.Extract(context.Background(), propagation.HeaderCarrier(r.Header)))
	reqs := make([]engine.Request, 0, len(c.prompts)*c.n)
	for i, p := range c.prompts {
		group := s.groups.Add(1)
		promptID := c.promptRequestID(i)
		for j := 0; j < c.n; j++ {
			engineID := promptID
			if c.n > 1 {
				engineID = strconv.Itoa(j) + "_" + promptID // ParentRequest.get_child_info
			}
			tag := &simtrace.Tag{Parent: parent, Group: group, GroupSize: c.n, Model: s.cfg.Model, MaxTokens: c.maxTokens[i],
				Temperature: c.temperature, TopP: c.topP, N: c.n, Pooling: c.ep == embeddingsEP}
			switch s.cfg.Version {
			case vllmversion.V0_10:
				tag.RequestID = engineID // the child's request_id
			default:
				tag.RequestID = promptID // V0's sequence group id; main's external_req_id
			}
			// Samples of one prompt differ (vLLM gives each child seed + index; without a seed
			// they sample independently, here deterministically by index).
			seed := uint64(j)
			if c.seed != nil {
				seed = uint64(*c.seed) + uint64(j)
			}
			reqs = append(reqs, engine.Request{
				ID: engineID, PromptIDs: p, MaxTokens: c.maxTokens[i], MinTokens: c.minTokens, IgnoreEOS: c.ignoreEOS,
				Seed: seed, PrefillOnly: c.ep == embeddingsEP, Notify: c.notify, Tag: tag,
			})
			c.children = append(c.children, &child{prompt: i, sample: j, index: j + i*c.n})
		}
	}
	if id, dup := s.register(c, reqs); dup {
		// vllm/v1/engine/output_processor.py add_request (0.8 to 0.13): the ValueError reaches
		// the client as create_error_response (a whole answer) or, for a stream, whose generator
		// adds the request on its first step, as the stream's error event.
		c.children = nil
		msg := fmt.Sprintf("Request id %s already running.", id)
		if c.stream {
			x := startSSE(w)
			x.data(s.streamError(errors.New(msg)))
			x.data([]byte("[DONE]"))
			_ = x.flush()
			return false
		}
		s.writeError(w, &apiError{status: http.StatusBadRequest, typ: "BadRequestError", msg: msg})
		return false
	}
	seqs, err := s.eng.SubmitAll(reqs)
	if err != nil {
		s.release(c)
		c.children = nil
		writeEngineDead(w)
		return false
	}
	for k, seq := range seqs {
		c.children[k].seq = seq
	}
	return true
}

// register records c's engine requests as running; on a release that refuses a duplicate of a
// running request it registers nothing and returns the first id already running.
func (s *Server) register(c *call, reqs []engine.Request) (string, bool) {
	if !s.cfg.Version.RefusesRunningDuplicateIDs() {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range reqs {
		if s.running[r.ID] > 0 {
			return r.ID, true
		}
	}
	for _, r := range reqs {
		s.running[r.ID]++
		c.registered = append(c.registered, r.ID)
	}
	return "", false
}

// release forgets c's engine requests once the call is over (vLLM's output processor drops a
// request's state when it finishes or is aborted).
func (s *Server) release(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range c.registered {
		if s.running[id]--; s.running[id] <= 0 {
			delete(s.running, id)
		}
	}
	c.registered = nil
}

func (s *Server) abortAll(c *call) {
	for _, ch := range c.children {
		if !ch.done {
			s.eng.Abort(ch.seq)
		}
	}
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	req, err := openaiwire.DecodeChatCompletionRequest(r.Body)
	if err != nil {
		s.writeDecodeError(w, err)
		return
	}
	sp := sampling{maxTokens: req.MaxTokens, minTokens: req.MinTokens, ignoreEOS: req.IgnoreEOS, seed: req.Seed,
		temperature: req.Temperature, topP: req.TopP, n: req.N}
	c, aerr := s.newCall(chatEP, r, req.Model, req.RequestID, req.Stream, req.StreamOptions, sp)
	if aerr == nil {
		ids := s.tok.Encode(engine.ApplyChatTemplate(chatMessages(req.Messages), true), true)
		aerr = s.setPrompts(c, [][]int{ids}, req.MaxTokens)
	}
	if aerr != nil {
		s.writeError(w, aerr)
		return
	}
	s.serveGeneration(w, r, c)
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	req, err := openaiwire.DecodeCompletionRequest(r.Body)
	if err != nil {
		s.writeDecodeError(w, err)
		return
	}
	sp := sampling{maxTokens: req.MaxTokens, minTokens: req.MinTokens, ignoreEOS: req.IgnoreEOS, seed: req.Seed,
		temperature: req.Temperature, topP: req.TopP, n: req.N}
	c, aerr := s.newCall(completionEP, r, req.Model, req.RequestID, req.Stream, req.StreamOptions, sp)
	if aerr == nil {
		aerr = s.setPrompts(c, s.encodePrompts(req.Prompts), req.MaxTokens)
	}
	if aerr != nil {
		s.writeError(w, aerr)
		return
	}
	s.serveGeneration(w, r, c)
}

// encodePrompts tokenizes text prompts (with special tokens, as vLLM's completion renderer does)
// and keeps token-id prompts as sent.
func (s *Server) encodePrompts(ps openaiwire.Prompts) [][]int {
	out := make([][]int, len(ps))
	for i, p := range ps {
		if p.TokenIDs != nil {
			out[i] = p.TokenIDs
			continue
		}
		out[i] = s.tok.Encode(p.Text, true)
	}
	return out
}

func (s *Server) serveGeneration(w http.ResponseWriter, r *http.Request, c *call) {
	if !s.submit(w, r, c) {
		return
	}
	defer s.release(c)
	if c.stream {
		s.stream(w, r, c)
		return
	}
	s.whole(w, r, c)
}

// collect waits until every child of c has ended, gathering texts. It returns false after
// answering the request itself (engine died: bare 500) or when the client went away.
func (s *Server) collect(w http.ResponseWriter, r *http.Request, c *call) bool {
	buf := make([]engine.Token, 0, 64)
	remaining, finished := len(c.children), 0
	for remaining > 0 {
		select {
		case <-c.notify:
		case <-r.Context().Done():
			s.abortAll(c)
			return false
		}
		for _, ch := range c.children {
			if ch.done {
				continue
			}
			toks, fin, done, err := ch.seq.Take(buf[:0])
			for _, t := range toks {
				ch.text = append(ch.text, t.Text...)
			}
			ch.tokens += len(toks)
			if !done {
				continue
			}
			ch.done = true
			remaining--
			if err != nil {
				s.abortAll(c)
				writeEngineDead(w)
				return false
			}
			finished++
			ch.fin, ch.order = fin, finished
		}
	}
	return true
}
