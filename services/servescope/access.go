package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/servescope/servescope/internal/access"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
)

// accessSettings are the least-privilege accounts' names and passwords.
type accessSettings struct {
	// DetectorUser and DetectorPassword (or DetectorPasswordFile) are the detector's account,
	// ConsumerUser and ConsumerPassword (or ConsumerPasswordFile) the consumer's.
	DetectorUser         string `env:"SERVESCOPE_DETECTOR_CLICKHOUSE_USER" envDefault:"servescope_detector"`
	DetectorPassword     string `env:"SERVESCOPE_DETECTOR_CLICKHOUSE_PASSWORD"`
	DetectorPasswordFile string `env:"SERVESCOPE_DETECTOR_CLICKHOUSE_PASSWORD_FILE,file"`
	ConsumerUser         string `env:"SERVESCOPE_CONSUMER_CLICKHOUSE_USER" envDefault:"servescope_consumer"`
	ConsumerPassword     string `env:"SERVESCOPE_CONSUMER_CLICKHOUSE_PASSWORD"`
	ConsumerPasswordFile string `env:"SERVESCOPE_CONSUMER_CLICKHOUSE_PASSWORD_FILE,file"`
	// The console's read-only account is made only when its password is set. ConsoleContent lets
	// it read captured prompt and output text (set it with CONSOLE_SHOW_CONTENT).
	ConsoleUser         string `env:"SERVESCOPE_CONSOLE_CLICKHOUSE_USER" envDefault:"servescope_console"`
	ConsolePassword     string `env:"SERVESCOPE_CONSOLE_CLICKHOUSE_PASSWORD"`
	ConsolePasswordFile string `env:"SERVESCOPE_CONSOLE_CLICKHOUSE_PASSWORD_FILE,file"`
	ConsoleContent      bool   `env:"SERVESCOPE_CONSOLE_CLICKHOUSE_CONTENT"`
	// Networks limits where the accounts may log in from (users.xml only), comma-separated.
	Networks   []string `env:"SERVESCOPE_ACCESS_NETWORKS" envSeparator:","`
	ClickHouse config.ClickHouse
}

func (s accessSettings) access() (access.Access, error) {
	pick := func(v, file string) string {
		if file != "" {
			return strings.TrimRight(file, "\r\n")
		}
		return v
	}
	a := access.Access{
		Database:      s.ClickHouse.Database,
		LocalDatabase: localDatabase(s.ClickHouse),
		Detector:      access.Account{User: s.DetectorUser, Password: pick(s.DetectorPassword, s.DetectorPasswordFile)},
		Consumer:      access.Account{User: s.ConsumerUser, Password: pick(s.ConsumerPassword, s.ConsumerPasswordFile)},
		Networks:      s.Networks,
	}
	if p := pick(s.ConsolePassword, s.ConsolePasswordFile); p != "" {
		a.Console = access.Account{User: s.ConsoleUser, Password: p}
		a.ConsoleContent = s.ConsoleContent
	}
	return a, a.Validate()
}

// newAccessCmd creates the detector's read-only and the consumer's insert-only ClickHouse
// accounts, and the console's read-only one when its password is set. They are not a migration: roles and users are server-wide and need passwords, which
// have no place in a migration file.
func newAccessCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "access",
		Short: "Least-privilege ClickHouse accounts for the detector (read-only), the consumer (insert-only) and the console (read-only)",
	}
	load := func() (accessSettings, access.Access, error) {
		s, err := config.Load[accessSettings]()
		if err != nil {
			return s, access.Access{}, err
		}
		a, err := s.access()
		return s, a, err
	}
	usersXML := &cobra.Command{
		Use:   "users-xml",
		Short: "Print a users.d XML file defining the roles and accounts (passwords as SHA-256)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, a, err := load()
			if err != nil {
				return err
			}
			b, err := a.UsersXML()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	apply := &cobra.Command{
		Use:   "apply",
		Short: "Create or update the roles and accounts with SQL, as the administrator in SERVESCOPE_CLICKHOUSE_*",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, a, err := load()
			if err != nil {
				return err
			}
			stmts, err := a.SQL()
			if err != nil {
				return err
			}
			conn, err := chstore.Open(cmd.Context(), s.ClickHouse)
			if err != nil {
				return err
			}
			defer conn.Close()
			for i, q := range stmts {
				if err := conn.Exec(cmd.Context(), q); err != nil {
					// The statement holds a password hash, so name it by position, not text.
					return fmt.Errorf("access statement %d of %d: %w", i+1, len(stmts), err)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "accounts %s (read-only) and %s (insert-only) ready on database %s\n", a.Detector.User, a.Consumer.User, a.Database)
			if a.Console.User != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "account %s (read-only, the console's) ready on database %s\n", a.Console.User, a.Database)
			}
			return nil
		},
	}
	cmd.AddCommand(usersXML, apply)
	return cmd
}

// localDatabase is the sharded schema's database of local tables, or "" on a single node.
func localDatabase(cfg config.ClickHouse) string {
	if cfg.Cluster == "" {
		return ""
	}
	return chstore.LocalDatabase(cfg)
}
