// Command consumer moves servescope events from NATS JetStream (stream SERVESCOPE) into the
// ClickHouse landing tables: a durable pull consumer, batches per table, acknowledged only after
// ClickHouse accepted the insert, refused messages to SERVESCOPE_DLQ and ingest_errors.
// Behaviour, sizing and guarantees are documented in package pipeline; package app's Run gives
// the stop order.
//
// Environment: CONSUMER_DURABLE (default servescope-writer), CONSUMER_BATCH_ROWS (10000),
// CONSUMER_FLUSH_INTERVAL (1s), CONSUMER_METRICS_ADDR (:9101), and the shared SERVESCOPE_NATS_*
// and SERVESCOPE_CLICKHOUSE_* settings. The tables must exist (`servescope migrate up`). The
// flags are the common ones (--log.level, --log.format, --version).
// Exit status: 0 after a graceful shutdown (SIGTERM, SIGINT), 1 on a configuration error or
// missing tables, 2 on bad usage.
package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/service"
	"github.com/servescope/servescope/services/consumer/app"
)

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("consumer", "Usage: consumer [flags]\n\n"+
		"Moves servescope events from NATS JetStream into ClickHouse; settings from CONSUMER_* and SERVESCOPE_* variables.")
	c.Run = func(ctx context.Context, log *slog.Logger, args []string) error {
		if len(args) > 0 {
			return service.UsageError(fmt.Errorf("unexpected arguments %q", args))
		}
		cfg, err := config.Load[app.Config]()
		if err != nil {
			return err
		}
		return app.Run(ctx, cfg, log, nil)
	}
	return c
}
