package simserver_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/sim"
	"github.com/servescope/servescope/sim/vllmsim/simserver"
	"github.com/servescope/servescope/sim/vllmsim/simtrace"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// chunk is a streamed completion chunk of either endpoint, as far as the tests read it.
type chunk struct {
	ID      string `json:"id"`
	Choices []struct {
		Index int    `json:"index"`
		Text  string `json:"text"`
		Delta struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage   *usage          `json:"usage"`
	Metrics json.RawMessage `json:"metrics"`
}

type usage struct {
	PromptTokens        int             `json:"prompt_tokens"`
	CompletionTokens    int             `json:"completion_tokens"`
	TotalTokens         int             `json:"total_tokens"`
	PromptTokensDetails json.RawMessage `json:"prompt_tokens_details"`
}

// readStream posts body and returns the stream's data payloads (without [DONE]) and whether it
// ended with [DONE].
func readStream(t *testing.T, url, body string, header map[string]string) (payloads []string, done bool) {
	t.Helper()
	resp := post(t, url, body, header)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	for _, ev := range strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			t.Fatalf("event without data: %q", ev)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		payloads = append(payloads, data)
	}
	return payloads, done
}

func chunks(t *testing.T, payloads []string) []chunk {
	t.Helper()
	out := make([]chunk, len(payloads))
	for i, p := range payloads {
		if err := json.Unmarshal([]byte(p), &out[i]); err != nil {
			t.Fatalf("chunk %d %s: %v", i, p, err)
		}
	}
	return out
}

func tokenCount(t *testing.T, url, prompt string) int {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"prompt": prompt})
	resp := post(t, url+"/tokenize", string(b), nil)
	defer resp.Body.Close()
	var tok struct {
		Count int `json:"count"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil {
		t.Fatal(err)
	}
	return tok.Count
}

// streamedChoices folds a stream into per-choice text, token chunk counts and finish reasons.
type streamedChoices struct {
	text     map[int]string
	chunks   map[int]int
	finishes map[int][]string
	order    []int // choice index of every content chunk, in stream order
	usage    []*usage
}

func fold(cs []chunk) streamedChoices {
	f := streamedChoices{text: map[int]string{}, chunks: map[int]int{}, finishes: map[int][]string{}}
	for _, c := range cs {
		if c.Usage != nil && len(c.Choices) == 0 {
			f.usage = append(f.usage, c.Usage)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Role != "" {
				continue
			}
			f.text[ch.Index] += ch.Text + ch.Delta.Content
			f.chunks[ch.Index]++
			f.order = append(f.order, ch.Index)
			if ch.FinishReason != nil {
				f.finishes[ch.Index] = append(f.finishes[ch.Index], *ch.FinishReason)
			}
		}
	}
	return f
}

// TestSeveralPromptsAndN streams three prompts with n = 2 from /v1/completions and n = 3 chat, as
// vLLM's completion/serving.py and chat_completion/serving.py do: one choice per prompt × sample
// with index = sample + prompt × n, chunks interleaved step by step, one finish_reason per choice,
// and a final usage that counts each prompt once and every choice's tokens. The same request
// without streaming answers the same choices.
func TestSeveralPromptsAndN(t *testing.T) {
	for _, v := range vllmversion.APIs {
		t.Run(v.String(), func(t *testing.T) {
			ts := startSim(t, sim.Options{Version: v})
			prompts := []string{"a", "b", "c"}
			const n, maxTokens = 2, 5
			body := `{"prompt":["a","b","c"],"n":2,"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`
			payloads, done := readStream(t, ts.URL+"/v1/completions", body, map[string]string{"X-Request-Id": "multi"})
			if !done {
				t.Fatal("stream did not end with [DONE]")
			}
			cs := chunks(t, payloads)
			f := fold(cs)
			if len(f.text) != len(prompts)*n {
				t.Fatalf("%d choices, want %d", len(f.text), len(prompts)*n)
			}
			wantPrompt := 0
			for _, p := range prompts {
				wantPrompt += tokenCount(t, ts.URL, p)
			}
			for i := 0; i < len(prompts)*n; i++ {
				if f.chunks[i] != maxTokens || len(f.finishes[i]) != 1 || f.finishes[i][0] != "length" {
					t.Errorf("choice %d: %d chunks, finishes %v", i, f.chunks[i], f.finishes[i])
				}
			}
			// Interleaved: the first len(prompts)×n content chunks are each choice's first token.
			first := append([]int(nil), f.order[:len(prompts)*n]...)
			if !sort.IntsAreSorted(first) || first[len(first)-1] != len(prompts)*n-1 {
				t.Errorf("first chunks by choice %v: not one per choice in index order", first)
			}
			if len(f.usage) != 1 || f.usage[0].PromptTokens != wantPrompt || f.usage[0].CompletionTokens != len(prompts)*n*maxTokens {
				t.Fatalf("usage %+v, want %d prompt and %d completion tokens", f.usage, wantPrompt, len(prompts)*n*maxTokens)
			}
			for _, c := range cs {
				if c.ID != "cmpl-multi" {
					t.Fatalf("chunk id %q", c.ID)
				}
			}
			// Samples of one prompt differ; the same request without streaming gives the same choices.
			if f.text[0] == f.text[1] {
				t.Errorf("the two samples of prompt 0 are identical: %q", f.text[0])
			}
			resp := post(t, ts.URL+"/v1/completions", `{"prompt":["a","b","c"],"n":2,"max_tokens":5}`, nil)
			var whole struct {
				Choices []struct {
					Index        int    `json:"index"`
					Text         string `json:"text"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage usage `json:"usage"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&whole); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if len(whole.Choices) != len(prompts)*n || whole.Usage.PromptTokens != wantPrompt || whole.Usage.CompletionTokens != len(prompts)*n*maxTokens {
				t.Fatalf("non-streaming: %d choices, usage %+v", len(whole.Choices), whole.Usage)
			}
			for i, c := range whole.Choices {
				if c.Index != i || c.Text != f.text[i] || c.FinishReason != "length" {
					t.Errorf("non-streaming choice %d = %+v, streamed %q", i, c, f.text[i])
				}
			}

			// Chat n = 3: one role chunk per choice, sent with the first output, before any content.
			payloads, _ = readStream(t, ts.URL+"/v1/chat/completions",
				`{"messages":[{"role":"user","content":"Three answers please"}],"n":3,"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`, nil)
			cs = chunks(t, payloads)
			for i := 0; i < 3; i++ {
				if len(cs[i].Choices) != 1 || cs[i].Choices[0].Delta.Role != "assistant" || cs[i].Choices[0].Index != i {
					t.Fatalf("chunk %d is not choice %d's role chunk: %s", i, i, payloads[i])
				}
			}
			f = fold(cs[3:])
			chatPrompt := len(f.usage)
			if chatPrompt != 1 || f.usage[0].CompletionTokens != 12 || len(f.text) != 3 {
				t.Fatalf("chat n=3: usage %+v, %d choices", f.usage, len(f.text))
			}
		})
	}
}

