package chstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/golang-migrate/migrate/v4"
	chmigrate "github.com/golang-migrate/migrate/v4/database/clickhouse"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/migrations"
)

// Migrator applies the embedded migrations to one database, then makes its views readable from
// any database (QualifyViews).
type Migrator struct {
	m *migrate.Migrate
	// ctx and cfg are NewMigrator's or OpenMigrator's: golang-migrate takes no context, and the
	// views are qualified after each Up and Down over a connection of cfg.
	ctx context.Context
	cfg config.ClickHouse
}

// NewMigrator creates the database when needed and prepares golang-migrate. Close it when done.
func NewMigrator(ctx context.Context, cfg config.ClickHouse) (*Migrator, error) {
	if err := EnsureDatabase(ctx, cfg); err != nil {
		return nil, err
	}
	return newMigrator(ctx, cfg, migrations.FS)
}

// OpenMigrator prepares golang-migrate on an existing database without creating anything but
// golang-migrate's own version table; it fails when the database does not exist. For reading
// the version and for down, where creating a database would be a surprise.
func OpenMigrator(ctx context.Context, cfg config.ClickHouse) (*Migrator, error) {
	conn, err := Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	_ = conn.Close()
	return newMigrator(ctx, cfg, migrations.FS)
}

func newMigrator(ctx context.Context, cfg config.ClickHouse, files fs.FS) (*Migrator, error) {
	opts, err := cfg.Options()
	if err != nil {
		return nil, err
	}
	db := clickhouse.OpenDB(opts)
	drv, err := chmigrate.WithInstance(db, &chmigrate.Config{
		DatabaseName:          cfg.Database,
		MigrationsTable:       "schema_migrations",
		MigrationsTableEngine: "MergeTree",
		MultiStatementEnabled: true,
		MultiStatementMaxSize: chmigrate.DefaultMultiStatementMaxSize,
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("prepare migrations on %s: %w", cfg.Database, err)
	}
	src, err := iofs.New(files, ".")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "clickhouse", drv)
	if err != nil {
		return nil, fmt.Errorf("prepare migrations on %s: %w", cfg.Database, err)
	}
	return &Migrator{m: m, ctx: ctx, cfg: cfg}, nil
}

// Up applies every pending migration, then qualifies the views (QualifyViews). Nothing pending is
// not an error.
func (g *Migrator) Up() error {
	if err := g.m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate up: %w", err)
	}
	return qualifyViews(g.ctx, g.cfg)
}

// Down reverts steps migrations (all of them when steps <= 0), then qualifies the views that are
// left.
func (g *Migrator) Down(steps int) error {
	var err error
	if steps <= 0 {
		err = g.m.Down()
	} else {
		err = g.m.Steps(-steps)
	}
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate down: %w", err)
	}
	// A down migration recreates the views it had, with bare calls.
	return qualifyViews(g.ctx, g.cfg)
}

// Version returns the applied version, whether the last migration failed half-way (dirty),
// and 0 with no error when nothing is applied.
func (g *Migrator) Version() (version uint, dirty bool, err error) {
	v, d, err := g.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read migration version: %w", err)
	}
	return v, d, nil
}

// Force sets the version without running migrations, to recover from a dirty state.
func (g *Migrator) Force(version int) error {
	if err := g.m.Force(version); err != nil {
		return fmt.Errorf("force migration version %d: %w", version, err)
	}
	return nil
}

// Close releases the connection.
func (g *Migrator) Close() error {
	srcErr, dbErr := g.m.Close()
	return errors.Join(srcErr, dbErr)
}

// Migrate applies every pending migration to cfg.Database (creating it when needed).
func Migrate(ctx context.Context, cfg config.ClickHouse) error {
	return migrateUp(ctx, cfg, migrations.FS)
}

func migrateUp(ctx context.Context, cfg config.ClickHouse, files fs.FS) error {
	if err := EnsureDatabase(ctx, cfg); err != nil {
		return err
	}
	g, err := newMigrator(ctx, cfg, files)
	if err != nil {
		return err
	}
	defer g.Close()
	return g.Up()
}
