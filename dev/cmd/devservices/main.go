// Command devservices runs the shared dev servers (NATS JetStream, ClickHouse) for
// scripts/dev-services, which installs their programs and then hands over to it:
//
//	devservices [--root DIR] up [nats-cluster|clickhouse-shards]|down [nats|clickhouse|nats-cluster|clickhouse-shards]|status|logs [-f]
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
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/servescope/servescope/dev/devservices"
	"github.com/servescope/servescope/internal/service"
)

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("dev-services", "Usage: devservices [--root DIR] up [nats-cluster|clickhouse-shards]|down [nats|clickhouse|nats-cluster|clickhouse-shards]|status|logs [-f]\n\n"+
		"Runs the shared dev servers (NATS JetStream, ClickHouse, and on demand a NATS cluster or ClickHouse shards) for scripts/dev-services.")
	root := c.Flags.String("root", "", "repository root (default: the working directory)")
	c.Run = func(ctx context.Context, _ *slog.Logger, args []string) error {
		return run(ctx, *root, args)
	}
	return c
}

func run(ctx context.Context, root string, args []string) error {
	if root == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		root = wd
	}
	cfg, err := devservices.Load(root, os.Getenv)
	if err != nil {
		return service.UsageError(err)
	}
	cmd, rest := "", []string(nil)
	if len(args) > 0 {
		cmd, rest = args[0], args[1:]
	}
	switch {
	case cmd == "up" && len(rest) == 0:
		return devservices.Up(ctx, cfg)
	case cmd == "up" && len(rest) == 1 && rest[0] == "nats-cluster":
		return devservices.UpNATSCluster(ctx, cfg)
	case cmd == "up" && len(rest) == 1 && rest[0] == "clickhouse-shards":
		return devservices.UpClickHouseShards(ctx, cfg)
	case cmd == "down" && len(rest) <= 1:
		which := ""
		if len(rest) == 1 {
			which = rest[0]
		}
		return devservices.Down(ctx, cfg, which)
	case cmd == "status" && len(rest) == 0:
		err := devservices.Status(ctx, cfg)
		if errors.Is(err, devservices.ErrUnhealthy) {
			return service.Exit(1, nil) // Status printed which server is down
		}
		return err
	case cmd == "logs" && (len(rest) == 0 || len(rest) == 1 && rest[0] == "-f"):
		return logs(cfg, len(rest) == 1)
	}
	return service.UsageError(fmt.Errorf("usage: up [nats-cluster|clickhouse-shards] | down [clickhouse|nats|nats-cluster|clickhouse-shards] | status | logs [-f] (got %q)", args))
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
