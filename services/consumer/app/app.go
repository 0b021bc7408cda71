// Package app wires the consumer: configuration, connections to NATS and ClickHouse, the
// durable consumer, the pipeline and the HTTP server of /metrics, /healthz (the process is
// alive; never asks a dependency) and /readyz (NATS connected, ClickHouse answering, inserts
// not failing).
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/retry"
	"github.com/servescope/servescope/internal/service"
	"github.com/servescope/servescope/services/consumer/pipeline"
	"github.com/servescope/servescope/services/consumer/sink"
)

// Config is the consumer's configuration, read from the environment with config.Load.
type Config struct {
	// Consumer is CONSUMER_DURABLE, CONSUMER_BATCH_ROWS and CONSUMER_FLUSH_INTERVAL, which the
	// setup step also reads to create the durable consumer.
	config.Consumer
	// MetricsAddr is where /metrics, /healthz (the process is alive; it never asks NATS or
	// ClickHouse) and /readyz (NATS connected, ClickHouse answering, inserts not failing) are served.
	MetricsAddr string `env:"CONSUMER_METRICS_ADDR" envDefault:":9101"`
	// NATS and ClickHouse are the shared SERVESCOPE_NATS_* and SERVESCOPE_CLICKHOUSE_* settings.
	NATS       config.NATS
	ClickHouse config.ClickHouse
}

// Settings returns the pipeline settings of c.
func (c *Config) Settings() pipeline.Settings {
	return pipeline.Settings{Durable: c.Durable, BatchRows: c.BatchRows, FlushInterval: c.FlushInterval}
}

// Validate implements config.Validator (config.Load validates the embedded blocks itself).
func (c *Config) Validate() error {
	if c.MetricsAddr == "" {
		return fmt.Errorf("CONSUMER_METRICS_ADDR: must be host:port or :port")
	}
	return c.Consumer.Validate()
}

// startRetry is how start-up waits for NATS and ClickHouse: 250 ms doubling to 10 s between
// attempts, each bounded by 15 s.
var startRetry = retry.Policy{Min: 250 * time.Millisecond, Max: 10 * time.Second, AttemptTimeout: 15 * time.Second}

// Run runs the consumer until ctx ends, then shuts down gracefully. ln serves the HTTP endpoints;
// nil means listen on cfg.MetricsAddr. It returns an error only for what retrying cannot fix: a
// listen failure, invalid credentials files, or missing tables (run `servescope migrate up`).
//
// The parts stop in this order:
//  1. /readyz answers 503 (stopping);
//  2. the consumer: JetStream consumption drains, what was taken is inserted and acknowledged,
//     the acknowledgements are flushed to NATS, then ClickHouse and NATS are closed;
//  3. the HTTP server (/metrics and /healthz answer until the end of the drain).
func Run(ctx context.Context, cfg Config, log *slog.Logger, ln net.Listener) error {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("listen on CONSUMER_METRICS_ADDR %s: %w", cfg.MetricsAddr, err)
		}
	}
	reg := service.NewRegistry("consumer")
	c := &consumer{cfg: cfg, log: log, metrics: pipeline.NewMetrics(reg), ready: service.NewReadiness(),
		queued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_consumer_rows_queued_for_shard_total",
			Help: "Rows inserted through the Distributed tables' per-shard queues because a shard did not answer a synchronous insert (acknowledged once the node that took them holds them), by table.",
		}, []string{"table"})}
	reg.MustRegister(c.queued)
	c.ready.Check("nats", c.natsConnected)
	c.ready.Check("clickhouse", c.clickhouseAnswers)
	c.ready.Check("inserts", c.insertsSucceed)
	srv := &http.Server{Handler: service.NewMux(reg, c.ready), ReadHeaderTimeout: 5 * time.Second}
	log.Info("serving /metrics, /healthz and /readyz", "addr", ln.Addr().String())

	g := service.NewGroup(log)
	g.AddStop("readiness", c.ready.Stopping)
	g.AddContext("consumer", c.run)
	g.AddServer("http", srv, ln, 5*time.Second)
	return g.Run(ctx)
}

