package record

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// Response is what the gateway learned from an engine response.
type Response struct {
	// Model is the response's `model` (the served model).
	Model string
	// ResponseID is the response's `id` (vLLM: chatcmpl-…, cmpl-…, embd-…, resp_…).
	ResponseID string
	// PromptTokens, CompletionTokens and CachedTokens come from the final usage (chat and
	// completions: the body's `usage` or the stream's usage-only chunk, prompt_tokens,
	// completion_tokens and prompt_tokens_details.cached_tokens; /v1/responses: input_tokens,
	// output_tokens and input_tokens_details.cached_tokens; embeddings: prompt_tokens and
	// completion_tokens); nil when the engine sent none. Per-chunk usage (continuous_usage_stats)
	// counts one choice so far and is not read.
	PromptTokens, CompletionTokens, CachedTokens *uint32
	// Usage is true when a final usage object was read.
	Usage bool
	// The engine's per-request timing object `metrics` (vLLM main with
	// --enable-per-request-metrics: queue_time_ms, time_to_first_token_ms (from scheduling),
	// generation_time_ms, mean_itl_ms), in seconds.
	QueueSeconds, ScheduledToFirstTokenSeconds, DecodeSeconds, EngineITLSeconds *float64
	// Error is set when the body or a stream event was an error, in any shape vLLM used (see
	// EngineError).
	Error *EngineError
	// ForeignChars counts generated letters outside the allowed scripts, over every choice.
	ForeignChars uint32
	// ContentBytes is the size of the generated text seen (content, reasoning, text), in bytes.
	ContentBytes int
	// Terminal is set once the stream's last event passed: "data: [DONE]" (chat, completions), or
	// response.completed, response.incomplete, response.failed or error (/v1/responses). After
	// it, the client has the whole answer.
	Terminal bool
	// Continuous is set when a chunk carrying choices also carried usage: the engine sends usage
	// on every chunk (stream_options.continuous_usage_stats, or a server forcing it).
	Continuous bool
}

// EngineError is an error reported by the engine.
type EngineError struct {
	// Type is the error's type (e.g. "BadRequestError"), or its code when it has no type; empty
	// when the error said neither.
	Type string
	// Message is the error text.
	Message string
}

// Observer reads an engine response as it passes through the gateway. For a stream it splits the
// bytes into server-sent events, reads each event's JSON once, keeps each choice's timeline, and
// removes the usage-only chunk when the gateway asked for it on the client's behalf. For a body it
// keeps only the top-level members it needs. It is not safe for concurrent use.
type Observer struct {
	Response

	endpoint   Endpoint
	script     *ScriptCheck
	strip      bool // remove one usage-only chunk
	stripped   bool
	capture    bool
	captureMax int
	output     strings.Builder

	choices     choices
	firstOutput time.Time

	pending []byte // bytes of an event not yet complete
	out     []byte // reused output buffer when an event is removed
	joined  []byte // scratch for multi-line data
	holding bool   // a removal may come: partial events are held back

	// What the last Pass left for Read: the bytes passed unread (nothing held back), or the
	// events of data (spans) passed unread and where data's incomplete tail starts.
	now    time.Time
	unread []byte
	data   []byte
	spans  [][2]int
	tail   int
	framed bool // data, spans and tail are set

	body *bodyMembers

	tmpl     chunkTemplate // the stream's last plain chunk (fastchunk.go)
	slowOnly bool          // tests: read every chunk with the general reader
}

// ObserverOptions configures an Observer.
type ObserverOptions struct {
	// Endpoint is the request's endpoint; it decides how objects are read.
	Endpoint Endpoint
	// Script checks generated text; nil turns the output check off.
	Script *ScriptCheck
	// StripUsage removes the stream's usage-only chunk (`"choices":[]` with `usage`), once: set it
	// when the gateway asked for that chunk (see AskUsage). It is kept when the engine turns out
	// to send usage on every chunk, because then it sends the final one regardless of the request.
	StripUsage bool
	// Capture keeps up to CaptureMax bytes of the generated text of choice 0.
	Capture    bool
	CaptureMax int
	// MaxBodyBytes bounds what is kept of a non-streaming body's members (default 8 MiB); a larger
	// member (e.g. choices of a huge answer) is skipped while later ones (usage) are still read.
	MaxBodyBytes int
}

