package record

import (
	"net/http"
	"testing"
)

func TestParseRequest(t *testing.T) {
	h := http.Header{}
	h.Set(HeaderPromptVersion, "p-hdr")
	tests := []struct {
		name       string
		endpoint   Endpoint
		body       string
		h          http.Header
		model      string
		stream     bool
		maxTokens  *uint32
		prompt     *uint32
		promptText string
		app        string
		promptVer  string
	}{
		{name: "chat", endpoint: Chat, body: `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"image_url","image_url":{"url":"x"}}]}],"stream":true,"max_tokens":64}`,
			model: "m", stream: true, maxTokens: u(64), prompt: u(11), promptText: "Be brief.\nHi"},
		{name: "max_completion_tokens and metadata", endpoint: Chat, body: `{"model":"m","messages":[{"role":"user","content":"héllo"}],"max_completion_tokens":7,"stream":true,"stream_options":{"include_usage":true},"metadata":{"app":"rag","prompt_version":"p-meta"}}`,
			h: h, model: "m", stream: true, maxTokens: u(7), prompt: u(6), promptText: "héllo", app: "rag", promptVer: "p-hdr"},
		{name: "several prompts", endpoint: Completions, body: `{"model":"m","prompt":["abc","zzz","q"],"max_tokens":null,"stream":true}`,
			model: "m", stream: true, prompt: u(7), promptText: "abc\nzzz\nq"},
		{name: "token-id prompt has no text", endpoint: Completions, body: `{"model":"m","prompt":[1,2,3],"max_tokens":5}`, model: "m", maxTokens: u(5)},
		{name: "responses", endpoint: Responses, body: `{"model":"m","instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"Hi"}]}],"max_output_tokens":32,"max_tokens":9,"stream":true}`,
			model: "m", stream: true, maxTokens: u(32), prompt: u(11), promptText: "Be brief.\nHi"},
		{name: "responses string input", endpoint: Responses, body: `{"model":"m","input":"Hello"}`, model: "m", prompt: u(5), promptText: "Hello"},
		{name: "embeddings", endpoint: Embeddings, body: `{"model":"e","input":["one","three"],"encoding_format":"float"}`, model: "e", prompt: u(8), promptText: "one\nthree"},
		{name: "stream as a string is not JSON true", endpoint: Chat, body: `{"model":"m","stream":"true"}`, model: "m"},
		{name: "not json", endpoint: Chat, body: `nope`},
		{name: "negative max_tokens", endpoint: Chat, body: `{"max_tokens":-1}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hh := tc.h
			if hh == nil {
				hh = http.Header{}
			}
			r := ParseRequest(tc.endpoint, []byte(tc.body), hh, true)
			if r.Model != tc.model || r.Stream != tc.stream || !eqU(r.MaxTokens, tc.maxTokens) || !eqU(r.PromptBytes, tc.prompt) {
				t.Fatalf("got %+v (max %v prompt %v)", r, p(r.MaxTokens), p(r.PromptBytes))
			}
			if r.PromptText != tc.promptText || r.Versions.App != tc.app || r.Versions.PromptVersion != tc.promptVer {
				t.Fatalf("prompt text %q app %q prompt version %q", r.PromptText, r.Versions.App, r.Versions.PromptVersion)
			}
		})
	}
}

// AskUsage asks for the usage chunk exactly when the request as sent would get none and asking
// changes nothing else (vLLM's StreamOptions: include_usage defaults to True in an object,
// continuous_usage_stats to False).
func TestAskUsage(t *testing.T) {
	tests := []struct {
		body string
		want string // "" when the body must stay as it is
	}{
		{`{"model":"m","stream":true}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{`{ "stream" : true , "model":"m" }`, `{ "stream" : true , "model":"m","stream_options":{"include_usage":true} }`},
		{`{"model":"m","stream":true,"stream_options":null}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{`{"model":"m","stream":true,"stream_options":{"include_usage":false}}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{`{"model":"m","stream":true,"stream_options":{"include_usage":null,"continuous_usage_stats":false}}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":false}}`},
		// The engine sends usage already: include_usage defaults to true in an object.
		{`{"model":"m","stream":true,"stream_options":{}}`, ""},
		{`{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":true}}`, ""},
		{`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, ""},
		// Asking would put usage on every chunk.
		{`{"model":"m","stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`, ""},
		// Not sure what vLLM reads: leave it.
		{`{"model":"m","stream":true,"stream_options":{"include_usage":"false"}}`, ""},
		{`{"model":"m","stream":true,"stream_options":"x"}`, ""},
		{`{"model":"m","stream":true,"stream_options":{"include_usage":false,"include_usage":false}}`, ""},
		{`{"model":"m","stream":true,"stream":true}`, ""},
		{`{"model":"m","stream":true,"stream_optio\u006es":{}}`, ""},
		{`{"model":"m","stream":"true"}`, ""},
		{`{"model":"m","stream":1}`, ""},
		{`{"model":"m"}`, ""},
		{`{"model":"m","stream":false}`, ""},
		{`{"model":"m","stream":true,}`, ""},
		{`[{"stream":true}]`, ""},
		{`{"model":"m","stream":true} x`, ""},
	}
	for _, tc := range tests {
		got, ok := AskUsage([]byte(tc.body))
		switch {
		case tc.want == "" && (ok || string(got) != tc.body):
			t.Errorf("%s: rewritten to %s, want it left alone", tc.body, got)
		case tc.want != "" && (!ok || string(got) != tc.want):
			t.Errorf("%s: got %s (%v), want %s", tc.body, got, ok, tc.want)
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
