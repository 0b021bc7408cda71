// Command demo is the driver behind scripts/demo: servescope end to end on one machine.
//
//	demo [--once]   run the scenarios and incidents, print the tables and alerts; with --once tear
//	                everything down afterwards and exit 1 when an expected alert did not arrive,
//	                otherwise keep the stack up until Ctrl-C
//	demo down       stop a demo stack left running (pid files under .cache/demo/pids)
//
// Environment: SERVESCOPE_DEMO_PORT_BASE (first of ten ports, default 19600),
// SERVESCOPE_DEMO_DATABASE (servescope_demo), SERVESCOPE_DEMO_PREFIX (servescope_demo),
// SERVESCOPE_DEMO_KEEP_DEV_SERVICES (non-empty: never stop the dev services), and the
// dev services' SERVESCOPE_DEV_* ports. The repository root is the working directory.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/servescope/servescope/dev/demo"
	"github.com/servescope/servescope/internal/service"
)

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("demo", "Usage: demo [--once] | demo down\n\n"+
		"The driver behind scripts/demo, run from the repository root; its detailed log goes to .cache/demo/driver.log\n"+
		"at --log.level in --log.format.")
	once := c.Flags.Bool("once", false, "tear down at the end; exit 1 if an expected alert did not arrive")
	appReport := c.Flags.String("app-report", "app.record", "how ragdemo reports its requests: app.record (published to NATS), otel (OpenTelemetry spans to the collector only) or both")
	c.Run = func(ctx context.Context, _ *slog.Logger, args []string) error {
		switch *appReport {
		case "app.record", "otel", "both":
		default:
			return service.UsageError(fmt.Errorf("--app-report=%q: want app.record, otel or both", *appReport))
		}
		return run(ctx, c.Options(), *once, *appReport, args)
	}
	return c
}

func run(ctx context.Context, o service.Options, once bool, appReport string, args []string) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if len(args) == 1 && args[0] == "down" {
		if err := demo.Down(ctx, root, os.Stdout); err != nil {
			return fmt.Errorf("down: %w", err)
		}
		return nil
	}
	if len(args) > 0 {
		return service.UsageError(fmt.Errorf("unknown argument %q (want --once or down)", args[0]))
	}
	base := demo.DefaultPortBase
	if v := os.Getenv("SERVESCOPE_DEMO_PORT_BASE"); v != "" {
		if base, err = strconv.Atoi(v); err != nil || base < 1024 || base > 65535-9 {
			return service.UsageError(fmt.Errorf("SERVESCOPE_DEMO_PORT_BASE=%q: want a port number from 1024 to 65526", v))
		}
	}
	if err := os.MkdirAll(filepath.Join(root, ".cache", "demo"), 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(root, ".cache", "demo", "driver.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	log, err := o.Logger(logFile)
	if err != nil {
		return err
	}
	err = demo.Run(ctx, demo.Options{
		Root: root, Once: once, PortBase: base,
		Database:        envOr("SERVESCOPE_DEMO_DATABASE", "servescope_demo"),
		Prefix:          envOr("SERVESCOPE_DEMO_PREFIX", "servescope_demo"),
		KeepDevServices: os.Getenv("SERVESCOPE_DEMO_KEEP_DEV_SERVICES") != "",
		AppReport:       appReport,
		Out:             os.Stdout,
		Log:             log,
	})
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "demo: interrupted; stopped what it started")
		return service.Exit(130, nil)
	}
	return err
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
