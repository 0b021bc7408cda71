package record

import (
	"bytes"
	"strconv"
	"strings"
)

// Response is what the gateway learned from an engine response.
type Response struct {
	// Model is the response's `model` (the served model).
	Model string
	// FinishReason is choice 0's finish_reason.
	FinishReason string
	// PromptTokens, CompletionTokens and CachedTokens come from `usage`
	// (prompt_tokens_details.cached_tokens for the cached part); nil when the engine sent none.
	PromptTokens, CompletionTokens, CachedTokens *uint32
	// ContentChunks counts stream chunks that carried non-empty content (text, reasoning or tool
	// calls); the basis of the completion token estimate when there is no usage.
	ContentChunks int
	// ContentBytes is the size of the generated text seen, in bytes.
	ContentBytes int
	// The engine's per-request metrics object (vLLM: queue_time_ms, time_to_first_token_ms,
	// generation_time_ms, mean_itl_ms, and prefill_time_ms when present), in seconds.
	QueueS, ScheduledToFirstTokenS, DecodeS, EngineITLS, PrefillS *float64
	// Error is set when the body or a stream event was an error object, in either vLLM shape:
	// {"error":{"message","type","code"}} or the older flat {"object":"error","message","type","code"}.
	Error *EngineError
	// ForeignChars counts generated letters outside the allowed scripts.
	ForeignChars uint32
	// Done is set once the stream's "data: [DONE]" event was read.
	Done bool
}

// EngineError is an error reported by the engine in a body or a stream event.
type EngineError struct {
	// Type is the error's type (e.g. "BadRequestError"), or its code when it has no type.
	Type string
	// Message is the error text.
	Message string
}

// Observer reads an engine response as it passes through the gateway. For a stream it splits
// the bytes into SSE events, reads each event's JSON once, and optionally removes the usage-only
// chunk the gateway asked for on the client's behalf. It is not safe for concurrent use.
type Observer struct {
	Response

	script     *ScriptCheck
	strip      bool
	capture    bool
	captureMax int
	output     strings.Builder

	pending []byte // bytes of an SSE event not yet complete
	out     []byte // reused output buffer when events are removed
	content bool   // the current Feed saw a content chunk
}

// NewObserver returns an observer. script may be nil (no output check). stripUsage removes
// usage-only stream chunks (`"choices":[]` with a `usage` object). With capture, up to
// captureMax bytes of generated text are kept for Output.
func NewObserver(script *ScriptCheck, stripUsage, capture bool, captureMax int) *Observer {
	return &Observer{script: script, strip: stripUsage, capture: capture, captureMax: captureMax}
}

// Output returns the captured generated text (empty unless capture is on).
func (o *Observer) Output() string { return o.output.String() }

// Feed takes bytes just read from an SSE stream and returns the bytes to send to the client now,
// and whether they contain a chunk with content. Without removal, everything is passed on at
// once; with removal, a partial event is held until it is complete. The returned slice is valid
// until the next call.
func (o *Observer) Feed(p []byte) (out []byte, content bool) {
	o.content = false
	data := p
	aliased := len(o.pending) > 0
	if aliased {
		o.pending = append(o.pending, p...)
		data = o.pending
	}
	start := 0 // start of the current event
	emitFrom := 0
	removed := false
	for i := 0; ; {
		j := bytes.IndexByte(data[i:], '\n')
		if j < 0 {
			break
		}
		i += j
		// An event ends with a blank line: "\n\n" or "\n\r\n".
		end := -1
		if i+1 < len(data) && data[i+1] == '\n' {
			end = i + 2
		} else if i+2 < len(data) && data[i+1] == '\r' && data[i+2] == '\n' {
			end = i + 3
		}
		if end < 0 {
			i++
			continue
		}
		if o.event(data[start:end]) {
			if !removed {
				o.out = o.out[:0]
				removed = true
			}
			o.out = append(o.out, data[emitFrom:start]...)
			emitFrom = end
		}
		start = end
		i = end
	}
	complete := start
	if !o.strip {
		// Everything passes at once; only the parser waits for the rest of an event.
		out = p
	} else if removed {
		o.out = append(o.out, data[emitFrom:complete]...)
		out = o.out
	} else {
		out = data[:complete]
		if aliased && complete < len(data) {
			// The tail moves to the front of pending below, over these bytes.
			o.out = append(o.out[:0], out...)
			out = o.out
		}
	}
	if complete < len(data) {
		if aliased {
			n := copy(o.pending, data[complete:])
			o.pending = o.pending[:n]
		} else {
			o.pending = append(o.pending[:0], data[complete:]...)
		}
	} else {
		o.pending = o.pending[:0]
	}
	return out, o.content
}

// Rest returns the bytes still held at the end of the stream (an incomplete last event), which
// are passed on unchanged.
func (o *Observer) Rest() []byte {
	if !o.strip || len(o.pending) == 0 {
		return nil
	}
	rest := o.pending
	o.pending = nil
	return rest
}

