package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/retry"
	svc "github.com/servescope/servescope/internal/service"
	"github.com/servescope/servescope/services/detector/rules"
)

// startRetry is how a starting detector waits for ClickHouse: 0.5 s doubling to 30 s between
// attempts.
var startRetry = retry.Policy{Min: 500 * time.Millisecond, Max: 30 * time.Second}

// Serve runs the detector until ctx ends: it serves /metrics, /healthz and /readyz on ln (nil:
// listen on cfg.MetricsAddr) at once, waits for ClickHouse with backoff (a detector started
// during an outage waits instead of exiting, so a supervisor does not crash-loop it), restores
// the alert state, then evaluates the rules and delivers notifications. The rules reload on SIGHUP
// and when a file of cfg.RulesDir changes (Detector.Reload: a refused reload is logged and
// counted, and the rules loaded before keep running).
//
// /healthz answers 200 while the process serves; /readyz answers 503 until the alert state is
// restored, and then while ClickHouse does not answer a ping.
//
// The parts stop in this order:
//  1. /readyz answers 503 (stopping);
//  2. evaluation and the notifier (a notification in flight is recorded as undelivered and sent
//     again after a restart), then the ClickHouse connection closes;
//  3. the HTTP server.
func Serve(ctx context.Context, cfg Config, defs []*rules.Definition, ln net.Listener, log *slog.Logger) error {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("listen on DETECTOR_METRICS_ADDR %s: %w", cfg.MetricsAddr, err)
		}
	}
	// SIGHUP reloads the rules; registered before anything starts, so that one sent during the
	// start waits for the detector instead of ending the process (its default action).
	hup, stopHUP := notifyHUP()
	defer stopHUP()
	reg := svc.NewRegistry("detector")
	ready := svc.NewReadiness()
	var conn atomic.Pointer[driver.Conn]
	ready.Check("clickhouse", func(ctx context.Context) error {
		c := conn.Load()
		if c == nil {
			return errors.New("not connected yet")
		}
		if err := (*c).Ping(ctx); err != nil {
			return fmt.Errorf("does not answer: %w", err)
		}
		return nil
	})
	srv := &http.Server{Handler: svc.NewMux(reg, ready), ReadHeaderTimeout: 5 * time.Second}

	g := svc.NewGroup(log)
	g.AddStop("readiness", ready.Stopping)
	g.AddContext("detector", func(ctx context.Context) error {
		wait := func(what string, f func(context.Context) error) error {
			ready.Starting(what)
			return retry.Do(ctx, startRetry, f, func(attempt int, err error, wait time.Duration) {
				log.Warn(what+" failed; retrying", "attempt", attempt, "retry_in", wait, "err", err)
			})
		}
		var c driver.Conn
		if err := wait("connect to ClickHouse", func(context.Context) error {
			var err error
			c, err = chstore.Open(ctx, cfg.ClickHouse)
			return err
		}); err != nil {
			return stopped(ctx, err)
		}
		defer c.Close()
		conn.Store(&c)
		d, err := New(cfg, c, defs, reg, log)
		if err != nil {
			return err
		}
		if err := wait("restore alert state", d.Restore); err != nil {
			return stopped(ctx, err)
		}
		ready.Started()
		log.Info("detector running", "rules", len(defs), "interval", cfg.Interval, "webhooks", len(cfg.WebhookURLs), "alertmanagers", len(cfg.AlertmanagerURLs), "metrics", ln.Addr().String())
		watched := make(chan struct{})
		go func() { defer close(watched); d.watchRules(ctx, cfg.RulesDir, hup) }()
		d.Run(ctx)
		<-watched
		return nil
	})
	g.AddServer("http", srv, ln, 5*time.Second)
	return g.Run(ctx)
}

// stopped returns nil when err comes from ctx's end (a stop while waiting), else err.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
