package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testnet"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/schema"
)

const (
	firstTokenDelay = 80 * time.Millisecond
	tokenDelay      = 10 * time.Millisecond
)

func TestOpenAISDKStreamingAndNonStreamingRecords(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	engine, engineURL := startEngine(t, firstTokenDelay, tokenDelay)
	_, gw := startGateway(t, engineURL, natsCfg, nil)
	client := openai.NewClient(option.WithBaseURL(gw+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("streaming", func(t *testing.T) {
		rid := newID("sdk-stream")
		var resp *http.Response
		sent := time.Now()
		var clientTTFT time.Duration
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:     "Qwen/Qwen2.5-7B-Instruct-AWQ",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the capital of France?")},
			MaxTokens: openai.Int(12),
			Metadata:  map[string]string{"prompt_version": "pv-7"},
		}, option.WithHeader("X-Request-Id", rid), option.WithHeader("X-Servescope-App", "sdk-test"), option.WithResponseInto(&resp))
		var text strings.Builder
		chunks := 0
		for stream.Next() {
			c := stream.Current()
			chunks++
			if len(c.Choices) == 0 {
				t.Fatalf("client received a chunk without choices (the gateway's usage chunk leaked): %s", c.RawJSON())
			}
			if c.Choices[0].Delta.Content != "" && clientTTFT == 0 {
				clientTTFT = time.Since(sent)
			}
			text.WriteString(c.Choices[0].Delta.Content)
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		if got := resp.Header.Get("X-Request-Id"); got != rid {
			t.Fatalf("X-Request-Id returned %q, want %q", got, rid)
		}
		want := strings.Join(enginetestWords(12), "")
		if text.String() != want {
			t.Fatalf("streamed text %q, want %q", text.String(), want)
		}
		st, fin := recordsOf(t, js, topo, rid)
		if st.Endpoint != "/v1/chat/completions" || !st.Stream || st.MaxTokens == nil || *st.MaxTokens != 12 || st.App != "sdk-test" || st.PromptVersion != "pv-7" || len(st.TraceID) != 32 {
			t.Fatalf("request.started = %+v", st)
		}
		if !fin.ArrivalTS.Equal(st.ArrivalTS) || fin.StatusCode != 200 || fin.ErrorLayer != "" || fin.FinishReason != "length" || fin.TokensEstimated {
			t.Fatalf("request.finished = %+v", fin)
		}
		if fin.CompletionTokens == nil || *fin.CompletionTokens != 12 || fin.PromptTokens == nil || *fin.PromptTokens == 0 {
			t.Fatalf("tokens: prompt %v completion %v", fin.PromptTokens, fin.CompletionTokens)
		}
		engineTTFT, ok := engine.TTFT(rid)
		if !ok || fin.TTFTSeconds == nil {
			t.Fatalf("ttft: engine %v (%v), gateway %v", engineTTFT, ok, fin.TTFTSeconds)
		}
		gwTTFT := time.Duration(*fin.TTFTSeconds * float64(time.Second))
		// The gateway's clock starts after the client's and stops before the client sees the chunk,
		// and it starts before the engine's and stops after the engine wrote the chunk. Those
		// orderings are what holds on any machine: how far apart the three are is the scheduler's.
		if gwTTFT < engineTTFT || gwTTFT > clientTTFT {
			t.Fatalf("gateway TTFT %v: want engine's %v ≤ it ≤ client's %v", gwTTFT, engineTTFT, clientTTFT)
		}
		if fin.E2ESeconds == nil || *fin.E2ESeconds < *fin.TTFTSeconds {
			t.Fatalf("E2E %v < TTFT %v", fin.E2ESeconds, fin.TTFTSeconds)
		}
		// The 11 gaps between 12 tokens fit in the time after the first one (a TPOT in
		// milliseconds, or not divided, would not); how close it comes to the engine's 10 ms
		// depends on when the gateway read the chunks, which a loaded machine delays.
		if fin.TPOTSeconds == nil || *fin.TPOTSeconds < 0 || *fin.TPOTSeconds*11 > *fin.E2ESeconds-*fin.TTFTSeconds+1e-9 {
			t.Fatalf("TPOT %v: want 0 ≤ 11 × it ≤ E2E %v − TTFT %v", fin.TPOTSeconds, *fin.E2ESeconds, *fin.TTFTSeconds)
		}
		if fin.ScheduledToFirstTokenSeconds == nil || *fin.ScheduledToFirstTokenSeconds != firstTokenDelay.Seconds() || fin.QueueSeconds == nil || fin.DecodeSeconds == nil || fin.EngineITLSeconds == nil {
			t.Fatalf("engine metrics not recorded: ttft %v queue %v decode %v itl %v", fin.ScheduledToFirstTokenSeconds, fin.QueueSeconds, fin.DecodeSeconds, fin.EngineITLSeconds)
		}
		if fin.OutputForeignChars == nil || *fin.OutputForeignChars != 0 || fin.OutputScriptViolation == nil || *fin.OutputScriptViolation {
			t.Fatalf("output check: %v %v", fin.OutputForeignChars, fin.OutputScriptViolation)
		}
		if fin.Model != "Qwen/Qwen2.5-7B-Instruct-AWQ" || fin.App != "sdk-test" || fin.PromptVersion != "pv-7" || fin.TraceID != st.TraceID || fin.Gateway != "gw-test" || fin.Upstream == "" {
			t.Fatalf("identity fields: %+v", fin)
		}
		if fin.PromptText != "" || fin.OutputText != "" {
			t.Fatal("content captured with capture off")
		}
	})

	t.Run("non-streaming", func(t *testing.T) {
		rid := newID("sdk-plain")
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "Qwen/Qwen2.5-7B-Instruct-AWQ",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the capital of France?")},
		}, option.WithHeader("X-Request-Id", rid))
		if err != nil {
			t.Fatal(err)
		}
		if c.Usage.CompletionTokens != int64(len(enginetestWords(0))) || c.Choices[0].FinishReason != "stop" {
			t.Fatalf("response usage %+v finish %q", c.Usage, c.Choices[0].FinishReason)
		}
		_, fin := recordsOf(t, js, topo, rid)
		if fin.Stream || fin.StatusCode != 200 || fin.FinishReason != "stop" || fin.TokensEstimated ||
			fin.CompletionTokens == nil || int64(*fin.CompletionTokens) != c.Usage.CompletionTokens ||
			fin.PromptTokens == nil || int64(*fin.PromptTokens) != c.Usage.PromptTokens {
			t.Fatalf("request.finished = %+v", fin)
		}
		if fin.TTFTSeconds != nil || fin.TPOTSeconds != nil {
			t.Fatalf("non-streaming record claims TTFT %v / TPOT %v the gateway cannot see", fin.TTFTSeconds, fin.TPOTSeconds)
		}
		if fin.ScheduledToFirstTokenSeconds == nil || fin.E2ESeconds == nil || *fin.E2ESeconds < firstTokenDelay.Seconds() {
			t.Fatalf("engine ttft %v, e2e %v", fin.ScheduledToFirstTokenSeconds, fin.E2ESeconds)
		}
	})
}