// event reads one complete SSE event and reports whether to remove it.
func (o *Observer) event(ev []byte) bool {
	// Most events have one "data:" line; join several with "\n" as SSE says.
	var payload []byte
	var joined []byte
	lines := 0
	for len(ev) > 0 {
		nl := bytes.IndexByte(ev, '\n')
		line := ev
		if nl >= 0 {
			line, ev = ev[:nl], ev[nl+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v = bytes.TrimPrefix(v, []byte{' '})
		lines++
		switch lines {
		case 1:
			payload = v
		case 2:
			joined = append(append(append(joined, payload...), '\n'), v...)
		default:
			joined = append(append(joined, '\n'), v...)
		}
	}
	if lines > 1 {
		payload = joined
	}
	if len(payload) == 0 || payload[0] != '{' {
		if string(payload) == "[DONE]" {
			o.Done = true
		}
		return false // "[DONE]" or a comment/keep-alive
	}
	usageOnly := o.chunk(payload, true)
	return o.strip && usageOnly
}

// ObserveBody reads a complete (non-streaming) response body or error body.
func (o *Observer) ObserveBody(body []byte) {
	o.chunk(body, false)
}

// chunk reads one response object (a stream chunk or a whole body). It reports whether the
// object is a usage-only chunk: an empty choices array and a usage object.
func (o *Observer) chunk(obj []byte, stream bool) (usageOnly bool) {
	var hasUsage, emptyChoices, flatError bool
	var flatMsg, flatType, flatCode []byte
	objectEach(obj, func(key, v []byte) bool {
		switch string(key) {
		case "model":
			if o.Model == "" {
				if s, ok := strValue(v); ok {
					o.Model = strings.Clone(s)
				}
			}
		case "choices":
			sawContent := false
			n := arrayEach(v, func(c []byte) {
				if o.choice(c) {
					sawContent = true
				}
			})
			emptyChoices = n == 0
			if sawContent && stream {
				o.ContentChunks++
				o.content = true
			}
		case "usage":
			hasUsage = o.usage(v) || hasUsage
		case "metrics":
			o.metrics(v)
		case "error":
			if s, ok := strValue(v); ok {
				o.setError(nil, nil, []byte(strconv.Quote(s)))
				break
			}
			var typ, code, msg []byte
			if objectEach(v, func(k, f []byte) bool {
				switch string(k) {
				case "type":
					typ = f
				case "code":
					code = f
				case "message":
					msg = f
				}
				return true
			}) {
				o.setError(typ, code, msg)
			}
		case "object":
			s, _ := strValue(v)
			flatError = s == "error"
		case "message":
			flatMsg = v
		case "type":
			flatType = v
		case "code":
			flatCode = v
		}
		return true
	})
	if flatError {
		o.setError(flatType, flatCode, flatMsg)
	}
	return hasUsage && emptyChoices
}

// choice reads one choice and reports whether it carried content.
func (o *Observer) choice(c []byte) bool {
	index0 := true
	var finish, text []byte
	content := false
	objectEach(c, func(key, v []byte) bool {
		switch string(key) {
		case "index":
			index0 = string(v) == "0"
		case "finish_reason":
			finish = v
		case "text":
			text = v
		case "delta", "message":
			objectEach(v, func(k, f []byte) bool {
				switch string(k) {
				case "content":
					text = f
				case "reasoning_content", "reasoning":
					if s, ok := strValue(f); ok && s != "" {
						content = true
						o.addText(s)
					}
				case "tool_calls":
					if arrayEach(f, func([]byte) {}) > 0 {
						content = true
					}
				}
				return true
			})
		}
		return true
	})
	if s, ok := strValue(text); ok && s != "" {
		content = true
		o.addText(s)
	}
	if index0 {
		if s, ok := strValue(finish); ok && s != "" {
			o.FinishReason = strings.Clone(s)
		}
	}
	return content
}

// addText runs the output check on one piece of generated text and captures it.
func (o *Observer) addText(s string) {
	o.ContentBytes += len(s)
	if o.script != nil {
		o.ForeignChars += o.script.Foreign(s)
	}
	if o.capture && o.output.Len() < o.captureMax {
		room := o.captureMax - o.output.Len()
		if len(s) > room {
			s = s[:room]
		}
		o.output.WriteString(s)
	}
}

// usage reads a usage object; false when v is not one.
func (o *Observer) usage(v []byte) bool {
	return objectEach(v, func(k, f []byte) bool {
		switch string(k) {
		case "prompt_tokens":
			o.PromptTokens = u32(f)
		case "completion_tokens":
			o.CompletionTokens = u32(f)
		case "prompt_tokens_details":
			objectEach(f, func(k2, f2 []byte) bool {
				if string(k2) == "cached_tokens" {
					o.CachedTokens = u32(f2)
				}
				return true
			})
		}
		return true
	})
}

func (o *Observer) metrics(v []byte) {
	objectEach(v, func(k, f []byte) bool {
		switch string(k) {
		case "queue_time_ms":
			o.QueueS = msToS(f)
		case "time_to_first_token_ms":
			o.ScheduledToFirstTokenS = msToS(f)
		case "generation_time_ms":
			o.DecodeS = msToS(f)
		case "mean_itl_ms":
			o.EngineITLS = msToS(f)
		case "prefill_time_ms":
			o.PrefillS = msToS(f)
		}
		return true
	})
}

// setError records the first error object seen; the raw values may be strings, numbers or absent.
func (o *Observer) setError(typ, code, msg []byte) {
	if o.Error != nil {
		return
	}
	e := &EngineError{Message: strings.Clone(rawText(msg)), Type: strings.Clone(rawText(typ))}
	if e.Type == "" {
		e.Type = strings.Clone(rawText(code))
	}
	if e.Message == "" && e.Type == "" {
		e.Message = "engine reported an error without a message"
	}
	o.Error = e
}

// rawText is a raw value as text: a string's content, a number's digits, "" for null or absent.
func rawText(v []byte) string {
	if s, ok := strValue(v); ok {
		return s
	}
	if len(v) == 0 || isNull(v) || v[0] == '{' || v[0] == '[' {
		return ""
	}
	return bstr(v)
}

func u32(f []byte) *uint32 {
	n, ok := numValue(f)
	if !ok || n < 0 {
		return nil
	}
	v := clampU32(int64(n))
	return &v
}

func msToS(f []byte) *float64 {
	n, ok := numValue(f)
	if !ok || n < 0 {
		return nil
	}
	s := n / 1000
	return &s
}
