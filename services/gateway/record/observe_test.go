package record

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/enginetest"
)

func golden(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// feedSplit feeds in to o in pieces cut at the given offsets, piece i at t0 + i ms, and returns
// the concatenated output.
func feedSplit(o *Observer, in []byte, cuts []int) []byte {
	var out []byte
	prev := 0
	for i, c := range append(cuts, len(in)) {
		out = append(out, o.Feed(append([]byte(nil), in[prev:c]...), t0.Add(time.Duration(i)*time.Millisecond))...)
		prev = c
	}
	return append(out, o.End()...)
}

func randomCuts(r *rand.Rand, n int) []int {
	var cuts []int
	for i := 1; i < n; i++ {
		if r.IntN(7) == 0 {
			cuts = append(cuts, i)
		}
	}
	return cuts
}

// splits returns cut lists for in: none, every byte, and random ones.
func splits(r *rand.Rand, n int) [][]int {
	out := [][]int{nil}
	var every []int
	for i := 1; i < n; i++ {
		every = append(every, i)
	}
	out = append(out, every)
	for range 20 {
		out = append(out, randomCuts(r, n))
	}
	return out
}

func u(v uint32) *uint32 { return &v }

func TestObserverStreams(t *testing.T) {
	latin, err := NewScriptCheck(nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		endpoint   Endpoint
		in         string
		strip      bool
		wantOut    string // golden of the client's bytes; "" means identical to in
		model      string
		id         string
		finish     string
		prompt     *uint32
		completion *uint32
		cached     *uint32
		events     int
		foreign    uint32
		errType    string
		errMsg     string
		output     string
		scheduled  float64
	}{
		{name: "chat with injected usage", endpoint: Chat, in: "chat_stream.engine.sse", strip: true, wantOut: "chat_stream.client.sse",
			model: "Qwen/Qwen2.5-7B-Instruct-AWQ", id: "chatcmpl-0a1b", finish: "stop", prompt: u(12), completion: u(5), cached: u(8), events: 5,
			output: "Hello, world! Bye", scheduled: 0.042},
		{name: "chat with client-asked usage", endpoint: Chat, in: "chat_stream.engine.sse", strip: false,
			model: "Qwen/Qwen2.5-7B-Instruct-AWQ", id: "chatcmpl-0a1b", finish: "stop", prompt: u(12), completion: u(5), cached: u(8), events: 5,
			output: "Hello, world! Bye", scheduled: 0.042},
		{name: "completions", endpoint: Completions, in: "completion_stream.engine.sse", strip: false,
			model: "Qwen/Qwen2.5-7B-Instruct-AWQ", id: "cmpl-9", finish: "length", prompt: u(3), completion: u(3), events: 3, output: "Once upon a"},
		{name: "nested error event (0.10.2 and later)", endpoint: Chat, in: "chat_stream_error.sse", strip: true,
			model: "Qwen/Qwen2.5-7B-Instruct-AWQ", id: "chatcmpl-0a1b", events: 1, errType: "InternalServerError", errMsg: "The engine crashed", output: "Hi"},
		{name: "error event of 0.8 (the flat object under error)", endpoint: Chat, in: "chat_stream_error_v08.sse", strip: true,
			model: "Qwen/Qwen2.5-7B-Instruct-AWQ", id: "chatcmpl-0a1b", errType: "BadRequestError", errMsg: "Out of KV cache"},
		{name: "CJK in Latin output", endpoint: Chat, in: "chat_stream_cjk.sse", strip: true,
			model: "Qwen/Qwen2.5-7B-Instruct-AWQ", id: "chatcmpl-0a1b", finish: "length", events: 5, foreign: 3, output: "The answer 是北京."},
		{name: "responses stream", endpoint: Responses, in: "responses_stream.sse",
			model: "Qwen/Qwen3-0.6B", id: "resp_9f3c2a71b0e84d5f8a1e6c4b2d7f0a93", finish: "stop", prompt: u(11), completion: u(6), cached: u(0), events: 4,
			output: "The user greets.Hello!"},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := golden(t, tc.in)
			want := in
			if tc.wantOut != "" {
				want = golden(t, tc.wantOut)
			}
			for _, cuts := range splits(r, len(in)) {
				o := NewObserver(ObserverOptions{Endpoint: tc.endpoint, Script: latin, StripUsage: tc.strip, Capture: true, CaptureMax: 1 << 16})
				out := feedSplit(o, in, cuts)
				if !bytes.Equal(out, want) {
					t.Fatalf("cuts %v: client bytes differ:\n got %q\nwant %q", cuts, out, want)
				}
				if o.Model != tc.model || o.ResponseID != tc.id || o.FinishReason() != tc.finish || o.TokenEvents() != tc.events || o.ForeignChars != tc.foreign || o.Output() != tc.output {
					t.Fatalf("cuts %v: model %q id %q finish %q events %d foreign %d output %q", cuts, o.Model, o.ResponseID, o.FinishReason(), o.TokenEvents(), o.ForeignChars, o.Output())
				}
				if !eqU(o.PromptTokens, tc.prompt) || !eqU(o.CompletionTokens, tc.completion) || !eqU(o.CachedTokens, tc.cached) {
					t.Fatalf("tokens %v %v %v", p(o.PromptTokens), p(o.CompletionTokens), p(o.CachedTokens))
				}
				if (o.Error == nil) != (tc.errType == "") || (o.Error != nil && (o.Error.Type != tc.errType || o.Error.Message != tc.errMsg)) {
					t.Fatalf("error %+v, want %q %q", o.Error, tc.errType, tc.errMsg)
				}
				if tc.scheduled != 0 && (o.ScheduledToFirstTokenSeconds == nil || *o.ScheduledToFirstTokenSeconds != tc.scheduled) {
					t.Fatalf("scheduled to first token %v, want %v", o.ScheduledToFirstTokenSeconds, tc.scheduled)
				}
				if !o.Terminal {
					t.Fatal("the stream's last event was not seen")
				}
			}
		})
	}
}

