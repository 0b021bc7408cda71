// Command servescope is the operator's CLI: it sets servescope up — the ClickHouse migrations, the
// JetStream streams and the consumer's durable consumer, of which it is the one owner (`migrate
// up`, `streams up`) — and reads the recorded data during an investigation (diagnose, postmortem).
//
// Connection settings come from the shared environment variables (SERVESCOPE_CLICKHOUSE_ADDR,
// SERVESCOPE_CLICKHOUSE_DATABASE, SERVESCOPE_NATS_URL, ...). Exit codes: 0 when the command ran, 1 on a usage or
// operational error, 2 when the data could not be read.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// exitError carries a specific exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	root := newRootCmd()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "servescope:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "servescope",
		Short:         "servescope operator CLI: setup (ClickHouse schema, JetStream streams) and investigations over the recorded requests",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newMigrateCmd(), newStreamsCmd(), newHealthcheckCmd(), newAccessCmd())
	for _, add := range extraCommands {
		root.AddCommand(add())
	}
	return root
}
