package benchkit

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/segmentio/ksuid"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
)

// Database is a benchmark's own database on a ClickHouse server, with the schema of the
// migrations, dropped by Drop.
type Database struct {
	// Config is the server's configuration with Database set to this database.
	Config config.ClickHouse
	Conn   driver.Conn
}

// CreateDatabase creates database name on the server of cfg, runs migrate on it (nil:
// chstore.Migrate, every migration as `servescope migrate up` applies them) and opens a
// connection to it. On error what the migration created is dropped again.
func CreateDatabase(ctx context.Context, cfg config.ClickHouse, name string, migrate func(context.Context, config.ClickHouse) error) (*Database, error) {
	cfg.Database = name
	if migrate == nil {
		migrate = chstore.Migrate
	}
	if err := migrate(ctx, cfg); err != nil {
		dropAfterFailure(cfg)
		return nil, fmt.Errorf("migrate database %s: %w", name, err)
	}
	conn, err := chstore.Open(ctx, cfg)
	if err != nil {
		dropAfterFailure(cfg)
		return nil, fmt.Errorf("open database %s: %w", name, err)
	}
	return &Database{Config: cfg, Conn: conn}, nil
}

// dropAfterFailure drops what a failed migration left, through the server's default database;
// the failure being reported already, its own error is not.
func dropAfterFailure(cfg config.ClickHouse) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := cfg.Database
	cfg.Database = "default"
	if conn, err := chstore.Open(ctx, cfg); err == nil {
		_ = conn.Exec(ctx, "DROP DATABASE IF EXISTS `"+name+"` SYNC")
		_ = conn.Close()
	}
}

// Drop drops the database (waiting for its tables to go, within 30 seconds whatever became of
// the bench's context) and closes the connection.
func (d *Database) Drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := d.Conn.Exec(ctx, "DROP DATABASE IF EXISTS `"+d.Config.Database+"` SYNC")
	if cerr := d.Conn.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("drop database %s: %w", d.Config.Database, err)
	}
	return nil
}

// ClickHouse is the configuration of the server a bench runs on: SERVESCOPE_CLICKHOUSE_*, with
// addr (a native host:port) in place of its addresses when given, or, when private, a private
// server of the dev build (StartPrivateClickHouse, the working directory being the repository
// root) so the shared dev server's other users are neither loaded nor put at risk. stop stops
// the private server and removes its data; it does nothing otherwise.
func ClickHouse(ctx context.Context, private bool, addr string, log *slog.Logger) (cfg config.ClickHouse, stop func(), err error) {
	if cfg, err = config.Load[config.ClickHouse](); err != nil {
		return cfg, nil, err
	}
	stop = func() {}
	if private {
		root, err := os.Getwd()
		if err != nil {
			return cfg, nil, err
		}
		ch, err := StartPrivateClickHouse(ctx, root, "", log)
		if err != nil {
			return cfg, nil, err
		}
		addr, stop = ch.Addr(), ch.Stop
	}
	if addr != "" {
		cfg.Addr = []string{addr}
	}
	return cfg, stop, nil
}

// RunID is a fresh name for one run's streams and databases: a KSUID (ordered by time) in lower
// case, valid in a NATS subject token and a ClickHouse database name.
func RunID() string { return strings.ToLower(ksuid.New().String()) }
