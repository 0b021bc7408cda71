package chstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/config"
)

// ttlColumns names, per table, the time column its TTL counts from.
var ttlColumns = map[string]string{
	"requests_started": "arrival_ts",
	"requests":         "arrival_ts",
	"app_records":      "ts",
	"engine_samples":   "ts",
	"engine_spans":     "ts",
	"engine_logs":      "ts",
	"alerts":           "ts",
	"ingest_errors":    "ts",
}

// TTLTables lists the tables whose retention SetTTL can change.
func TTLTables() []string {
	return []string{"requests_started", "requests", "app_records", "engine_samples", "engine_spans", "engine_logs", "alerts", "ingest_errors"}
}

// SetTTL changes how many days table keeps rows (ALTER TABLE … MODIFY TTL). Rows older than that
// are deleted in the background by ClickHouse's merges (its TTL merges, by default within 4 hours
// of their expiry), not by a rewrite of the table at the ALTER.
func SetTTL(ctx context.Context, conn driver.Conn, table string, days int) error {
	col, ok := ttlColumns[table]
	if !ok {
		return fmt.Errorf("set TTL: unknown table %q (known: %v)", table, TTLTables())
	}
	if days < 1 || days > 36500 {
		return fmt.Errorf("set TTL of %s: days must be between 1 and 36500, got %d", table, days)
	}
	// DDL takes no bound parameters; table and column come from the fixed map above and days is
	// a checked integer, so nothing user-supplied reaches the text.
	// materialize_ttl_after_modify = 0: the new TTL applies to rows written from now on and to the
	// parts a merge rewrites, without the mutation that otherwise rewrites every part of the table
	// at once (on the month's 100 M requests one raised TTL kept the server busy for minutes).
	q := fmt.Sprintf("ALTER TABLE %s MODIFY TTL toDateTime(%s) + INTERVAL %d DAY SETTINGS materialize_ttl_after_modify = 0", table, col, days)
	if err := conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("set TTL of %s to %d days: %w", table, days, err)
	}
	return nil
}

// SetTTLSharded is SetTTL on a sharded schema (cfg.Cluster set): the Distributed table under the
// name has no TTL, the rows live in the local table of the same name on every node, so the TTL
// is changed there, node by node over a direct connection as MigrateSharded runs, on every node
// of cfg.Addr (with Replicated tables the ALTER is also replicated, and running it on each
// replica again changes nothing). It returns the nodes changed, and an error naming every node
// that could not be: run it again once they answer.
func SetTTLSharded(ctx context.Context, cfg config.ClickHouse, table string, days int) ([]string, error) {
	if cfg.Cluster == "" {
		return nil, fmt.Errorf("set TTL on a sharded schema: SERVESCOPE_CLICKHOUSE_CLUSTER is not set")
	}
	var done []string
	var errs []error
	for _, addr := range cfg.Addr {
		node := cfg
		node.Addr = []string{addr}
		node.Database = LocalDatabase(cfg)
		err := func() error {
			conn, err := Open(ctx, node)
			if err != nil {
				return err
			}
			defer conn.Close()
			return SetTTL(ctx, conn, table, days)
		}()
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", addr, err))
			continue
		}
		done = append(done, addr)
	}
	if len(errs) > 0 {
		return done, fmt.Errorf("set TTL of %s.%s to %d days on %d of %d nodes (run it again once they answer): %w",
			LocalDatabase(cfg), table, days, len(errs), len(cfg.Addr), errors.Join(errs...))
	}
	return done, nil
}
