// Command console serves servescope's web console: the minimal dashboard of docs/measurements.md over
// ClickHouse (each panel with its baseline, its "alert when" rule, the live state of the detector
// rule that watches it and the action it calls for), the alerts, a page per complaint of
// docs/measurements.md (From symptom to quantity) with `servescope diagnose`'s reading, and a crash page with `servescope
// postmortem`'s. See package server for the settings; it listens on 127.0.0.1:9104 by default.
package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/servescope/servescope/internal/service"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/console/server"
)

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("console", "Usage: console [flags]\n\nservescope's web console; settings from CONSOLE_* and SERVESCOPE_CLICKHOUSE_* variables.")
	c.Run = func(ctx context.Context, log *slog.Logger, args []string) error {
		if len(args) > 0 {
			return service.UsageError(fmt.Errorf("unexpected arguments %q", args))
		}
		return run(ctx, log)
	}
	return c
}

func run(ctx context.Context, log *slog.Logger) error {
	cfg, err := config.Load[server.Config]()
	if err != nil {
		return err
	}
	s, err := server.New(cfg, log)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Run(ctx)
}
