package simserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/sim"
	"github.com/servescope/servescope/sim/vllmsim/simserver"
	"github.com/servescope/servescope/sim/vllmsim/simtrace"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

var update = flag.Bool("update", false, "rewrite golden files")

const testScale = 50

type testSim struct {
	*sim.Sim
	URL    string
	cancel context.CancelFunc
	done   chan struct{}
}

// startSim serves a simulator at a high time scale; stop ends its engine early (tests of the
// dead-engine paths call it), otherwise cleanup does.
func startSim(t *testing.T, opts sim.Options) *testSim {
	t.Helper()
	if opts.TimeScale == 0 {
		opts.TimeScale = testScale
	}
	s := sim.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testSim{Sim: s, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ts.done)
		_ = s.Run(ctx)
	}()
	srv := httptest.NewServer(s.Handler)
	ts.URL = srv.URL
	t.Cleanup(func() {
		ts.stop()
		srv.Close()
	})
	return ts
}

func (ts *testSim) stop() {
	ts.cancel()
	<-ts.done
}

func sdk(ts *testSim, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(ts.URL + "/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0)}, opts...)...)
}

func TestOpenAISDKStreamingWithUsage(t *testing.T) {
	ts := startSim(t, sim.Options{})
	client := sdk(ts, option.WithHeader("X-Request-Id", "rid-stream-1"))
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "servescope/sim-7b",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Explain continuous batching in one paragraph.")},
		MaxTokens:     openai.Int(12),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	acc := openai.ChatCompletionAccumulator{}
	var chunks, usageChunks int
	var finish string
	for stream.Next() {
		c := stream.Current()
		acc.AddChunk(c)
		chunks++
		if c.ID != "chatcmpl-rid-stream-1" {
			t.Fatalf("chunk id %q, want chatcmpl-rid-stream-1", c.ID)
		}
		if len(c.Choices) == 0 {
			usageChunks++
			continue
		}
		if c.Choices[0].FinishReason != "" {
			finish = c.Choices[0].FinishReason
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if finish != "length" {
		t.Errorf("finish reason %q, want length", finish)
	}
	if usageChunks != 1 {
		t.Errorf("%d usage chunks, want 1", usageChunks)
	}
	// role chunk + 12 token chunks + usage chunk
	if chunks != 14 {
		t.Errorf("%d chunks, want 14", chunks)
	}
	if acc.Usage.CompletionTokens != 12 || acc.Usage.PromptTokens < 10 || acc.Usage.TotalTokens != acc.Usage.PromptTokens+12 {
		t.Errorf("usage %+v", acc.Usage)
	}
	if len(acc.Choices) != 1 || strings.TrimSpace(acc.Choices[0].Message.Content) == "" {
		t.Errorf("no content accumulated: %+v", acc.Choices)
	}
}

func TestOpenAISDKNonStreaming(t *testing.T) {
	ts := startSim(t, sim.Options{})
	client := sdk(ts)
	var resp *http.Response
	cc, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "servescope/sim-7b",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("What is a KV cache?")},
		MaxTokens: openai.Int(20),
	}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^chatcmpl-[0-9a-f]{32}$`).MatchString(cc.ID) {
		t.Errorf("id %q, want chatcmpl-<32 hex> without X-Request-Id", cc.ID)
	}
	if resp.Header.Get("X-Request-Id") != "" {
		t.Errorf("X-Request-Id echoed without being sent")
	}
	if cc.Usage.CompletionTokens != 20 || cc.Choices[0].FinishReason != "length" || cc.Choices[0].Message.Role != "assistant" {
		t.Errorf("completion %+v", cc)
	}
	// Same prompt, same answer: the output is a deterministic function of the prompt.
	cc2, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "servescope/sim-7b",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("What is a KV cache?")},
		MaxTokens: openai.Int(20),
	})
	if err != nil {
		t.Fatal(err)
	}
	if cc2.Choices[0].Message.Content != cc.Choices[0].Message.Content {
		t.Errorf("same prompt gave different answers")
	}
}

func TestOpenAISDKCompletions(t *testing.T) {
	ts := startSim(t, sim.Options{})
	client := sdk(ts, option.WithHeader("X-Request-Id", "abc"))
	c, err := client.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:     "servescope/sim-7b",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(7),
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != "cmpl-abc" || c.Usage.CompletionTokens != 7 || c.Choices[0].FinishReason != "length" || c.Choices[0].Text == "" {
		t.Errorf("completion %+v", c)
	}
}

func TestErrors(t *testing.T) {
	ts := startSim(t, sim.Options{})
	client := sdk(ts)
	tests := []struct {
		name       string
		params     openai.ChatCompletionNewParams
		wantStatus int
		wantType   string
		wantMsg    string
	}{
		{
			name: "over-long request",
			params: openai.ChatCompletionNewParams{Model: "servescope/sim-7b", MaxTokens: openai.Int(5000),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}},
			wantStatus: 400, wantType: "BadRequestError", wantMsg: "maximum context length is 4096 tokens",
		},
		{
			name: "over-long prompt",
			params: openai.ChatCompletionNewParams{Model: "servescope/sim-7b",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("serving systems ", 3000))}},
			wantStatus: 400, wantType: "BadRequestError", wantMsg: "maximum context length is 4096 tokens",
		},
		{
			name: "unknown model",
			params: openai.ChatCompletionNewParams{Model: "gpt-unknown",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}},
			wantStatus: 404, wantType: "NotFoundError", wantMsg: "The model `gpt-unknown` does not exist.",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.Chat.Completions.New(context.Background(), tc.params)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want *openai.Error", err)
			}
			if apiErr.StatusCode != tc.wantStatus || apiErr.Type != tc.wantType || !strings.Contains(apiErr.Message, tc.wantMsg) {
				t.Fatalf("got %d %s %q; want %d %s containing %q", apiErr.StatusCode, apiErr.Type, apiErr.Message, tc.wantStatus, tc.wantType, tc.wantMsg)
			}
			var body struct {
				Code int `json:"code"`
			}
			if err := json.Unmarshal([]byte(apiErr.RawJSON()), &body); err != nil || body.Code != tc.wantStatus {
				t.Fatalf("error.code in %s, want %d", apiErr.RawJSON(), tc.wantStatus)
			}
		})
	}
}

func post(t *testing.T, url, body string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

var normalizeRE = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`"created(_at)?":\d+`), `"created$1":0`},
	{regexp.MustCompile(`(msg|resp|embd|chatcmpl|cmpl)([_-])[0-9a-f]{32}`), `${1}${2}RANDOM`},
}

// normalize replaces what varies between runs (timestamps, random ids) in a body.
func normalize(b []byte) []byte {
	for _, n := range normalizeRE {
		b = n.re.ReplaceAll(b, []byte(n.with))
	}
	return b
}

// TestGoldenBodies checks the exact bytes of streams, bodies and errors at each vLLM version
// (timestamps and random ids normalized). The shapes follow vLLM's pydantic models at each
// version; run with -update to rewrite them after a deliberate change.
func TestGoldenBodies(t *testing.T) {
	const chat = "/v1/chat/completions"
	tests := []struct {
		name, path, body string
		status           int
		responsesAPI     bool // not served by 0.8
	}{
		{"chat_stream_usage", chat, `{"model":"servescope/sim-7b","messages":[{"role":"user","content":"Say something <short> & \"quoted\"."}],"max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}`, 200, false},
		{"chat_stream_no_usage", chat, `{"messages":[{"role":"user","content":"Another prompt"}],"max_tokens":3,"stream":true}`, 200, false},
		{"chat_stream_n2_continuous_usage", chat, `{"messages":[{"role":"user","content":"Two answers"}],"n":2,"max_tokens":3,"stream":true,"stream_options":{"continuous_usage_stats":true}}`, 200, false},
		{"chat_whole_n2", chat, `{"messages":[{"role":"user","content":"Two answers"}],"n":2,"max_tokens":3}`, 200, false},
		{"completion_stream_usage", "/v1/completions", `{"model":"servescope/sim-7b","prompt":"The engine","max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`, 200, false},
		{"completion_stream_prompts_n2", "/v1/completions", `{"prompt":["a","b c"],"n":2,"max_tokens":2,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`, 200, false},
		{"completion_whole_token_prompts", "/v1/completions", `{"prompt":[[9906,1879],[40,1079,11]],"max_tokens":2}`, 200, false},
		{"error_unknown_model", chat, `{"model":"gpt-unknown","messages":[{"role":"user","content":"hi"}]}`, 404, false},
		{"error_context_length", chat, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":5000}`, 400, false},
		{"error_bad_n", "/v1/completions", `{"prompt":"hi","n":0}`, 400, false},
		{"embeddings", "/v1/embeddings", `{"input":["one","two words"],"dimensions":3}`, 200, false},
		{"responses_whole", "/v1/responses", `{"input":"hi","max_output_tokens":2,"request_id":"resp_golden"}`, 200, true},
		{"responses_stream", "/v1/responses", `{"input":"hi","max_output_tokens":2,"stream":true,"request_id":"resp_golden"}`, 200, true},
	}
	for _, v := range vllmversion.APIs {
		ts := startSim(t, sim.Options{Version: v})
		for _, tc := range tests {
			if tc.responsesAPI && !v.ResponsesAPI() {
				continue
			}
			t.Run(v.String()+"/"+tc.name, func(t *testing.T) {
				resp := post(t, ts.URL+tc.path, tc.body, map[string]string{"X-Request-Id": "golden-" + tc.name})
				defer resp.Body.Close()
				raw, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, raw)
				}
				if strings.Contains(tc.body, `"stream":true`) != strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
					t.Errorf("content type %q", resp.Header.Get("Content-Type"))
				}
				if resp.Header.Get("X-Request-Id") != "" {
					t.Errorf("X-Request-Id echoed without --enable-request-id-headers")
				}
				got := normalize(raw)
				path := "testdata/" + v.String() + "/" + tc.name + ".golden"
				if *update {
					if err := os.MkdirAll("testdata/"+v.String(), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(want) {
					t.Errorf("body differs from %s:\n%s", path, got)
				}
			})
		}
	}
}

func TestMetricsCarryVLLMNames(t *testing.T) {
	ts := startSim(t, sim.Options{})
	resp := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`, nil)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	mresp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(mresp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"vllm:num_requests_running": "GAUGE", "vllm:num_requests_waiting": "GAUGE", "vllm:kv_cache_usage_perc": "GAUGE",
		"vllm:time_to_first_token_seconds": "HISTOGRAM", "vllm:request_queue_time_seconds": "HISTOGRAM",
		"vllm:request_prefill_time_seconds": "HISTOGRAM", "vllm:request_decode_time_seconds": "HISTOGRAM",
		"vllm:inter_token_latency_seconds": "HISTOGRAM", "vllm:request_time_per_output_token_seconds": "HISTOGRAM",
		"vllm:e2e_request_latency_seconds": "HISTOGRAM", "vllm:request_inference_time_seconds": "HISTOGRAM",
		"vllm:request_prompt_tokens": "HISTOGRAM", "vllm:request_generation_tokens": "HISTOGRAM",
		"vllm:request_params_max_tokens": "HISTOGRAM", "vllm:iteration_tokens_total": "HISTOGRAM",
		"vllm:request_success_total": "COUNTER", "vllm:prompt_tokens_total": "COUNTER", "vllm:generation_tokens_total": "COUNTER",
		"vllm:num_preemptions_total": "COUNTER", "vllm:prefix_cache_queries_total": "COUNTER", "vllm:prefix_cache_hits_total": "COUNTER",
	}
	for name, typ := range want {
		f, ok := fams[name]
		if !ok {
			// The text parser keys counters by their name without _total in newer versions.
			f, ok = fams[strings.TrimSuffix(name, "_total")]
		}
		if !ok {
			t.Errorf("missing %s", name)
			continue
		}
		if f.GetType().String() != typ {
			t.Errorf("%s is %s, want %s", name, f.GetType(), typ)
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["model_name"] != "servescope/sim-7b" || labels["engine"] != "0" {
				t.Errorf("%s labels %v", name, labels)
			}
		}
	}
	gen := fams["vllm:request_generation_tokens"].GetMetric()[0].GetHistogram()
	if gen.GetSampleCount() != 1 || gen.GetSampleSum() != 4 {
		t.Errorf("generation tokens histogram count %d sum %g, want 1 and 4", gen.GetSampleCount(), gen.GetSampleSum())
	}
}

func TestTokenizeDetokenize(t *testing.T) {
	ts := startSim(t, sim.Options{})
	text := "The quick brown fox jumps over the lazy dog. 模型 serving, 42 times!"
	b, _ := json.Marshal(map[string]any{"prompt": text})
	resp := post(t, ts.URL+"/tokenize", string(b), nil)
	var tok struct {
		Count       int   `json:"count"`
		MaxModelLen int   `json:"max_model_len"`
		Tokens      []int `json:"tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if tok.Count != len(tok.Tokens) || tok.MaxModelLen != 4096 || tok.Count < len(text)/6 || tok.Count > len(text) {
		t.Fatalf("tokenize: %+v", tok)
	}
	b, _ = json.Marshal(map[string]any{"tokens": tok.Tokens})
	resp = post(t, ts.URL+"/detokenize", string(b), nil)
	var detok struct {
		Prompt string `json:"prompt"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&detok); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if detok.Prompt != text {
		t.Fatalf("detokenize = %q, want %q", detok.Prompt, text)
	}
	// Chat form counts the template, and matches the usage of a chat request with that message.
	resp = post(t, ts.URL+"/tokenize", `{"messages":[{"role":"user","content":"hello"}]}`, nil)
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	client := sdk(ts)
	cc, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "servescope/sim-7b", MaxTokens: openai.Int(1), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}})
	if err != nil {
		t.Fatal(err)
	}
	if int(cc.Usage.PromptTokens) != tok.Count {
		t.Fatalf("chat usage %d prompt tokens, /tokenize said %d", cc.Usage.PromptTokens, tok.Count)
	}
	resp = post(t, ts.URL+"/tokenize", `{"prompt":"a","messages":[{"role":"user","content":"b"}]}`, nil)
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("ambiguous tokenize: status %d, want 400", resp.StatusCode)
	}
}

func TestPerRequestMetricsAndWrongLanguage(t *testing.T) {
	ts := startSim(t, sim.Options{Server: simserver.Config{PerRequestMetrics: true}, Engine: func() engine.Config {
		c := engine.DefaultConfig()
		c.WrongLanguageShare = 1
		return c
	}()})
	resp := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":40}`, nil)
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Metrics *struct {
			QueueTimeMs        float64 `json:"queue_time_ms"`
			TimeToFirstTokenMs float64 `json:"time_to_first_token_ms"`
			GenerationTimeMs   float64 `json:"generation_time_ms"`
			MeanITLMs          float64 `json:"mean_itl_ms"`
			TokensPerSecond    float64 `json:"tokens_per_second"`
		} `json:"metrics"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	m := out.Metrics
	if m == nil || m.TimeToFirstTokenMs <= 0 || m.MeanITLMs < 15 || m.MeanITLMs > 25 || m.GenerationTimeMs <= 0 || m.TokensPerSecond <= 0 {
		t.Fatalf("metrics %+v", m)
	}
	han := 0
	for _, r := range out.Choices[0].Message.Content {
		if unicode.Is(unicode.Han, r) {
			han++
		}
	}
	if han == 0 {
		t.Fatalf("wrong-language share 1 produced no CJK: %q", out.Choices[0].Message.Content)
	}
}

func TestDropMidStream(t *testing.T) {
	ts := startSim(t, sim.Options{Server: simserver.Config{DropShare: 1}})
	resp := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":20,"stream":true}`, nil)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("stream ended cleanly, want a cut connection: %s", raw)
	}
	if strings.Contains(string(raw), "[DONE]") || !strings.Contains(string(raw), `"content"`) {
		t.Fatalf("stream before the cut: %s", raw)
	}
}

