package simserver

import (
	"net/http"
	"sort"
	"time"

	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// whole answers a non-streaming chat or text completion once every engine request finished, as
// Starlette's JSONResponse writes vLLM's model_dump(): every field of the version's response
// model, null ones included, in declaration order. Choices are ordered by index (sample + prompt
// × n); usage sums prompt tokens over the prompts and completion tokens over the choices.
func (s *Server) whole(w http.ResponseWriter, r *http.Request, c *call) {
	if !s.collect(w, r, c) {
		return
	}
	c.created = time.Now().Unix()
	kids := append([]*child(nil), c.children...)
	sort.SliceStable(kids, func(i, j int) bool { return kids[i].index < kids[j].index })
	v := s.cfg.Version
	e := &enc{}
	e.open()
	e.str("id", c.id)
	if c.ep == chatEP {
		e.str("object", "chat.completion")
	} else {
		e.str("object", "text_completion")
	}
	e.int64("created", c.created)
	e.str("model", c.model)
	e.arr("choices")
	for _, ch := range kids {
		e.open()
		e.int("index", ch.index)
		if c.ep == chatEP {
			s.chatMessage(e, string(ch.text))
		} else {
			e.str("text", string(ch.text))
		}
		e.null("logprobs")
		e.str("finish_reason", ch.fin.FinishReason)
		e.null("stop_reason")
		if c.ep == completionEP {
			e.null("prompt_logprobs")
			if v.TokenIDFields() {
				e.null("prompt_token_ids")
			}
		}
		if v.TokenIDFields() {
			e.null("token_ids")
		}
		e.close()
	}
	e.endArr()
	if v != vllmversion.V0_8 {
		e.null("service_tier")
		e.null("system_fingerprint")
	}
	prompt, completion := c.tokenTotals()
	s.usageFull(e, prompt, completion, c.reportedCached())
	if c.ep == chatEP {
		e.null("prompt_logprobs")
		if v.TokenIDFields() {
			e.null("prompt_token_ids")
		}
	}
	if v != vllmversion.V0_8 {
		e.null("kv_transfer_params")
	}
	if v.PerRequestMetrics() {
		if f := s.timedFinish(c); f != nil {
			writeTiming(e, f, completion, true)
		} else {
			e.null("metrics")
		}
	}
	e.close()
	writeBody(w, http.StatusOK, e.b)
}

// chatMessage writes the assistant message of a non-streaming chat choice (ChatMessage).
func (s *Server) chatMessage(e *enc, text string) {
	e.openKey("message")
	e.str("role", "assistant")
	switch s.cfg.Version {
	case vllmversion.V0_8:
		e.null("reasoning_content")
		e.str("content", text)
		e.raw("tool_calls", "[]")
	default:
		e.str("content", text)
		e.null("refusal")
		e.null("annotations")
		e.null("audio")
		e.null("function_call")
		e.raw("tool_calls", "[]")
		if s.cfg.Version == vllmversion.Main {
			e.null("reasoning")
		} else {
			e.null("reasoning_content")
		}
	}
	e.close()
}

// reportedCached is the num_cached_tokens vLLM reports in a non-streaming body: chat reads the
// final output, made when the last sample finished; text completion reads the last prompt's.
func (c *call) reportedCached() int {
	var last *child
	for _, ch := range c.children {
		if c.ep != chatEP && ch.prompt != len(c.prompts)-1 {
			continue
		}
		if last == nil || ch.order > last.order {
			last = ch
		}
	}
	if last == nil || last.fin == nil {
		return 0
	}
	return last.fin.CachedTokens
}
