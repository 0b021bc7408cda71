// Command collector is servescope's engine-side collector. `collector run` scrapes vLLM /metrics,
// receives vLLM's OTLP spans and follows its log files; `collector logs FILE|-` ships one log by
// itself. Settings come from the environment (see package collector's Config); the flags are the
// common ones (--log.level, --log.format, --version) and those of `logs`. Exit status: 0 after a
// graceful shutdown (SIGTERM, SIGINT) or a finished `logs --once`, 1 on a configuration error or
// a failure, 2 on bad usage.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/service"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/services/collector/collector"
	"github.com/servescope/servescope/services/collector/logship"
)

func main() { command().Main() }

func command() *service.Cobra {
	root := &cobra.Command{
		Use:   "collector",
		Short: "Collect vLLM's /metrics, OTLP spans and logs into servescope",
	}
	cli := service.NewCobra("collector", root)
	root.AddCommand(&cobra.Command{
		Use:   "run",
		Short: "Scrape COLLECTOR_TARGETS, receive OTLP traces and follow COLLECTOR_LOG_FILES",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCollector(cmd.Context(), cli.Logger())
		},
	})
	var engine string
	var once bool
	logs := &cobra.Command{
		Use:   "logs FILE|-",
		Short: "Ship one vLLM log: follow FILE (rotation-safe, resuming from its saved offset) or read standard input",
		Example: "  docker logs -f vllm 2>&1 | collector logs -\n" +
			"  collector logs --engine vllm-a /var/log/vllm/vllm.log",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLogs(cmd.Context(), cli.Logger(), args[0], engine, once)
		},
	}
	logs.Flags().StringVar(&engine, "engine", "", "engine name of the log's events (default COLLECTOR_ENGINE, the only target's name, or \"vllm\")")
	logs.Flags().BoolVar(&once, "once", false, "read FILE to its end and exit instead of following it")
	root.AddCommand(logs)
	return cli
}

// runCollector is `collector run`. Its parts stop in this order: the collector (scrapes, OTLP
// receivers, log followers, /metrics), then the publishing parts (see publishing.addTo).
func runCollector(ctx context.Context, log *slog.Logger) error {
	cfg, err := config.Load[collector.Config]()
	if err != nil {
		return err
	}
	p, err := openPublishing(cfg, log)
	if err != nil {
		return err
	}
	c, err := collector.New(cfg, p.pub, log, p.reg)
	if err != nil {
		p.close()
		return err
	}
	if cfg.Lease {
		js, err := jetstream.New(p.nc)
		if err == nil {
			err = c.UseLeases(js)
		}
		if err != nil {
			p.close()
			return fmt.Errorf("scrape leases: %w", err)
		}
	}
	c.Readiness().Details(p.details)
	g := service.NewGroup(log)
	g.AddContext("collector", c.Run)
	p.addTo(g)
	return g.Run(ctx)
}

// runLogs is `collector logs`: the shipper, then the publishing parts. With --once or standard
// input the shipper ends at the end of its input, which stops the rest after it.
func runLogs(ctx context.Context, log *slog.Logger, path, engine string, once bool) error {
	cfg, err := config.Load[collector.Config]()
	if err != nil {
		return err
	}
	p, err := openPublishing(cfg, log)
	if err != nil {
		return err
	}
	ship, err := shipper(cfg, p, log, path, engine, once)
	if err != nil {
		p.close()
		return err
	}
	g := service.NewGroup(log)
	g.AddContext("logs "+path, ship)
	p.addTo(g)
	return g.Run(ctx)
}

// publishing is what delivers the collector's events: the NATS connection, the publisher with
// its spool, and the registry their metrics go to.
type publishing struct {
	cfg collector.Config
	log *slog.Logger
	nc  *nats.Conn
	pub *publish.Publisher
	reg *prometheus.Registry
}

// openPublishing connects to NATS (in the background: the collector starts before NATS, its
// events waiting in the spool) and opens the publisher.
func openPublishing(cfg collector.Config, log *slog.Logger) (*publishing, error) {
	nc, err := cfg.NATS.Connect("servescope-collector", append(config.NATSEventHandlers(log, config.RedactURL(cfg.NATS.URL)),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		// Fail publishes at once while disconnected, so they go to the spool.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: the connection was closed on purpose
				log.Warn("NATS disconnected; spooling events", "error", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("NATS reconnected", "url", c.ConnectedUrlRedacted())
		}),
	)...)
	if err != nil {
		return nil, err
	}
	reg := service.NewRegistry("collector")
	pub, err := publish.New(nc, cfg.NATS.SubjectPrefix, cfg.PublisherConfig(log.With("component", "publish"), reg))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("open publisher: %w", err)
	}
	return &publishing{cfg: cfg, log: log, nc: nc, pub: pub, reg: reg}, nil
}

// addTo adds the publishing parts to g, to stop in this order after what publishes: the
// publisher's flush of queued events to JetStream or the spool (up to
// COLLECTOR_SHUTDOWN_TIMEOUT), the NATS connection.
func (p *publishing) addTo(g *service.Group) {
	g.AddStop("publisher", p.flush)
	g.AddStop("nats", p.nc.Close)
}

func (p *publishing) flush() {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ShutdownTimeout)
	defer cancel()
	if err := p.pub.Close(ctx); err != nil {
		p.log.Error("flush publisher", "error", err)
	}
}

// close releases what openPublishing opened when nothing ran.
func (p *publishing) close() {
	p.flush()
	p.nc.Close()
}

// details is the publishing state /readyz shows.
func (p *publishing) details() map[string]any {
	st := p.pub.Stats()
	d := map[string]any{
		"nats_connected": p.nc.IsConnected(),
		"spool_events":   st.SpoolEvents,
		"spool_bytes":    st.SpoolBytes,
		"dropped":        st.Dropped,
	}
	// The streams not being set up yet does not make the collector unready: its events wait in
	// the spool, as while NATS is away.
	if err := p.pub.StreamCheck(); err != nil {
		d["stream_check"] = err.Error()
	}
	return d
}

// shipper returns the part that ships one log: standard input ("-") or FILE to its end with
// once, else FILE followed from its saved offset.
func shipper(cfg collector.Config, p *publishing, log *slog.Logger, path, engine string, once bool) (func(context.Context) error, error) {
	if engine == "" {
		engine = cfg.EngineName()
	}
	loc, err := time.LoadLocation(cfg.LogTimezone)
	if err != nil {
		return nil, fmt.Errorf("COLLECTOR_LOG_TIMEZONE: %w", err)
	}
	m, err := logship.NewMetrics(p.reg)
	if err != nil {
		return nil, err
	}
	sh := logship.NewShipper(p.pub, engine, path, loc, nil, m, log)
	switch {
	case path == "-":
		return func(ctx context.Context) error { return sh.Stream(ctx, os.Stdin) }, nil
	case once:
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("open log: %w", err)
		}
		return func(ctx context.Context) error {
			defer f.Close()
			return sh.Stream(ctx, f)
		}, nil
	}
	state, err := logship.OpenState(filepath.Join(cfg.StateDir, "log-offsets.json"))
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return sh.Follow(ctx, &logship.Follower{Path: path, State: state, Poll: cfg.LogPollInterval, RotateWait: cfg.LogRotateWait})
	}, nil
}
