package simserver

import (
	"errors"
	mrand "math/rand/v2"
	"net/http"
	"sort"

	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// sseWriter frames SSE events into a buffer written and flushed once per engine step, so a
// 256-sequence batch costs one write per stream per step.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
}

func (x *sseWriter) data(payload []byte) {
	x.buf = append(x.buf, "data: "...)
	x.buf = append(x.buf, payload...)
	x.buf = append(x.buf, "\n\n"...)
}

// event writes a named event, as vLLM frames the Responses API stream.
func (x *sseWriter) event(name string, payload []byte) {
	x.buf = append(x.buf, "event: "...)
	x.buf = append(x.buf, name...)
	x.buf = append(x.buf, '\n')
	x.data(payload)
}

func (x *sseWriter) flush() error {
	if len(x.buf) == 0 {
		return nil
	}
	if _, err := x.w.Write(x.buf); err != nil {
		return err
	}
	x.buf = x.buf[:0]
	return x.rc.Flush()
}

// startSSE sends the status and headers at once, as Starlette's StreamingResponse does before the
// first event: the first body bytes follow with the first token.
func startSSE(w http.ResponseWriter) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	x := &sseWriter{w: w, rc: http.NewResponseController(w)}
	_ = x.rc.Flush()
	return x
}

// streamError is the error event vLLM writes when generation fails after the stream began: the
// exception goes through create_streaming_error_response with its defaults (BadRequestError, 400),
// as json.dumps writes it; 0.8 wraps the flat body in "error".
func (s *Server) streamError(err error) []byte {
	return pyDumpsError(!s.cfg.Version.NestedErrors(), err.Error(), "BadRequestError", nil, http.StatusBadRequest)
}

// stream answers a streaming chat or text completion as vLLM's chat_completion_stream_generator
// and completion_stream_generator do. Chunks carry one choice each, interleaved across the n
// samples and the prompts in the order the engine produced them, choice index = sample + prompt × n.
// Chat sends one role chunk per choice with the first output; each choice's last token carries
// its finish_reason. With include_usage a final chunk ("choices": []) sums prompt tokens over the
// prompts and completion tokens over every choice; continuous_usage_stats adds the choice's
// cumulative usage to each chunk. An engine failure after the stream began ends it with an error
// event and [DONE].
func (s *Server) stream(w http.ResponseWriter, r *http.Request, c *call) {
	x := startSSE(w)
	dropAfter := -1
	if s.cfg.DropShare > 0 && mrand.Float64() < s.cfg.DropShare {
		dropAfter = max(1, c.maxTokens[0]/2)
	}
	var firstOutput *child // vLLM reads num_cached_tokens from the first output of the stream
	sent := 0
	buf := make([]engine.Token, 0, 16)
	var outs []output
	remaining := len(c.children)
	e := &enc{}
	for remaining > 0 {
		select {
		case <-c.notify:
		case <-r.Context().Done():
			s.abortAll(c)
			return
		}
		var failed error
		outs = outs[:0]
		for _, ch := range c.children {
			if ch.done {
				continue
			}
			toks, fin, done, err := ch.seq.Take(buf[:0])
			for k, t := range toks {
				o := output{ch: ch, tok: t}
				if done && err == nil && fin != nil && k == len(toks)-1 {
					o.finish = fin.FinishReason
				}
				outs = append(outs, o)
			}
			if !done {
				continue
			}
			ch.done = true
			remaining--
			if err != nil {
				failed = err
				continue
			}
			ch.fin = fin
		}
		// Within a step the engine emits its batch in order, and the children were added in
		// order; across steps the earlier step comes first, however late this reader woke.
		sort.SliceStable(outs, func(i, j int) bool { return outs[i].tok.Step < outs[j].tok.Step })
		for _, o := range outs {
			if firstOutput == nil {
				firstOutput = o.ch
				if c.ep == chatEP {
					for i := 0; i < c.n; i++ {
						x.data(s.roleChunk(e, c, i))
					}
				}
			}
			o.ch.tokens++
			x.data(s.tokenChunk(e, c, o.ch, o.tok.Text, o.finish))
			sent++
			if sent == dropAfter && x.flush() == nil {
				s.abortAll(c)
				s.cfg.Log.Info("dropping connection mid-stream", "request_id", c.id, "tokens_sent", sent)
				panic(http.ErrAbortHandler)
			}
		}
		if failed != nil {
			s.abortAll(c)
			if !errors.Is(failed, engine.ErrAborted) {
				x.data(s.streamError(failed))
			}
			x.data([]byte("[DONE]"))
			_ = x.flush()
			return
		}
		if err := x.flush(); err != nil {
			s.abortAll(c)
			return
		}
	}
	if c.includeUsage {
		x.data(s.usageChunk(e, c, firstOutput))
	}
	x.data([]byte("[DONE]"))
	_ = x.flush()
}

// output is one token of one child, with the child's finish reason on its last token.
type output struct {
	ch     *child
	tok    engine.Token
	finish string
}

func (s *Server) chunkHead(e *enc, c *call) {
	e.b, e.more = e.b[:0], false
	e.open()
	e.str("id", c.id)
	if c.ep == chatEP {
		e.str("object", "chat.completion.chunk")
	} else {
		e.str("object", "text_completion")
	}
	e.int64("created", c.created)
	e.str("model", c.model)
}

// usageSet writes a UsageInfo built with its three counts only (pydantic's exclude_unset drops
// prompt_tokens_details), as chat chunks carry it.
func usageSet(e *enc, prompt, completion int) {
	e.openKey("usage")
	e.int("prompt_tokens", prompt)
	e.int("total_tokens", prompt+completion)
	e.int("completion_tokens", completion)
	e.close()
}

