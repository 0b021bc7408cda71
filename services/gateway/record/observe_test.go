package record

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

func golden(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// feedSplit feeds in to a new observer in pieces cut at the given offsets and returns the
// concatenated output and the observer.
func feedSplit(in []byte, cuts []int, strip bool, script *ScriptCheck) ([]byte, *Observer) {
	o := NewObserver(script, strip, true, 1<<16)
	var out []byte
	prev := 0
	for _, c := range append(cuts, len(in)) {
		b, _ := o.Feed(append([]byte(nil), in[prev:c]...))
		out = append(out, b...)
		prev = c
	}
	out = append(out, o.Rest()...)
	return out, o
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

func u(v uint32) *uint32 { return &v }

func TestObserverStreams(t *testing.T) {
	latin, err := NewScriptCheck(nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		in         string
		strip      bool
		wantOut    string // golden of the client's bytes; "" means identical to in
		model      string
		finish     string
		prompt     *uint32
		completion *uint32
		cached     *uint32
		chunks     int
		foreign    uint32
		errType    string
		output     string
		engineTTFT float64
	}{
		{name: "chat with injected usage", in: "chat_stream.engine.sse", strip: true, wantOut: "chat_stream.client.sse",
			model: "Qwen/Qwen2.5-7B-Instruct-AWQ", finish: "stop", prompt: u(12), completion: u(5), cached: u(8), chunks: 5,
			output: "Hello, world! Bye", engineTTFT: 0.042},
		{name: "chat with client-asked usage", in: "chat_stream.engine.sse", strip: false,
			model: "Qwen/Qwen2.5-7B-Instruct-AWQ", finish: "stop", prompt: u(12), completion: u(5), cached: u(8), chunks: 5,
			output: "Hello, world! Bye", engineTTFT: 0.042},
		{name: "completions", in: "completion_stream.engine.sse", strip: false,
			model: "Qwen/Qwen2.5-7B-Instruct-AWQ", finish: "length", prompt: u(3), completion: u(3), chunks: 3, output: "Once upon a"},
		{name: "error event in a 200 stream", in: "chat_stream_error.sse", strip: true,
			model: "Qwen/Qwen2.5-7B-Instruct-AWQ", chunks: 1, errType: "InternalServerError", output: "Hi"},
		{name: "flat error event", in: "chat_stream_error_flat.sse", strip: true,
			model: "Qwen/Qwen2.5-7B-Instruct-AWQ", errType: "InternalServerError"},
		{name: "CJK in Latin output", in: "chat_stream_cjk.sse", strip: true,
			model: "Qwen/Qwen2.5-7B-Instruct-AWQ", finish: "length", chunks: 5, foreign: 3, output: "The answer 是北京."},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := golden(t, tc.in)
			want := in
			if tc.wantOut != "" {
				want = golden(t, tc.wantOut)
			}
			splits := [][]int{nil}
			var every []int
			for i := 1; i < len(in); i++ {
				every = append(every, i)
			}
			splits = append(splits, every)
			for range 20 {
				splits = append(splits, randomCuts(r, len(in)))
			}
			for _, cuts := range splits {
				out, o := feedSplit(in, cuts, tc.strip, latin)
				if !bytes.Equal(out, want) {
					t.Fatalf("cuts %v: client bytes differ:\n got %q\nwant %q", cuts, out, want)
				}
				if o.Model != tc.model || o.FinishReason != tc.finish || o.ContentChunks != tc.chunks || o.ForeignChars != tc.foreign || o.Output() != tc.output {
					t.Fatalf("cuts %v: model %q finish %q chunks %d foreign %d output %q", cuts, o.Model, o.FinishReason, o.ContentChunks, o.ForeignChars, o.Output())
				}
				if !eqU(o.PromptTokens, tc.prompt) || !eqU(o.CompletionTokens, tc.completion) || !eqU(o.CachedTokens, tc.cached) {
					t.Fatalf("tokens %v %v %v", p(o.PromptTokens), p(o.CompletionTokens), p(o.CachedTokens))
				}
				if (o.Error == nil) != (tc.errType == "") || (o.Error != nil && o.Error.Type != tc.errType) {
					t.Fatalf("error %+v, want type %q", o.Error, tc.errType)
				}
				if tc.engineTTFT != 0 && (o.ScheduledToFirstTokenS == nil || *o.ScheduledToFirstTokenS != tc.engineTTFT) {
					t.Fatalf("engine ttft %v, want %v", o.ScheduledToFirstTokenS, tc.engineTTFT)
				}
			}
		})
	}
}

