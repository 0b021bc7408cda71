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
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/servescope/servescope/dev/chaos"
)

func main() { os.Exit(run()) }

func run() int {
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	opt := chaos.Options{Root: root, PortBase: chaos.DefaultPortBase, Out: os.Stdout}
	if v := os.Getenv("SERVESCOPE_CHAOS_PORT_BASE"); v != "" {
		if opt.PortBase, err = strconv.Atoi(v); err != nil || opt.PortBase < 1024 || opt.PortBase > 65535-12 {
			fmt.Fprintf(os.Stderr, "chaos: SERVESCOPE_CHAOS_PORT_BASE=%q: want a port number from 1024 to 65523\n", v)
			return 2
		}
	}
	for _, d := range []struct {
		env string
		to  *time.Duration
	}{{"SERVESCOPE_CHAOS_OUTAGE", &opt.Outage}, {"SERVESCOPE_CHAOS_STEADY", &opt.Steady}} {
		if v := os.Getenv(d.env); v != "" {
			if *d.to, err = time.ParseDuration(v); err != nil || *d.to <= 0 {
				fmt.Fprintf(os.Stderr, "chaos: %s=%q: want a positive duration such as 30s\n", d.env, v)
				return 2
			}
		}
	}
	opt.Hard = os.Getenv("SERVESCOPE_CHAOS_HARD") != ""
	logPath := filepath.Join(root, ".cache", "chaos", "driver.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	defer logFile.Close()
	opt.Log = slog.New(slog.NewTextHandler(logFile, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	ledger, err := chaos.Run(ctx, opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos: the run could not be carried out:", err)
		return 1
	}
	ledger.Print(os.Stdout)
	fmt.Printf("chaos: %.0fs in all\n", time.Since(start).Seconds())
	if len(ledger.Gaps) > 0 {
		return 1
	}
	return 0
}