// usageFull writes a UsageInfo with every field (model_dump without exclusions), as non-streaming
// bodies and text completion chunks carry it: prompt_tokens_details is null unless cached > 0
// and the server reports details.
func (s *Server) usageFull(e *enc, prompt, completion, cached int) {
	e.openKey("usage")
	e.int("prompt_tokens", prompt)
	e.int("total_tokens", prompt+completion)
	e.int("completion_tokens", completion)
	if s.cfg.EnablePromptTokensDetails && cached > 0 {
		e.openKey("prompt_tokens_details")
		e.int("cached_tokens", cached)
		e.close()
	} else {
		e.null("prompt_tokens_details")
	}
	e.close()
}

func (s *Server) roleChunk(e *enc, c *call, index int) []byte {
	s.chunkHead(e, c)
	e.arr("choices")
	e.open()
	e.int("index", index)
	e.openKey("delta")
	e.str("role", "assistant")
	e.str("content", "")
	e.close()
	e.null("logprobs")
	e.null("finish_reason")
	e.close()
	e.endArr()
	if c.continuousUsage {
		usageSet(e, len(c.prompts[0]), 0)
	}
	if s.cfg.Version.TokenIDFields() {
		e.null("prompt_token_ids")
	}
	e.close()
	return e.b
}

// tokenChunk is one choice's delta; finish is its finish reason on the choice's last token.
func (s *Server) tokenChunk(e *enc, c *call, ch *child, text, finish string) []byte {
	s.chunkHead(e, c)
	e.arr("choices")
	e.open()
	e.int("index", ch.index)
	if c.ep == chatEP {
		e.openKey("delta")
		e.str("content", text)
		e.close()
	} else {
		e.str("text", text)
	}
	e.null("logprobs")
	if finish == "" {
		e.null("finish_reason")
	} else {
		e.str("finish_reason", finish)
	}
	// Chat chunks are dumped with exclude_unset: stop_reason appears once set, on the last
	// chunk; text completion chunks are dumped whole.
	if finish != "" || c.ep != chatEP {
		e.null("stop_reason")
	}
	if s.cfg.Version.TokenIDFields() {
		if c.ep != chatEP {
			e.null("prompt_token_ids")
		}
		e.null("token_ids")
	}
	e.close()
	e.endArr()
	prompt := len(c.prompts[ch.prompt])
	switch {
	case c.ep == chatEP && c.continuousUsage:
		usageSet(e, prompt, ch.tokens)
	case c.ep == chatEP:
	case c.continuousUsage:
		s.usageFull(e, prompt, ch.tokens, 0)
	default:
		e.null("usage")
	}
	e.close()
	return e.b
}

// usageChunk is the final chunk of a stream with include_usage, dumped with exclude_none.
func (s *Server) usageChunk(e *enc, c *call, firstOutput *child) []byte {
	s.chunkHead(e, c)
	e.arr("choices")
	e.endArr()
	prompt, completion := c.tokenTotals()
	e.openKey("usage")
	e.int("prompt_tokens", prompt)
	e.int("total_tokens", prompt+completion)
	e.int("completion_tokens", completion)
	if firstOutput != nil && firstOutput.fin != nil && s.cfg.EnablePromptTokensDetails && firstOutput.fin.CachedTokens > 0 {
		e.openKey("prompt_tokens_details")
		e.int("cached_tokens", firstOutput.fin.CachedTokens)
		e.close()
	}
	e.close()
	if f := s.timedFinish(c); f != nil {
		writeTiming(e, f, completion, false)
	}
	e.close()
	return e.b
}

// tokenTotals sums prompt tokens over the prompts (each counted once, whatever n) and completion
// tokens over every choice, as vLLM's final usage does.
func (c *call) tokenTotals() (prompt, completion int) {
	for _, p := range c.prompts {
		prompt += len(p)
	}
	for _, ch := range c.children {
		completion += ch.tokens
	}
	return prompt, completion
}

// timedFinish is the engine record the per-request timing object describes, or nil when vLLM
// sends none: only main with --enable-per-request-metrics, and only for one prompt with n = 1.
func (s *Server) timedFinish(c *call) *engine.Finished {
	if !s.cfg.PerRequestMetrics || s.cfg.Version != vllmversion.Main || len(c.children) != 1 {
		return nil
	}
	return c.children[0].fin
}

// writeTiming writes vLLM main's per-request timing object (build_per_request_timing_metrics):
// time_to_first_token_ms from first scheduling (the queue wait excluded), generation_time_ms from
// the first to the last token, queue_time_ms, mean_itl_ms over tokens − 1 gaps, tokens_per_second
// over scheduling to last token. A field whose timestamps are missing is null; withNulls writes
// those (model_dump) instead of leaving them out (exclude_none).
func writeTiming(e *enc, f *engine.Finished, tokens int, withNulls bool) {
	field := func(k string, ok bool, v float64) {
		switch {
		case ok:
			e.float(k, v)
		case withNulls:
			e.null(k)
		}
	}
	hasFirst := f.FirstToken > 0 && f.LastToken > 0
	e.openKey("metrics")
	field("time_to_first_token_ms", f.Scheduled > 0 && f.FirstToken > 0, (f.FirstToken-f.Scheduled)*1000)
	field("generation_time_ms", hasFirst, (f.LastToken-f.FirstToken)*1000)
	field("queue_time_ms", f.Queued > 0 && f.Scheduled > 0, (f.Scheduled-f.Queued)*1000)
	field("mean_itl_ms", hasFirst && tokens > 1, (f.LastToken-f.FirstToken)/float64(tokens-1)*1000)
	inference := (f.LastToken - f.Scheduled) * 1000
	field("tokens_per_second", f.Scheduled > 0 && f.LastToken > 0 && inference > 0, float64(tokens)/inference*1000)
	e.close()
}