func TestObserverBodies(t *testing.T) {
	latin, _ := NewScriptCheck([]string{"Latin"})
	tests := []struct {
		file       string
		endpoint   Endpoint
		id         string
		finish     string
		reasons    []string
		prompt     *uint32
		completion *uint32
		cached     *uint32
		foreign    uint32
		errType    string
		errMsg     string
		output     string
	}{
		{file: "chat.json", endpoint: Chat, id: "chatcmpl-1", finish: "stop", reasons: []string{"stop"}, prompt: u(20), completion: u(4), foreign: 9, output: "Привет, мир"},
		{file: "error_nested.json", endpoint: Chat, errType: "BadRequestError", errMsg: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens in the messages. Please reduce the length of the messages."},
		{file: "error_nested_v2.json", endpoint: Completions, errType: "NotFoundError", errMsg: "The model `nope` does not exist."},
		{file: "error_flat.json", endpoint: Chat, errType: "NotFoundError", errMsg: "The model `nope` does not exist."},
		{file: "error_unauthorized.json", endpoint: Embeddings, errMsg: "Unauthorized"},
		{file: "error_detail.json", endpoint: Responses, errMsg: "Not Found"},
		{file: "error_method.json", endpoint: Chat, errMsg: "Method Not Allowed"},
		{file: "error_text.txt", endpoint: Chat, errMsg: "Internal Server Error"},
		{file: "responses.json", endpoint: Responses, id: "resp_0c8e41f2a7d94b6e9e3a5d1c7b2f8e60", finish: "length", reasons: []string{"length"},
			prompt: u(20), completion: u(8), cached: u(16), output: "Capital of France.Paris"},
		{file: "embeddings.json", endpoint: Embeddings, id: "embd-2Iq3zZNkYd3wBpRc6Z6pW0Y1yTd", prompt: u(9), completion: u(0)},
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			body := golden(t, tc.file)
			for _, cuts := range splits(r, len(body)) {
				o := NewObserver(ObserverOptions{Endpoint: tc.endpoint, Script: latin, Capture: true, CaptureMax: 1 << 10})
				prev := 0
				for _, c := range append(cuts, len(body)) {
					o.Body(body[prev:c])
					prev = c
				}
				o.BodyEnd()
				if o.ResponseID != tc.id || o.FinishReason() != tc.finish || fmt.Sprint(o.FinishReasons()) != fmt.Sprint(tc.reasons) || o.ForeignChars != tc.foreign || o.Output() != tc.output {
					t.Fatalf("cuts %v: id %q finish %q %q foreign %d output %q", cuts, o.ResponseID, o.FinishReason(), o.FinishReasons(), o.ForeignChars, o.Output())
				}
				if !eqU(o.PromptTokens, tc.prompt) || !eqU(o.CompletionTokens, tc.completion) || !eqU(o.CachedTokens, tc.cached) {
					t.Fatalf("tokens %v %v %v", p(o.PromptTokens), p(o.CompletionTokens), p(o.CachedTokens))
				}
				if tc.errMsg == "" {
					if o.Error != nil {
						t.Fatalf("unexpected error %+v", o.Error)
					}
					continue
				}
				if o.Error == nil || o.Error.Type != tc.errType || o.Error.Message != tc.errMsg {
					t.Fatalf("error %+v, want %q %q", o.Error, tc.errType, tc.errMsg)
				}
			}
		})
	}
}

