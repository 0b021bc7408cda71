// Command collector is servescope's engine-side collector. `collector run` scrapes vLLM /metrics,
// receives vLLM's OTLP spans and follows its log files; `collector logs FILE|-` ships one log by
// itself. Settings come from the environment (see package collector's Config).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/services/collector/collector"
	"github.com/servescope/servescope/services/collector/logship"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := command(log).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "collector:", err)
		os.Exit(1)
	}
}

func command(log *slog.Logger) *cobra.Command {
	root := &cobra.Command{
		Use:           "collector",
		Short:         "Collect vLLM's /metrics, OTLP spans and logs into servescope",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(&cobra.Command{
		Use:   "run",
		Short: "Scrape COLLECTOR_TARGETS, receive OTLP traces and follow COLLECTOR_LOG_FILES",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPublisher(cmd.Context(), log, func(ctx context.Context, cfg collector.Config, pub *publish.Publisher, reg *prometheus.Registry) error {
				c, err := collector.New(cfg, pub, log, reg)
				if err != nil {
					return err
				}
				return c.Run(ctx)
			})
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
			return withPublisher(cmd.Context(), log, func(ctx context.Context, cfg collector.Config, pub *publish.Publisher, reg *prometheus.Registry) error {
				return shipLog(ctx, cfg, pub, reg, log, args[0], engine, once)
			})
		},
	}
	logs.Flags().StringVar(&engine, "engine", "", "engine name of the log's events (default COLLECTOR_ENGINE, the only target's name, or \"vllm\")")
	logs.Flags().BoolVar(&once, "once", false, "read FILE to its end and exit instead of following it")
	root.AddCommand(logs)
	return root
}

// withPublisher loads the configuration, connects to NATS, opens the publisher and runs f until
// SIGINT/SIGTERM; at the end it flushes queued events to JetStream or the spool.
func withPublisher(parent context.Context, log *slog.Logger, f func(context.Context, collector.Config, *publish.Publisher, *prometheus.Registry) error) error {
	cfg, err := config.Load[collector.Config]()
	if err != nil {
		return err
	}
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := cfg.NATS.Connect("servescope-collector",
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		// Fail publishes at once while disconnected, so they go to the spool.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("NATS disconnected; spooling events", "error", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("NATS reconnected", "url", c.ConnectedUrlRedacted())
		}),
	)
	if err != nil {
		return err
	}
	defer nc.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pub, err := publish.New(nc, cfg.NATS.SubjectPrefix, cfg.PublisherConfig(log.With("component", "publish"), reg))
	if err != nil {
		return fmt.Errorf("open publisher: %w", err)
	}
	runErr := f(ctx, cfg, pub, reg)
	cctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := pub.Close(cctx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("flush publisher: %w", err))
	}
	return runErr
}

func shipLog(ctx context.Context, cfg collector.Config, pub *publish.Publisher, reg *prometheus.Registry, log *slog.Logger, path, engine string, once bool) error {
	if engine == "" {
		engine = cfg.EngineName()
	}
	loc, err := time.LoadLocation(cfg.LogTimezone)
	if err != nil {
		return fmt.Errorf("COLLECTOR_LOG_TIMEZONE: %w", err)
	}
	m, err := logship.NewMetrics(reg)
	if err != nil {
		return err
	}
	sh := logship.NewShipper(pub, engine, path, loc, nil, m, log)
	if path == "-" {
		return sh.Stream(ctx, os.Stdin)
	}
	if once {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("open log: %w", err)
		}
		defer f.Close()
		return sh.Stream(ctx, f)
	}
	state, err := logship.OpenState(filepath.Join(cfg.StateDir, "log-offsets.json"))
	if err != nil {
		return err
	}
	return sh.Follow(ctx, &logship.Follower{Path: path, State: state, Poll: cfg.LogPollInterval})
}
