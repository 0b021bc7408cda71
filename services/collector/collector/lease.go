package collector

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/lease"
	"github.com/servescope/servescope/internal/retry"
)

// leaseWait is how a collector waits for NATS and the lease bucket: 0.5 s doubling to 30 s.
var leaseWait = retry.Policy{Min: 500 * time.Millisecond, Max: 30 * time.Second}

// LeaseKey is the key of engine's scrape lease: "scrape.<engine>-<hash>", the engine's name with
// the characters a NATS key does not take replaced by '_', and 8 hex digits of its FNV-32a hash
// so that two names that differ only in those characters get different keys.
func LeaseKey(engine string) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '=':
			return r
		}
		return '_'
	}, engine)
	h := fnv.New32a()
	_, _ = h.Write([]byte(engine))
	return fmt.Sprintf("scrape.%s-%08x", clean, h.Sum32())
}

// UseLeases makes the collector scrape each engine only while it holds the engine's lease in the
// lease bucket on js (see Config.Lease). Call it before Run.
func (c *Collector) UseLeases(js jetstream.JetStream) error {
	held := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "servescope_collector_scrape_lease_held",
		Help: "1 while this collector holds the engine's scrape lease (COLLECTOR_LEASE) and scrapes it, 0 while another does.",
	}, []string{"engine"})
	if err := c.reg.Register(held); err != nil {
		return fmt.Errorf("register lease metrics: %w", err)
	}
	holder := c.cfg.Instance
	if holder == "" {
		holder = lease.DefaultHolder()
	}
	c.scraper.SetGuard(func(ctx context.Context, engine string, loop func(context.Context)) error {
		held.WithLabelValues(engine).Set(0)
		log := c.log.With("component", "scrape", "engine", engine)
		for {
			var l *lease.Lease
			err := retry.Do(ctx, leaseWait, func(ctx context.Context) error {
				kv, diffs, err := bus.CheckLeases(ctx, js, c.cfg.NATS.Topology(), c.cfg.NATS.StreamSettings())
				if err != nil {
					return err
				}
				bus.LogDifferences(log, diffs)
				l, err = lease.New(ctx, kv, LeaseKey(engine), holder, log)
				return err
			}, func(attempt int, err error, wait time.Duration) {
				log.Warn("scrape lease not available yet; retrying", "attempt", attempt, "retry_in", wait, "err", err)
			})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			l.OnChange = func(h bool) {
				if h {
					held.WithLabelValues(engine).Set(1)
				} else {
					held.WithLabelValues(engine).Set(0)
				}
			}
			err = l.Run(ctx, func(ctx context.Context) error { loop(ctx); return nil })
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, lease.ErrLost):
				// Another collector scrapes the engine now; stand by again.
				continue
			default:
				return err
			}
		}
	})
	return nil
}