func TestEngineDeathMidStreamAndHealth(t *testing.T) {
	ts := startSim(t, sim.Options{TimeScale: 1})
	hresp, err := http.Get(ts.URL + "/health")
	if err != nil || hresp.StatusCode != 200 {
		t.Fatalf("health before: %v %v", hresp, err)
	}
	resp := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1000,"stream":true}`, nil)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	// Wait for the first content chunk, then kill the engine.
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, `"content":" `) || strings.Contains(line, `"content":",`) || strings.Contains(line, `"content":".`) {
			break
		}
	}
	ts.stop()
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	events := strings.Split(strings.TrimSpace(string(rest)), "\n\n")
	// vLLM's stream generator catches the EngineDeadError and writes create_streaming_error_response
	// through json.dumps (spaces after separators), then [DONE].
	wantErr := `data: {"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause.", "type": "BadRequestError", "param": null, "code": 400}}`
	if len(events) < 2 || events[len(events)-1] != "data: [DONE]" || events[len(events)-2] != wantErr {
		t.Fatalf("tail of stream: %q", events[max(0, len(events)-3):])
	}
	hresp, err = http.Get(ts.URL + "/health")
	if err != nil || hresp.StatusCode != 503 {
		t.Fatalf("health after engine death: %v %v", hresp.StatusCode, err)
	}
	resp2 := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":5}`, nil)
	body2, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if resp2.StatusCode != 500 || len(body2) != 0 {
		t.Fatalf("request to a dead engine: status %d body %q, want a bare 500", resp2.StatusCode, body2)
	}
}

