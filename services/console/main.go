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
	"os"
	"os/signal"
	"syscall"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/console/server"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(log); err != nil {
		fmt.Fprintln(os.Stderr, "console:", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	cfg, err := config.Load[server.Config]()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := server.New(cfg, log)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Run(ctx)
}
