package chstore

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ttlColumns names, per table, the time column its TTL counts from.
var ttlColumns = map[string]string{
	"requests_started":   "arrival_ts",
	"requests":           "arrival_ts",
	"app_records":        "ts",
	"engine_samples":     "ts",
	"engine_spans":       "ts",
	"engine_logs":        "ts",
	"gateway_heartbeats": "ts",
	"alerts":             "ts",
	"ingest_errors":      "ts",
}

// TTLTables lists the tables whose retention SetTTL can change.
func TTLTables() []string {
	return []string{"requests_started", "requests", "app_records", "engine_samples", "engine_spans", "engine_logs", "gateway_heartbeats", "alerts", "ingest_errors"}
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