// consumer is the consumer's state shared with /readyz.
type consumer struct {
	cfg     Config
	log     *slog.Logger
	metrics *pipeline.Metrics
	ready   *service.Readiness
	// queued counts rows sent through the per-shard queues (sink.Sharded), by table.
	queued *prometheus.CounterVec

	nc   atomic.Pointer[nats.Conn]
	ch   atomic.Pointer[driver.Conn]
	pipe atomic.Pointer[pipeline.Pipeline]
}

// natsConnected is /readyz's NATS check.
func (c *consumer) natsConnected(context.Context) error {
	if nc := c.nc.Load(); nc == nil || !nc.IsConnected() {
		return errors.New("disconnected")
	}
	return nil
}

// clickhouseAnswers is /readyz's ClickHouse check: a ping.
func (c *consumer) clickhouseAnswers(ctx context.Context) error {
	ch := c.ch.Load()
	if ch == nil {
		return errors.New("not connected yet")
	}
	if err := (*ch).Ping(ctx); err != nil {
		return fmt.Errorf("does not answer: %w", err)
	}
	return nil
}

// insertsSucceed is /readyz's insert check: the pipeline's last insert did not fail.
func (c *consumer) insertsSucceed(context.Context) error {
	if p := c.pipe.Load(); p != nil {
		if why := p.SinkError(); why != "" {
			return errors.New(why)
		}
	}
	return nil
}

// wait runs f under startRetry, logging failures, until it succeeds (nil) or ctx ends
// (errStopped). It returns f's error at once when f makes it permanent (retry.Permanent).
func (c *consumer) wait(ctx context.Context, what string, f func(context.Context) error) error {
	c.ready.Starting(what)
	err := retry.Do(ctx, startRetry, f, func(_ int, err error, wait time.Duration) {
		c.log.Warn(what+" failed, retrying", "retry_in", wait, "error", err)
	})
	if err != nil && ctx.Err() != nil {
		return errStopped
	}
	return err
}

// errStopped is wait's answer when the consumer was stopped while it waited.
var errStopped = errors.New("stopped during start-up")

func ignoreStopped(err error) error {
	if errors.Is(err, errStopped) {
		return nil
	}
	return err
}

