package rag

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/schema/publish"
)

// llm answers chat completions like an OpenAI server, with a fixed text, and remembers the
// request headers it saw.
type llm struct {
	mu      sync.Mutex
	answer  string
	headers []http.Header
}

func (l *llm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	l.mu.Lock()
	l.headers = append(l.headers, r.Header.Clone())
	answer := l.answer
	l.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"choices": []map[string]any{{"index": 0, "message": map[string]string{"role": "assistant", "content": answer}, "finish_reason": "stop"}}})
}

// TestAskPublishesAppRecords runs questions through the app against real JetStream and checks
// the app.record events: passages and top score, versions, cache hit on a repeat, citation and
// language checks, and the silent failure after switching the query-side embedding model.
func TestAskPublishesAppRecords(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	nc := testenv.NATS(t)
	pub, err := publish.New(nc, natsCfg.SubjectPrefix, publish.Config{SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	model := &llm{answer: "The KV cache stores keys and values [1]."}
	gw := httptest.NewServer(model)
	defer gw.Close()
	app, err := New(Config{
		GatewayURL: gw.URL, Model: "m", IndexEmbeddingModel: "hash-embed-v1", QueryEmbeddingModel: "hash-embed-v1",
		EmbeddingDim: 192, CorpusVersion: "c1", TopK: 4, MaxTokens: 64, PromptVersion: "p1", ConfigVersion: "cfg1",
		CacheSize: 8, Timeout: 5 * time.Second,
	}, pub, gw.Client())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := Questions()["kv-cache-01"]
	first, err := app.Ask(ctx, "req-1", q)
	if err != nil {
		t.Fatal(err)
	}
	if first.Passages[0].ID != "kv-cache-01" || first.TopScore < 0.75 || first.CacheHit || first.Citations != 1 {
		t.Errorf("first answer: %+v", first)
	}
	again, err := app.Ask(ctx, "req-2", q)
	if err != nil || !again.CacheHit || again.RequestID != "req-2" {
		t.Errorf("repeat: %+v %v", again, err)
	}
	model.mu.Lock()
	model.answer = "The cache 缓存 stores keys."
	model.mu.Unlock()
	app.SetQueryEmbeddingModel("hash-embed-v2")
	drifted, err := app.Ask(ctx, "req-3", q)
	if err != nil {
		t.Fatal(err)
	}
	if drifted.TopScore > 0.3 {
		t.Errorf("top score after the embedding switch = %.3f, want a collapse", drifted.TopScore)
	}
	model.mu.Lock()
	if h := model.headers[0]; h.Get("X-Request-Id") != "req-1" || h.Get("X-Servescope-Embedding-Model") != "hash-embed-v1" || h.Get("X-Servescope-Index-Version") != "c1@hash-embed-v1" {
		t.Errorf("headers sent to the gateway: %v", h)
	}
	model.mu.Unlock()
	if err := pub.Close(ctx); err != nil {
		t.Fatal(err)
	}

	cons, err := js.CreateOrUpdateConsumer(ctx, topo.Stream(), jetstream.ConsumerConfig{FilterSubject: topo.Subject(schema.KindAppRecord)})
	if err != nil {
		t.Fatal(err)
	}
	recs := map[string]*schema.AppRecord{}
	for len(recs) < 3 {
		batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			ev, err := schema.Decode(m.Subject(), m.Data())
			if err != nil {
				t.Fatal(err)
			}
			r := ev.(*schema.AppRecord)
			recs[r.RequestID] = r
		}
		if n == 0 {
			t.Fatalf("only %d app records arrived", len(recs))
		}
	}
	r1, r2, r3 := recs["req-1"], recs["req-2"], recs["req-3"]
	if r1.App != "ragdemo" || r1.EmbeddingModelVersion != "hash-embed-v1" || r1.IndexVersion != "c1@hash-embed-v1" || r1.PromptVersion != "p1" ||
		len(r1.Passages) != 4 || r1.RetrievalTopScore == nil || *r1.RetrievalTopScore < 0.75 || *r1.CacheHit || *r1.CitationCount != 1 || *r1.OutputScriptViolation {
		t.Errorf("record 1: %+v", r1)
	}
	if !*r2.CacheHit || r2.CacheKind != "exact" || r2.RetrievalTopScore == nil {
		t.Errorf("record 2 (cache hit): %+v", r2)
	}
	if r3.EmbeddingModelVersion != "hash-embed-v2" || *r3.RetrievalTopScore > 0.3 || !*r3.OutputScriptViolation || *r3.OutputForeignChars != 2 || !*r3.CitationsMissing {
		t.Errorf("record 3 (drift, CJK): %+v", r3)
	}
	if strings.Contains(r3.ErrorMessage, "") && r3.ErrorLayer != "" {
		t.Errorf("record 3 has an error: %s %s", r3.ErrorLayer, r3.ErrorMessage)
	}
}

// TestOversizeBodyIs413 posts bodies over the limit, valid JSON or not: 413 either way, and a
// malformed small body stays 400.
func TestOversizeBodyIs413(t *testing.T) {
	app, err := New(Config{GatewayURL: "http://127.0.0.1:1", Model: "m", IndexEmbeddingModel: "v1", QueryEmbeddingModel: "v1",
		EmbeddingDim: 16, CorpusVersion: "c", TopK: 1, MaxTokens: 1, Timeout: time.Second}, nil, http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	h := app.Handler("tok")
	for _, c := range []struct {
		body string
		want int
	}{
		{strings.Repeat("x", 200<<10), http.StatusRequestEntityTooLarge},
		{`{"question":"` + strings.Repeat("a", 200<<10) + `"}`, http.StatusRequestEntityTooLarge},
		{`{"question":`, http.StatusBadRequest},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/ask", strings.NewReader(c.body)))
		if rec.Code != c.want {
			t.Errorf("%d-byte body: status %d, want %d", len(c.body), rec.Code, c.want)
		}
	}
}
