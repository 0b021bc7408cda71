// Package testenv connects integration tests to the real NATS and ClickHouse servers that
// `scripts/dev-services up` starts, and gives each test its own isolated space on them: a fresh
// ClickHouse database with every migration applied, and a JetStream subject prefix with its own
// streams. Tests using it can run in parallel and repeatedly.
//
// When a server cannot be reached the test is skipped, unless SERVESCOPE_REQUIRE_INTEGRATION=1
// (as scripts/test sets), in which case it fails. This package is the one place that decides it.
//
// Server addresses come from the same variables the services read (SERVESCOPE_NATS_URL,
// SERVESCOPE_CLICKHOUSE_ADDR, ...), with the same defaults.
package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/ksuid"

	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
)

// RequireIntegration reports whether SERVESCOPE_REQUIRE_INTEGRATION=1: then an unreachable
// server fails the test instead of skipping it.
func RequireIntegration() bool { return os.Getenv("SERVESCOPE_REQUIRE_INTEGRATION") == "1" }

// Unavailable ends the test because a server it needs is unreachable: a failure when integration
// is required, a skip otherwise.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + " (start the servers with scripts/dev-services up)"
	if RequireIntegration() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// UniqueName returns a lower-case name unique to this test run, e.g. "t_2a9f...", usable as a
// ClickHouse database name or a subject prefix.
func UniqueName(prefix string) string {
	return prefix + "_" + strings.ToLower(ksuid.New().String())
}

// NATSConfig returns the shared NATS settings as the services would read them.
func NATSConfig(t testing.TB) config.NATS {
	t.Helper()
	cfg, err := config.Load[config.NATS]()
	if err != nil {
		t.Fatalf("read NATS settings: %v", err)
	}
	return cfg
}

// ClickHouseConfig returns the shared ClickHouse settings as the services would read them.
func ClickHouseConfig(t testing.TB) config.ClickHouse {
	t.Helper()
	cfg, err := config.Load[config.ClickHouse]()
	if err != nil {
		t.Fatalf("read ClickHouse settings: %v", err)
	}
	return cfg
}

// NATS connects to the shared NATS server; the connection is closed when the test ends.
func NATS(t testing.TB) *nats.Conn {
	t.Helper()
	cfg := NATSConfig(t)
	nc, err := cfg.Connect(t.Name(), nats.Timeout(3*time.Second))
	if err != nil {
		Unavailable(t, "NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream gives the test its own subject prefix on the shared NATS server, with the events and
// dead-letter streams set up by [Provision]; both streams are deleted when the test ends. The
// returned config.NATS carries the prefix, so a service built from it uses the test's streams.
// A test that runs the consumer also sets up its durable consumer with Provision.
func JetStream(t testing.TB) (jetstream.JetStream, bus.Topology, config.NATS) {
	t.Helper()
	js, topo, cfg := NATSPrefix(t)
	Provision(t, js, cfg)
	return js, topo, cfg
}

// NATSPrefix gives the test its own subject prefix on the shared NATS server and nothing set up
// on it: a service started with the returned config.NATS finds no stream until the test runs
// [Provision]. Whatever streams of the prefix exist when the test ends are deleted. The config's
// StreamMaxBytes is 256 MiB: JetStream reserves a stream's max_bytes on the server up front, and
// parallel tests at the production default (10 GiB) exhaust the server's storage reservation
// (err 10047).
func NATSPrefix(t testing.TB) (jetstream.JetStream, bus.Topology, config.NATS) {
	t.Helper()
	nc := NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("JetStream: %v", err)
	}
	cfg := NATSConfig(t)
	cfg.SubjectPrefix = UniqueName("t")
	cfg.StreamMaxBytes = 256 << 20
	topo := bus.Topology{Prefix: cfg.SubjectPrefix}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, topo.Stream())
		_ = js.DeleteStream(ctx, topo.DLQStream())
		_ = js.DeleteKeyValue(ctx, topo.LeaseBucket())
	})
	return js, topo, cfg
}

// Provision runs the setup step for cfg's prefix on js, the same code `servescope migrate up`
// runs: it creates or updates the events and dead-letter streams with cfg's stream limits, each
// durable consumer of ds, and the lease bucket with cfg's LeaseTTL. It returns what it did.
func Provision(t testing.TB, js jetstream.JetStream, cfg config.NATS, ds ...bus.Durable) []bus.Applied {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	applied, err := bus.Setup(ctx, js, cfg.Topology(), cfg.StreamSettings(), ds...)
	if err != nil {
		t.Fatalf("set up JetStream streams of prefix %s: %v", cfg.SubjectPrefix, err)
	}
	return applied
}

// ClickHouse gives the test a fresh database on the shared ClickHouse server with every migration
// applied; the database is dropped when the test ends. The returned config.ClickHouse selects it.
func ClickHouse(t testing.TB) (driver.Conn, config.ClickHouse) {
	t.Helper()
	cfg := ClickHouseConfig(t)
	cfg.Database = UniqueName("t")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := chstore.EnsureDatabase(ctx, cfg); err != nil {
		Unavailable(t, "ClickHouse: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin := cfg
		admin.Database = "default"
		if conn, err := chstore.Open(ctx, admin); err == nil {
			_ = conn.Exec(ctx, "DROP DATABASE IF EXISTS `"+cfg.Database+"` SYNC")
			_ = conn.Close()
		}
	})
	if err := chstore.Migrate(ctx, cfg); err != nil {
		t.Fatalf("migrate test database %s: %v", cfg.Database, err)
	}
	conn, err := chstore.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open test database %s: %v", cfg.Database, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, cfg
}