// run connects, waiting for NATS and ClickHouse, and consumes until ctx ends.
func (c *consumer) run(ctx context.Context) error {
	cfg, log := c.cfg, c.log
	c.ready.Starting("connecting to NATS")
	conn, err := cfg.NATS.Connect("servescope-consumer", append(config.NATSEventHandlers(log, config.RedactURL(cfg.NATS.URL)),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(time.Second),
		nats.ReconnectJitter(500*time.Millisecond, 2*time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil when the connection is closed on shutdown
				log.Warn("NATS disconnected, reconnecting", "error", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", "url", c.ConnectedUrl()) }),
	)...)
	if err != nil {
		return err
	}
	c.nc.Store(conn)
	defer conn.Close()
	js, err := jetstream.New(conn)
	if err != nil {
		return fmt.Errorf("JetStream context: %w", err)
	}
	topo := cfg.NATS.Topology()
	set := cfg.Settings()

	// The setup step owns the streams and the durable consumer; they are checked, never changed.
	// Until they are set up the check is retried (a consumer started alongside `servescope migrate
	// up` waits for it), for SERVESCOPE_SETUP_WAIT at most.
	var (
		cons      jetstream.Consumer
		diffs     []bus.Difference
		waitSince = time.Now()
	)
	if err := c.wait(ctx, "check the JetStream streams and durable consumer "+set.Durable, func(ctx context.Context) error {
		cons, diffs, err = bus.CheckConsumer(ctx, js, topo, cfg.DurableConsumer(), cfg.NATS.StreamSettings())
		if errors.Is(err, bus.ErrNotSetUp) && time.Since(waitSince) >= cfg.NATS.SetupWait {
			return retry.Permanent(err)
		}
		return err
	}); err != nil {
		return ignoreStopped(err)
	}
	bus.LogDifferences(log, diffs)
	var chConn driver.Conn
	if err := c.wait(ctx, "connect to ClickHouse", func(ctx context.Context) error {
		conn, err := chstore.Open(ctx, cfg.ClickHouse)
		if err != nil {
			return err
		}
		if err := sink.New(conn).Check(ctx); err != nil {
			_ = conn.Close()
			if errors.Is(err, sink.ErrMissingTables) {
				return retry.Permanent(fmt.Errorf("ClickHouse database %s: %w", cfg.ClickHouse.Database, err))
			}
			return err
		}
		chConn = conn
		return nil
	}); err != nil {
		return ignoreStopped(err)
	}
	defer chConn.Close()
	c.ch.Store(&chConn)

	var pipeSink pipeline.Sink
	snk := sink.New(chConn)
	pipeSink = snk
	if cfg.ClickHouse.Cluster != "" {
		// One shard's outage must not hold the other shards' rows (see sink.Sharded).
		sh := sink.NewSharded(chConn)
		sh.OnQueued = c.queuedForShard
		sh.OnFlush = func(table string, err error) {
			if err != nil {
				log.Warn("rows queued for a shard could not be sent yet; ClickHouse's own sender goes on trying, and so does the consumer", "table", table, "error", err)
				return
			}
			log.Info("every shard answers again: the rows queued for the one that did not are sent", "table", table)
		}
		snk, pipeSink = sh.Sink, sh
	}
	// TTLs are in force before the first insert, so that a backfill waiting in the stream is not
	// dropped by ClickHouse before the first reload.
	watch := &retentionWatch{snk: snk, log: log}
	watch.load(ctx)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); watch.run(watchCtx) }()
	defer func() { stopWatch(); <-watchDone }()

	p := pipeline.New(set, topo, js, cons, pipeSink, c.metrics, log)
	c.pipe.Store(p)
	c.ready.Started()
	durable := cons.CachedInfo().Config // as the setup step made it: in force, whatever set says
	log.Info("consuming", "stream", topo.Stream(), "durable", set.Durable, "batch_rows", set.BatchRows,
		"flush_interval", set.FlushInterval, "pull_messages", set.PullMessages(), "max_ack_pending", durable.MaxAckPending, "ack_wait", durable.AckWait,
		"clickhouse_database", cfg.ClickHouse.Database)
	err = p.Run(ctx)
	// The last acks sit in the connection's buffer; make sure the server has them before closing.
	if ferr := conn.FlushTimeout(5 * time.Second); ferr != nil {
		log.Warn("flush acknowledgements to NATS", "error", ferr)
	}
	log.Info("stopped", "acked", p.Acked(), "rows_inserted", p.Inserted())
	return err
}

// queuedForShard counts and logs a batch that went to the per-shard queues of a Distributed
// insert because a shard did not answer (sink.Sharded); cause is nil for the batches queued at
// once after the first.
func (c *consumer) queuedForShard(table string, rows int, cause error) {
	c.queued.WithLabelValues(table).Add(float64(rows))
	if cause != nil {
		c.log.Warn("a shard does not answer: its rows wait in the Distributed tables' queue on the node that took the insert, the other shards' rows land, and the messages are acknowledged",
			"table", table, "rows", rows, "shard", chstore.UnavailableShard(cause), "error", cause)
	}
}

// retentionInterval is how often the tables' TTLs are re-read, as `servescope migrate ttl`
// changes them under a running consumer.
const retentionInterval = time.Minute

// retentionWatch keeps snk's TTLs current, logging what is enforced whenever it changes.
type retentionWatch struct {
	snk  *sink.Sink
	log  *slog.Logger
	last string
}

// load reads the TTLs once. A failed read keeps the TTLs read before.
func (w *retentionWatch) load(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	ret, err := w.snk.LoadRetention(rctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("read the tables' TTLs; rows older than them are left to ClickHouse, which drops them at insert", "error", err)
		}
		return
	}
	var parts []string
	for _, table := range sink.Tables() {
		if r, ok := ret[table]; ok {
			if r.Table != table {
				parts = append(parts, table+": "+r.Expr+" (TTL of "+r.Table+")")
				continue
			}
			parts = append(parts, table+": "+r.Expr)
		} else {
			parts = append(parts, table+": none understood")
		}
	}
	if s := strings.Join(parts, ", "); s != w.last {
		w.log.Info("rows older than their table's TTL are dead-lettered instead of dropped by ClickHouse", "ttl", s)
		w.last = s
	}
}

// run reloads the TTLs every retentionInterval until ctx ends.
func (w *retentionWatch) run(ctx context.Context) {
	t := time.NewTicker(retentionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.load(ctx)
		}
	}
}
