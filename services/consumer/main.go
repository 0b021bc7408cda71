// Command consumer moves servescope events from NATS JetStream (stream SERVESCOPE) into the
// ClickHouse landing tables: a durable pull consumer, batches per table, acknowledged only after
// ClickHouse accepted the insert, refused messages to SERVESCOPE_DLQ and ingest_errors.
// Behaviour, sizing and guarantees are documented in package pipeline.
//
// Environment: CONSUMER_DURABLE (default servescope-writer), CONSUMER_BATCH_ROWS (10000),
// CONSUMER_FLUSH_INTERVAL (1s), CONSUMER_METRICS_ADDR (:9101), and the shared SERVESCOPE_NATS_*
// and SERVESCOPE_CLICKHOUSE_* settings. The tables must exist (`servescope migrate up`).
// Exit status: 0 after a graceful shutdown (SIGTERM, SIGINT), 1 on a configuration error or
// missing tables.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/consumer/app"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg, err := config.Load[app.Config]()
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, cfg, log, nil); err != nil {
		log.Error("consumer failed", "error", err)
		stop()
		os.Exit(1)
	}
}
