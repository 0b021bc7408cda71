package record

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/servescope/servescope/dev/benchcpu"
)

// BenchmarkObserverFeedStream measures the per-stream cost of reading a vLLM chat stream with
// the usage chunk removed, one engine write (SSE event) per Feed as vLLM sends them.
func BenchmarkObserverFeedStream(b *testing.B) {
	in := golden(b, "chat_stream.engine.sse")
	events := bytes.SplitAfter(in, []byte("\n\n"))
	script, _ := NewScriptCheck(nil)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	stop := benchcpu.Start(b)
	for b.Loop() {
		o := NewObserver(ObserverOptions{Endpoint: Chat, Script: script, StripUsage: true})
		for _, ev := range events {
			o.Feed(ev, t0)
		}
	}
	stop()
}

// BenchmarkParseRequest measures reading a chat request body and asking for usage.
func BenchmarkParseRequest(b *testing.B) {
	body := []byte(`{"model":"Qwen/Qwen2.5-7B-Instruct-AWQ","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France?"}],"max_tokens":128,"stream":true,"metadata":{"prompt_version":"p7"}}`)
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		ParseRequest(Chat, body, h, false)
		if _, ok := AskUsage(body); !ok {
			b.Fatal("usage not asked for")
		}
	}
}

// BenchmarkObserverBody measures reading a vLLM non-streaming chat completion, written to the
// observer in one piece as the proxy forwards it.
func BenchmarkObserverBody(b *testing.B) {
	body := golden(b, "chat.json")
	script, _ := NewScriptCheck(nil)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	stop := benchcpu.Start(b)
	for b.Loop() {
		o := NewObserver(ObserverOptions{Endpoint: Chat, Script: script})
		o.Body(body)
		o.BodyEnd()
		if o.CompletionTokens == nil {
			b.Fatal("usage not read")
		}
	}
	stop()
}

// BenchmarkObserverContentChunk measures one content chunk of a long stream, the observer's
// steady cost per generated token: vLLM's chunk, read by Pass (the gateway asked for usage, so a
// removal is pending) and Read, as the proxy does around each write.
func BenchmarkObserverContentChunk(b *testing.B) {
	chunk := []byte(`data: {"id":"chatcmpl-0a1b","object":"chat.completion.chunk","created":1764460000,"model":"Qwen/Qwen2.5-7B-Instruct-AWQ","choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	script, _ := NewScriptCheck(nil)
	o := NewObserver(ObserverOptions{Endpoint: Chat, Script: script, StripUsage: true})
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	stop := benchcpu.Start(b)
	for b.Loop() {
		if out := o.Pass(chunk, t0); len(out) != len(chunk) {
			b.Fatal("the chunk did not pass")
		}
		o.Read()
	}
	stop()
}