// NewObserver returns an observer.
func NewObserver(opt ObserverOptions) *Observer {
	o := &Observer{endpoint: opt.Endpoint, script: opt.Script, strip: opt.StripUsage, holding: opt.StripUsage,
		capture: opt.Capture, captureMax: opt.CaptureMax}
	budget := opt.MaxBodyBytes
	if budget <= 0 {
		budget = 8 << 20
	}
	o.body = newBodyMembers(budget, skipBodyMember)
	return o
}

// skipBodyMember names top-level members the gateway never reads: vectors, token ids and
// logprobs of the prompt.
func skipBodyMember(key string) bool {
	switch key {
	case "data", "prompt_logprobs", "prompt_token_ids", "kv_transfer_params":
		return true
	}
	return false
}

// Output returns the captured generated text of choice 0 (empty unless capture is on).
func (o *Observer) Output() string { return o.output.String() }

// FirstOutput is when the first event carrying generated output of any kind (text, reasoning, a
// tool call, a Responses delta) was fed; zero when none was.
func (o *Observer) FirstOutput() time.Time { return o.firstOutput }

// FinishReason is choice 0's finish reason ("" when unknown).
func (o *Observer) FinishReason() string {
	if len(o.choices.list) > 0 {
		return o.choices.list[0].finish
	}
	return ""
}

// FinishReasons returns every choice's finish reason by choice index ("" for a choice without
// one), at most maxChoices; nil when no choice had one.
func (o *Observer) FinishReasons() []string { return o.choices.finishReasons() }

// TPOT returns the mean time per output token after the first, per choice, in seconds:
// Σc (lastc − firstc) ÷ (completionTokens − k) over the k choices that produced tokens, where
// firstc and lastc are the feed times of a choice's first and last token-bearing events. Pass the
// usage total; without usage, pass TokenEvents(). ok is false when there are not two tokens of
// one choice.
func (o *Observer) TPOT(completionTokens uint32) (seconds float64, ok bool) {
	return o.choices.tpot(completionTokens)
}

// TokenEvents counts stream events that carried tokens, over every choice: the basis of the
// completion token estimate when the engine gives no usage.
func (o *Observer) TokenEvents() int { return o.choices.events }

// Feed takes bytes just read from an SSE stream at time now, reads every event they complete and
// returns the bytes to send to the client now: Pass and Read at once. The returned slice is valid
// until the next call.
func (o *Observer) Feed(p []byte, now time.Time) []byte {
	out := o.Pass(p, now)
	if len(out) > 0 && o.framed && len(o.pending) > 0 && &out[0] == &o.pending[0] {
		// Read moves the incomplete tail to the front of pending, over these bytes.
		o.out = append(o.out[:0], out...)
		out = o.out
	}
	o.Read()
	return out
}

