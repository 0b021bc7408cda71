package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/sim/ragdemo/rag"
)

// TestRagdemoOverOpenTelemetryOnly: ragdemo reporting through OpenTelemetry only
// (RAGDEMO_REPORT=otel: no app.record of its own) still gives ClickHouse what the embedding
// switch's rules read. Its GenAI spans go over OTLP from the Go SDK to the collector; every
// question is asked with the index's embedding model, then again twice after the query side
// switches to another (the repeat served from ragdemo's cache). Each request is one app_records
// row with the query's embedding model and top score, joined to its gateway request by
// request_id; after the switch the top scores collapse, cached answers included.
func TestRagdemoOverOpenTelemetryOnly(t *testing.T) {
	t.Parallel()
	p := startPipeline(t, pipelineOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(p.OTLPAddr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(200*time.Millisecond)),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "ragdemo"))))
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = tp.Shutdown(sctx)
	}()
	app, err := rag.New(rag.Config{
		GatewayURL: p.GatewayURL, Model: "servescope/sim-7b", IndexEmbeddingModel: "hash-embed-v1", QueryEmbeddingModel: "hash-embed-v1",
		EmbeddingDim: 192, CorpusVersion: "corpus-2026-11", TopK: 4, MaxTokens: 32, PromptVersion: "rag-prompt-v3",
		ConfigVersion: "ragdemo-config-1", CacheSize: 256, Timeout: time.Minute, TracerProvider: tp,
	}, nil, &http.Client{})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(rag.Questions()))
	for k := range rag.Questions() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ask := func(phase string) {
		for _, k := range keys {
			if _, err := app.Ask(ctx, phase+"-"+k, rag.Questions()[k]); err != nil {
				t.Fatalf("%s %s: %v", phase, k, err)
			}
		}
	}
	ask("v1")
	app.SetQueryEmbeddingModel("hash-embed-v2")
	ask("v2")
	ask("v2cached")
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatalf("export the spans: %v", err)
	}
	asked := time.Now()

	type phase struct {
		rows, joined, cacheHits uint64
		embedding               []string
		tops                    []float64
	}
	read := func(ctx context.Context, prefix string) (phase, error) {
		var ph phase
		// Cache hits never reached the gateway: their record's request_id is the trace id.
		err := p.Conn.QueryRow(chstore.WithParams(ctx, map[string]string{"p": prefix}), `
			SELECT count(), countIf(cache_hit), groupUniqArray(embedding_model_version), groupArray(assumeNotNull(retrieval_top_score)),
			       (SELECT count() FROM request_facts WHERE startsWith(request_id, {p:String}) AND app_join = 'request_id'
			            AND embedding_model_version != '' AND retrieval_top_score IS NOT NULL)
			FROM app_records FINAL
			WHERE app = 'ragdemo' AND retrieval_top_score IS NOT NULL AND trace_id != ''
			  AND (startsWith(request_id, {p:String}) OR (cache_hit AND {p:String} = 'v2cached-'))`).Scan(&ph.rows, &ph.cacheHits, &ph.embedding, &ph.tops, &ph.joined)
		return ph, err
	}
	n := uint64(len(keys))
	// How soon the records are in ClickHouse: the spans' path adds the exporter's batch delay
	// (here 200 ms) to what an app.record's path takes.
	waitFor(t, 90*time.Second, "ragdemo's records from its spans in ClickHouse", func(ctx context.Context) (bool, string, error) {
		var rows uint64
		err := p.Conn.QueryRow(ctx, `SELECT count() FROM app_records FINAL WHERE app = 'ragdemo'`).Scan(&rows)
		return rows == 3*n, fmt.Sprintf("%d of %d rows", rows, 3*n), err
	})
	t.Logf("%d requests' records from spans in ClickHouse %s after the last answer", 3*n, time.Since(asked).Round(time.Millisecond))
	got := map[string]phase{}
	// Bounds for a hang: the request_facts view is heavy on a machine loaded by other work.
	waitFor(t, 3*time.Minute, "ragdemo's records joined to their gateway requests", func(ctx context.Context) (bool, string, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		ok := true
		for _, prefix := range []string{"v1-", "v2-", "v2cached-"} {
			ph, err := read(ctx, prefix)
			if err != nil {
				return false, "", err
			}
			got[prefix] = ph
			want := n
			if prefix == "v2cached-" {
				want = 0 // served from the cache: no gateway request to join
			}
			ok = ok && ph.rows == n && ph.joined == want
		}
		return ok, fmt.Sprintf("%+v", got), nil
	})

	v1, v2, cached := got["v1-"], got["v2-"], got["v2cached-"]
	if !slices.Equal(v1.embedding, []string{"hash-embed-v1"}) || !slices.Equal(v2.embedding, []string{"hash-embed-v2"}) ||
		!slices.Equal(cached.embedding, []string{"hash-embed-v2"}) {
		t.Errorf("embedding_model_version: v1 %v, v2 %v, cached %v", v1.embedding, v2.embedding, cached.embedding)
	}
	if v1.cacheHits != 0 || v2.cacheHits != 0 || cached.cacheHits != n {
		t.Errorf("cache hits: v1 %d, v2 %d, repeated %d of %d", v1.cacheHits, v2.cacheHits, cached.cacheHits, n)
	}
	m1, m2, mc := median(v1.tops), median(v2.tops), median(cached.tops)
	if m1 < 0.6 || m2 > m1-0.3 || mc != m2 {
		t.Errorf("median top score: %.3f with the index's embedding model, %.3f after the switch, %.3f cached; want a collapse of more than 0.3, cached as answered",
			m1, m2, mc)
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