// An embeddings answer for a large batch is many megabytes of vectors, with its usage at the end:
// the usage is read whatever the body's size, without keeping the vectors.
func TestObserverBodyLargerThanItsBudget(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"id":"embd-big","object":"list","created":1764460000,"model":"BAAI/bge-small-en-v1.5","data":[`)
	for i := range 3000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"index":%d,"object":"embedding","embedding":[`, i)
		for j := range 384 {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%.6f", float64(j%97)/97-0.5)
		}
		b.WriteString("]}")
	}
	b.WriteString(`],"usage":{"prompt_tokens":24000,"total_tokens":24000,"completion_tokens":0,"prompt_tokens_details":null}}`)
	body := []byte(b.String())
	if len(body) < 8<<20 {
		t.Fatalf("test body is %d bytes, want more than the default budget", len(body))
	}
	o := NewObserver(ObserverOptions{Endpoint: Embeddings, MaxBodyBytes: 64 << 10})
	for len(body) > 0 {
		n := min(len(body), 32<<10)
		o.Body(body[:n])
		body = body[n:]
	}
	o.BodyEnd()
	if !eqU(o.PromptTokens, u(24000)) || !eqU(o.CompletionTokens, u(0)) || o.ResponseID != "embd-big" || o.Model != "BAAI/bge-small-en-v1.5" || o.Error != nil {
		t.Fatalf("prompt %v completion %v id %q model %q error %v", p(o.PromptTokens), p(o.CompletionTokens), o.ResponseID, o.Model, o.Error)
	}
	// A chat answer whose choices overrun the budget still yields its usage.
	big := `{"id":"chatcmpl-x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("a", 100<<10) + `"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"total_tokens":25603,"completion_tokens":25600}}`
	o = NewObserver(ObserverOptions{Endpoint: Chat, MaxBodyBytes: 64 << 10})
	o.Body([]byte(big))
	o.BodyEnd()
	if !eqU(o.CompletionTokens, u(25600)) || o.FinishReason() != "" {
		t.Fatalf("completion %v finish %q: want the usage, and no choices read", p(o.CompletionTokens), o.FinishReason())
	}
}

// The per-request timing object: vLLM main builds it in build_per_request_timing_metrics with no
// prefill time; it is null unless the server runs with --enable-per-request-metrics.
func TestObserverTimingObject(t *testing.T) {
	body := `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":"stop","stop_reason":null}],` +
		`"usage":{"prompt_tokens":1,"total_tokens":2,"completion_tokens":1},"metrics":{"time_to_first_token_ms":25.0,"generation_time_ms":180.5,"queue_time_ms":812.0,"mean_itl_ms":null,"tokens_per_second":5.1,"prefill_time_ms":9.0}}`
	o := NewObserver(ObserverOptions{Endpoint: Completions})
	o.Body([]byte(body))
	o.BodyEnd()
	if o.QueueSeconds == nil || *o.QueueSeconds != 0.812 || o.ScheduledToFirstTokenSeconds == nil || *o.ScheduledToFirstTokenSeconds != 0.025 ||
		o.DecodeSeconds == nil || *o.DecodeSeconds != 0.1805 || o.EngineITLSeconds != nil {
		t.Fatalf("queue %v scheduled→first %v decode %v itl %v", o.QueueSeconds, o.ScheduledToFirstTokenSeconds, o.DecodeSeconds, o.EngineITLSeconds)
	}
	null := strings.Replace(body, body[strings.Index(body, `"metrics":`):len(body)-1], `"metrics":null`, 1)
	o = NewObserver(ObserverOptions{Endpoint: Completions})
	o.Body([]byte(null))
	o.BodyEnd()
	if o.QueueSeconds != nil || o.ScheduledToFirstTokenSeconds != nil || !eqU(o.CompletionTokens, u(1)) {
		t.Fatalf("metrics null: queue %v scheduled %v completion %v", o.QueueSeconds, o.ScheduledToFirstTokenSeconds, p(o.CompletionTokens))
	}
}

