// Command devservices runs the shared dev servers (NATS JetStream, ClickHouse) for
// scripts/dev-services, which installs their programs and then hands over to it:
//
//	devservices [--root DIR] up|down [nats|clickhouse]|status|logs [-f]
//
// See scripts/dev-services for what each command does and the SERVESCOPE_DEV_* variables it
// reads; package dev/devservices does the work. --root is the repository root (default: the
// working directory); the cache directory is SERVESCOPE_DEV_CACHE_DIR or .cache under it.
// Exit status: 0 on success, 1 when a command failed (for status: a server is stopped or
// unhealthy), 2 on bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/servescope/servescope/dev/devservices"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("devservices", flag.ContinueOnError)
	root := fs.String("root", "", "repository root (default: the working directory)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *root == "" {
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintln(os.Stderr, "dev-services:", err)
			return 1
		}
		*root = wd
	}
	cfg, err := devservices.Load(*root, os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dev-services:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cmd, rest := fs.Arg(0), fs.Args()[min(1, fs.NArg()):]
	switch {
	case cmd == "up" && len(rest) == 0:
		err = devservices.Up(ctx, cfg)
	case cmd == "down" && len(rest) <= 1:
		which := ""
		if len(rest) == 1 {
			which = rest[0]
		}
		err = devservices.Down(ctx, cfg, which)
	case cmd == "status" && len(rest) == 0:
		err = devservices.Status(ctx, cfg)
		if errors.Is(err, devservices.ErrUnhealthy) {
			return 1
		}
	case cmd == "logs" && (len(rest) == 0 || len(rest) == 1 && rest[0] == "-f"):
		err = logs(cfg, len(rest) == 1)
	default:
		fmt.Fprintf(os.Stderr, "dev-services: usage: up | down [clickhouse|nats] | status | logs [-f] (got %q)\n", fs.Args())
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dev-services:", err)
		return 1
	}
	return 0
}

// logs replaces this process with tail(1) over the logs: tail -F follows a log across its
// rotation, which is what `logs -f` is for.
func logs(cfg devservices.Config, follow bool) error {
	files := cfg.LogFiles()
	if len(files) == 0 {
		return fmt.Errorf("no logs yet under %s (run scripts/dev-services up)", cfg.CacheDir)
	}
	tail, err := exec.LookPath("tail")
	if err != nil {
		return err
	}
	argv := []string{"tail", "-n", strconv.Itoa(cfg.LogLines)}
	if follow {
		argv = append(argv, "-F")
	}
	return syscall.Exec(tail, append(argv, files...), os.Environ())
}
