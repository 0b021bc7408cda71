// Command gateway is servescope's recording OpenAI-compatible reverse proxy in front of vLLM,
// and the HTTP ingest endpoint for application records. See package server for the settings.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/gateway/server"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(log); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
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
	return s.Run(ctx)
}
