package sink

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// Retention is a table's TTL as the sink enforces it before inserting.
//
// ClickHouse applies a table's delete TTL when it writes a part, so a row already older than the
// TTL is dropped at insert without an error (and a row close to it by the next TTL merge): a
// backfill older than the retention would vanish without a word. The sink refuses such rows
// instead ([RowsError]), so that they are dead-lettered with the reason and kept.
type Retention struct {
	// Column is the time column the TTL counts from ("ts", "arrival_ts").
	Column string
	// Keep is how long rows are kept.
	Keep time.Duration
	// Expr is the TTL as system.tables shows it: "toDateTime(ts) + toIntervalDay(30)".
	Expr string
}

// ttlPattern matches the one TTL form the sink understands, the one migrations and
// `servescope migrate ttl` write (ClickHouse shows INTERVAL 30 DAY as toIntervalDay(30)): a
// single delete rule on a time column plus a fixed interval. Anything else (several rules, a
// WHERE, months) is left to ClickHouse.
var ttlPattern = regexp.MustCompile(`\bTTL ((?:toDateTime\((\w+)\)|(\w+)) \+ toInterval(Second|Minute|Hour|Day|Week)\((\d+)\))(?: SETTINGS |$)`)

var intervalUnits = map[string]time.Duration{
	"Second": time.Second, "Minute": time.Minute, "Hour": time.Hour, "Day": 24 * time.Hour, "Week": 7 * 24 * time.Hour,
}

// parseTTL returns the retention in a table's engine_full, and false when it has none the sink
// understands.
func parseTTL(engineFull string) (Retention, bool) {
	m := ttlPattern.FindStringSubmatch(engineFull)
	if m == nil {
		return Retention{}, false
	}
	n, err := strconv.ParseInt(m[5], 10, 64)
	if err != nil || n <= 0 || n > 1<<20 {
		return Retention{}, false
	}
	return Retention{Column: m[2] + m[3], Keep: time.Duration(n) * intervalUnits[m[4]], Expr: m[1]}, true
}

// LoadRetention reads the TTL of every table the sink writes (system.tables.engine_full of the
// current database) and enforces it from then on; a table whose TTL is absent or of another form
// is not checked. Call it at start and again from time to time, as `servescope migrate ttl`
// changes TTLs under a running consumer. On error the retention read before stays in force. It
// returns what is enforced, by table.
func (s *Sink) LoadRetention(ctx context.Context) (map[string]Retention, error) {
	rows, err := s.conn.Query(ctx, "SELECT name, engine_full FROM system.tables WHERE database = currentDatabase()")
	if err != nil {
		return nil, fmt.Errorf("read table TTLs: %w", err)
	}
	defer rows.Close()
	ret := map[string]Retention{}
	for rows.Next() {
		var name, engine string
		if err := rows.Scan(&name, &engine); err != nil {
			return nil, fmt.Errorf("read table TTLs: %w", err)
		}
		if !slices.Contains(Tables(), name) {
			continue
		}
		if r, ok := parseTTL(engine); ok {
			cols, _ := s.Columns(name)
			if slices.Contains(cols, r.Column) {
				ret[name] = r
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read table TTLs: %w", err)
	}
	s.retention.Store(&ret)
	return maps.Clone(ret), nil
}

// expiredCheck returns a check of rows (values in columns' order) against table's retention:
// "" for a row ClickHouse keeps, else why it would drop it. Nil when no retention is enforced.
func (s *Sink) expiredCheck(table string, columns []string, now time.Time) func(row []any) string {
	p := s.retention.Load()
	if p == nil {
		return nil
	}
	r, ok := (*p)[table]
	if !ok {
		return nil
	}
	idx := slices.Index(columns, r.Column)
	if idx < 0 {
		return nil
	}
	cutoff := now.Add(-r.Keep)
	return func(row []any) string {
		var t time.Time
		switch v := row[idx].(type) {
		case time.Time:
			t = v
		case *time.Time:
			if v == nil {
				return ""
			}
			t = *v
		default:
			return ""
		}
		if !t.Before(cutoff) {
			return ""
		}
		return fmt.Sprintf("%s %s is older than the TTL of %s (%s), which ClickHouse applies at insert, dropping the row without an error; raise the retention with `servescope migrate ttl %s DAYS` to keep such rows",
			r.Column, t.UTC().Format(time.RFC3339Nano), table, r.Expr, table)
	}
}
