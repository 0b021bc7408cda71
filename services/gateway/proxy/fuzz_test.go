package proxy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/servescope/servescope/dev/enginetest"
)

// usageMode is how a generated stream gets (or does not get) its usage.
type usageMode uint8

const (
	usageAskedByGateway usageMode = iota // the client asked for none: the gateway asks and removes the chunk
	usageAskedByClient                   // stream_options.include_usage
	usageContinuous                      // include_usage and continuous_usage_stats: usage on every chunk
	usageForcedByEngine                  // the client asked for none, the engine sends it on every chunk anyway
	usageNone                            // the gateway does not ask (GATEWAY_ASK_USAGE=false): no usage
	usageModes
)

// streamCase is one generated engine answer.
type streamCase struct {
	stream enginetest.VLLMStream
	mode   usageMode
	ending uint8 // 0: the engine ends normally; 1: an error event mid-stream; 2: the engine goes away
	body   string
	path   string
}

func genStream(seed uint64, chat bool, prompts, n, mode, ending uint8) streamCase {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c := streamCase{mode: usageMode(mode % uint8(usageModes)), ending: ending % 3}
	s := enginetest.VLLMStream{Chat: chat, Model: "Qwen/Qwen2.5-7B-Instruct-AWQ", Created: 1764460000,
		Prompts: 1 + int(prompts%4), N: 1 + int(n%3), Shuffle: rand.New(rand.NewPCG(seed, 1))}
	c.path = "/v1/completions"
	s.ID = "cmpl-fuzz"
	prompt := `"prompt":["a","b","c","d"]`
	if chat {
		s.Prompts, s.ID, c.path = 1, "chatcmpl-fuzz", "/v1/chat/completions"
		prompt = `"messages":[{"role":"user","content":"hi"}]`
		s.Reasoning = r.IntN(3) == 0
		s.ToolCall = !s.Reasoning && r.IntN(4) == 0
	} else {
		prompt = `"prompt":[` + strings.Repeat(`"p",`, s.Prompts-1) + `"p"]`
	}
	for range s.Choices() {
		s.Tokens = append(s.Tokens, 1+r.IntN(8))
		s.Finish = append(s.Finish, []string{"stop", "length", "tool_calls"}[r.IntN(3)])
	}
	for range s.Prompts {
		s.PromptTokens = append(s.PromptTokens, 1+r.IntN(50))
	}
	if r.IntN(2) == 0 {
		cached := r.IntN(40)
		s.CachedTokens = &cached
	}
	steps := slices.Max(s.Tokens)
	switch c.ending {
	case 1:
		s.ErrorAfterSteps = 1 + r.IntN(steps)
	case 2:
		s.CloseAfterSteps = r.IntN(steps + 1)
		if s.CloseAfterSteps == 0 {
			s.CloseAfterSteps = steps // after the last token, before usage and [DONE]
		}
	}
	opts := ""
	switch c.mode {
	case usageAskedByGateway:
		s.IncludeUsage = true
	case usageAskedByClient:
		s.IncludeUsage, opts = true, `,"stream_options":{"include_usage":true}`
	case usageContinuous:
		s.IncludeUsage, s.ContinuousUsage, opts = true, true, `,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`
	case usageForcedByEngine:
		s.IncludeUsage, s.ContinuousUsage = true, true
	}
	c.stream = s
	c.body = fmt.Sprintf(`{"model":"m",%s,"n":%d,"stream":true%s}`, prompt, s.N, opts)
	return c
}

// cutter splits data into random pieces.
func cutter(seed uint64) func([]byte) [][]byte {
	return func(data []byte) [][]byte {
		r := rand.New(rand.NewPCG(seed, 7))
		var out [][]byte
		for len(data) > 0 {
			n := 1 + r.IntN(min(len(data), 1+r.IntN(300)))
			out = append(out, append([]byte(nil), data[:n]...))
			data = data[n:]
		}
		return out
	}
}

