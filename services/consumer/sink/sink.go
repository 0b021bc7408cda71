// Package sink writes decoded servescope events into their ClickHouse landing tables
// (migrations/000001_tables.up.sql) with clickhouse-go/v2 native batches, one INSERT per batch,
// and says what to do when ClickHouse does not accept one.
//
// Every insert carries an insert_deduplication_token derived from the batch's event ids, so an
// insert retried after an error whose outcome was unknown (the server may have committed it) is
// dropped by ClickHouse instead of stored twice; the tables set non_replicated_deduplication_window
// for this. A message that reaches the consumer twice in different batches (a crash between
// insert and ack, an ack lost with the connection) is stored twice and collapsed by the tables'
// ReplacingMergeTree key (event_id, or subject and stream_seq for ingest_errors); see the
// consumer's package documentation for which queries need FINAL.
//
// # Errors
//
// [Classify] sorts a failed insert by the ClickHouse exception it carries (clickhouse.Exception,
// code and message), as clickhouse_sinker does. Names are those of system.errors; the table in
// classify.go is this list.
//
//   - Retry (the same insert succeeds later; retried unchanged, without limit). The server is
//     unavailable, overloaded or shutting down, or the connection broke: 3 UNEXPECTED_END_OF_FILE,
//     32 ATTEMPT_TO_READ_AFTER_EOF, 159 TIMEOUT_EXCEEDED, 160 TOO_SLOW, 164 READONLY,
//     173 CANNOT_ALLOCATE_MEMORY, 202 TOO_MANY_SIMULTANEOUS_QUERIES, 203 NO_FREE_CONNECTION,
//     209 SOCKET_TIMEOUT, 210 NETWORK_ERROR, 218 TABLE_IS_DROPPED, 236 ABORTED,
//     241 MEMORY_LIMIT_EXCEEDED, 242 TABLE_IS_READ_ONLY, 243 NOT_ENOUGH_SPACE, 252 TOO_MANY_PARTS
//     ("Too many parts …": merges are behind), 279 ALL_CONNECTION_TRIES_FAILED (a Distributed
//     insert whose shard is down), 285 TOO_FEW_LIVE_REPLICAS,
//     319 UNKNOWN_STATUS_OF_INSERT, 394 QUERY_WAS_CANCELLED, 425 SYSTEM_ERROR,
//     439 CANNOT_SCHEDULE_TASK, 473 DEADLOCK_AVOIDED, 733 TABLE_IS_BEING_RESTARTED,
//     745 SERVER_OVERLOADED, 749 TCP_CONNECTION_LIMIT_REACHED, 999 KEEPER_EXCEPTION. Or the
//     database is not set up for the insert, which an operator fixes and which would refuse every
//     row alike: 16 NO_SUCH_COLUMN_IN_TABLE, 60 UNKNOWN_TABLE, 81 UNKNOWN_DATABASE,
//     192 UNKNOWN_USER, 201 QUOTA_EXCEEDED, 291 DATABASE_ACCESS_DENIED, 497 ACCESS_DENIED,
//     516 AUTHENTICATION_FAILED. Every error without an exception is Retry too: a refused or
//     reset connection, EOF, a timeout, an exhausted connection pool.
//   - Split (the batch's shape is refused, not a row): 252 TOO_MANY_PARTS with the message "Too
//     many partitions for single INSERT block (more than N)" — a batch spanning more days than
//     max_partitions_per_insert_block, such as a backfill.
//   - Refuse (a row holds a value ClickHouse will never accept): 6 CANNOT_PARSE_TEXT,
//     27 CANNOT_PARSE_INPUT_ASSERTION_FAILED, 38 CANNOT_PARSE_DATE, 41 CANNOT_PARSE_DATETIME,
//     53 TYPE_MISMATCH, 69 ARGUMENT_OUT_OF_BOUND, 70 CANNOT_CONVERT_TYPE, 72 CANNOT_PARSE_NUMBER,
//     117 INCORRECT_DATA, 131 TOO_LARGE_STRING_SIZE, 190 SIZES_OF_ARRAYS_DONT_MATCH,
//     321 VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE, 349 CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN,
//     376 CANNOT_PARSE_UUID, 395 FUNCTION_THROW_IF_VALUE_IS_NON_ZERO, 407 DECIMAL_OVERFLOW,
//     467 CANNOT_PARSE_BOOL, 469 VIOLATED_CONSTRAINT, 691 UNKNOWN_ELEMENT_OF_ENUM. ClickHouse
//     refuses the whole batch; its message may point at the row ("violated at row N",
//     [Verdict.Row]), which the caller confirms by inserting that row alone, and otherwise the
//     caller finds the row by splitting. Two kinds of rows are Refuse
//     before anything is sent, named one by one in a [RowsError]: rows the client cannot encode
//     into the column types the server declares (a column's type changed under the consumer),
//     and rows older than the table's TTL, which ClickHouse would drop at insert without an
//     error ([Retention]; raise the TTL with `servescope migrate ttl` before such a backfill).
//   - Unknown: any other code. The caller retries it a bounded number of times, then treats it
//     as Refuse.
package sink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/schema"
)

