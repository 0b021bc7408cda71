// Command ragdemo is servescope's demo application: POST /ask answers a question by retrieving
// passages from a small built-in corpus and asking the model through the servescope gateway, and
// reports each request with the passages, the top score, the embedding model and index versions,
// the cache result and the output checks, as RAGDEMO_REPORT says:
//
//   - app.record (default): one app.record per request, published to NATS (schema/publish);
//   - otel: OpenTelemetry spans shaped by the GenAI semantic conventions, exported over OTLP/HTTP
//     to the collector, which makes the same app.record of them; the exporter takes the standard
//     OTEL_EXPORTER_OTLP_* variables (e.g. OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318) and
//     the batch processor OTEL_BSP_* (e.g. OTEL_BSP_SCHEDULE_DELAY=1000, in milliseconds);
//   - both.
//
// POST /admin/embedding-model {"version": "hash-embed-v2"} (bearer RAGDEMO_ADMIN_TOKEN) switches
// the query-side embedding model without re-indexing: the silent retrieval failure of reference §4.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/sim/ragdemo/rag"
)

type settings struct {
	ListenAddr          string        `env:"RAGDEMO_LISTEN_ADDR" envDefault:":8090"`
	GatewayURL          string        `env:"RAGDEMO_GATEWAY_URL" envDefault:"http://127.0.0.1:8080"`
	Model               string        `env:"RAGDEMO_MODEL" envDefault:"servescope/sim-7b"`
	IndexEmbeddingModel string        `env:"RAGDEMO_INDEX_EMBEDDING_MODEL" envDefault:"hash-embed-v1"`
	QueryEmbeddingModel string        `env:"RAGDEMO_QUERY_EMBEDDING_MODEL" envDefault:"hash-embed-v1"`
	EmbeddingDim        int           `env:"RAGDEMO_EMBEDDING_DIM" envDefault:"192"`
	CorpusVersion       string        `env:"RAGDEMO_CORPUS_VERSION" envDefault:"corpus-2026-11"`
	TopK                int           `env:"RAGDEMO_TOP_K" envDefault:"4"`
	MaxTokens           int           `env:"RAGDEMO_MAX_TOKENS" envDefault:"128"`
	PromptVersion       string        `env:"RAGDEMO_PROMPT_VERSION" envDefault:"rag-prompt-v3"`
	ConfigVersion       string        `env:"RAGDEMO_CONFIG_VERSION" envDefault:"ragdemo-config-1"`
	CacheSize           int           `env:"RAGDEMO_CACHE_SIZE" envDefault:"256"`
	Timeout             time.Duration `env:"RAGDEMO_TIMEOUT" envDefault:"120s"`
	AdminToken          string        `env:"RAGDEMO_ADMIN_TOKEN"`
	SpoolDir            string        `env:"RAGDEMO_SPOOL_DIR" envDefault:"/tmp/servescope-ragdemo-spool"`
	Report              string        `env:"RAGDEMO_REPORT" envDefault:"app.record"`
	NATS                config.NATS
}

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(log); err != nil {
		log.Error("ragdemo stopped", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	cfg, err := config.Load[settings]()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var (
		pub *publish.Publisher
		tp  *sdktrace.TracerProvider
	)
	switch cfg.Report {
	case reportRecord, reportOTel, reportBoth:
	default:
		return fmt.Errorf("RAGDEMO_REPORT=%q: want %s, %s or %s", cfg.Report, reportRecord, reportOTel, reportBoth)
	}
	if cfg.Report != reportOTel {
		nc, err := cfg.NATS.Connect("ragdemo", nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
		if err != nil {
			return err
		}
		defer nc.Close()
		if pub, err = publish.New(nc, cfg.NATS.SubjectPrefix, publish.Config{SpoolDir: cfg.SpoolDir, Logger: log}); err != nil {
			return err
		}
	}
	if cfg.Report != reportRecord {
		if tp, err = tracerProvider(ctx); err != nil {
			return err
		}
	}
	rcfg := rag.Config{
		GatewayURL: cfg.GatewayURL, Model: cfg.Model,
		IndexEmbeddingModel: cfg.IndexEmbeddingModel, QueryEmbeddingModel: cfg.QueryEmbeddingModel,
		EmbeddingDim: cfg.EmbeddingDim, CorpusVersion: cfg.CorpusVersion, TopK: cfg.TopK, MaxTokens: cfg.MaxTokens,
		PromptVersion: cfg.PromptVersion, ConfigVersion: cfg.ConfigVersion, CacheSize: cfg.CacheSize, Timeout: cfg.Timeout,
	}
	var recs rag.Publisher
	if pub != nil {
		recs = pub
	}
	if tp != nil {
		rcfg.TracerProvider = tp
	}
	app, err := rag.New(rcfg, recs, &http.Client{})
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: cfg.ListenAddr, Handler: app.Handler(cfg.AdminToken), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("ragdemo listening", "addr", cfg.ListenAddr, "gateway", cfg.GatewayURL, "report", cfg.Report, "query_embedding_model", app.QueryEmbeddingModel())
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	var errs []error
	if tp != nil {
		if err := tp.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("flush spans: %w", err))
		}
	}
	if pub != nil {
		errs = append(errs, pub.Close(sctx))
	}
	return errors.Join(errs...)
}

// RAGDEMO_REPORT values.
const (
	reportRecord = "app.record"
	reportOTel   = "otel"
	reportBoth   = "both"
)

// tracerProvider exports spans over OTLP/HTTP as the OTEL_EXPORTER_OTLP_* and OTEL_BSP_*
// variables say, with the resource OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES give
// (service.name defaults to ragdemo).
func tracerProvider(ctx context.Context) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", "ragdemo")), resource.Environment())
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
