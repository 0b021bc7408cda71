package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/servescope/servescope/dev/appspans"
	"github.com/servescope/servescope/internal/chstore"
)

// TestApplicationSpans: an application instrumented with OpenTelemetry — one request
// shaped as OpenInference's LlamaIndex instrumentation emits it, one as the GenAI conventions and
// opentelemetry-instrumentation-openai-v2 do — exports real OTLP from the Go SDK to the
// collector, and calls the model through the gateway with its traceparent. Each trace becomes
// one app_records row holding what the spans said, and joins the gateway's request and the
// engine's span: the LlamaIndex one by trace_id (OpenInference does not record the answer's id),
// the GenAI one by request_id (read from gen_ai.response.id = chatcmpl-<request_id>).
func TestApplicationSpans(t *testing.T) {
	t.Parallel()
	p := startPipeline(t, pipelineOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(p.OTLPAddr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(100*time.Millisecond)),
		sdktrace.WithResource(appspans.PythonResource("support-bot",
			attribute.String("servescope.index.version", "kb-2026-11"),
			attribute.String("servescope.config.version", "cfg-3"))))
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = tp.Shutdown(sctx)
	}()

	var mu sync.Mutex
	traces := map[string]string{} // shape → trace id
	call := func(shape string) func(context.Context) (appspans.Answer, error) {
		return func(ctx context.Context) (appspans.Answer, error) {
			mu.Lock()
			traces[shape] = trace.SpanContextFromContext(ctx).TraceID().String()
			mu.Unlock()
			return chat(ctx, p.GatewayURL, "Why does queue wait stay at zero?")
		}
	}
	docs := []appspans.Doc{
		{ID: "handbook#12", Score: 0.8512, Content: "Queue wait stays at zero until the batch is full."},
		{ID: "handbook#4", Score: 0.8807, Content: "vLLM schedules up to max_num_seqs sequences."},
	}
	if err := appspans.LlamaIndex(ctx, tp, appspans.Request{
		Question: "Why does queue wait stay at zero?", Docs: docs, EmbeddingModel: "text-embedding-3-small",
		Model: "servescope/sim-7b", PromptVersion: "rag-v3", Call: call("llamaindex"),
	}); err != nil {
		t.Fatalf("LlamaIndex request: %v", err)
	}
	if err := appspans.GenAI(ctx, tp, appspans.Request{
		Question: "What fills the KV cache?", Docs: docs[:1], EmbeddingModel: "bge-m3", Model: "servescope/sim-7b",
		DataSource: "kb", Call: call("genai"),
	}, appspans.GenAIOptions{Latest: true, ServerSpan: true}); err != nil {
		t.Fatalf("GenAI request: %v", err)
	}
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatalf("export the spans: %v", err)
	}

	type row struct {
		requestID, app, index, embedding, prompt, config, model, join, engineTrace string
		top                                                                        *float64
		passages                                                                   []string
		cacheHit                                                                   *bool
		cacheKind                                                                  string
		gatewayRequests                                                            uint64
		engineChildren                                                             uint32
	}
	read := func(ctx context.Context, traceID string) (row, bool, error) {
		var r row
		err := p.Conn.QueryRow(chstore.WithParams(ctx, map[string]string{"t": traceID}), `
			SELECT a.request_id, a.app, a.index_version, a.embedding_model_version, a.prompt_version, a.config_version,
			       a.model, a.retrieval_top_score, a.passage_ids, a.cache_hit, a.cache_kind,
			       (SELECT count() FROM requests FINAL WHERE trace_id = {t:String}),
			       (SELECT any(app_join) FROM request_facts WHERE trace_id = {t:String}),
			       (SELECT any(engine_children) FROM request_facts WHERE trace_id = {t:String}),
			       (SELECT any(trace_id) FROM engine_spans FINAL WHERE request_id IN
			            (SELECT request_id FROM requests FINAL WHERE trace_id = {t:String}))
			FROM app_records AS a FINAL WHERE a.trace_id = {t:String}`).Scan(&r.requestID, &r.app, &r.index, &r.embedding, &r.prompt, &r.config, &r.model, &r.top, &r.passages,
			&r.cacheHit, &r.cacheKind, &r.gatewayRequests, &r.join, &r.engineChildren, &r.engineTrace)
		if err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return r, false, nil
			}
			return r, false, err
		}
		return r, r.gatewayRequests == 1 && r.engineTrace != "" && r.join != "", nil
	}
	got := map[string]row{}
	for _, shape := range []string{"llamaindex", "genai"} {
		mu.Lock()
		id := traces[shape]
		mu.Unlock()
		if id == "" {
			t.Fatalf("%s: the LLM call was not made", shape)
		}
		// Bounds for a hang: the request_facts view is heavy, and on a machine loaded by other
		// work one read took more than waitFor's 10 s per attempt.
		waitFor(t, 3*time.Minute, shape+"'s app record joined with its request and engine span", func(ctx context.Context) (bool, string, error) {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			r, ok, err := read(ctx, id)
			got[shape] = r
			return ok, fmt.Sprintf("%+v", r), err
		})
	}

	li, gi := got["llamaindex"], got["genai"]
	if li.app != "support-bot" || li.index != "kb-2026-11" || li.config != "cfg-3" || li.embedding != "text-embedding-3-small" ||
		li.prompt != "rag-v3" || li.model != "servescope/sim-7b" || li.top == nil || *li.top != 0.8807 ||
		fmt.Sprint(li.passages) != "[handbook#4 handbook#12]" {
		t.Errorf("LlamaIndex record: %+v", li)
	}
	if li.requestID != traces["llamaindex"] || li.join != "trace_id" || li.engineTrace != traces["llamaindex"] || li.engineChildren != 1 {
		t.Errorf("LlamaIndex joins: request_id %q, app_join %q, engine span's trace %q, engine children %d; want the trace id, trace_id, the trace id, 1",
			li.requestID, li.join, li.engineTrace, li.engineChildren)
	}
	if gi.embedding != "bge-m3" || gi.index != "kb-2026-11" || gi.top == nil || *gi.top != 0.8512 || gi.cacheHit == nil || gi.cacheKind != "prefix" {
		t.Errorf("GenAI record: %+v", gi)
	}
	if gi.requestID == traces["genai"] || gi.join != "request_id" || gi.engineTrace != traces["genai"] || gi.engineChildren != 1 {
		t.Errorf("GenAI joins: request_id %q, app_join %q, engine span's trace %q, engine children %d; want the gateway's request id, request_id, the trace id, 1",
			gi.requestID, gi.join, gi.engineTrace, gi.engineChildren)
	}
}

