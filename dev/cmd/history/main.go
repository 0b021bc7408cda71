// Command history fills a ClickHouse database with a generated history of servescope data (package
// dev/history): requests, app records, engine spans, samples and logs shaped like a normal day,
// generated inside ClickHouse.
//
//	go run ./dev/cmd/history -database servescope_history -requests 100000000 -span 720h
//
// It migrates the database (servescope migrate up), raises the tables' TTLs to cover the span, and
// prints the rows inserted per table. The server is SERVESCOPE_CLICKHOUSE_ADDR (and the other
// SERVESCOPE_CLICKHOUSE_* settings). A month of 100 M requests is hundreds of millions of rows:
// give it a server of its own (dev/servers), not a shared one.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/servescope/servescope/internal/service"

	"github.com/servescope/servescope/dev/history"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
)

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("history", "Usage: history [flags]\n\nFills a ClickHouse database with realistic generated history (dev/history).")
	database := c.Flags.String("database", "servescope_history", "database to fill (created and migrated when needed)")
	requests := c.Flags.Uint64("requests", 1_000_000, "requests over the whole span")
	span := c.Flags.Duration("span", 24*time.Hour, "how far back the history goes")
	endFlag := c.Flags.String("end", "", "end of the history, RFC 3339 (default: now)")
	fromFlag := c.Flags.String("from", "", "generate only the history's rows from this time on, RFC 3339")
	toFlag := c.Flags.String("to", "", "generate only the history's rows before this time, RFC 3339")
	tables := c.Flags.String("tables", "", "generate only these tables, comma-separated (default: all)")
	engines := c.Flags.Int("engines", 4, "vLLM engines")
	seed := c.Flags.Uint64("seed", 1, "random seed")
	chunk := c.Flags.Uint64("chunk", 2_000_000, "requests per INSERT")
	sampleInterval := c.Flags.Duration("sample-interval", time.Second, "the collector's scrape period per engine")
	logInterval := c.Flags.Duration("log-interval", 10*time.Second, "vLLM's stats line period per engine")
	c.Run = func(_ context.Context, log *slog.Logger, _ []string) error {
		var only []string
		if *tables != "" {
			only = strings.Split(*tables, ",")
		}
		return run(log, *database, *requests, *span, *endFlag, *fromFlag, *toFlag, only, *engines, *seed, *chunk, *sampleInterval, *logInterval)
	}
	return c
}

func run(log *slog.Logger, database string, requests uint64, span time.Duration, endFlag, fromFlag, toFlag string, tables []string, engines int, seed, chunk uint64, sampleInterval, logInterval time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	end := time.Now().UTC()
	if endFlag != "" {
		var err error
		if end, err = time.Parse(time.RFC3339, endFlag); err != nil {
			return fmt.Errorf("-end: %w", err)
		}
	}
	spec := history.Normal(end, span, requests)
	spec.Engines, spec.Seed = engines, seed
	spec.SampleInterval, spec.StatsLogInterval = sampleInterval, logInterval
	opt := history.Options{ChunkRequests: chunk, Tables: tables, Progress: func(table string, rows uint64) {
		log.Info("generated", "table", table, "rows", rows)
	}}
	if fromFlag != "" {
		from, err := time.Parse(time.RFC3339, fromFlag)
		if err != nil {
			return fmt.Errorf("-from: %w", err)
		}
		opt.From = from
	}
	if toFlag != "" {
		to, err := time.Parse(time.RFC3339, toFlag)
		if err != nil {
			return fmt.Errorf("-to: %w", err)
		}
		opt.To = to
	}
	cfg, err := config.Load[config.ClickHouse]()
	if err != nil {
		return err
	}
	cfg.Database = database
	if err := chstore.Migrate(ctx, cfg); err != nil {
		return err
	}
	conn, err := chstore.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := history.ExtendRetention(ctx, conn, spec); err != nil {
		return err
	}
	start := time.Now()
	counts, err := spec.Generate(ctx, conn, opt)
	if err != nil {
		return err
	}
	for _, t := range history.Tables {
		fmt.Printf("%-17s %12d rows\n", t, counts[t])
	}
	fmt.Printf("generated in %s (mean rate %.1f requests/s, %s to %s)\n", time.Since(start).Round(time.Second),
		spec.MeanRate(), spec.Start().Format(time.RFC3339), spec.End.Format(time.RFC3339))
	return nil
}
