package openaiwire

import (
	"encoding/json"
	"errors"
	"reflect"
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
		{name: "n=2", body: `{"messages":[{"role":"user","content":"x"}],"n":2}`, wantText: "x"},
		{name: "n=0", body: `{"messages":[{"role":"user","content":"x"}],"n":0}`, wantErr: true, wantParam: "n"},
		{name: "stream_options without stream", body: `{"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}`, wantErr: true, wantParam: "stream_options"},
		{name: "negative temperature", body: `{"messages":[{"role":"user","content":"x"}],"temperature":-0.1}`, wantErr: true, wantParam: "temperature"},
		{name: "temperature above 2", body: `{"messages":[{"role":"user","content":"x"}],"temperature":2.5}`, wantText: "x"},
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
	tests := []struct {
		name string
		body string
		want Prompts // nil: an error is expected
	}{
		{"string", `{"prompt":"once"}`, Prompts{{Text: "once"}}},
		{"strings", `{"prompt":["a","b","c"],"max_tokens":3}`, Prompts{{Text: "a"}, {Text: "b"}, {Text: "c"}}},
		{"token ids", `{"prompt":[1,2,3]}`, Prompts{{TokenIDs: []int{1, 2, 3}}}},
		{"token-id arrays", `{"prompt":[[1,2],[3]]}`, Prompts{{TokenIDs: []int{1, 2}}, {TokenIDs: []int{3}}}},
		{"empty string", `{"prompt":""}`, nil},
		{"empty list", `{"prompt":[]}`, nil},
		{"empty token-id array", `{"prompt":[[1],[]]}`, nil},
		{"mixed", `{"prompt":["a",1]}`, nil},
		{"number", `{"prompt":5}`, nil},
		{"too deep", `{"prompt":[[[1]]]}`, nil},
		{"too many sequences", `{"prompt":["a","b"],"n":600}`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := DecodeCompletionRequest(strings.NewReader(tc.body))
			if tc.want == nil {
				var re *RequestError
				if !errors.As(err, &re) {
					t.Fatalf("err = %v, want *RequestError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(req.Prompts, tc.want) {
				t.Fatalf("prompts %+v, want %+v", req.Prompts, tc.want)
			}
			if string(req.Prompt) != tc.want[0].Text {
				t.Fatalf("Prompt = %q, want the first prompt's text %q", req.Prompt, tc.want[0].Text)
			}
			back, err := json.Marshal(req.Prompts)
			if err != nil {
				t.Fatal(err)
			}
			var again Prompts
			if err := json.Unmarshal(back, &again); err != nil || !reflect.DeepEqual(again, tc.want) {
				t.Fatalf("round trip through %s: %+v, %v", back, again, err)
			}
		})
	}
}

func TestStreamOptionsDefaults(t *testing.T) {
	tests := []struct {
		body                   string
		wantUsage, wantPerTick bool
	}{
		{`{}`, true, false},
		{`{"include_usage":false}`, false, false},
		{`{"include_usage":null,"continuous_usage_stats":true}`, true, true},
		{`{"continuous_usage_stats":false}`, true, false},
	}
	for _, tc := range tests {
		req, err := DecodeChatCompletionRequest(strings.NewReader(`{"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":` + tc.body + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if req.StreamOptions.IncludeUsage != tc.wantUsage || req.StreamOptions.ContinuousUsageStats != tc.wantPerTick {
			t.Errorf("%s: %+v", tc.body, *req.StreamOptions)
		}
	}
}

func TestDecodeEmbeddingRequest(t *testing.T) {
	req, err := DecodeEmbeddingRequest(strings.NewReader(`{"model":"m","input":["a","b"],"encoding_format":"base64"}`))
	if err != nil || len(req.Input) != 2 || req.EncodingFormat != "base64" {
		t.Fatalf("req=%+v err=%v", req, err)
	}
	for _, body := range []string{`{"input":""}`, `{"input":[]}`, `{"input":"a","encoding_format":"hex"}`, `{"input":"a","dimensions":0}`} {
		if _, err := DecodeEmbeddingRequest(strings.NewReader(body)); err == nil {
			t.Errorf("%s accepted", body)
		}
	}
}

func TestDecodeResponsesRequest(t *testing.T) {
	req, err := DecodeResponsesRequest(strings.NewReader(`{"model":"m","input":"hi","instructions":"be brief","max_output_tokens":5}`))
	if err != nil || len(req.Input) != 1 || req.Input[0].Role != "user" || req.Input[0].Content != "hi" || *req.Instructions != "be brief" {
		t.Fatalf("req=%+v err=%v", req, err)
	}
	req, err = DecodeResponsesRequest(strings.NewReader(`{"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},{"type":"function_call_output","call_id":"c","output":"x"},{"role":"assistant","content":"ok"}]}`))
	if err != nil || len(req.Input) != 2 || req.Input[0].Content != "ab" || req.Input[1].Content != "ok" {
		t.Fatalf("req=%+v err=%v", req, err)
	}
	for _, body := range []string{`{"input":[]}`, `{"input":5}`, `{"input":"x","max_output_tokens":0}`} {
		if _, err := DecodeResponsesRequest(strings.NewReader(body)); err == nil {
			t.Errorf("%s accepted", body)
		}
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
	f.Add(`{"prompt":[[1,2],[3]],"n":2}`)
	f.Add(`{"prompt":[7],"stream":true,"stream_options":{"continuous_usage_stats":true}}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := DecodeCompletionRequest(strings.NewReader(body))
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("non-RequestError for in-memory body: %v", err)
			}
			return
		}
		if len(req.Prompts) == 0 || len(req.Prompts)*nOr1(req.N) > MaxSequences {
			t.Fatalf("accepted %d prompts with n %v", len(req.Prompts), req.N)
		}
		for _, p := range req.Prompts {
			if p.empty() {
				t.Fatal("accepted an empty prompt")
			}
		}
	})
}

func FuzzDecodeEmbeddingRequest(f *testing.F) {
	f.Add(`{"model":"m","input":"hello"}`)
	f.Add(`{"input":[[1,2],[3]],"encoding_format":"base64"}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := DecodeEmbeddingRequest(strings.NewReader(body))
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("non-RequestError for in-memory body: %v", err)
			}
			return
		}
		if len(req.Input) == 0 || len(req.Input) > MaxSequences {
			t.Fatalf("accepted %d inputs", len(req.Input))
		}
	})
}

func FuzzDecodeResponsesRequest(f *testing.F) {
	f.Add(`{"model":"m","input":"hello","stream":true}`)
	f.Add(`{"input":[{"role":"user","content":[{"type":"input_text","text":"a"}]}],"max_output_tokens":3}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := DecodeResponsesRequest(strings.NewReader(body))
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("non-RequestError for in-memory body: %v", err)
			}
			return
		}
		if len(req.Input) == 0 {
			t.Fatal("accepted a request without input messages")
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
