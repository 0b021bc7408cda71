// Command demo is the driver behind scripts/demo: servescope end to end on one machine.
//
//	demo [--once]   run the scenarios and incidents, print the tables and alerts; with --once tear
//	                everything down afterwards and exit 1 when an expected alert did not arrive,
//	                otherwise keep the stack up until Ctrl-C
//	demo down       stop a demo stack left running (pid files under .cache/demo/pids)
//
// Environment: SERVESCOPE_DEMO_PORT_BASE (first of nine ports, default 19600),
// SERVESCOPE_DEMO_DATABASE (servescope_demo), SERVESCOPE_DEMO_PREFIX (servescope_demo),
// SERVESCOPE_DEMO_KEEP_DEV_SERVICES (non-empty: never stop the dev services), and the
// dev services' SERVESCOPE_DEV_* ports. The repository root is the working directory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/servescope/servescope/dev/demo"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	once := fs.Bool("once", false, "tear down at the end; exit 1 if an expected alert did not arrive")
	appReport := fs.String("app-report", "app.record", "how ragdemo reports its requests: app.record (published to NATS), otel (OpenTelemetry spans to the collector only) or both")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if fs.Arg(0) == "down" {
		if err := demo.Down(ctx, root, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "demo down:", err)
			return 1
		}
		return 0
	}
	switch *appReport {
	case "app.record", "otel", "both":
	default:
		fmt.Fprintf(os.Stderr, "demo: --app-report=%q: want app.record, otel or both\n", *appReport)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "demo: unknown argument %q (want --once or down)\n", fs.Arg(0))
		return 2
	}
	base := demo.DefaultPortBase
	if v := os.Getenv("SERVESCOPE_DEMO_PORT_BASE"); v != "" {
		if base, err = strconv.Atoi(v); err != nil || base < 1024 || base > 65535-8 {
			fmt.Fprintf(os.Stderr, "demo: SERVESCOPE_DEMO_PORT_BASE=%q: want a port number from 1024 to 65527\n", v)
			return 2
		}
	}
	if err := os.MkdirAll(filepath.Join(root, ".cache", "demo"), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	logFile, err := os.Create(filepath.Join(root, ".cache", "demo", "driver.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	defer logFile.Close()
	err = demo.Run(ctx, demo.Options{
		Root: root, Once: *once, PortBase: base,
		Database:        envOr("SERVESCOPE_DEMO_DATABASE", "servescope_demo"),
		Prefix:          envOr("SERVESCOPE_DEMO_PREFIX", "servescope_demo"),
		KeepDevServices: os.Getenv("SERVESCOPE_DEMO_KEEP_DEV_SERVICES") != "",
		AppReport:       *appReport,
		Out:             os.Stdout,
		Log:             slog.New(slog.NewTextHandler(logFile, nil)),
	})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "demo: interrupted; stopped what it started")
			return 130
		}
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	return 0
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
