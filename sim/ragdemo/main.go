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
// the query-side embedding model without re-indexing: the silent retrieval failure of
// docs/measurements.md (Incidents no engine metric shows).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/service"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/sim/ragdemo/rag"
)

type settings struct {
	// ListenAddr is where POST /ask and the admin endpoints are served.
	ListenAddr string `env:"RAGDEMO_LISTEN_ADDR" envDefault:":8090"`
	// GatewayURL is the servescope gateway's base URL (the OpenAI-compatible endpoint).
	GatewayURL string `env:"RAGDEMO_GATEWAY_URL" envDefault:"http://127.0.0.1:8080"`
	// Model is the model asked for.
	Model string `env:"RAGDEMO_MODEL" envDefault:"servescope/sim-7b"`
	// IndexEmbeddingModel is the embedding model the index is built with.
	IndexEmbeddingModel string `env:"RAGDEMO_INDEX_EMBEDDING_MODEL" envDefault:"hash-embed-v1"`
	// QueryEmbeddingModel is the embedding model queries are embedded with; another version than
	// the index's reproduces the silent retrieval failure (POST /admin/embedding-model switches it).
	QueryEmbeddingModel string `env:"RAGDEMO_QUERY_EMBEDDING_MODEL" envDefault:"hash-embed-v1"`
	// EmbeddingDim is the embedding size.
	EmbeddingDim int `env:"RAGDEMO_EMBEDDING_DIM" envDefault:"192"`
	// CorpusVersion names the corpus snapshot; the index version is "<corpus>@<embedding model>".
	CorpusVersion string `env:"RAGDEMO_CORPUS_VERSION" envDefault:"corpus-2026-11"`
	// TopK is how many passages go into the prompt.
	TopK int `env:"RAGDEMO_TOP_K" envDefault:"4"`
	// MaxTokens is the answer's max_tokens.
	MaxTokens int `env:"RAGDEMO_MAX_TOKENS" envDefault:"128"`
	// PromptVersion and ConfigVersion label the prompt template and the app's configuration.
	PromptVersion string `env:"RAGDEMO_PROMPT_VERSION" envDefault:"rag-prompt-v3"`
	ConfigVersion string `env:"RAGDEMO_CONFIG_VERSION" envDefault:"ragdemo-config-1"`
	// CacheSize is the answer cache's size in entries (0 disables it).
	CacheSize int `env:"RAGDEMO_CACHE_SIZE" envDefault:"256"`
	// Timeout bounds one call to the gateway.
	Timeout time.Duration `env:"RAGDEMO_TIMEOUT" envDefault:"120s"`
	// AdminToken is the bearer token POST /admin/embedding-model requires.
	AdminToken string `env:"RAGDEMO_ADMIN_TOKEN"`
	// SpoolDir holds the publisher's on-disk spool of app.records NATS has not acknowledged.
	SpoolDir string `env:"RAGDEMO_SPOOL_DIR" envDefault:"/tmp/servescope-ragdemo-spool"`
	// Report is how each answer is recorded: app.record (published to NATS), otel (spans to the
	// OTLP endpoint of OTEL_EXPORTER_OTLP_ENDPOINT, for the collector) or both.
	Report string `env:"RAGDEMO_REPORT" envDefault:"app.record"`
	NATS   config.NATS
}

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("ragdemo", "Usage: ragdemo [flags]\n\n"+
		"servescope's demo RAG application: POST /ask; settings from RAGDEMO_* and SERVESCOPE_NATS_* variables.")
	c.Run = func(ctx context.Context, log *slog.Logger, args []string) error {
		if len(args) > 0 {
			return service.UsageError(fmt.Errorf("unexpected arguments %q", args))
		}
		cfg, err := config.Load[settings]()
		if err != nil {
			return err
		}
		return run(ctx, cfg, log)
	}
	return c
}

// run serves until ctx ends. The parts stop in this order: the HTTP server (30 s for answers in
// flight), the span exporter's flush, the publisher's flush of the records, the NATS connection.
func run(ctx context.Context, cfg settings, log *slog.Logger) error {
	switch cfg.Report {
	case reportRecord, reportOTel, reportBoth:
	default:
		return service.UsageError(fmt.Errorf("RAGDEMO_REPORT=%q: want %s, %s or %s", cfg.Report, reportRecord, reportOTel, reportBoth))
	}
	var (
		nc      *nats.Conn
		pub     *publish.Publisher
		tp      *sdktrace.TracerProvider
		closers []closer
	)
	fail := func(err error) error {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i].close()
		}
		return err
	}
	flushTimeout := 30 * time.Second
	if cfg.Report != reportOTel {
		var err error
		nc, err = cfg.NATS.Connect("ragdemo", append(config.NATSEventHandlers(log, config.RedactURL(cfg.NATS.URL)), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))...)
		if err != nil {
			return err
		}
		closers = append(closers, closer{"nats", nc.Close})
		pub, err = publish.New(nc, cfg.NATS.SubjectPrefix, publish.Config{SpoolDir: cfg.SpoolDir, Logger: log,
			Kinds: []schema.Kind{schema.KindAppRecord}, SetupWait: cfg.NATS.SetupWait})
		if err != nil {
			return fail(err)
		}
		closers = append(closers, closer{"publisher", func() {
			sctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
			defer cancel()
			if err := pub.Close(sctx); err != nil {
				log.Error("flush publisher", "err", err)
			}
		}})
	}
	if cfg.Report != reportRecord {
		var err error
		if tp, err = tracerProvider(ctx); err != nil {
			return fail(err)
		}
		closers = append(closers, closer{"span exporter", func() {
			sctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				log.Error("flush spans", "err", err)
			}
		}})
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
		return fail(err)
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fail(fmt.Errorf("listen on RAGDEMO_LISTEN_ADDR %s: %w", cfg.ListenAddr, err))
	}
	srv := &http.Server{Handler: app.Handler(cfg.AdminToken), ReadHeaderTimeout: 10 * time.Second}
	g := service.NewGroup(log)
	g.AddServer("http", srv, ln, 30*time.Second)
	// The closers in reverse order of opening: spans, then records, then NATS.
	for i := len(closers) - 1; i >= 0; i-- {
		g.AddStop(closers[i].name, closers[i].close)
	}
	log.Info("ragdemo listening", "addr", ln.Addr().String(), "gateway", cfg.GatewayURL, "report", cfg.Report, "query_embedding_model", app.QueryEmbeddingModel())
	return g.Run(ctx)
}

// closer is one part run opened, closed by name in the stop order.
type closer struct {
	name  string
	close func()
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