func TestObserverBodies(t *testing.T) {
	latin, _ := NewScriptCheck([]string{"Latin"})
	tests := []struct {
		file       string
		finish     string
		completion *uint32
		foreign    uint32
		errType    string
		errPrefix  string
	}{
		{file: "chat.json", finish: "stop", completion: u(4), foreign: 9},
		{file: "error_nested.json", errType: "BadRequestError", errPrefix: "This model's maximum context length"},
		{file: "error_flat.json", errType: "NotFoundError", errPrefix: "The model `nope`"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			o := NewObserver(latin, false, false, 0)
			o.ObserveBody(golden(t, tc.file))
			if o.FinishReason != tc.finish || !eqU(o.CompletionTokens, tc.completion) || o.ForeignChars != tc.foreign {
				t.Fatalf("finish %q completion %v foreign %d", o.FinishReason, p(o.CompletionTokens), o.ForeignChars)
			}
			if tc.errType == "" {
				if o.Error != nil {
					t.Fatalf("unexpected error %+v", o.Error)
				}
				return
			}
			if o.Error == nil || o.Error.Type != tc.errType || !bytes.HasPrefix([]byte(o.Error.Message), []byte(tc.errPrefix)) {
				t.Fatalf("error %+v, want %s %q...", o.Error, tc.errType, tc.errPrefix)
			}
		})
	}
}

func TestParseRequest(t *testing.T) {
	h := http.Header{}
	h.Set(HeaderPromptVersion, "p-hdr")
	tests := []struct {
		name       string
		body       string
		h          http.Header
		model      string
		stream     bool
		usage      bool
		maxTokens  *uint32
		prompt     *uint32
		promptText string
		app        string
		promptVer  string
	}{
		{name: "chat", body: `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"image_url","image_url":{"url":"x"}}]}],"stream":true,"max_tokens":64}`,
			model: "m", stream: true, maxTokens: u(64), prompt: u(11), promptText: "Be brief.Hi"},
		{name: "max_completion_tokens and metadata", body: `{"model":"m","messages":[{"role":"user","content":"héllo"}],"max_completion_tokens":7,"stream":true,"stream_options":{"include_usage":true},"metadata":{"app":"rag","prompt_version":"p-meta"}}`,
			h: h, model: "m", stream: true, usage: true, maxTokens: u(7), prompt: u(6), promptText: "héllo", app: "rag", promptVer: "p-hdr"},
		{name: "completion prompt array", body: `{"model":"m","prompt":["abc","zzz"],"max_tokens":null}`, model: "m", prompt: u(3), promptText: "abc"},
		{name: "not json", body: `nope`},
		{name: "negative max_tokens", body: `{"max_tokens":-1}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hh := tc.h
			if hh == nil {
				hh = http.Header{}
			}
			r := ParseRequest([]byte(tc.body), hh, true)
			if r.Model != tc.model || r.Stream != tc.stream || r.IncludeUsage != tc.usage || !eqU(r.MaxTokens, tc.maxTokens) || !eqU(r.PromptBytes, tc.prompt) {
				t.Fatalf("got %+v (max %v prompt %v)", r, p(r.MaxTokens), p(r.PromptBytes))
			}
			if r.PromptText != tc.promptText || r.Versions.App != tc.app || r.Versions.PromptVersion != tc.promptVer {
				t.Fatalf("prompt text %q app %q prompt version %q", r.PromptText, r.Versions.App, r.Versions.PromptVersion)
			}
		})
	}
}

func TestInjectIncludeUsage(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","stream":true}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":false}}`,
		`{"model":"m","stream":true,"stream_options":null}`,
		`{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":false}}`,
	} {
		b, err := InjectIncludeUsage([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		r := ParseRequest(b, http.Header{}, false)
		if !r.IncludeUsage || r.Model != "m" || !r.Stream {
			t.Fatalf("%s → %s: include_usage not set", body, b)
		}
	}
}

func TestScriptCheck(t *testing.T) {
	tests := []struct {
		scripts []string
		text    string
		want    uint32
	}{
		{nil, "Hello, world! 123 — ça va?", 0},
		{nil, "Привет", 6},
		{nil, "答案是北京", 5},
		{[]string{"Latin", "Cyrillic"}, "Hello Привет", 0},
		{[]string{"cyrillic"}, "Hi Привет", 2},
		{nil, "e\u0301 ①", 0}, // combining mark (Inherited), circled digit (not a letter)
	}
	for _, tc := range tests {
		c, err := NewScriptCheck(tc.scripts)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Foreign(tc.text); got != tc.want {
			t.Errorf("%v %q: %d foreign letters, want %d", tc.scripts, tc.text, got, tc.want)
		}
	}
	if _, err := NewScriptCheck([]string{"Klingon"}); err == nil {
		t.Error("unknown script accepted")
	}
}

func TestCapture(t *testing.T) {
	c, err := NewCapture([]string{`[\w.]+@[\w.]+`, `\b\d{16}\b`}, 40)
	if err != nil {
		t.Fatal(err)
	}
	got := c.Apply("mail bob@example.com card 4111111111111111 and more text after it")
	want := "mail [REDACTED] card [REDACTED] and more"
	if got != want {
		t.Fatalf("Apply = %q, want %q", got, want)
	}
	if got := Truncate("aé", 2); got != "a" {
		t.Fatalf("Truncate split a rune: %q", got)
	}
	if _, err := NewCapture([]string{"("}, 10); err == nil {
		t.Fatal("bad pattern accepted")
	}
}

func eqU(a, b *uint32) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

func p(v *uint32) any {
	if v == nil {
		return nil
	}
	return *v
}
