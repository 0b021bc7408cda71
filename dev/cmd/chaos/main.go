// Command chaos is the driver behind scripts/chaos: the end-to-end fault suite (see package
// chaos). It prints progress and a ledger and exits 1 on any gap, 2 on bad settings.
//
// Environment: SERVESCOPE_CHAOS_PORT_BASE (first of 13 consecutive loopback ports, default
// 19700), SERVESCOPE_CHAOS_OUTAGE (how long ClickHouse and NATS stay down, default 30s),
// SERVESCOPE_CHAOS_STEADY (traffic-only time between faults, default 10s), SERVESCOPE_CHAOS_HARD
// (non-empty: every stop is a crash, SIGKILL). The repository root
// is the working directory.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/servescope/servescope/dev/chaos"
	"github.com/servescope/servescope/internal/service"
)

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("chaos", "Usage: chaos [flags]\n\n"+
		"The end-to-end fault suite behind scripts/chaos; settings from SERVESCOPE_CHAOS_* variables, run from the repository root.\n"+
		"Its detailed log goes to .cache/chaos/driver.log at --log.level in --log.format.")
	c.Run = func(ctx context.Context, _ *slog.Logger, args []string) error {
		if len(args) > 0 {
			return service.UsageError(fmt.Errorf("unexpected arguments %q", args))
		}
		return run(ctx, c.Options())
	}
	return c
}

func run(ctx context.Context, o service.Options) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	opt := chaos.Options{Root: root, PortBase: chaos.DefaultPortBase, Out: os.Stdout}
	if v := os.Getenv("SERVESCOPE_CHAOS_PORT_BASE"); v != "" {
		if opt.PortBase, err = strconv.Atoi(v); err != nil || opt.PortBase < 1024 || opt.PortBase > 65535-12 {
			return service.UsageError(fmt.Errorf("SERVESCOPE_CHAOS_PORT_BASE=%q: want a port number from 1024 to 65523", v))
		}
	}
	for _, d := range []struct {
		env string
		to  *time.Duration
	}{{"SERVESCOPE_CHAOS_OUTAGE", &opt.Outage}, {"SERVESCOPE_CHAOS_STEADY", &opt.Steady}} {
		if v := os.Getenv(d.env); v != "" {
			if *d.to, err = time.ParseDuration(v); err != nil || *d.to <= 0 {
				return service.UsageError(fmt.Errorf("%s=%q: want a positive duration such as 30s", d.env, v))
			}
		}
	}
	opt.Hard = os.Getenv("SERVESCOPE_CHAOS_HARD") != ""
	logPath := filepath.Join(root, ".cache", "chaos", "driver.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	if opt.Log, err = o.Logger(logFile); err != nil {
		return err
	}
	start := time.Now()
	ledger, err := chaos.Run(ctx, opt)
	if err != nil {
		return fmt.Errorf("the run could not be carried out: %w", err)
	}
	ledger.Print(os.Stdout)
	fmt.Printf("chaos: %.0fs in all\n", time.Since(start).Seconds())
	if len(ledger.Gaps) > 0 {
		return service.Exit(1, nil) // the ledger shows the gaps
	}
	return nil
}
