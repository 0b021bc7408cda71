// Command gateway is servescope's recording OpenAI-compatible reverse proxy in front of vLLM,
// and the HTTP ingest endpoint for application records. Settings come from the environment (see
// package server's Config); the flags are the common ones (--log.level, --log.format,
// --version). Package server's Run gives the stop order. Exit status: 0 after a graceful
// shutdown (SIGTERM, SIGINT), 1 on a configuration error or when serving fails, 2 on bad usage.
package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/service"
	"github.com/servescope/servescope/services/gateway/server"
)

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("gateway", "Usage: gateway [flags]\n\n"+
		"servescope's recording OpenAI-compatible proxy in front of vLLM; settings from GATEWAY_* and SERVESCOPE_* variables.")
	c.Run = func(ctx context.Context, log *slog.Logger, args []string) error {
		if len(args) > 0 {
			return service.UsageError(fmt.Errorf("unexpected arguments %q", args))
		}
		cfg, err := config.Load[server.Config]()
		if err != nil {
			return err
		}
		s, err := server.New(cfg, log)
		if err != nil {
			return err
		}
		return s.Run(ctx)
	}
	return c
}
