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
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/lease"
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
// counted, and the rules loaded before keep running). With cfg.Lease it first waits for NATS and
// the lease bucket, stands by until it holds the lease, and does all of that only while it holds
// it; a lost lease ends Serve with an error wrapping lease.ErrLost.
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
		// wait retries f until it succeeds or ctx ends (the lease's term, for the work under it).
		wait := func(ctx context.Context, what string, f func(context.Context) error) error {
			ready.Starting(what)
			return retry.Do(ctx, startRetry, f, func(attempt int, err error, wait time.Duration) {
				log.Warn(what+" failed; retrying", "attempt", attempt, "retry_in", wait, "err", err)
			})
		}
		var c driver.Conn
		if err := wait(ctx, "connect to ClickHouse", func(context.Context) error {
			var err error
			c, err = chstore.Open(ctx, cfg.ClickHouse)
			return err
		}); err != nil {
			return stopped(ctx, err)
		}
		defer c.Close()
		conn.Store(&c)
		work := func(ctx context.Context) error {
			d, err := New(cfg, c, defs, reg, log)
			if err != nil {
				return err
			}
			if err := wait(ctx, "restore alert state", d.Restore); err != nil {
				return stopped(ctx, err)
			}
			// The SLOs' objectives and the engines file, which the views read, as they are now.
			if err := wait(ctx, "write the SLOs and the engines file", func(ctx context.Context) error {
				l, err := Load(cfg)
				if err != nil {
					return retry.Permanent(err)
				}
				return d.WriteConfig(ctx, l)
			}); err != nil {
				return stopped(ctx, err)
			}
			ready.Started()
			log.Info("detector running", "rules", len(defs), "interval", cfg.Interval, "webhooks", len(cfg.WebhookURLs), "alertmanagers", len(cfg.AlertmanagerURLs), "metrics", ln.Addr().String())
			watched := make(chan struct{})
			go func() { defer close(watched); d.watchRules(ctx, hup) }()
			d.Run(ctx)
			<-watched
			return nil
		}
		if !cfg.Lease {
			return work(ctx)
		}
		l, closeNATS, err := takeLease(ctx, cfg, wait, reg, log)
		if err != nil {
			return stopped(ctx, err)
		}
		defer closeNATS()
		ready.Details(func() map[string]any { return map[string]any{"lease_held": l.Held()} })
		// A standby is ready: it serves and stands by, which is its job.
		ready.Started()
		// One term per process: a holder that loses its lease returns ErrLost and exits, so
		// its supervisor starts it afresh as a standby, with no in-memory alert state or
		// queued notification outliving its term (as Kubernetes' controllers do).
		return l.Run(ctx, work)
	})
	g.AddServer("http", srv, ln, 5*time.Second)
	return g.Run(ctx)
}

// takeLease connects to NATS and prepares the detector's lease in the bucket the setup step made,
// waiting (with wait) for NATS and the bucket. The returned func closes the NATS connection.
func takeLease(ctx context.Context, cfg Config, wait func(context.Context, string, func(context.Context) error) error, reg prometheus.Registerer, log *slog.Logger) (*lease.Lease, func(), error) {
	var nc *nats.Conn
	if err := wait(ctx, "connect to NATS", func(context.Context) error {
		var err error
		nc, err = cfg.NATS.Connect("servescope-detector", append(config.NATSEventHandlers(log, config.RedactURL(cfg.NATS.URL)),
			nats.MaxReconnects(-1))...)
		return err
	}); err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("JetStream context: %w", err)
	}
	var l *lease.Lease
	if err := wait(ctx, "find the lease bucket", func(ctx context.Context) error {
		kv, diffs, err := bus.CheckLeases(ctx, js, cfg.NATS.Topology(), cfg.NATS.StreamSettings())
		if err != nil {
			return err
		}
		bus.LogDifferences(log, diffs)
		holder := cfg.Instance
		if holder == "" {
			holder = lease.DefaultHolder()
		}
		l, err = lease.New(ctx, kv, cfg.LeaseKey, holder, log)
		return err
	}); err != nil {
		nc.Close()
		return nil, nil, err
	}
	held := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "servescope_detector_lease_held",
		Help: "1 while this detector holds the lease (DETECTOR_LEASE) and works, 0 while it stands by.",
	})
	reg.MustRegister(held)
	l.OnChange = func(h bool) {
		if h {
			held.Set(1)
		} else {
			held.Set(0)
		}
	}
	return l, nc.Close, nil
}

// stopped returns nil when err comes from ctx's end (a stop while waiting), else err.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