// vLLM generates the choices of n > 1 and of several prompts side by side and reports their
// tokens summed. The gateway's TPOT is each choice's time per token, as the engine's: it is within
// 10% of the step gap (here exactly it), where one timeline over the summed tokens is 1/n of it.
func TestTPOTPerChoice(t *testing.T) {
	const gap = 20 * time.Millisecond
	for _, tc := range []struct {
		name    string
		stream  enginetest.VLLMStream
		choices int
	}{
		{"chat n=1", enginetest.VLLMStream{Chat: true, N: 1, Tokens: []int{30}}, 1},
		{"chat n=2", enginetest.VLLMStream{Chat: true, N: 2, Tokens: []int{30, 30}}, 2},
		{"chat n=3, unequal lengths", enginetest.VLLMStream{Chat: true, N: 3, Tokens: []int{30, 12, 21}}, 3},
		{"three prompts", enginetest.VLLMStream{Prompts: 3, N: 1, Tokens: []int{4, 9, 12}}, 3},
		{"two prompts n=2", enginetest.VLLMStream{Prompts: 2, N: 2, Tokens: []int{5, 8, 3, 10}}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.stream
			s.ID, s.Model, s.IncludeUsage, s.StepGap, s.FirstToken = "cmpl-x", "m", true, gap, 3*gap
			s.Shuffle = rand.New(rand.NewPCG(7, 8))
			for range s.Choices() {
				s.Finish = append(s.Finish, "stop")
			}
			endpoint := Completions
			if s.Chat {
				s.ID, endpoint = "chatcmpl-x", Chat
			}
			o := NewObserver(ObserverOptions{Endpoint: endpoint, StripUsage: true})
			now := t0
			for _, w := range s.Writes() {
				now = now.Add(w.Delay)
				o.Feed(w.Data, now)
			}
			_, completion := s.Usage()
			if !eqU(o.CompletionTokens, u(uint32(completion))) {
				t.Fatalf("completion tokens %v, want %d", p(o.CompletionTokens), completion)
			}
			tpot, ok := o.TPOT(*o.CompletionTokens)
			if !ok || math.Abs(tpot-gap.Seconds()) > 1e-9 {
				t.Fatalf("TPOT %v (%v), want the step gap %v", tpot, ok, gap.Seconds())
			}
			if len(o.FinishReasons()) != tc.choices {
				t.Fatalf("finish reasons %q, want %d", o.FinishReasons(), tc.choices)
			}
			if o.FirstOutput() != t0.Add(3*gap) {
				t.Fatalf("first output at %v, want the first step", o.FirstOutput().Sub(t0))
			}
		})
	}
}

