package openaiwire

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodeChatCompletionRequest(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		wantParam string // "" with wantErr false means success
		wantErr   bool
		wantText  string
		wantMax   int
	}{
		{name: "string content", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`, wantText: "hi", wantMax: 5},
		{name: "parts content", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]}]}`, wantText: "ab"},
		{name: "max_completion_tokens", body: `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":7}`, wantText: "x", wantMax: 7},
		{name: "no messages", body: `{"model":"m","messages":[]}`, wantErr: true, wantParam: "messages"},
		{name: "bad role", body: `{"messages":[{"role":"robot","content":"x"}]}`, wantErr: true, wantParam: "messages"},
		{name: "zero max_tokens", body: `{"messages":[{"role":"user","content":"x"}],"max_tokens":0}`, wantErr: true, wantParam: "max_tokens"},
		{name: "wrong type", body: `{"messages":[{"role":"user","content":"x"}],"max_tokens":"9"}`, wantErr: true, wantParam: "max_tokens"},
		{name: "n=2", body: `{"messages":[{"role":"user","content":"x"}],"n":2}`, wantErr: true, wantParam: "n"},
		{name: "not json", body: `{"messages":`, wantErr: true},
		{name: "content number", body: `{"messages":[{"role":"user","content":5}]}`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := DecodeChatCompletionRequest(strings.NewReader(tc.body))
			if tc.wantErr {
				var re *RequestError
				if !errors.As(err, &re) {
					t.Fatalf("err = %v, want *RequestError", err)
				}
				if tc.wantParam != "" && re.Param != tc.wantParam {
					t.Fatalf("param = %q, want %q", re.Param, tc.wantParam)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got := string(req.Messages[0].Content); got != tc.wantText {
				t.Fatalf("content = %q, want %q", got, tc.wantText)
			}
			if tc.wantMax != 0 && (req.MaxTokens == nil || *req.MaxTokens != tc.wantMax) {
				t.Fatalf("max_tokens = %v, want %d", req.MaxTokens, tc.wantMax)
			}
		})
	}
}

func TestDecodeCompletionRequest(t *testing.T) {
	req, err := DecodeCompletionRequest(strings.NewReader(`{"model":"m","prompt":["first","second"],"max_tokens":3}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Prompt != "first" {
		t.Fatalf("prompt = %q", req.Prompt)
	}
	if _, err := DecodeCompletionRequest(strings.NewReader(`{"prompt":[1,2,3]}`)); err == nil {
		t.Fatal("token-id prompt accepted")
	}
	if _, err := DecodeCompletionRequest(strings.NewReader(`{"prompt":""}`)); err == nil {
		t.Fatal("empty prompt accepted")
	}
}

func TestDecodeTokenizeRequest(t *testing.T) {
	if _, err := DecodeTokenizeRequest(strings.NewReader(`{"prompt":"a","messages":[{"role":"user","content":"b"}]}`)); err == nil {
		t.Fatal("both prompt and messages accepted")
	}
	req, err := DecodeTokenizeRequest(strings.NewReader(`{"messages":[{"role":"user","content":"b"}]}`))
	if err != nil || len(req.Messages) != 1 {
		t.Fatalf("req=%v err=%v", req, err)
	}
}

func FuzzDecodeChatCompletionRequest(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`)
	f.Add(`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`)
	f.Add(`{"messages":[{"role":"system","content":null}],"temperature":3}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := DecodeChatCompletionRequest(strings.NewReader(body))
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("non-RequestError for in-memory body: %v", err)
			}
			return
		}
		if len(req.Messages) == 0 {
			t.Fatal("accepted request without messages")
		}
		if req.MaxTokens != nil && *req.MaxTokens < 1 {
			t.Fatal("accepted max_tokens < 1")
		}
	})
}

func FuzzDecodeCompletionRequest(f *testing.F) {
	f.Add(`{"model":"m","prompt":"hello","max_tokens":5}`)
	f.Add(`{"prompt":["a","b"]}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := DecodeCompletionRequest(strings.NewReader(body))
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("non-RequestError for in-memory body: %v", err)
			}
			return
		}
		if req.Prompt == "" {
			t.Fatal("accepted empty prompt")
		}
	})
}

func FuzzDecodeTokenizeRequest(f *testing.F) {
	f.Add(`{"prompt":"hello"}`)
	f.Add(`{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := DecodeTokenizeRequest(strings.NewReader(body))
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("non-RequestError for in-memory body: %v", err)
			}
			return
		}
		if (req.Prompt == nil) == (len(req.Messages) == 0) {
			t.Fatal("accepted a request with neither or both of prompt and messages")
		}
	})
}