func enginetestWords(maxTokens int) []string {
	w := []string{"The", " capital", " of", " France", " is", " Paris", ".", " It", " is", " known", " for", " the", " Eiffel", " Tower", "."}
	if maxTokens > 0 && maxTokens < len(w) {
		return w[:maxTokens]
	}
	return w
}

// TestClientBytesIdenticalWithAndWithoutGateway compares, byte for byte, what a streaming client
// receives from the engine directly and through the gateway, with and without include_usage.
func TestClientBytesIdenticalWithAndWithoutGateway(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	_, engineURL := startEngine(t, 5*time.Millisecond, time.Millisecond)
	_, gw := startGateway(t, engineURL, natsCfg, nil)
	bodies := map[string]string{
		"chat without usage":        `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":9}`,
		"chat with usage":           `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
		"chat usage explicitly off": `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":false}}`,
		"completion without usage":  `{"model":"m","prompt":"Once upon","stream":true,"max_tokens":5}`,
		"chat non-streaming":        `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	}
	for name, body := range bodies {
		path := "/v1/chat/completions"
		if strings.HasPrefix(name, "completion") {
			path = "/v1/completions"
		}
		rid := newID("bytes")
		dStatus, direct, _ := post(t, engineURL+path, rid, body, nil)
		gStatus, via, _ := post(t, gw+path, rid, body, nil)
		if dStatus != 200 || gStatus != 200 {
			t.Fatalf("%s: status direct %d, gateway %d", name, dStatus, gStatus)
		}
		if !bytes.Equal(direct, via) {
			t.Fatalf("%s: client bytes differ\ndirect:  %q\ngateway: %q", name, direct, via)
		}
		_, fin := recordsOf(t, js, topo, rid)
		if fin.CompletionTokens == nil || fin.TokensEstimated {
			t.Fatalf("%s: tokens not from usage: %+v", name, fin)
		}
	}
}

func TestErrorsAreRecordedWithTheirLayer(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	_, engineURL := startEngine(t, time.Millisecond, time.Millisecond)
	_, gw := startGateway(t, engineURL, natsCfg, nil)

	// An engine that is down: a port that refuses connections for the whole test.
	deadURL := "http://" + testnet.RefusingAddr(t)
	_, gwDead := startGateway(t, deadURL, natsCfg, nil)

	long := strings.Repeat("word ", 4000) // 20000 bytes ≈ 5000 tokens > 4096
	tests := []struct {
		name      string
		url       string
		body      string
		status    int
		layer     string
		code      string
		msgPrefix string
		check     func(t *testing.T, fin *schema.RequestFinished)
	}{
		{name: "over-long prompt", url: gw, body: `{"model":"m","messages":[{"role":"user","content":"` + long + `"}]}`,
			status: 400, layer: "upstream", code: "BadRequestError", msgPrefix: "This model's maximum context length is 4096 tokens"},
		{name: "engine down", url: gwDead, body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
			status: 502, layer: "upstream", code: "connection_refused", msgPrefix: "engine " + deadURL},
		{name: "error event in a 200 stream", url: gw, body: `{"model":"m","messages":[{"role":"user","content":"[error-stream]"}],"stream":true}`,
			status: 200, layer: "upstream", code: "InternalServerError", msgPrefix: "engine step failed"},
		{name: "flat error event in a stream", url: gw, body: `{"model":"m","messages":[{"role":"user","content":"[error-flat]"}],"stream":true}`,
			status: 200, layer: "upstream", code: "InternalServerError", msgPrefix: "Out of memory"},
		{name: "CJK in the output", url: gw, body: `{"model":"m","messages":[{"role":"user","content":"[cjk]"}],"stream":true}`,
			status: 200, check: func(t *testing.T, fin *schema.RequestFinished) {
				if fin.OutputForeignChars == nil || *fin.OutputForeignChars != 2 || fin.OutputScriptViolation == nil || !*fin.OutputScriptViolation {
					t.Fatalf("output check: foreign %v violation %v, want 2 and true", fin.OutputForeignChars, fin.OutputScriptViolation)
				}
			}},
		{name: "CJK in a non-streaming output", url: gw, body: `{"model":"m","messages":[{"role":"user","content":"[cjk]"}]}`,
			status: 200, check: func(t *testing.T, fin *schema.RequestFinished) {
				if fin.OutputForeignChars == nil || *fin.OutputForeignChars != 2 || !*fin.OutputScriptViolation {
					t.Fatalf("output check: foreign %v violation %v", fin.OutputForeignChars, fin.OutputScriptViolation)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rid := newID("err")
			status, body, hdr := post(t, tc.url+"/v1/chat/completions", rid, tc.body, nil)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			if hdr.Get("X-Request-Id") != rid {
				t.Fatalf("X-Request-Id %q", hdr.Get("X-Request-Id"))
			}
			if tc.status >= 400 {
				var e struct {
					Error struct {
						Message string `json:"message"`
						Code    int    `json:"code"`
					} `json:"error"`
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != tc.status || e.Error.Message == "" {
					t.Fatalf("error body %s (%v)", body, err)
				}
			}
			_, fin := recordsOf(t, js, topo, rid)
			if int(fin.StatusCode) != tc.status || fin.ErrorLayer != tc.layer || fin.ErrorCode != tc.code || !strings.HasPrefix(fin.ErrorMessage, tc.msgPrefix) {
				t.Fatalf("recorded status %d layer %q code %q message %q; want %d %q %q %q...",
					fin.StatusCode, fin.ErrorLayer, fin.ErrorCode, fin.ErrorMessage, tc.status, tc.layer, tc.code, tc.msgPrefix)
			}
			if tc.check != nil {
				tc.check(t, fin)
			}
		})
	}
}

func TestClientDisconnectMidStreamIsRecordedAsClient499(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	_, engineURL := startEngine(t, time.Millisecond, time.Millisecond)
	_, gw := startGateway(t, engineURL, natsCfg, nil)
	rid := newID("gone")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"[slow]"}],"stream":true}`))
	req.Header.Set("X-Request-Id", rid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// Read up to the first content chunk, then hang up.
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"content":"The"`) {
			break
		}
	}
	cancel()
	resp.Body.Close()
	_, fin := recordsOf(t, js, topo, rid)
	if fin.StatusCode != 499 || fin.ErrorLayer != "client" || fin.TTFTSeconds == nil {
		t.Fatalf("request.finished: status %d layer %q ttft %v; want 499, client, a TTFT", fin.StatusCode, fin.ErrorLayer, fin.TTFTSeconds)
	}
}

func TestContentCaptureRedactsAndTruncates(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	_, engineURL := startEngine(t, time.Millisecond, time.Millisecond)
	_, gw := startGateway(t, engineURL, natsCfg, map[string]string{
		"GATEWAY_CAPTURE_CONTENT":   "true",
		"GATEWAY_CAPTURE_MAX_BYTES": "30",
		"GATEWAY_CAPTURE_REDACT":    `[\w.]+@[\w.]+` + "\n" + `Paris`,
	})
	rid := newID("capture")
	status, _, _ := post(t, gw+"/v1/chat/completions", rid, `{"model":"m","messages":[{"role":"user","content":"mail bob@example.com now"}],"stream":true}`, nil)
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	_, fin := recordsOf(t, js, topo, rid)
	if fin.PromptText != "mail [REDACTED] now" {
		t.Fatalf("prompt_text %q", fin.PromptText)
	}
	if fin.OutputText != "The capital of France is [REDA" {
		t.Fatalf("output_text %q", fin.OutputText)
	}
}

func TestIngestEndpoint(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	_, engineURL := startEngine(t, time.Millisecond, time.Millisecond)
	_, gw := startGateway(t, engineURL, natsCfg, map[string]string{"SERVESCOPE_INGEST_TOKEN": "s3cret", "GATEWAY_INGEST_MAX_BYTES": "2048"})
	_, gwNoToken := startGateway(t, engineURL, natsCfg, nil)
	auth := map[string]string{"Authorization": "Bearer s3cret"}
	url := gw + "/servescope/v1/records"
	good := `{"request_id":"ing-1","app":"ragdemo","retrieval_top_score":0.82,"passages":[{"id":"doc-1","score":0.82}],"index_version":"idx-3"}`
	tests := []struct {
		name   string
		url    string
		body   string
		hdr    map[string]string
		status int
		want   string
	}{
		{"no token configured", gwNoToken + "/servescope/v1/records", good, auth, 404, "disabled"},
		{"missing token", url, good, nil, 401, "bearer"},
		{"wrong token", url, good, map[string]string{"Authorization": "Bearer nope"}, 401, "bearer"},
		{"field errors", url, `[{"request_id":"ing-x","ts":"1999-01-01T00:00:00Z"},{"app":"a"}]`, auth, 400, `"field":"request_id"`},
		{"unknown field", url, `{"request_id":"r","bogus":1}`, auth, 400, `"field":"bogus"`},
		{"not json", url, `hello`, auth, 400, "app.record JSON"},
		{"too large", url, `[` + strings.Repeat(good+",", 20) + good + `]`, auth, 413, "exceeds"},
		{"one record", url, good, auth, 202, `"accepted":1`},
		{"array", url, `[{"request_id":"ing-2","app":"a"},{"request_id":"ing-3","app":"a","cache_hit":true,"cache_kind":"semantic"}]`, auth, 202, `"accepted":2`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body, _ := post(t, tc.url, "", tc.body, tc.hdr)
			if status != tc.status || !strings.Contains(string(body), tc.want) {
				t.Fatalf("status %d body %s; want %d containing %q", status, body, tc.status, tc.want)
			}
		})
	}
	deadline := time.Now().Add(2 * time.Minute) // returns as soon as it holds
	for {
		got := map[string]*schema.AppRecord{}
		for _, e := range events(t, js, topo) {
			if r, ok := e.(*schema.AppRecord); ok {
				got[r.RequestID] = r
			}
		}
		if len(got) == 3 {
			r := got["ing-1"]
			if r == nil || r.App != "ragdemo" || r.IndexVersion != "idx-3" || r.RetrievalTopScore == nil || *r.RetrievalTopScore != 0.82 || len(r.Passages) != 1 {
				t.Fatalf("ing-1 = %+v", r)
			}
			if r := got["ing-3"]; r == nil || r.CacheHit == nil || !*r.CacheHit || r.CacheKind != "semantic" {
				t.Fatalf("ing-3 = %+v", r)
			}
			return
		}
		if len(got) > 3 || time.Now().After(deadline) {
			t.Fatalf("app.records on the stream: %d, want exactly 3 (ing-1, ing-2, ing-3)", len(got))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestProxiesOtherPathsAndServesOwnEndpoints(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	_, engineURL := startEngine(t, time.Millisecond, time.Millisecond)
	_, gw := startGateway(t, engineURL, natsCfg, nil)
	resp, err := http.Get(gw + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"max_model_len":4096`) || len(resp.Header.Get("X-Request-Id")) == 0 {
		t.Fatalf("GET /v1/models: %d %s", resp.StatusCode, body)
	}
	status, _, _ := post(t, gw+"/v1/chat/completions", newID("m"), `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
	if status != 200 {
		t.Fatalf("chat status %d", status)
	}
	for path, want := range map[string]string{
		"/healthz": "ok",
		"/readyz":  `"nats_connected":true`,
		// Counted when the gateway finishes the request, which can be a moment after the client
		// has read the whole body: polled, not read once.
		"/metrics": `servescope_gateway_requests_total{route="/v1/chat/completions",status="200"} 1`,
	} {
		waitFor(t, func() bool {
			resp, err := http.Get(gw + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode == 200 && strings.Contains(string(b), want)
		}, fmt.Sprintf("GET %s to answer 200 with %q", path, want))
	}
	// Only the recorded route produced events: one started, one finished.
	deadline := time.Now().Add(2 * time.Minute) // returns as soon as both are there
	for {
		evs := events(t, js, topo)
		if len(evs) == 2 {
			break
		}
		if len(evs) > 2 || time.Now().After(deadline) {
			t.Fatalf("%d events on the stream, want 2", len(evs))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClientHangingUpAfterDoneIsNotA499 is the reproducer of a stream recorded as 499 although
// the client had its whole answer: loadgen and many SDKs close the connection the moment they read
// "data: [DONE]", which cancels the gateway's read of the engine's tail. Both paths: the client
// asked for the usage chunk itself, and it did not (the gateway asked, and removed that chunk).
func TestClientHangingUpAfterDoneIsNotA499(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	_, engineURL := startEngine(t, time.Millisecond, time.Millisecond)
	_, gw := startGateway(t, engineURL, natsCfg, nil)
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hello"}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","messages":[{"role":"user","content":"hello"}],"stream":true}`,
	} {
		for i := range 10 {
			rid := newID(fmt.Sprintf("done-%d", i))
			req, _ := http.NewRequest(http.MethodPost, gw+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("X-Request-Id", rid)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if sc.Text() == "data: [DONE]" {
					break
				}
			}
			resp.Body.Close() // hang up at once, without reading to EOF
			_, fin := recordsOf(t, js, topo, rid)
			if fin.StatusCode != 200 || fin.ErrorLayer != "" || fin.FinishReason == "" {
				t.Fatalf("%s: request.finished status %d layer %q (%s) finish %q; want 200 with no error", body, fin.StatusCode, fin.ErrorLayer, fin.ErrorMessage, fin.FinishReason)
			}
		}
	}
}
