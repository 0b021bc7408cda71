// Command detector evaluates windowed SQL rules against a baseline on ClickHouse every interval,
// keeps alert state in the alerts table, and posts alerts to webhooks (Alertmanager format).
//
//	detector                      run until SIGINT/SIGTERM
//	detector --once               evaluate now, print would-be alerts as JSON lines, send nothing
//	detector --once --at <RFC3339> the same as of that time (replay)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/detector/service"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, log); err != nil {
		log.Error("detector stopped", "err", err)
		os.Exit(1)
	}
}

// run is the detector; with --once the alerts go to stdout and nothing else does.
func run(ctx context.Context, args []string, stdout io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("detector", flag.ContinueOnError)
	once := fs.Bool("once", false, "evaluate once, print pending/firing alerts as JSON lines on stdout, send nothing")
	atText := fs.String("at", "", "with --once: evaluate as of this RFC 3339 time instead of now")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *atText != "" && !*once {
		return errors.New("--at needs --once")
	}
	at := time.Now().UTC()
	if *atText != "" {
		t, err := time.Parse(time.RFC3339, *atText)
		if err != nil {
			return fmt.Errorf("--at: want an RFC 3339 time like 2026-11-30T09:00:00Z: %w", err)
		}
		at = t.UTC()
	}
	cfg, err := config.Load[service.Config]()
	if err != nil {
		return err
	}
	defs, err := service.LoadRules(cfg.RulesDir)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	if *once {
		conn, err := chstore.Open(ctx, cfg.ClickHouse)
		if err != nil {
			return err
		}
		defer conn.Close()
		d, err := service.New(cfg, conn, defs, prometheus.NewRegistry(), log)
		if err != nil {
			return err
		}
		return d.Replay(ctx, at, stdout)
	}
	// Live: a detector (re)started while ClickHouse is away waits for it instead of exiting, so a
	// supervisor does not crash-loop it through an outage.
	var conn driver.Conn
	if err := retry(ctx, log, "connect to ClickHouse", func() error {
		var err error
		conn, err = chstore.Open(ctx, cfg.ClickHouse)
		return err
	}); err != nil {
		return err
	}
	defer conn.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d, err := service.New(cfg, conn, defs, reg, log)
	if err != nil {
		return err
	}
	if err := retry(ctx, log, "restore alert state", func() error { return d.Restore(ctx) }); err != nil {
		return err
	}
	srv := &http.Server{Addr: cfg.MetricsAddr, Handler: d.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "addr", cfg.MetricsAddr, "err", err)
			stop()
		}
	}()
	log.Info("detector running", "rules", len(defs), "interval", cfg.Interval, "webhooks", len(cfg.WebhookURLs), "alertmanagers", len(cfg.AlertmanagerURLs))
	d.Run(ctx)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// retry runs fn until it succeeds or ctx ends, waiting between attempts with capped exponential
// backoff and jitter (0.5 s doubling to 30 s).
func retry(ctx context.Context, log *slog.Logger, what string, fn func() error) error {
	wait := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		d := wait/2 + rand.N(wait/2+1)
		log.Warn(what+" failed; retrying", "attempt", attempt, "retry_in", d, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, err)
		case <-time.After(d):
		}
		wait = min(2*wait, 30*time.Second)
	}
}