// TestStreamOptions checks which chunks carry usage under vLLM's should_include_usage.
func TestStreamOptions(t *testing.T) {
	ts := startSim(t, sim.Options{})
	forced := startSim(t, sim.Options{Server: simserver.Config{EnableForceIncludeUsage: true}})
	forcedOld := startSim(t, sim.Options{Version: vllmversion.V0_8, Server: simserver.Config{EnableForceIncludeUsage: true}})
	const msgs = `"messages":[{"role":"user","content":"usage please"}],"max_tokens":3,"stream":true`
	tests := []struct {
		name          string
		url, body     string
		wantFinal     bool
		wantPerChunk  bool
		wantDetailKey bool
	}{
		{"no stream_options", ts.URL, `{` + msgs + `}`, false, false, false},
		{"empty stream_options defaults include_usage to true", ts.URL, `{` + msgs + `,"stream_options":{}}`, true, false, false},
		{"include_usage false", ts.URL, `{` + msgs + `,"stream_options":{"include_usage":false}}`, false, false, false},
		{"continuous without include_usage", ts.URL, `{` + msgs + `,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`, false, false, false},
		{"continuous", ts.URL, `{` + msgs + `,"stream_options":{"continuous_usage_stats":true}}`, true, true, false},
		{"forced", forced.URL, `{` + msgs + `}`, true, false, false},
		{"forced flag absent in 0.8", forcedOld.URL, `{` + msgs + `}`, false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			payloads, _ := readStream(t, tc.url+"/v1/chat/completions", tc.body, nil)
			cs := chunks(t, payloads)
			final := len(cs[len(cs)-1].Choices) == 0
			if final != tc.wantFinal {
				t.Fatalf("final usage chunk %v, want %v: %s", final, tc.wantFinal, payloads[len(payloads)-1])
			}
			completion := 0
			for i, c := range cs {
				if final && i == len(cs)-1 {
					if c.Usage == nil || c.Usage.CompletionTokens != 3 || c.Usage.TotalTokens != c.Usage.PromptTokens+3 {
						t.Errorf("final usage %+v", c.Usage)
					}
					if strings.Contains(payloads[i], "prompt_tokens_details") {
						t.Errorf("final chunk names prompt_tokens_details without a cache hit: %s", payloads[i])
					}
					continue
				}
				if (c.Usage != nil) != tc.wantPerChunk {
					t.Fatalf("chunk %d usage %v, want per-chunk %v: %s", i, c.Usage, tc.wantPerChunk, payloads[i])
				}
				if c.Usage != nil {
					if c.Choices[0].Delta.Role == "" {
						completion++
					}
					if c.Usage.CompletionTokens != completion {
						t.Errorf("chunk %d: cumulative completion_tokens %d, want %d", i, c.Usage.CompletionTokens, completion)
					}
				}
			}
		})
	}
}