// IngestError is one refused message, a row of ingest_errors.
type IngestError struct {
	// TS is the message's JetStream timestamp (when the stream stored it), which stays the same
	// across redeliveries so a refusal recorded twice is one row to FINAL.
	TS time.Time
	// Subject is the subject the message was published on.
	Subject string
	// StreamSeq is the message's sequence number in the events stream.
	StreamSeq uint64
	// Reason is the decode or validation error.
	Reason string
	// Payload is the message body as received.
	Payload []byte
}

// Sink inserts batches into one ClickHouse database. It is safe for concurrent use.
type Sink struct {
	conn      driver.Conn
	tables    map[schema.Kind]*table
	retention atomic.Pointer[map[string]Retention] // by table; nil until LoadRetention
}

// New returns a sink writing through conn, whose database holds the landing tables.
func New(conn driver.Conn) *Sink {
	return &Sink{conn: conn, tables: tableDefs()}
}

// ErrMissingTables is wrapped by Check's error when the schema is not (fully) migrated.
var ErrMissingTables = errors.New("landing tables missing: run `servescope migrate up`")

// Check verifies that every table the consumer writes exists with every column it writes, so a
// consumer started before `servescope migrate up` fails at start with a clear message instead
// of at its first insert. It returns an error wrapping [ErrMissingTables] naming what is missing.
func (s *Sink) Check(ctx context.Context) error {
	rows, err := s.conn.Query(ctx, "SELECT table, name FROM system.columns WHERE database = currentDatabase()")
	if err != nil {
		return fmt.Errorf("read columns of the current database: %w", err)
	}
	defer rows.Close()
	have := map[string]map[string]bool{}
	for rows.Next() {
		var tbl, col string
		if err := rows.Scan(&tbl, &col); err != nil {
			return fmt.Errorf("read columns of the current database: %w", err)
		}
		if have[tbl] == nil {
			have[tbl] = map[string]bool{}
		}
		have[tbl][col] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read columns of the current database: %w", err)
	}
	want := map[string][]string{TableIngestErrors: ingestErrorColumns()}
	for _, t := range s.tables {
		want[t.name] = t.columns
	}
	var problems []string
	for _, name := range Tables() {
		cols, ok := have[name]
		if !ok {
			problems = append(problems, "table "+name)
			continue
		}
		for _, c := range want[name] {
			if !cols[c] {
				problems = append(problems, "column "+name+"."+c)
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrMissingTables, strings.Join(problems, ", "))
	}
	return nil
}

// Token returns the insert_deduplication_token of a batch: the table name and a SHA-256 over its
// keys (event ids, or stream sequences for ingest_errors) in batch order. The same batch retried
// gets the same token; any other batch gets another.
func Token(table string, keys []string) string {
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(k))
		h.Write([]byte{0})
	}
	return table + "-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// InsertEvents inserts events, all of kind k, into k's table as one batch with the given
// deduplication token (see [Token]). It returns an error naming the table and row count when
// ClickHouse did not accept the whole batch ([Classify] says what to do about it). A refused
// batch leaves nothing visible (ClickHouse checks a block before writing it); after an ambiguous
// failure (the connection lost mid-insert) some or all of it may be stored, and a retry with the
// same token stores the rest without doubling any of it, as the token deduplicates each
// partition's part of the block.
func (s *Sink) InsertEvents(ctx context.Context, k schema.Kind, events []schema.Event, token string) error {
	t, ok := s.tables[k]
	if !ok {
		return fmt.Errorf("insert %d events: unknown kind %q", len(events), k)
	}
	if len(events) == 0 {
		return nil
	}
	return s.insert(ctx, t.name, t.columns, len(events), token, func(dst []any, i int) []any {
		return t.row(dst, events[i])
	})
}

// InsertErrors inserts refused messages into ingest_errors as one batch with the given token.
func (s *Sink) InsertErrors(ctx context.Context, errs []IngestError, token string) error {
	if len(errs) == 0 {
		return nil
	}
	return s.insert(ctx, TableIngestErrors, ingestErrorColumns(), len(errs), token, func(dst []any, i int) []any {
		e := &errs[i]
		return append(dst, e.TS, e.Subject, e.StreamSeq, e.Reason, string(e.Payload))
	})
}

// ErrorsToken is [Token] for a batch of refused messages, keyed by subject and stream sequence.
func ErrorsToken(errs []IngestError) string {
	keys := make([]string, len(errs))
	for i, e := range errs {
		keys[i] = e.Subject + "#" + strconv.FormatUint(e.StreamSeq, 10)
	}
	return Token(TableIngestErrors, keys)
}