// Pass takes bytes just read from an SSE stream at time now and returns the bytes to send to the
// client now, reading no more of them than that decision needs: the events are read by Read,
// which the caller calls after sending, so that reading an event never delays it. Without a
// removal pending, everything passes at once, unread. With one pending, a partial event is held
// back until it is complete, and an event that may be the usage-only chunk to remove (it names
// usage, in plain letters or through a \u escape) is read at once, after the events before it;
// once the removal happened everything passes again. The returned slice is valid until the next
// Pass; call Read before the next Pass.
func (o *Observer) Pass(p []byte, now time.Time) []byte {
	o.now = now
	if !o.holding {
		o.unread = p
		return p
	}
	data := p
	aliased := len(o.pending) > 0
	if aliased {
		o.pending = append(o.pending, p...)
		data = o.pending
	}
	o.spans = o.spans[:0]
	start, emitFrom := 0, 0
	removed := false
	for {
		n := eventEnd(data[start:])
		if n < 0 {
			break
		}
		end := start + n
		if ev := data[start:end]; !removed && o.mayRemove(ev) {
			// Read in order: the events before this one first.
			o.readSpans(data)
			if o.event(ev, now) {
				// At most one event is ever removed, so o.out starts empty here.
				o.out = append(o.out[:0], data[emitFrom:start]...)
				emitFrom = end
				removed = true
			}
		} else {
			o.spans = append(o.spans, [2]int{start, end})
		}
		start = end
	}
	var out []byte
	switch {
	case removed:
		// Nothing more will be removed: the rest passes, a partial event included.
		o.out = append(o.out, data[emitFrom:]...)
		out = o.out
	default:
		out = data[:start]
	}
	o.data, o.tail, o.framed = data, start, true
	return out
}

// mayRemove reports whether the complete event ev could be the usage-only chunk: it holds
// "usage", or an escape that could spell it, and is not the stream's last plain chunk with
// another text (chunkTemplate: a chunk without usage).
func (o *Observer) mayRemove(ev []byte) bool {
	if d, ok := bytes.CutPrefix(ev, []byte("data: ")); ok && len(d) > 2 {
		if _, plain := o.tmpl.match(d[:len(d)-2]); plain && d[len(d)-1] == '\n' && d[len(d)-2] == '\n' {
			return false
		}
	}
	if i := bytes.IndexByte(ev, '\\'); i >= 0 && bytes.Contains(ev[i:], []byte(`\u`)) {
		return true
	}
	return bytes.Contains(ev, []byte("usage"))
}

// readSpans reads the events of data that Pass left unread so far.
func (o *Observer) readSpans(data []byte) {
	for _, sp := range o.spans {
		o.event(data[sp[0]:sp[1]], o.now)
	}
	o.spans = o.spans[:0]
}

// Read reads the events that the bytes of the last Pass completed and that Pass left unread
// (removing none: a removal is decided in Pass), and keeps an incomplete last event for the
// next Pass.
func (o *Observer) Read() {
	if p := o.unread; p != nil {
		o.unread = nil
		data := p
		if len(o.pending) > 0 {
			o.pending = append(o.pending, p...)
			data = o.pending
		}
		start := 0
		for {
			n := eventEnd(data[start:])
			if n < 0 {
				break
			}
			o.event(data[start:start+n], o.now)
			start += n
		}
		o.keepTail(data, start, len(o.pending) > 0)
		return
	}
	if !o.framed {
		return
	}
	o.readSpans(o.data)
	o.keepTail(o.data, o.tail, len(o.pending) > 0 && &o.data[0] == &o.pending[0])
	o.data, o.framed = nil, false
}

// keepTail keeps data[start:], an incomplete event, in pending; aliased says data is pending.
func (o *Observer) keepTail(data []byte, start int, aliased bool) {
	switch tail := data[start:]; {
	case len(tail) == 0:
		o.pending = o.pending[:0]
	case aliased:
		o.pending = o.pending[:copy(o.pending, tail)]
	default:
		o.pending = append(o.pending[:0], tail...)
	}
}

// End returns the bytes still held back at the end of the stream (an incomplete last event),
// which pass unchanged. Clients discard an incomplete event, so it is not read.
func (o *Observer) End() []byte {
	if !o.holding || len(o.pending) == 0 {
		return nil
	}
	rest := o.pending
	o.pending = nil
	return rest
}

