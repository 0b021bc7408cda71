package simserver

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
	"net/http"
	"time"

	"github.com/servescope/servescope/sim/openaiwire"
	"github.com/servescope/servescope/sim/vllmsim/engine"
)

// handleResponses serves POST /v1/responses (0.10 and later) as vLLM's serving_responses.py does
// for a text model: the input messages (instructions first, as a system message) through the chat
// template, one engine request whose id is the response id (the body's request_id, by default
// "resp_" and 32 hex digits), then a Response object, or with "stream": true named SSE events
// ("event: <type>" then "data: <json>") ending with response.completed and no [DONE].
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	req, err := openaiwire.DecodeResponsesRequest(r.Body)
	if err != nil {
		s.writeDecodeError(w, err)
		return
	}
	sp := sampling{maxTokens: req.MaxOutputTokens, temperature: req.Temperature, topP: req.TopP}
	c, aerr := s.newCall(responsesEP, r, req.Model, "", false, nil, sp)
	if aerr != nil {
		s.writeError(w, aerr)
		return
	}
	c.id = req.RequestID
	if c.id == "" {
		c.id = "resp_" + randomHex()
	}
	c.stream, c.responses = req.Stream, req
	msgs := chatMessages(req.Input)
	if req.Instructions != nil {
		msgs = append([]engine.ChatMessage{{Role: "system", Content: *req.Instructions}}, msgs...)
	}
	ids := s.tok.Encode(engine.ApplyChatTemplate(msgs, true), true)
	if aerr := s.setPrompts(c, [][]int{ids}, req.MaxOutputTokens); aerr != nil {
		s.writeError(w, aerr)
		return
	}
	if !s.submit(w, r, c) {
		return
	}
	defer s.release(c)
	if c.stream {
		s.streamResponse(w, r, c)
		return
	}
	if !s.collect(w, r, c) {
		return
	}
	ch := c.children[0]
	e := &enc{}
	s.responseObject(e, c, "completed", "msg_"+randomHex(), string(ch.text), ch)
	writeBody(w, http.StatusOK, e.b)
}

// responseObject writes a ResponsesResponse. ch nil is the in-progress object of the first events
// (no output, null usage).
func (s *Server) responseObject(e *enc, c *call, status, msgID, text string, ch *child) {
	req := c.responses
	e.open()
	e.str("id", c.id)
	e.int64("created_at", c.created)
	e.strOrNull("instructions", req.Instructions)
	e.null("metadata")
	e.str("model", c.model)
	e.str("object", "response")
	e.arr("output")
	if ch != nil {
		outputMessage(e, msgID, "completed", text, true)
	}
	e.endArr()
	e.bool("parallel_tool_calls", true)
	e.float("temperature", c.temperature)
	e.str("tool_choice", "auto")
	e.raw("tools", "[]")
	e.float("top_p", c.topP)
	e.bool("background", false)
	e.int("max_output_tokens", c.maxTokens[0])
	e.null("max_tool_calls")
	e.null("previous_response_id")
	e.null("prompt")
	e.null("reasoning")
	e.str("service_tier", "auto")
	e.str("status", status)
	e.null("text")
	e.int("top_logprobs", 0)
	e.str("truncation", "disabled")
	if ch == nil {
		e.null("usage")
	} else {
		prompt := len(c.prompts[0])
		cached := 0
		if ch.fin != nil {
			cached = ch.fin.CachedTokens
		}
		e.openKey("usage")
		e.int("input_tokens", prompt)
		e.openKey("input_tokens_details")
		e.int("cached_tokens", cached)
		e.close()
		e.int("output_tokens", ch.tokens)
		e.openKey("output_tokens_details")
		e.int("reasoning_tokens", 0)
		e.close()
		e.int("total_tokens", prompt+ch.tokens)
		e.close()
	}
	if req.User != "" {
		e.str("user", req.User)
	} else {
		e.null("user")
	}
	e.close()
}

// outputMessage writes a ResponseOutputMessage (as a value inside an array or event).
func outputMessage(e *enc, id, status, text string, withContent bool) {
	e.open()
	e.str("id", id)
	e.arr("content")
	if withContent {
		outputText(e, text, "null")
	}
	e.endArr()
	e.str("role", "assistant")
	e.str("status", status)
	e.str("type", "message")
	e.close()
}

// outputText writes a ResponseOutputText part; logprobs is a JSON literal ("null" or "[]").
func outputText(e *enc, text, logprobs string) {
	e.open()
	e.raw("annotations", "[]")
	e.str("text", text)
	e.str("type", "output_text")
	e.raw("logprobs", logprobs)
	e.close()
}

