// Command servescope is the operator's CLI: it sets servescope up — the ClickHouse migrations, the
// JetStream streams and the consumer's durable consumer, of which it is the one owner (`migrate
// up`, `streams up`) — and reads the recorded data during an investigation (diagnose, postmortem).
//
// Connection settings come from the shared environment variables (SERVESCOPE_CLICKHOUSE_ADDR,
// SERVESCOPE_CLICKHOUSE_DATABASE, SERVESCOPE_NATS_URL, ...); the common flags (--log.level,
// --log.format, --version) apply to every subcommand. Exit codes: 0 when the command ran, 1 on a
// usage or operational error, 2 when the data could not be read.
package main

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/servescope/servescope/internal/service"
)

func main() { newCLI().Main() }

// newCLI is the command tree with the common flags, --version and the exit codes above.
func newCLI() *service.Cobra {
	root := newRootCmd()
	cli := service.NewCobra("servescope", root)
	cli.UsageCode = 1
	withLogger := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if err := withLogger(cmd, args); err != nil {
			return err
		}
		// Libraries that log through log/slog's default logger follow the flags too.
		slog.SetDefault(cli.Logger())
		return nil
	}
	return cli
}

// dataUnreadable is exit code 2: the data could not be read.
func dataUnreadable(err error) error { return service.Exit(2, err) }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "servescope",
		Short: "servescope operator CLI: setup (ClickHouse schema, JetStream streams) and investigations over the recorded requests",
	}
	root.AddCommand(newMigrateCmd(), newStreamsCmd(), newRulesCmd(), newHealthcheckCmd(), newAccessCmd())
	for _, add := range extraCommands {
		root.AddCommand(add())
	}
	return root
}
