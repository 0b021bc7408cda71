package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
)

func newMigrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply or revert the ClickHouse schema migrations (golang-migrate)",
	}
	// open prepares the migrator; only `up` may create the database.
	open := func(cmd *cobra.Command, create bool) (*chstore.Migrator, error) {
		cfg, err := config.Load[config.ClickHouse]()
		if err != nil {
			return nil, err
		}
		if cfg.Cluster != "" {
			// Each node's local database has its own version table: address it directly.
			return nil, fmt.Errorf("on a cluster (SERVESCOPE_CLICKHOUSE_CLUSTER=%s) only `migrate up` runs over every node; "+
				"for this command name one node and its local database: SERVESCOPE_CLICKHOUSE_ADDR=<node> "+
				"SERVESCOPE_CLICKHOUSE_DATABASE=%s, SERVESCOPE_CLICKHOUSE_CLUSTER unset", cfg.Cluster, chstore.LocalDatabase(cfg))
		}
		if create {
			return chstore.NewMigrator(cmd.Context(), cfg)
		}
		return chstore.OpenMigrator(cmd.Context(), cfg)
	}
	var withStreams bool
	up := &cobra.Command{
		Use:   "up",
		Short: "Set up servescope: the ClickHouse schema, then the JetStream streams and durable consumer (no-op when up to date)",
		Long: "Creates the ClickHouse database if needed and applies every pending migration (with\n" +
			"SERVESCOPE_CLICKHOUSE_CLUSTER set: on every node, with Distributed tables), then runs\n" +
			"`servescope streams up`: creates the events and dead-letter streams and the consumer's durable\n" +
			"consumer, or updates them to SERVESCOPE_STREAM_* and CONSUMER_* (docs/operations/upgrades.md).\n" +
			"The services only check these resources; this command is their one owner.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load[config.ClickHouse]()
			if err != nil {
				return err
			}
			if cfg.Cluster != "" {
				if err := chstore.MigrateSharded(cmd.Context(), cfg); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "sharded schema on cluster %s: %d nodes migrated (%s), Distributed tables in %s\n",
					cfg.Cluster, len(cfg.Addr), chstore.LocalDatabase(cfg), cfg.Database)
				if !withStreams {
					return nil
				}
				return streamsUp(cmd)
			}
			g, err := open(cmd, true)
			if err != nil {
				return err
			}
			defer g.Close()
			if err := g.Up(); err != nil {
				return err
			}
			if err := printVersion(cmd, g); err != nil {
				return err
			}
			if !withStreams {
				return nil
			}
			return streamsUp(cmd)
		},
	}
	up.Flags().BoolVar(&withStreams, "streams", true, "also set up the JetStream streams and durable consumer (servescope streams up)")
	var steps int
	down := &cobra.Command{
		Use:   "down",
		Short: "Revert migrations: all of them, or --steps N",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g, err := open(cmd, false)
			if err != nil {
				return err
			}
			defer g.Close()
			if err := g.Down(steps); err != nil {
				return err
			}
			return printVersion(cmd, g)
		},
	}
	down.Flags().IntVar(&steps, "steps", 0, "number of migrations to revert (0 = all)")
	version := &cobra.Command{
		Use:   "version",
		Short: "Print the applied migration version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g, err := open(cmd, false)
			if err != nil {
				return err
			}
			defer g.Close()
			return printVersion(cmd, g)
		},
	}
	force := &cobra.Command{
		Use:   "force VERSION",
		Short: "Mark VERSION as applied without running it (recovery from a dirty state)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := strconv.Atoi(args[0])
			if err != nil {
				return fmt.Errorf("force: VERSION must be a number: %w", err)
			}
			g, err := open(cmd, false)
			if err != nil {
				return err
			}
			defer g.Close()
			if err := g.Force(v); err != nil {
				return err
			}
			return printVersion(cmd, g)
		},
	}
	ttl := &cobra.Command{
		Use:   "ttl TABLE DAYS",
		Short: "Change how many days a table keeps rows (defaults: see migrations/000001_tables.up.sql); on a cluster, on every node's local table",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			days, err := strconv.Atoi(args[1])
			if err != nil {
				return fmt.Errorf("ttl: DAYS must be a number: %w", err)
			}
			cfg, err := config.Load[config.ClickHouse]()
			if err != nil {
				return err
			}
			if cfg.Cluster != "" {
				nodes, err := chstore.SetTTLSharded(cmd.Context(), cfg, args[0], days)
				for _, n := range nodes {
					fmt.Fprintf(cmd.OutOrStdout(), "%s.%s on %s keeps rows for %d days\n", chstore.LocalDatabase(cfg), args[0], n, days)
				}
				return err
			}
			conn, err := chstore.Open(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer conn.Close()
			if err := chstore.SetTTL(cmd.Context(), conn, args[0], days); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s keeps rows for %d days\n", args[0], days)
			return nil
		},
	}
	cmd.AddCommand(up, down, version, force, ttl)
	return cmd
}

func printVersion(cmd *cobra.Command, g *chstore.Migrator) error {
	v, dirty, err := g.Version()
	if err != nil {
		return err
	}
	state := "clean"
	if dirty {
		state = "dirty (a migration failed half-way: fix it, then `servescope migrate force VERSION`)"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "schema version %d, %s\n", v, state)
	return nil
}