// event reads one complete SSE event and reports whether to remove it.
func (o *Observer) event(ev []byte, now time.Time) bool {
	data, scratch, ok := sseData(ev, o.joined)
	o.joined = scratch
	if !ok || len(data) == 0 {
		return false
	}
	if data[0] != '{' {
		if string(data) == "[DONE]" {
			o.Terminal = true
		}
		return false
	}
	if o.endpoint == Responses {
		o.responsesEvent(parse(data), now)
		return false
	}
	if !o.slowOnly && o.chunkFast(data, now) {
		return false // no usage in it: nothing to remove
	}
	usageOnly := o.chunk(parse(data), now)
	if usageOnly && o.strip && !o.stripped && !o.Continuous {
		o.stripped = true
		o.holding = false // nothing else is removed
		return true
	}
	return false
}

// chunk reads one chat or text completion stream chunk and reports whether it is a usage-only
// chunk: an empty choices array and a usage object.
func (o *Observer) chunk(obj gjson.Result, now time.Time) (usageOnly bool) {
	var usage gjson.Result
	choicesN := -1
	var errObj errorFields
	eachMember(obj, func(key string, v gjson.Result) {
		switch key {
		case "id":
			o.setID(v)
		case "model":
			o.setModel(v)
		case "choices":
			choicesN = eachElement(v, func(c gjson.Result) { o.streamChoice(c, now) })
		case "usage":
			usage = v
		case "metrics":
			o.metrics(v)
		default:
			errObj.member(key, v)
		}
	})
	if e := errObj.engineError(); e != nil {
		o.setError(e)
	}
	if !given(usage) {
		return false
	}
	if choicesN > 0 {
		o.Continuous = true
		return false
	}
	if o.usage(usage) {
		return choicesN == 0
	}
	return false
}

// streamChoice reads one choice of a stream chunk.
func (o *Observer) streamChoice(c gjson.Result, now time.Time) {
	index := -1
	var finish, text, reasoning gjson.Result
	var tools, hasRole bool
	eachMember(c, func(key string, v gjson.Result) {
		switch key {
		case "index":
			index = choiceIndex(v)
		case "finish_reason":
			finish = v
		case "text":
			text = v
		case "delta":
			eachMember(v, func(k string, f gjson.Result) {
				switch k {
				case "role":
					hasRole = !isNull(f)
				case "content":
					text = f
				case "reasoning_content", "reasoning":
					if !given(reasoning) {
						reasoning = f
					}
				case "tool_calls":
					tools = eachElement(f, func(gjson.Result) {}) > 0
				}
			})
		}
	})
	output := tools
	if s, ok := str(reasoning); ok && s != "" {
		output = true
		o.addText(index, s)
	}
	if s, ok := str(text); ok && s != "" {
		output = true
		o.addText(index, s)
	}
	if output && o.firstOutput.IsZero() {
		o.firstOutput = now
	}
	st := o.choices.at(index)
	if st == nil {
		return
	}
	// vLLM's first chunk of each chat choice carries only the role (and content ""): no token.
	if output || !hasRole {
		st.token(now)
		o.choices.events++
	}
	if s, ok := str(finish); ok && s != "" {
		st.finish = strings.Clone(s)
	}
}

// choiceIndex is a choice's `index`, or -1 when it is not a non-negative integer.
func choiceIndex(v gjson.Result) int {
	if v.Type != gjson.Number {
		return -1
	}
	if n, err := strconv.Atoi(v.Raw); err == nil && n >= 0 {
		return n
	}
	return -1
}