// TestPromptTokensDetails: with --enable-prompt-tokens-details vLLM fills prompt_tokens_details
// only when num_cached_tokens is truthy; a request served without the prefix cache has null
// (non-streaming) or no key at all (the stream's usage chunk, dumped with exclude_none).
func TestPromptTokensDetails(t *testing.T) {
	long := strings.Repeat("The scheduler admits waiting requests while slots and blocks are free. ", 40)
	b, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": long}}, "max_tokens": 2})
	for _, enabled := range []bool{false, true} {
		ts := startSim(t, sim.Options{Server: simserver.Config{EnablePromptTokensDetails: enabled}})
		var details []string
		for i := 0; i < 2; i++ {
			resp := post(t, ts.URL+"/v1/chat/completions", string(b), nil)
			var out struct {
				Usage usage `json:"usage"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			details = append(details, string(out.Usage.PromptTokensDetails))
		}
		if details[0] != "null" {
			t.Errorf("enabled=%v: first request (no cache hit) has prompt_tokens_details %s, want null", enabled, details[0])
		}
		var second struct {
			CachedTokens int `json:"cached_tokens"`
		}
		switch {
		case !enabled && details[1] != "null":
			t.Errorf("details reported without the flag: %s", details[1])
		case enabled && (json.Unmarshal([]byte(details[1]), &second) != nil || second.CachedTokens < 16):
			t.Errorf("repeated prompt: prompt_tokens_details %s, want cached_tokens from the prefix cache", details[1])
		}
		if !enabled {
			continue
		}
		var sb map[string]any
		_ = json.Unmarshal(b, &sb)
		sb["stream"], sb["stream_options"] = true, map[string]bool{"include_usage": true}
		sbody, _ := json.Marshal(sb)
		payloads, _ := readStream(t, ts.URL+"/v1/chat/completions", string(sbody), nil)
		if last := payloads[len(payloads)-1]; !strings.Contains(last, `"prompt_tokens_details":{"cached_tokens":`) {
			t.Errorf("streamed cache hit: usage chunk %s", last)
		}
		short, _ := readStream(t, ts.URL+"/v1/chat/completions",
			`{"messages":[{"role":"user","content":"never seen before"}],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`, nil)
		if last := short[len(short)-1]; strings.Contains(last, "prompt_tokens_details") {
			t.Errorf("stream without a cache hit names prompt_tokens_details: %s", last)
		}
	}
}

// finishRecorder keeps the engine's finished records by request id.
type finishRecorder struct {
	mu   sync.Mutex
	byID map[string]*engine.Finished
}

func (r *finishRecorder) RequestFinished(f *engine.Finished) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID[f.ID] = f
}
func (r *finishRecorder) StepDone(engine.StepStats)  {}
func (r *finishRecorder) Stats(engine.IntervalStats) {}
func (r *finishRecorder) Crashed(engine.CrashInfo)   {}
func (r *finishRecorder) PrefixCache(int, int)       {}
func (r *finishRecorder) get(id string) *engine.Finished {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// TestPerRequestTimingObject checks vLLM main's "metrics" object: time_to_first_token_ms runs from
// scheduling (the queue wait excluded), there is no prefill_time_ms, it is absent for n > 1 and
// several prompts, and streams carry it only on the final usage chunk.
func TestPerRequestTimingObject(t *testing.T) {
	rec := &finishRecorder{byID: map[string]*engine.Finished{}}
	cfg := engine.DefaultConfig()
	cfg.MaxNumSeqs = 1 // the second request waits for the first
	// Time runs 5× faster here, so the first request holds the only slot for ~3 s of wall time:
	// the second must reach the engine within it, an HTTP request and a tokenization on a loaded
	// machine (0.6 s was not always enough).
	ts := startSim(t, sim.Options{TimeScale: 5, Engine: cfg, Observers: []engine.Observer{rec}, Server: simserver.Config{PerRequestMetrics: true}})
	first := post(t, ts.URL+"/v1/completions", `{"prompt":"hold the slot","max_tokens":1000,"ignore_eos":true,"stream":true}`, nil)
	defer first.Body.Close()
	if _, err := io.ReadFull(first.Body, make([]byte, 1)); err != nil { // it is running
		t.Fatal(err)
	}
	resp := post(t, ts.URL+"/v1/completions", `{"prompt":"queue behind me","max_tokens":30,"ignore_eos":true}`, map[string]string{"X-Request-Id": "second"})
	second, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out struct {
		Metrics map[string]*float64 `json:"metrics"`
	}
	if err := json.Unmarshal(second, &out); err != nil {
		t.Fatal(err)
	}
	f := rec.get("cmpl-second-0")
	if f == nil || out.Metrics == nil {
		t.Fatalf("no record or metrics: %s", second)
	}
	if _, ok := out.Metrics["prefill_time_ms"]; ok || len(out.Metrics) != 5 {
		t.Errorf("metrics keys %v, want vLLM's five", out.Metrics)
	}
	near := func(name string, got *float64, want float64) {
		if got == nil || math.Abs(*got-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if f.QueueSeconds() <= 0 {
		t.Fatalf("the second request did not queue (%+v)", f)
	}
	near("time_to_first_token_ms", out.Metrics["time_to_first_token_ms"], (f.FirstToken-f.Scheduled)*1000)
	near("queue_time_ms", out.Metrics["queue_time_ms"], f.QueueSeconds()*1000)
	near("generation_time_ms", out.Metrics["generation_time_ms"], f.DecodeSeconds()*1000)
	near("mean_itl_ms", out.Metrics["mean_itl_ms"], f.DecodeSeconds()/29*1000)
	near("tokens_per_second", out.Metrics["tokens_per_second"], 30/f.InferenceSeconds())
	if ttft := *out.Metrics["time_to_first_token_ms"]; ttft >= f.TTFTSeconds()*1000 {
		t.Errorf("time_to_first_token_ms %.1f includes the queue wait (TTFT from arrival %.1f ms)", ttft, f.TTFTSeconds()*1000)
	}

	for _, body := range []string{`{"prompt":"x","n":2,"max_tokens":2}`, `{"prompt":["x","y"],"max_tokens":2}`} {
		resp := post(t, ts.URL+"/v1/completions", body, nil)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasSuffix(string(raw), `"metrics":null}`) {
			t.Errorf("%s: metrics not null: %s", body, raw)
		}
	}
	payloads, _ := readStream(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`, nil)
	for i, p := range payloads {
		has := strings.Contains(p, `"metrics":{`)
		if has != (i == len(payloads)-1) {
			t.Errorf("chunk %d metrics %v: %s", i, has, p)
		}
	}
	payloads, _ = readStream(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}`, nil)
	for _, p := range payloads {
		if strings.Contains(p, "metrics") {
			t.Errorf("metrics without include_usage: %s", p)
		}
	}
	old := startSim(t, sim.Options{Version: vllmversion.V0_10, Server: simserver.Config{PerRequestMetrics: true}})
	resp = post(t, old.URL+"/v1/completions", `{"prompt":"x","max_tokens":2}`, nil)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(raw), "metrics") {
		t.Errorf("0.10 body carries a metrics key: %s", raw)
	}
}

// TestErrorShapes checks errors before a stream at each version: flat {"object":"error",...} at
// 0.8, {"error":{...}} since 0.10.1, and vLLM's status codes.
func TestErrorShapes(t *testing.T) {
	for _, v := range vllmversion.APIs {
		ts := startSim(t, sim.Options{Version: v})
		tests := []struct {
			path, body string
			status     int
			typ, msg   string
		}{
			{"/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, 404, "NotFoundError", "The model `nope` does not exist."},
			{"/v1/completions", `{"prompt":"` + strings.Repeat("serving systems ", 3000) + `"}`, 400, "BadRequestError", "maximum context length is 4096 tokens"},
			{"/v1/completions", `{"prompt":"hi","stream_options":{"include_usage":true}}`, 400, "BadRequestError", "Stream options can only be defined when `stream=True`."},
			{"/v1/completions", `{"prompt":[999999999]}`, 400, "BadRequestError", "out of vocabulary"},
			{"/v1/embeddings", `{"input":"` + strings.Repeat("serving systems ", 3000) + `"}`, 400, "BadRequestError", "maximum context length is 4096 tokens"},
		}
		for _, tc := range tests {
			resp := post(t, ts.URL+tc.path, tc.body, nil)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var flat struct {
				Object, Message, Type string
				Code                  int
			}
			var nested struct {
				Error struct {
					Message, Type string
					Code          int
				}
			}
			_ = json.Unmarshal(raw, &flat)
			_ = json.Unmarshal(raw, &nested)
			msg, typ, code := nested.Error.Message, nested.Error.Type, nested.Error.Code
			if v == vllmversion.V0_8 {
				msg, typ, code = flat.Message, flat.Type, flat.Code
				if flat.Object != "error" || nested.Error.Message != "" {
					t.Errorf("0.8 %s: body %s is not the flat envelope", tc.path, raw)
				}
			} else if flat.Object != "" {
				t.Errorf("%s %s: body %s is not the nested envelope", v, tc.path, raw)
			}
			if resp.StatusCode != tc.status || code != tc.status || typ != tc.typ || !strings.Contains(msg, tc.msg) {
				t.Errorf("%s %s: %d %s", v, tc.path, resp.StatusCode, raw)
			}
		}
		resp := post(t, ts.URL+"/v1/responses", `{"input":"hi"}`, nil)
		resp.Body.Close()
		if want := map[bool]int{true: 200, false: 404}[v.ResponsesAPI()]; resp.StatusCode != want {
			t.Errorf("%s /v1/responses: %d, want %d", v, resp.StatusCode, want)
		}
	}
}

// TestEngineDeathMidStreamPerVersion: the error event inside a stream is json.dumps of the error
// response: the flat body wrapped in "error" at 0.8, the nested one since.
func TestEngineDeathMidStreamPerVersion(t *testing.T) {
	ts := startSim(t, sim.Options{Version: vllmversion.V0_8, TimeScale: 1})
	resp := post(t, ts.URL+"/v1/completions", `{"prompt":"hi","max_tokens":1000,"stream":true}`, nil)
	defer resp.Body.Close()
	buf := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, buf); err != nil { // the first token arrived
		t.Fatal(err)
	}
	ts.stop()
	rest, _ := io.ReadAll(resp.Body)
	want := `data: {"error": {"object": "error", "message": "EngineCore encountered an issue. See stack trace (above) for the root cause.", "type": "BadRequestError", "param": null, "code": 400}}` + "\n\ndata: [DONE]\n\n"
	if !strings.HasSuffix(string(rest), want) {
		t.Fatalf("0.8 stream tail: %q", rest[max(0, len(rest)-300):])
	}
}

func TestRequestIDHeaders(t *testing.T) {
	ts := startSim(t, sim.Options{Server: simserver.Config{EnableRequestIDHeaders: true}})
	resp := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`, map[string]string{"X-Request-Id": "mine"})
	resp.Body.Close()
	if got := resp.Header.Get("X-Request-Id"); got != "mine" {
		t.Errorf("echoed %q", got)
	}
	resp = post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`, nil)
	var out struct {
		ID string `json:"id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	got := resp.Header.Get("X-Request-Id")
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(got) || "chatcmpl-"+got == out.ID {
		t.Errorf("generated header %q next to body id %q: want a fresh uuid hex unrelated to the body", got, out.ID)
	}
	h, err := http.Get(ts.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	h.Body.Close()
	if h.Header.Get("X-Request-Id") == "" {
		t.Error("the middleware answers every route, /health included")
	}
	// The body's request_id is the id's base when no header is sent.
	resp = post(t, ts.URL+"/v1/completions", `{"prompt":"hi","max_tokens":1,"request_id":"from-body"}`, nil)
	_ = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if out.ID != "cmpl-from-body" {
		t.Errorf("id %q, want cmpl-from-body", out.ID)
	}
}

// TestResponsesAndEmbeddingsWithTheSDK serves /v1/responses (both forms) and /v1/embeddings to the
// official OpenAI Go SDK.
func TestResponsesAndEmbeddingsWithTheSDK(t *testing.T) {
	ts := startSim(t, sim.Options{Version: vllmversion.V0_10})
	client := sdk(ts)
	ctx := context.Background()
	r, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "servescope/sim-7b", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hi")},
		MaxOutputTokens: openai.Int(4),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.ID, "resp_") || r.Usage.OutputTokens != 4 || r.Usage.InputTokens < 5 || r.Usage.TotalTokens != r.Usage.InputTokens+4 || r.OutputText() == "" {
		t.Fatalf("response %s usage %+v text %q", r.ID, r.Usage, r.OutputText())
	}
	stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "servescope/sim-7b", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hi")},
		MaxOutputTokens: openai.Int(4),
	})
	var types []string
	var deltas, final string
	var seq int64
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != seq {
			t.Fatalf("sequence_number %d, want %d", ev.SequenceNumber, seq)
		}
		seq++
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			deltas += ev.Delta
		case "response.completed":
			final = ev.Response.OutputText()
			if ev.Response.Usage.OutputTokens != 4 {
				t.Errorf("completed usage %+v", ev.Response.Usage)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if strings.Join(types, " ") != strings.Join(want, " ") || deltas != final || final != r.OutputText() {
		t.Fatalf("events %v, deltas %q, final %q, non-streamed %q", types, deltas, final, r.OutputText())
	}

	emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "servescope/sim-7b", Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"first input", "second"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(emb.Data) != 2 || emb.Usage.PromptTokens < 3 || emb.Usage.TotalTokens != emb.Usage.PromptTokens || len(emb.Data[0].Embedding) != 384 {
		t.Fatalf("embeddings: %d vectors, usage %+v", len(emb.Data), emb.Usage)
	}
	norm := 0.0
	for _, f := range emb.Data[1].Embedding {
		norm += f * f
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Errorf("embedding norm² %v, want 1", norm)
	}
	resp := post(t, ts.URL+"/v1/embeddings", `{"input":"second","encoding_format":"base64"}`, nil)
	var b64 struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&b64)
	resp.Body.Close()
	raw, err := base64.StdEncoding.DecodeString(b64.Data[0].Embedding)
	if err != nil || len(raw) != 4*384 {
		t.Fatalf("base64 embedding: %d bytes, %v", len(raw), err)
	}
}