// insert sends n rows, row i's values given by values, as one INSERT. When a row would not be
// stored as sent — the client cannot encode it into the column types the server declared, or
// it is older than the table's TTL — it sends nothing and returns a *[RowsError] naming every
// such row of the batch, so that the caller can set them all aside at once.
func (s *Sink) insert(ctx context.Context, tableName string, columns []string, n int, token string, values func(dst []any, i int) []any) error {
	settings := clickhouse.Settings{
		"insert_deduplicate":         1,
		"insert_deduplication_token": token,
	}
	if extra, ok := ctx.Value(settingsKey{}).(clickhouse.Settings); ok {
		maps.Copy(settings, extra)
	}
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(settings))
	// Table and column names come from the fixed definitions in this package, never from input.
	query := "INSERT INTO " + tableName + " (" + strings.Join(columns, ", ") + ")"
	batch, err := s.conn.PrepareBatch(ctx, query, driver.WithReleaseConnection())
	if err != nil {
		return fmt.Errorf("insert %d rows into %s: prepare batch: %w", n, tableName, err)
	}
	// The server's column types, in the order Append takes values; kept for probe, as a batch
	// that refused a row is unusable.
	cols := batch.Columns()
	expired := s.expiredCheck(tableName, columns, time.Now())
	row := make([]any, 0, len(columns))
	for i := range n {
		row = values(row[:0], i)
		if expired != nil && expired(row) != "" {
			_ = batch.Abort()
			return fmt.Errorf("insert %d rows into %s: %w", n, tableName, probe(tableName, cols, i, n, values, expired, nil))
		}
		if err := batch.Append(row...); err != nil {
			_ = batch.Abort()
			return fmt.Errorf("insert %d rows into %s: %w", n, tableName, probe(tableName, cols, i, n, values, expired, err))
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("insert %d rows into %s: %w", n, tableName, err)
	}
	return nil
}

// settingsKey carries settings of an insert beside the sink's own (withSettings):
// clickhouse.WithSettings replaces a context's settings rather than adding to them.
type settingsKey struct{}

// withSettings returns ctx with settings added to the sink's own for its inserts.
func withSettings(ctx context.Context, settings clickhouse.Settings) context.Context {
	return context.WithValue(ctx, settingsKey{}, settings)
}

// probe finds every row from first on that expired (may be nil) refuses or that the client
// cannot encode into cols, the latter by appending each value to a scratch column of the same
// type. first is the row that stopped the batch, with appendErr when its append failed. Columns
// are probed independently, so a value one column refuses does not disturb the others, and a
// scratch column that refused a value is replaced, as it may be half-written.
func probe(tableName string, cols []column.Interface, first, n int, values func(dst []any, i int) []any, expired func([]any) string, appendErr error) *RowsError {
	re := &RowsError{Table: tableName}
	// DateTime columns without a zone need one to be created; it does not change what they refuse.
	sc := &column.ServerContext{Timezone: time.UTC}
	scratch := make([]column.Interface, len(cols))
	for j := range cols {
		c, err := column.Type(cols[j].Type()).Column(cols[j].Name(), sc)
		if err != nil {
			// A type the client cannot build would have failed PrepareBatch; keep what is known.
			return &RowsError{Table: tableName, Rows: []RowError{{Index: first, Reason: refusedValue(cols[j], appendErr)}}}
		}
		scratch[j] = c
	}
	row := make([]any, 0, len(cols))
	for i := first; i < n; i++ {
		row = values(row[:0], i)
		if expired != nil {
			if why := expired(row); why != "" {
				re.Rows = append(re.Rows, RowError{Index: i, Reason: why})
				continue
			}
		}
		reason := ""
		for j, v := range row[:min(len(row), len(scratch))] {
			if err := scratch[j].AppendRow(v); err != nil {
				if reason == "" {
					reason = refusedValue(cols[j], err)
				}
				scratch[j], _ = column.Type(cols[j].Type()).Column(cols[j].Name(), sc)
			}
		}
		if reason != "" {
			re.Rows = append(re.Rows, RowError{Index: i, Reason: reason})
		}
	}
	if appendErr != nil && (len(re.Rows) == 0 || re.Rows[0].Index != first) {
		// The batch refused the first row for a reason the scratch columns do not reproduce:
		// that row is refused all the same, with the batch's error.
		re.Rows = append([]RowError{{Index: first, Reason: "ClickHouse client refused the row: " + appendErr.Error()}}, re.Rows...)
	}
	return re
}

// refusedValue is the reason of a value column c cannot hold.
func refusedValue(c column.Interface, err error) string {
	return fmt.Sprintf("ClickHouse column %s %s cannot hold the value: %v", c.Name(), c.Type(), err)
}

// Columns returns the columns the consumer writes into table, in insert order, and false for a
// table it does not write.
func (s *Sink) Columns(tableName string) ([]string, bool) {
	if tableName == TableIngestErrors {
		return ingestErrorColumns(), true
	}
	for _, t := range s.tables {
		if t.name == tableName {
			return slices.Clone(t.columns), true
		}
	}
	return nil, false
}
