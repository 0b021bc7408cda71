package sink

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
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
	// Table is the table whose TTL it is: the sink's table itself ("requests"), or on a sharded
	// schema the local table the rows land in ("servescope_local.requests").
	Table string
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

// distributedEngine matches the engine_full of a Distributed table, Distributed('cluster',
// 'database', 'table'[, sharding key]): the local table a row inserted through it lands in.
var distributedEngine = regexp.MustCompile(`^Distributed\('((?:[^'\\]|\\.)*)', '((?:[^'\\]|\\.)*)', '((?:[^'\\]|\\.)*)'`)

// LoadRetention reads the TTL of every table the sink writes and enforces it from then on; a
// table whose TTL is absent or of another form is not checked. The TTL is the one of the table
// the rows land in: a table of the current database itself, or, for a Distributed table (a
// sharded schema, internal/chstore's MigrateSharded), the local table it inserts into, as the
// node the connection reached holds it (`servescope migrate ttl` changes it on every node; a
// Distributed table has no TTL of its own, so reading it enforced none and a row past the local
// table's TTL was acknowledged and dropped without a trace). Call it at start and again from
// time to time, as `servescope migrate ttl` changes TTLs under a running consumer. On error the
// retention read before stays in force. It returns what is enforced, by table.
func (s *Sink) LoadRetention(ctx context.Context) (map[string]Retention, error) {
	rows, err := s.conn.Query(ctx, "SELECT name, engine_full FROM system.tables WHERE database = currentDatabase()")
	if err != nil {
		return nil, fmt.Errorf("read table TTLs: %w", err)
	}
	engines := map[string]string{}
	for rows.Next() {
		var name, engine string
		if err := rows.Scan(&name, &engine); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read table TTLs: %w", err)
		}
		if slices.Contains(Tables(), name) {
			engines[name] = engine
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read table TTLs: %w", err)
	}
	ret := map[string]Retention{}
	for _, name := range Tables() {
		engine, ok := engines[name]
		if !ok {
			continue
		}
		source := name
		if m := distributedEngine.FindStringSubmatch(engine); m != nil {
			db, table := unquote(m[2]), unquote(m[3])
			source = db + "." + table
			if engine, err = s.localEngine(ctx, db, table); err != nil {
				return nil, fmt.Errorf("read the TTL of %s, where the rows of %s land: %w", source, name, err)
			}
		}
		if r, ok := parseTTL(engine); ok {
			cols, _ := s.Columns(name)
			if slices.Contains(cols, r.Column) {
				r.Table = source
				ret[name] = r
			}
		}
	}
	s.retention.Store(&ret)
	return maps.Clone(ret), nil
}

// localEngine is the engine_full of database.table on the node the connection reached, "" when
// that node has no such table.
func (s *Sink) localEngine(ctx context.Context, database, table string) (string, error) {
	ctx = clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{"db": database, "t": table}))
	rows, err := s.conn.Query(ctx, "SELECT engine_full FROM system.tables WHERE database = {db:String} AND name = {t:String}")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var engine string
	if rows.Next() {
		if err := rows.Scan(&engine); err != nil {
			return "", err
		}
	}
	return engine, rows.Err()
}

// unquote undoes the backslash escapes of a quoted string in engine_full.
func unquote(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
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
			r.Column, t.UTC().Format(time.RFC3339Nano), r.Table, r.Expr, table)
	}
}