// TestSpansThroughTheAPI runs n > 1 chat and multi-prompt completions through the server and
// checks the spans each version emits: how many, with which request ids, and that a traceparent
// whose sampled flag is off gets none.
func TestSpansThroughTheAPI(t *testing.T) {
	tests := []struct {
		version                  vllmversion.Version
		wantChat, wantCompletion []string
	}{
		{vllmversion.Main, []string{"chatcmpl-c", "chatcmpl-c"}, []string{"cmpl-p-0", "cmpl-p-1"}},
		{vllmversion.V0_10, []string{"0_chatcmpl-c", "1_chatcmpl-c"}, []string{"cmpl-p-0", "cmpl-p-1"}},
		{vllmversion.V0_8, []string{"chatcmpl-c"}, []string{"cmpl-p-0", "cmpl-p-1"}},
	}
	for _, tc := range tests {
		t.Run(tc.version.String(), func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			clock := engine.NewClock(testScale)
			x := simtrace.NewWithExporter(exp, clock, simtrace.WithVersion(tc.version))
			ts := startSim(t, sim.Options{Version: tc.version, Clock: clock, Observers: []engine.Observer{x}})
			sampled := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
			idsOf := func(hdr map[string]string, path, body string) []string {
				t.Helper()
				exp.Reset()
				resp := post(t, ts.URL+path, body, hdr)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err := x.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, sp := range exp.GetSpans() {
					for _, a := range sp.Attributes {
						if a.Key == "gen_ai.request.id" {
							ids = append(ids, a.Value.AsString())
						}
					}
				}
				sort.Strings(ids)
				return ids
			}
			chatHdr := map[string]string{"X-Request-Id": "c", "traceparent": sampled["traceparent"]}
			if got := idsOf(chatHdr, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":2,"max_tokens":3}`); strings.Join(got, ",") != strings.Join(tc.wantChat, ",") {
				t.Errorf("chat n=2 spans %v, want %v", got, tc.wantChat)
			}
			if got := idsOf(map[string]string{"X-Request-Id": "p"}, "/v1/completions", `{"prompt":["a","b"],"max_tokens":2,"stream":true}`); strings.Join(got, ",") != strings.Join(tc.wantCompletion, ",") {
				t.Errorf("two-prompt spans %v, want %v", got, tc.wantCompletion)
			}
			unsampled := map[string]string{"X-Request-Id": "u", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}
			if got := idsOf(unsampled, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`); len(got) != 0 {
				t.Errorf("unsampled traceparent produced spans %v", got)
			}
		})
	}
}