// streamResponse writes the Responses API events of vLLM's simple (non-harmony) streaming path:
// response.created and response.in_progress at once; with the first token
// response.output_item.added and response.content_part.added; one response.output_text.delta per
// token; then response.output_text.done, response.content_part.done, response.output_item.done
// and response.completed (whose response carries the usage). sequence_number counts from 0.
func (s *Server) streamResponse(w http.ResponseWriter, r *http.Request, c *call) {
	x := startSSE(w)
	seq := 0
	e := &enc{}
	// Event fields are in the OpenAI SDK models' (alphabetical) order; body writes those before
	// sequence_number, after writes those between it and type.
	emit3 := func(typ string, body, after func()) {
		e.b, e.more = e.b[:0], false
		e.open()
		body()
		e.int("sequence_number", seq)
		if after != nil {
			after()
		}
		e.str("type", typ)
		e.close()
		x.event(typ, e.b)
		seq++
	}
	emit := func(typ string, body func()) { emit3(typ, body, nil) }
	emit("response.created", func() { e.key("response"); s.responseObject(e, c, "in_progress", "", "", nil) })
	emit("response.in_progress", func() { e.key("response"); s.responseObject(e, c, "in_progress", "", "", nil) })
	if x.flush() != nil {
		s.abortAll(c)
		return
	}
	ch := c.children[0]
	msgID := "msg_" + randomHex()
	part := func(text, logprobs string) {
		e.key("part")
		outputText(e, text, logprobs)
	}
	buf := make([]engine.Token, 0, 16)
	var text []byte
	for !ch.done {
		select {
		case <-c.notify:
		case <-r.Context().Done():
			s.abortAll(c)
			return
		}
		toks, fin, done, err := ch.seq.Take(buf[:0])
		for _, t := range toks {
			if ch.tokens == 0 {
				emit("response.output_item.added", func() {
					e.key("item")
					outputMessage(e, msgID, "in_progress", "", false)
					e.int("output_index", 0)
				})
				emit("response.content_part.added", func() {
					e.int("content_index", 0)
					e.str("item_id", msgID)
					e.int("output_index", 0)
					part("", "[]")
				})
			}
			ch.tokens++
			text = append(text, t.Text...)
			emit("response.output_text.delta", func() {
				e.int("content_index", 0)
				e.str("delta", t.Text)
				e.str("item_id", msgID)
				e.raw("logprobs", "[]")
				e.int("output_index", 0)
			})
		}
		if done {
			ch.done = true
			if err != nil {
				if !errors.Is(err, engine.ErrAborted) {
					x.data(s.streamError(err))
				}
				_ = x.flush()
				return
			}
			ch.fin = fin
		}
		if x.flush() != nil {
			s.abortAll(c)
			return
		}
	}
	full := string(text)
	emit3("response.output_text.done", func() {
		e.int("content_index", 0)
		e.str("item_id", msgID)
		e.raw("logprobs", "[]")
		e.int("output_index", 0)
	}, func() { e.str("text", full) })
	emit("response.content_part.done", func() {
		e.int("content_index", 0)
		e.str("item_id", msgID)
		e.int("output_index", 0)
		part(full, "null")
	})
	emit("response.output_item.done", func() {
		e.key("item")
		outputMessage(e, msgID, "completed", full, true)
		e.int("output_index", 0)
	})
	emit("response.completed", func() { e.key("response"); s.responseObject(e, c, "completed", msgID, full, ch) })
	_ = x.flush()
}

// handleEmbeddings serves POST /v1/embeddings as vLLM's pooling server does: one prefill-only
// engine request per input ("embd-<id>-<i>"), a deterministic unit vector per input derived from
// its token ids, and usage with prompt_tokens = total_tokens and completion_tokens 0.
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	req, err := openaiwire.DecodeEmbeddingRequest(r.Body)
	if err != nil {
		s.writeDecodeError(w, err)
		return
	}
	c, aerr := s.newCall(embeddingsEP, r, req.Model, "", false, nil, sampling{})
	if aerr == nil {
		aerr = s.setPrompts(c, s.encodePrompts(req.Input), nil)
	}
	dim := s.cfg.EmbeddingDim
	if aerr == nil && req.Dimensions != nil {
		if *req.Dimensions > dim {
			aerr = badRequest("Model does not support matryoshka representation, changing output dimensions will lead to poor results.", "dimensions")
		} else {
			dim = *req.Dimensions
		}
	}
	if aerr != nil {
		s.writeError(w, aerr)
		return
	}
	if !s.submit(w, r, c) {
		return
	}
	defer s.release(c)
	if !s.collect(w, r, c) {
		return
	}
	c.created = time.Now().Unix()
	e := &enc{}
	e.open()
	e.str("id", c.id)
	e.str("object", "list")
	e.int64("created", c.created)
	e.str("model", c.model)
	e.arr("data")
	prompt := 0
	for i, p := range c.prompts {
		prompt += len(p)
		vec := embed(p, dim)
		e.open()
		e.int("index", i)
		e.str("object", "embedding")
		if req.EncodingFormat == "base64" {
			raw := make([]byte, 4*len(vec))
			for k, f := range vec {
				binary.LittleEndian.PutUint32(raw[4*k:], math.Float32bits(float32(f)))
			}
			e.str("embedding", base64.StdEncoding.EncodeToString(raw))
		} else {
			e.arr("embedding")
			for _, f := range vec {
				e.sep()
				e.b = appendPyFloat(e.b, f)
				e.more = true
			}
			e.endArr()
		}
		e.close()
	}
	e.endArr()
	s.usageFull(e, prompt, 0, 0)
	e.close()
	writeBody(w, http.StatusOK, e.b)
}

// embed is a deterministic unit vector of dim float32-representable components for token ids.
func embed(ids []int, dim int) []float64 {
	v := make([]float64, dim)
	h := uint64(1469598103934665603)
	for _, id := range ids {
		h = (h ^ uint64(id)) * 1099511628211
		for k := 0; k < 4; k++ {
			h ^= h << 13
			h ^= h >> 7
			h ^= h << 17
			v[h%uint64(dim)] += float64(int64(h>>40)%2001-1000) / 1000
		}
	}
	norm := 0.0
	for _, f := range v {
		norm += f * f
	}
	if norm == 0 {
		v[0], norm = 1, 1
	}
	norm = math.Sqrt(norm)
	for k := range v {
		v[k] = float64(float32(v[k] / norm))
	}
	return v
}