// responsesEvent reads one /v1/responses stream event (OpenAI's ResponseStreamEvent types, which
// vLLM's api_router writes as "event: <type>\ndata: <json>").
func (o *Observer) responsesEvent(obj gjson.Result, now time.Time) {
	var typ string
	var response, delta gjson.Result
	var errObj errorFields
	eachMember(obj, func(key string, v gjson.Result) {
		switch key {
		case "type":
			typ, _ = str(v)
			errObj.member(key, v)
		case "response":
			response = v
		case "delta":
			delta = v
		default:
			errObj.member(key, v)
		}
	})
	switch {
	case strings.HasSuffix(typ, ".delta"):
		s, ok := str(delta)
		if !ok || s == "" {
			return
		}
		if o.firstOutput.IsZero() {
			o.firstOutput = now
		}
		o.choices.at(0).token(now)
		o.choices.events++
		switch typ {
		case "response.output_text.delta", "response.reasoning_text.delta", "response.reasoning_summary_text.delta", "response.refusal.delta":
			o.addText(0, s)
		}
	case typ == "error":
		o.Terminal = true
		if e := errObj.engineError(); e != nil {
			o.setError(e)
		}
	case typ == "response.completed" || typ == "response.incomplete" || typ == "response.failed":
		o.Terminal = true
		o.responseObject(response)
	case response.Exists():
		o.responseObject(response)
	}
}

// responseFields are the members of a Responses API response object the gateway reads.
type responseFields struct {
	id, model, status, incomplete, usage, output, errV gjson.Result
}

func (r *responseFields) member(key string, v gjson.Result) {
	switch key {
	case "id":
		r.id = v
	case "model":
		r.model = v
	case "status":
		r.status = v
	case "incomplete_details":
		r.incomplete = v
	case "usage":
		r.usage = v
	case "output":
		r.output = v
	case "error":
		r.errV = v
	}
}

// responseObject reads the response object inside a Responses stream event.
func (o *Observer) responseObject(v gjson.Result) {
	var r responseFields
	eachMember(v, r.member)
	o.response(&r, false)
}

// response reads a Responses API response: the non-streaming body or the response inside a
// stream event. withOutput reads its output items (a body; a stream's deltas were read already).
func (o *Observer) response(r *responseFields, withOutput bool) {
	o.setID(r.id)
	o.setModel(r.model)
	if given(r.usage) {
		o.usage(r.usage)
	}
	if withOutput {
		eachElement(r.output, o.responseOutputItem)
	}
	if given(r.errV) {
		var e errorFields
		eachMember(r.errV, e.member)
		o.setError(e.fields())
	}
	// vLLM sets status "incomplete" (reason max_output_tokens) when the engine finished on
	// "length", "completed" otherwise (vllm/entrypoints/openai/responses/serving.py).
	status, _ := str(r.status)
	reason := ""
	switch status {
	case "completed":
		reason = "stop"
	case "incomplete":
		eachMember(r.incomplete, func(k string, f gjson.Result) {
			if k == "reason" {
				reason, _ = str(f)
			}
		})
		if reason == "max_output_tokens" {
			reason = "length"
		}
	}
	if reason != "" {
		o.choices.at(0).finish = strings.Clone(reason)
	}
}

// responseOutputItem reads one output item of a Responses API body: message text, reasoning text
// and function call arguments are generated output.
func (o *Observer) responseOutputItem(item gjson.Result) {
	eachMember(item, func(k string, f gjson.Result) {
		switch k {
		case "content", "summary":
			eachElement(f, func(part gjson.Result) {
				eachMember(part, func(pk string, pv gjson.Result) {
					if pk == "text" {
						if s, ok := str(pv); ok {
							o.addText(0, s)
						}
					}
				})
			})
		}
	})
}

// Body feeds the next bytes of a non-streaming body.
func (o *Observer) Body(p []byte) { o.body.Write(p) }

// BodyEnd reads the members of the body fed so far.
func (o *Observer) BodyEnd() {
	b := o.body
	if b.notJSON {
		msg := strings.TrimSpace(strings.ToValidUTF8(string(b.textHead), "\uFFFD"))
		if msg != "" {
			o.setError(&EngineError{Message: msg})
		}
		return
	}
	o.setID(parse(b.get("id")))
	o.setModel(parse(b.get("model")))
	switch o.endpoint {
	case Responses:
		if obj, _ := str(parse(b.get("object"))); obj == "response" {
			var r responseFields
			for _, m := range b.members {
				r.member(m.key, parse(m.raw))
			}
			o.response(&r, true)
		}
	default:
		eachElement(parse(b.get("choices")), o.bodyChoice)
		if u := parse(b.get("usage")); given(u) {
			o.usage(u)
		}
		if m := parse(b.get("metrics")); m.Exists() {
			o.metrics(m)
		}
	}
	var e errorFields
	for _, m := range b.members {
		e.member(m.key, parse(m.raw))
	}
	if ee := e.engineError(); ee != nil {
		o.setError(ee)
	}
}