// chat sends one chat completion through the gateway with ctx's span as traceparent, as the
// OpenAI SDK does under opentelemetry-instrumentation-httpx.
func chat(ctx context.Context, gateway, question string) (appspans.Answer, error) {
	body, _ := json.Marshal(map[string]any{
		"model": "servescope/sim-7b", "max_tokens": 16,
		"messages": []map[string]string{{"role": "user", "content": question}},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gateway+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return appspans.Answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	appspans.InjectTraceparent(ctx, req.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return appspans.Answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return appspans.Answer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return appspans.Answer{}, appspans.ErrCall{Status: resp.StatusCode}
	}
	var out struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Choices []struct {
			Message      struct{ Content string } `json:"message"`
			FinishReason string                   `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			CompletionTokens    int `json:"completion_tokens"`
			PromptTokensDetails *struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) == 0 {
		return appspans.Answer{}, fmt.Errorf("decode the answer %q: %v", raw, err)
	}
	ans := appspans.Answer{ResponseID: out.ID, Model: out.Model, Text: out.Choices[0].Message.Content,
		FinishReason: out.Choices[0].FinishReason, PromptTokens: out.Usage.PromptTokens, CompletionTokens: out.Usage.CompletionTokens, CachedTokens: 0}
	if d := out.Usage.PromptTokensDetails; d != nil {
		ans.CachedTokens = d.CachedTokens
	}
	return ans, nil
}
