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
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/consumer/pipeline"
	"github.com/servescope/servescope/services/consumer/sink"
)

// Config is the consumer's configuration, read from the environment with config.Load.
type Config struct {
	// Consumer is CONSUMER_DURABLE, CONSUMER_BATCH_ROWS and CONSUMER_FLUSH_INTERVAL, which the
	// setup step also reads to create the durable consumer.
	config.Consumer
	// MetricsAddr is where /metrics, /healthz and /readyz are served.
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

// retryDelayMax bounds the backoff while waiting for NATS or ClickHouse at start.
const retryDelayMax = 10 * time.Second

// readyPingTimeout bounds /readyz's ping of ClickHouse.
const readyPingTimeout = 2 * time.Second

// Run runs the consumer until ctx ends, then shuts down gracefully: drain the consumption,
// insert and acknowledge what was taken, exit. ln serves the HTTP endpoints; nil means listen on
// cfg.MetricsAddr. It returns an error only for what retrying cannot fix: a listen failure,
// invalid credentials files, or missing tables (run `servescope migrate up`).
func Run(ctx context.Context, cfg Config, log *slog.Logger, ln net.Listener) error {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("listen on CONSUMER_METRICS_ADDR %s: %w", cfg.MetricsAddr, err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := pipeline.NewMetrics(reg)

	var (
		stage atomic.Pointer[string] // what start-up waits for; nil once consuming
		nc    atomic.Pointer[nats.Conn]
		ch    atomic.Pointer[driver.Conn]
		pipe  atomic.Pointer[pipeline.Pipeline]
	)
	setStage := func(s string) { stage.Store(&s) }
	setStage("connecting to NATS")
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// /healthz: the process is alive and serving; it never asks NATS or ClickHouse, so that an
	// outage of either does not get the consumer restarted (it waits and recovers by itself).
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	// /readyz: NATS is connected, ClickHouse answers a ping, and inserts are not failing.
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		why := func() string {
			if s := stage.Load(); s != nil {
				return "starting: " + *s
			}
			if c := nc.Load(); c == nil || !c.IsConnected() {
				return "NATS disconnected"
			}
			if c := ch.Load(); c != nil {
				pctx, cancel := context.WithTimeout(r.Context(), readyPingTimeout)
				defer cancel()
				if err := (*c).Ping(pctx); err != nil {
					return "ClickHouse does not answer: " + err.Error()
				}
			}
			if p := pipe.Load(); p != nil {
				return p.SinkError()
			}
			return ""
		}()
		if why != "" {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "error", err)
		}
	}()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("serving /metrics, /healthz and /readyz", "addr", ln.Addr().String())

	conn, err := cfg.NATS.Connect("servescope-consumer",
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
	)
	if err != nil {
		return err
	}
	nc.Store(conn)
	defer conn.Close()
	setStage("checking the JetStream streams and the durable consumer")
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
		fatal     error
		waitSince = time.Now()
	)
	if !retry(ctx, log, "check the JetStream streams and durable consumer "+set.Durable, func(ctx context.Context) error {
		cons, diffs, err = bus.CheckConsumer(ctx, js, topo, cfg.DurableConsumer(), cfg.NATS.StreamSettings())
		if errors.Is(err, bus.ErrNotSetUp) && time.Since(waitSince) >= cfg.NATS.SetupWait {
			fatal = err
			return nil
		}
		return err
	}) {
		return nil
	}
	if fatal != nil {
		return fatal
	}
	bus.LogDifferences(log, diffs)
	setStage("connecting to ClickHouse")
	var chConn driver.Conn
	if !retry(ctx, log, "connect to ClickHouse", func(ctx context.Context) error {
		c, err := chstore.Open(ctx, cfg.ClickHouse)
		if err != nil {
			return err
		}
		if err := sink.New(c).Check(ctx); err != nil {
			_ = c.Close()
			if errors.Is(err, sink.ErrMissingTables) {
				fatal = fmt.Errorf("ClickHouse database %s: %w", cfg.ClickHouse.Database, err)
				return nil
			}
			return err
		}
		chConn = c
		return nil
	}) {
		return nil
	}
	if fatal != nil {
		return fatal
	}
	defer chConn.Close()
	ch.Store(&chConn)

	snk := sink.New(chConn)
	// TTLs are in force before the first insert, so that a backfill waiting in the stream is not
	// dropped by ClickHouse before the first reload.
	watch := &retentionWatch{snk: snk, log: log}
	watch.load(ctx)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); watch.run(watchCtx) }()
	defer func() { stopWatch(); <-watchDone }()

	p := pipeline.New(set, topo, js, cons, snk, metrics, log)
	pipe.Store(p)
	stage.Store(nil)
	durable := cons.CachedInfo().Config // as the setup step made it: in force, whatever set says
	log.Info("consuming", "stream", topo.Stream(), "durable", set.Durable, "batch_rows", set.BatchRows,
		"flush_interval", set.FlushInterval, "pull_messages", set.PullMessages(), "max_ack_pending", durable.MaxAckPending, "ack_wait", durable.AckWait,
		"clickhouse_database", cfg.ClickHouse.Database)
	err = p.Run(ctx)
	setStage("stopping")
	// The last acks sit in the connection's buffer; make sure the server has them before closing.
	if ferr := conn.FlushTimeout(5 * time.Second); ferr != nil {
		log.Warn("flush acknowledgements to NATS", "error", ferr)
	}
	log.Info("stopped", "acked", p.Acked(), "rows_inserted", p.Inserted())
	return err
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

// retry runs f with capped exponential backoff until it succeeds (true) or ctx ends (false).
func retry(ctx context.Context, log *slog.Logger, what string, f func(context.Context) error) bool {
	delay := 250 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn(what+" failed, retrying", "retry_in", delay, "error", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		delay = min(2*delay, retryDelayMax)
	}
}