func TestSpanContinuesTraceparent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	clock := engine.NewClock(testScale)
	x := simtrace.NewWithExporter(exp, clock)
	ts := startSim(t, sim.Options{Clock: clock, Observers: []engine.Observer{x}})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	resp := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0.5,"top_p":0.9}`,
		map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01", "X-Request-Id": "span-1"})
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := x.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	sp := spans[0]
	if sp.Name != "llm_request" || sp.SpanKind != trace.SpanKindServer || sp.SpanContext.TraceID().String() != traceID || sp.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("span %s kind %v trace %s parent %s", sp.Name, sp.SpanKind, sp.SpanContext.TraceID(), sp.Parent.SpanID())
	}
	attrs := map[string]any{}
	for _, a := range sp.Attributes {
		attrs[string(a.Key)] = a.Value.AsInterface()
	}
	if attrs["gen_ai.request.id"] != "chatcmpl-span-1" || attrs["gen_ai.usage.completion_tokens"] != int64(3) ||
		attrs["gen_ai.request.temperature"] != 0.5 || attrs["gen_ai.request.top_p"] != 0.9 || attrs["gen_ai.request.max_tokens"] != int64(3) ||
		attrs["gen_ai.response.finish_reasons"] != `["length"]` {
		t.Fatalf("attributes %v", attrs)
	}
	for _, k := range []string{"gen_ai.usage.prompt_tokens", "gen_ai.latency.time_in_queue", "gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e",
		"gen_ai.latency.time_in_model_prefill", "gen_ai.latency.time_in_model_decode", "gen_ai.latency.time_in_model_inference"} {
		if _, ok := attrs[k]; !ok {
			t.Errorf("missing attribute %s", k)
		}
	}
	if attrs["gen_ai.request.n"] != int64(1) {
		t.Errorf("gen_ai.request.n = %v, want 1 (vLLM reports the sampling params' n, 1 by default)", attrs["gen_ai.request.n"])
	}
	if _, ok := attrs["gen_ai.response.model"]; ok {
		t.Error("main's span carries gen_ai.response.model; vLLM's V1 span has no model attribute")
	}
	e2e := attrs["gen_ai.latency.e2e"].(float64)
	if d := sp.EndTime.Sub(sp.StartTime).Seconds(); d < e2e*0.99 || d > e2e*1.01 {
		t.Errorf("span lasts %g s, e2e attribute %g s", d, e2e)
	}
}

func TestModelsVersion(t *testing.T) {
	ts := startSim(t, sim.Options{Model: "acme/test-1"})
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(list.Data) != 1 || list.Data[0].ID != "acme/test-1" || list.Data[0].MaxModelLen != 4096 {
		t.Fatalf("models %+v", list)
	}
	resp, err = http.Get(ts.URL + "/version")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != `{"version":"`+vllmversion.Main.Release()+`"}` {
		t.Fatalf("version %s", b)
	}
}

func TestSlowUpstream(t *testing.T) {
	// 5 simulated seconds at scale 50 is 100 ms of wall time before the engine sees the request.
	ts := startSim(t, sim.Options{Server: simserver.Config{SlowShare: 1, SlowDelaySeconds: 5}})
	start := time.Now()
	resp := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, nil)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if el := time.Since(start); resp.StatusCode != 200 || el < 100*time.Millisecond {
		t.Fatalf("status %d after %s, want 200 after at least 100 ms", resp.StatusCode, el)
	}
}
