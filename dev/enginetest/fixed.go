package enginetest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Fixed answers every chat completion at once with precomputed vLLM-shaped bytes, costing next
// to nothing per request, so that a benchmark measures what sits in front of it: a JSON body
// (chat.completion with usage), or a stream of a role chunk, one content chunk per token and
// "data: [DONE]", with the usage-only chunk before [DONE] when the request asks for it
// (stream_options.include_usage). It reads the request only to tell those apart.
type Fixed struct {
	// Plain is the non-streaming answer.
	Plain []byte
	// Stream and StreamUsage are the streamed answers without and with the usage-only chunk.
	Stream, StreamUsage []byte
}

// NewFixed returns a Fixed engine whose answers have chunks content tokens.
func NewFixed(chunks int) *Fixed {
	const head = `{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1764460000,"model":"m","choices":[`
	var sb, text strings.Builder
	sb.WriteString("data: " + head + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	for i := range chunks {
		fin := "null"
		if i == chunks-1 {
			fin = `"length"`
		}
		fmt.Fprintf(&sb, "data: %s{\"index\":0,\"delta\":{\"content\":\" word%d\"},\"logprobs\":null,\"finish_reason\":%s}]}\n\n", head, i, fin)
		fmt.Fprintf(&text, " word%d", i)
	}
	usage := fmt.Sprintf(`{"prompt_tokens":9,"total_tokens":%d,"completion_tokens":%d}`, 9+chunks, chunks)
	stream := sb.String()
	withUsage := stream + "data: " + head + `],"usage":` + usage + "}\n\n"
	plain := fmt.Sprintf(`{"id":"chatcmpl-bench","object":"chat.completion","created":1764460000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%q,"tool_calls":[]},"logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":%s}`, text.String(), usage)
	return &Fixed{Plain: []byte(plain), Stream: []byte(stream + "data: [DONE]\n\n"), StreamUsage: []byte(withUsage + "data: [DONE]\n\n")}
}

// Answer returns the answer to a request body and whether it is an event stream.
func (e *Fixed) Answer(body []byte) (answer []byte, stream bool) {
	if !bytes.Contains(body, []byte(`"stream":true`)) {
		return e.Plain, false
	}
	if bytes.Contains(body, []byte(`"include_usage":true`)) {
		return e.StreamUsage, true
	}
	return e.Stream, true
}

// ServeHTTP implements http.Handler: a body in one write, a stream one write and flush per
// event, as vLLM does.
func (e *Fixed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, stream := e.Answer(body)
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	fl := w.(http.Flusher)
	for len(out) > 0 {
		i := bytes.Index(out, []byte("\n\n"))
		if _, err := w.Write(out[:i+2]); err != nil {
			return
		}
		fl.Flush()
		out = out[i+2:]
	}
}