// FuzzProxyStream checks the proxy's invariant on generated vLLM streams: any chunk boundaries,
// interleaved choices, n > 1, several prompts, usage at the end, on every chunk or not at all, an
// error event mid-stream, the engine going away. The client receives exactly the engine's bytes,
// less the one usage chunk the gateway asked for; one request.finished records the usage's tokens
// (or, without usage, one token per token-bearing chunk, which is exact for these streams), every
// choice's finish reason, and the failure if any; the client's connection breaks off when the
// engine's did.
func FuzzProxyStream(f *testing.F) {
	f.Add(uint64(1), false, uint8(2), uint8(0), uint8(usageAskedByGateway), uint8(0), uint64(1)) // three prompts
	f.Add(uint64(2), true, uint8(0), uint8(1), uint8(usageAskedByGateway), uint8(0), uint64(2))  // chat n = 2
	f.Add(uint64(3), true, uint8(0), uint8(2), uint8(usageContinuous), uint8(0), uint64(3))
	f.Add(uint64(4), false, uint8(1), uint8(1), uint8(usageForcedByEngine), uint8(0), uint64(4))
	f.Add(uint64(5), true, uint8(0), uint8(0), uint8(usageAskedByClient), uint8(1), uint64(5))
	f.Add(uint64(6), false, uint8(3), uint8(2), uint8(usageNone), uint8(2), uint64(6))
	f.Add(uint64(7), false, uint8(2), uint8(0), uint8(usageAskedByGateway), uint8(2), uint64(7))
	f.Fuzz(func(t *testing.T, seed uint64, chat bool, prompts, n, mode, ending uint8, cutSeed uint64) {
		c := genStream(seed, chat, prompts, n, mode, ending)
		ws := c.stream.Writes()
		engineBytes := enginetest.Bytes(ws)
		var engineErr error = errEngineGone
		if c.ending != 2 {
			engineErr = errEOF
		}
		var sentToEngine []byte
		engine := replay(ws, cutter(cutSeed), engineErr)
		h, pub := newHandler(t, engineFunc(func(req *http.Request, body []byte) *http.Response {
			sentToEngine = body
			return engine(req, body)
		}), func(o *Options) { o.AskUsage = c.mode != usageNone })
		rec, aborted := call(h, c.path, "fuzz-req", c.body, nil)
		settle(h)

		want := engineBytes
		usageChunk := usageChunkOf(ws)
		if c.mode == usageAskedByGateway && usageChunk != nil {
			want = bytes.Replace(engineBytes, usageChunk, nil, 1)
		}
		if got := rec.Body.Bytes(); !bytes.Equal(got, want) {
			t.Fatalf("client bytes differ from the engine's (%d vs %d)\nrequest %s\n got %q\nwant %q", len(got), len(want), c.body, got, want)
		}
		if aborted != (c.ending == 2) {
			t.Fatalf("client connection aborted %v, engine went away %v", aborted, c.ending == 2)
		}
		asked := !bytes.Equal(sentToEngine, []byte(c.body))
		if asked != (c.mode == usageAskedByGateway || c.mode == usageForcedByEngine) {
			t.Fatalf("gateway asked for usage: %v, in mode %d (sent %s)", asked, c.mode, sentToEngine)
		}

		fin := pub.finished(t, "fuzz-req")
		if fin.StatusCode != 200 {
			t.Fatalf("status %d", fin.StatusCode)
		}
		complete := c.ending == 0
		switch c.ending {
		case 1:
			if fin.ErrorLayer != "upstream" || fin.ErrorCode != "BadRequestError" || !strings.HasPrefix(fin.ErrorMessage, "engine step failed") {
				t.Fatalf("error event not recorded: %q %q %q", fin.ErrorLayer, fin.ErrorCode, fin.ErrorMessage)
			}
		case 2:
			if fin.ErrorLayer != "upstream" || fin.ErrorCode != "stream_interrupted" {
				t.Fatalf("broken engine stream not recorded: %q %q", fin.ErrorLayer, fin.ErrorCode)
			}
		default:
			if fin.ErrorLayer != "" {
				t.Fatalf("unexpected error %q %q %q", fin.ErrorLayer, fin.ErrorCode, fin.ErrorMessage)
			}
		}
		prompt, completion := c.stream.Usage()
		switch {
		case complete && c.mode != usageNone:
			if fin.TokensEstimated || fin.CompletionTokens == nil || int(*fin.CompletionTokens) != completion || fin.PromptTokens == nil || int(*fin.PromptTokens) != prompt {
				t.Fatalf("tokens %v/%v estimated %v, want %d/%d from usage", fin.PromptTokens, fin.CompletionTokens, fin.TokensEstimated, prompt, completion)
			}
			if (c.stream.CachedTokens == nil) != (fin.CachedTokens == nil) || (fin.CachedTokens != nil && int(*fin.CachedTokens) != *c.stream.CachedTokens) {
				t.Fatalf("cached tokens %v, want %v", fin.CachedTokens, c.stream.CachedTokens)
			}
		case complete:
			if !fin.TokensEstimated || fin.CompletionTokens == nil || int(*fin.CompletionTokens) != completion {
				t.Fatalf("estimated completion tokens %v (estimated %v), want one per token chunk: %d", fin.CompletionTokens, fin.TokensEstimated, completion)
			}
		}
		if complete {
			if !slices.Equal(fin.FinishReasons, c.stream.Finish) || fin.FinishReason != c.stream.Finish[0] {
				t.Fatalf("finish reasons %q (%q), want %q", fin.FinishReasons, fin.FinishReason, c.stream.Finish)
			}
			if fin.TTFTSeconds == nil {
				t.Fatal("no TTFT for a stream with output")
			}
		}
		if fin.ResponseID != c.stream.ID {
			t.Fatalf("response id %q, want %q", fin.ResponseID, c.stream.ID)
		}
	})
}

// usageChunkOf returns the bytes of the usage-only chunk among the writes, or nil.
func usageChunkOf(ws []enginetest.Write) []byte {
	for _, w := range ws {
		if bytes.Contains(w.Data, []byte(`"choices":[]`)) {
			return w.Data
		}
	}
	return nil
}
