package server_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/sim"
	"github.com/servescope/servescope/sim/vllmsim/simserver"
)

// startSim runs vllmsim in-process in real time and returns its URL.
func startSim(t *testing.T, wrongLanguageShare float64, perRequestMetrics bool) string {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.WrongLanguageShare = wrongLanguageShare
	s := sim.New(sim.Options{Engine: cfg, Server: simserver.Config{PerRequestMetrics: perRequestMetrics}, TimeScale: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Engine.Run(ctx)
	}()
	srv := httptest.NewServer(s.Handler)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-done
	})
	return srv.URL
}

func TestWithVLLMSim(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	simURL := startSim(t, 0, true)
	_, gw := startGateway(t, simURL, natsCfg, nil)
	// Per-request metrics carry measured times that differ between two runs of the same request,
	// so the byte comparison uses a simulator without them.
	plainSimURL := startSim(t, 0, false)
	_, plainGW := startGateway(t, plainSimURL, natsCfg, nil)
	client := openai.NewClient(option.WithBaseURL(gw+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("streaming with the OpenAI SDK", func(t *testing.T) {
		rid := newID("sim-stream")
		sent := time.Now()
		var clientTTFT time.Duration
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:     "servescope/sim-7b",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about the Eiffel Tower.")},
			MaxTokens: openai.Int(16),
		}, option.WithHeader("X-Request-Id", rid))
		chunks := 0
		for stream.Next() {
			c := stream.Current()
			if len(c.Choices) == 0 {
				t.Fatalf("usage chunk leaked to the client: %s", c.RawJSON())
			}
			if c.Choices[0].Delta.Content != "" {
				chunks++
				if clientTTFT == 0 {
					clientTTFT = time.Since(sent)
				}
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		_, fin := recordsOf(t, js, topo, rid)
		if fin.StatusCode != 200 || fin.TokensEstimated || fin.CompletionTokens == nil || *fin.CompletionTokens == 0 || fin.FinishReason == "" {
			t.Fatalf("request.finished = %+v", fin)
		}
		if int(*fin.CompletionTokens) < chunks {
			t.Fatalf("completion_tokens %d < %d content chunks", *fin.CompletionTokens, chunks)
		}
		if fin.TTFTSeconds == nil || fin.ScheduledToFirstTokenSeconds == nil {
			t.Fatalf("ttft %v, engine ttft %v", fin.TTFTSeconds, fin.ScheduledToFirstTokenSeconds)
		}
		gw, eng := time.Duration(*fin.TTFTSeconds*1e9), time.Duration(*fin.ScheduledToFirstTokenSeconds*1e9)
		// The engine's clock starts when it got the request and stops at the token; the gateway's
		// starts earlier and stops after forwarding it; the client's brackets both.
		if gw+2*time.Millisecond < eng || gw > clientTTFT {
			t.Fatalf("gateway TTFT %v vs engine %v and client %v", gw, eng, clientTTFT)
		}
	})

	t.Run("non-streaming", func(t *testing.T) {
		rid := newID("sim-plain")
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     "servescope/sim-7b",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
			MaxTokens: openai.Int(8),
		}, option.WithHeader("X-Request-Id", rid))
		if err != nil {
			t.Fatal(err)
		}
		_, fin := recordsOf(t, js, topo, rid)
		if fin.CompletionTokens == nil || int64(*fin.CompletionTokens) != c.Usage.CompletionTokens ||
			fin.PromptTokens == nil || int64(*fin.PromptTokens) != c.Usage.PromptTokens ||
			fin.FinishReason != string(c.Choices[0].FinishReason) || fin.Model != "servescope/sim-7b" {
			t.Fatalf("record %+v vs response usage %+v finish %q", fin, c.Usage, c.Choices[0].FinishReason)
		}
	})

	t.Run("client bytes identical", func(t *testing.T) {
		for _, body := range []string{
			`{"model":"servescope/sim-7b","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":6,"seed":7}`,
			`{"model":"servescope/sim-7b","prompt":"Once upon a time","stream":true,"max_tokens":6,"seed":7}`,
		} {
			path := "/v1/chat/completions"
			if strings.Contains(body, `"prompt"`) {
				path = "/v1/completions"
			}
			rid := newID("sim-bytes")
			_, direct, _ := post(t, plainSimURL+path, rid, body, nil)
			_, via, _ := post(t, plainGW+path, rid, body, nil)
			// The engine stamps each answer with the second it began ("created"); the two requests
			// may straddle a second. That value is compared within a second, everything else
			// byte for byte.
			direct, via = sameCreated(t, direct, via)
			if !bytes.Equal(direct, via) {
				t.Fatalf("%s: bytes differ\ndirect:  %q\ngateway: %q", path, direct, via)
			}
		}
	})

	t.Run("over-long prompt", func(t *testing.T) {
		rid := newID("sim-long")
		long := strings.Repeat("the quick brown fox ", 2000)
		status, body, _ := post(t, gw+"/v1/chat/completions", rid, `{"model":"servescope/sim-7b","messages":[{"role":"user","content":"`+long+`"}]}`, nil)
		if status != 400 {
			t.Fatalf("status %d: %s", status, body)
		}
		_, fin := recordsOf(t, js, topo, rid)
		if fin.StatusCode != 400 || fin.ErrorLayer != "upstream" || !strings.Contains(fin.ErrorMessage, "maximum context length") {
			t.Fatalf("record: status %d layer %q message %q", fin.StatusCode, fin.ErrorLayer, fin.ErrorMessage)
		}
	})
}

func TestWithVLLMSimWrongLanguage(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	simURL := startSim(t, 1, false)
	_, gw := startGateway(t, simURL, natsCfg, nil)
	rid := newID("sim-cjk")
	status, body, _ := post(t, gw+"/v1/chat/completions", rid, `{"model":"servescope/sim-7b","messages":[{"role":"user","content":"Explain KV caches."}],"stream":true,"max_tokens":40,"ignore_eos":true}`, nil)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	_, fin := recordsOf(t, js, topo, rid)
	if fin.OutputForeignChars == nil || *fin.OutputForeignChars == 0 || fin.OutputScriptViolation == nil || !*fin.OutputScriptViolation {
		t.Fatalf("output check: foreign %v violation %v\n%s", fin.OutputForeignChars, fin.OutputScriptViolation, body)
	}
}

var createdField = regexp.MustCompile(`"created":([0-9]+)`)

// sameCreated checks that a's and b's "created" stamps pair up within one second, and returns
// both with every stamp set to a's first, for a byte comparison of the rest.
func sameCreated(t *testing.T, a, b []byte) ([]byte, []byte) {
	t.Helper()
	ma, mb := createdField.FindAllSubmatch(a, -1), createdField.FindAllSubmatch(b, -1)
	if len(ma) != len(mb) {
		t.Fatalf("%d created stamps direct, %d through the gateway", len(ma), len(mb))
	}
	if len(ma) == 0 {
		return a, b
	}
	for i := range ma {
		x, _ := strconv.ParseInt(string(ma[i][1]), 10, 64)
		y, _ := strconv.ParseInt(string(mb[i][1]), 10, 64)
		// The two requests run one after the other; on a loaded machine seconds apart.
		if d := y - x; d < 0 || d > 60 {
			t.Fatalf("created %d through the gateway vs %d direct: more than a minute apart", y, x)
		}
	}
	norm := []byte(`"created":` + string(ma[0][1]))
	return createdField.ReplaceAll(a, norm), createdField.ReplaceAll(b, norm)
}