// bodyChoice reads one choice of a non-streaming chat or text completion.
func (o *Observer) bodyChoice(c gjson.Result) {
	index := -1
	var finish gjson.Result
	eachMember(c, func(key string, v gjson.Result) {
		switch key {
		case "index":
			index = choiceIndex(v)
		case "finish_reason":
			finish = v
		case "text":
			if s, ok := str(v); ok {
				o.addText(index, s)
			}
		case "message":
			eachMember(v, func(k string, f gjson.Result) {
				switch k {
				case "content", "reasoning_content", "reasoning":
					if s, ok := str(f); ok {
						o.addText(index, s)
					}
				}
			})
		}
	})
	if st := o.choices.at(index); st != nil {
		if s, ok := str(finish); ok && s != "" {
			st.finish = strings.Clone(s)
		}
	}
}

func (o *Observer) setID(v gjson.Result) {
	if o.ResponseID == "" {
		if s, ok := str(v); ok {
			o.ResponseID = strings.Clone(s)
		}
	}
}

func (o *Observer) setModel(v gjson.Result) {
	if o.Model == "" {
		if s, ok := str(v); ok {
			o.Model = strings.Clone(s)
		}
	}
}

// addText runs the output check on one piece of generated text of a choice and captures choice
// 0's.
func (o *Observer) addText(index int, s string) {
	o.ContentBytes += len(s)
	if o.script != nil {
		o.ForeignChars += o.script.Foreign(s)
	}
	if o.capture && index <= 0 && o.output.Len() < o.captureMax {
		room := o.captureMax - o.output.Len()
		if len(s) > room {
			s = s[:room]
		}
		o.output.WriteString(s)
	}
}

// usage reads a final usage object in either vocabulary; false when v is not an object.
func (o *Observer) usage(v gjson.Result) bool {
	ok := eachMember(v, func(k string, f gjson.Result) {
		switch k {
		case "prompt_tokens", "input_tokens":
			o.PromptTokens = u32(f)
		case "completion_tokens", "output_tokens":
			o.CompletionTokens = u32(f)
		case "prompt_tokens_details", "input_tokens_details":
			eachMember(f, func(k2 string, f2 gjson.Result) {
				if k2 == "cached_tokens" {
					o.CachedTokens = u32(f2)
				}
			})
		}
	})
	o.Usage = o.Usage || ok
	return ok
}

// metrics reads vLLM's per-request timing object (build_per_request_timing_metrics in
// vllm/entrypoints/generate/base/serving.py on main). It has no prefill time.
func (o *Observer) metrics(v gjson.Result) {
	eachMember(v, func(k string, f gjson.Result) {
		switch k {
		case "queue_time_ms":
			o.QueueSeconds = msToS(f)
		case "time_to_first_token_ms":
			o.ScheduledToFirstTokenSeconds = msToS(f)
		case "generation_time_ms":
			o.DecodeSeconds = msToS(f)
		case "mean_itl_ms":
			o.EngineITLSeconds = msToS(f)
		}
	})
}

// setError records the first error seen.
func (o *Observer) setError(e *EngineError) {
	if o.Error == nil {
		o.Error = e
	}
}

func u32(f gjson.Result) *uint32 {
	n, ok := num(f)
	if !ok || n < 0 {
		return nil
	}
	v := clampU32(int64(n))
	return &v
}

func msToS(f gjson.Result) *float64 {
	n, ok := num(f)
	if !ok || n < 0 {
		return nil
	}
	s := n / 1000
	return &s
}