// TTFT is the first generated output of any kind; vLLM's role chunk is none. Reasoning comes as
// reasoning_content (up to 0.10) or reasoning (later), tools as tool_calls deltas.
func TestFirstOutputOfAnyKind(t *testing.T) {
	role := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n"
	empty := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n"
	for name, first := range map[string]string{
		"content":           `{"content":"Hi"}`,
		"reasoning_content": `{"reasoning_content":"Let me think"}`,
		"reasoning":         `{"reasoning":"Let me think"}`,
		"tool call":         `{"tool_calls":[{"id":"chatcmpl-tool-1","type":"function","index":0,"function":{"name":"get_weather","arguments":""}}]}`,
	} {
		chunk := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + first + `,"logprobs":null,"finish_reason":null}]}` + "\n\n"
		o := NewObserver(ObserverOptions{Endpoint: Chat})
		o.Feed([]byte(role), t0)
		o.Feed([]byte(empty), t0.Add(time.Second))
		o.Feed([]byte(chunk), t0.Add(2*time.Second))
		if o.FirstOutput() != t0.Add(2*time.Second) {
			t.Errorf("%s: first output at %v, want the %s chunk", name, o.FirstOutput().Sub(t0), name)
		}
		// The empty-content chunk carried a token: the choice's timeline starts there.
		if o.TokenEvents() != 2 {
			t.Errorf("%s: %d token events, want 2 (role chunk excluded)", name, o.TokenEvents())
		}
	}
}

// Usage on every chunk (continuous_usage_stats) counts one choice so far; the totals come from the
// usage-only chunk. And when the engine sends usage on every chunk, it sends the final one
// whatever the request said, so it is never removed.
func TestContinuousUsage(t *testing.T) {
	s := enginetest.VLLMStream{Chat: true, ID: "chatcmpl-x", Model: "m", N: 2, Tokens: []int{3, 4}, Finish: []string{"stop", "length"},
		IncludeUsage: true, ContinuousUsage: true}
	in := enginetest.Bytes(s.Writes())
	o := NewObserver(ObserverOptions{Endpoint: Chat, StripUsage: true})
	out := feedSplit(o, in, nil)
	if !bytes.Equal(out, in) {
		t.Fatalf("a stream with usage on every chunk lost bytes:\n got %q\nwant %q", out, in)
	}
	if !o.Continuous || !eqU(o.CompletionTokens, u(7)) || !eqU(o.PromptTokens, u(7)) {
		t.Fatalf("continuous %v completion %v prompt %v", o.Continuous, p(o.CompletionTokens), p(o.PromptTokens))
	}
	if got := o.FinishReasons(); fmt.Sprint(got) != "[stop length]" {
		t.Fatalf("finish reasons %q", got)
	}
}

func TestEventBoundaries(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"data: x\n\n", 9},
		{"data: x\r\n\r\ndata: y", 11},
		{"data: x\r\rdata: y", 9},
		{"data: x\r", -1},
		{"data: x\r\n\r", -1},
		{": keep-alive\n\n", 14},
		{"data: a\ndata: b\n\n", 17},
		{"\n", 1},
		{"data: x", -1},
	} {
		if got := eventEnd([]byte(tc.in)); got != tc.want {
			t.Errorf("eventEnd(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
	data, _, ok := sseData([]byte("event: e\r\ndata: {\"a\":\ndata:1}\n: c\n\n"), nil)
	if !ok || string(data) != "{\"a\":\n1}" {
		t.Errorf("sseData joined %q (%v)", data, ok)
	}
}

func eqU(a, b *uint32) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

func p(v *uint32) any {
	if v == nil {
		return nil
	}
	return *v
}

// The fast reader takes vLLM's plain chunks (every chunk of the golden streams but the usage-only
// one and the error events), so it is the reader that runs on a stream's hot path.
func TestFastReaderTakesVLLMChunks(t *testing.T) {
	taken, left := 0, 0
	for _, name := range []string{"chat_stream.engine.sse", "chat_stream_cjk.sse", "completion_stream.engine.sse"} {
		for _, line := range bytes.Split(golden(t, name), []byte("\n")) {
			data, ok := bytes.CutPrefix(line, []byte("data: "))
			if !ok || len(data) == 0 || data[0] != '{' {
				continue
			}
			o := NewObserver(ObserverOptions{Endpoint: Chat})
			if o.chunkFast(data, t0) {
				taken++
				continue
			}
			left++
			if !bytes.Contains(data, []byte(`"usage"`)) {
				t.Errorf("%s: the fast reader left a chunk without usage: %s", name, data)
			}
		}
	}
	if taken == 0 || left == 0 {
		t.Errorf("fast reader took %d chunks and left %d; want both (the usage chunks are left)", taken, left)
	}
}
