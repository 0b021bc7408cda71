// Command detector evaluates windowed SQL rules against a baseline on ClickHouse every interval,
// keeps alert state in the alerts table, and posts alerts to webhooks (Alertmanager format).
//
//	detector                       run until SIGINT/SIGTERM (package service's Serve gives the stop order)
//	detector --once                evaluate now, print would-be alerts as JSON lines, send nothing
//	detector --once --at <RFC3339> the same as of that time (replay)
//
// Settings come from the environment (package service's Config); the common flags
// (--log.level, --log.format, --version) apply too. Exit status: 0 after a graceful shutdown or
// a replay, 1 on a configuration error or a failed replay, 2 on bad usage.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	svc "github.com/servescope/servescope/internal/service"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/detector/service"
)

func main() { command(os.Stdout).Main() }

// command is the detector; with --once the alerts go to stdout and nothing else does.
func command(stdout io.Writer) *svc.Command {
	c := svc.NewCommand("detector", "Usage: detector [--once [--at RFC3339]] [flags]\n\n"+
		"Evaluates servescope's alert rules on ClickHouse and posts alerts to webhooks; settings from DETECTOR_* and SERVESCOPE_* variables.")
	once := c.Flags.Bool("once", false, "evaluate once, print pending/firing alerts as JSON lines on stdout, send nothing")
	atText := c.Flags.String("at", "", "with --once: evaluate as of this RFC 3339 time instead of now")
	c.Run = func(ctx context.Context, log *slog.Logger, args []string) error {
		if len(args) > 0 {
			return svc.UsageError(fmt.Errorf("unexpected arguments %q", args))
		}
		if *atText != "" && !*once {
			return svc.UsageError(errors.New("--at needs --once"))
		}
		at := time.Now().UTC()
		if *atText != "" {
			t, err := time.Parse(time.RFC3339, *atText)
			if err != nil {
				return svc.UsageError(fmt.Errorf("--at: want an RFC 3339 time like 2026-11-30T09:00:00Z: %w", err))
			}
			at = t.UTC()
		}
		cfg, err := config.Load[service.Config]()
		if err != nil {
			return err
		}
		l, err := service.Load(cfg)
		if err != nil {
			return err
		}
		if *once {
			return replay(ctx, cfg, l.Rules, at, stdout, log)
		}
		return service.Serve(ctx, cfg, l.Rules, nil, log)
	}
	return c
}

// replay is --once: evaluate as of at and print the alerts that would be pending or firing.
func replay(ctx context.Context, cfg service.Config, defs []*rules.Definition, at time.Time, stdout io.Writer, log *slog.Logger) error {
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
