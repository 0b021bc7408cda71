// Package sink writes decoded servescope events into their ClickHouse landing tables
// (migrations/000001_tables.up.sql) with clickhouse-go/v2 native batches, one INSERT per batch.
//
// Every insert carries an insert_deduplication_token derived from the batch's event ids, so an
// insert retried after an error whose outcome was unknown (the server may have committed it) is
// dropped by ClickHouse instead of stored twice; the tables set non_replicated_deduplication_window
// for this. A message that reaches the consumer twice in different batches (a crash between
// insert and ack, an ack lost with the connection) is stored twice and collapsed by the tables'
// ReplacingMergeTree key (event_id, or subject and stream_seq for ingest_errors); see the
// consumer's package documentation for which queries need FINAL.
package sink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
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
	conn   driver.Conn
	tables map[schema.Kind]*table
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
// ClickHouse did not accept the whole batch; then nothing of it is visible (ClickHouse inserts a
// block atomically) or, after an ambiguous failure, all of it, and a retry with the same token
// is safe either way.
func (s *Sink) InsertEvents(ctx context.Context, k schema.Kind, events []schema.Event, token string) error {
	t, ok := s.tables[k]
	if !ok {
		return fmt.Errorf("insert %d events: unknown kind %q", len(events), k)
	}
	if len(events) == 0 {
		return nil
	}
	row := make([]any, 0, len(t.columns))
	return s.insert(ctx, t.name, t.columns, len(events), token, func(b driver.Batch, i int) error {
		row = t.row(row[:0], events[i])
		return b.Append(row...)
	})
}

// InsertErrors inserts refused messages into ingest_errors as one batch with the given token.
func (s *Sink) InsertErrors(ctx context.Context, errs []IngestError, token string) error {
	if len(errs) == 0 {
		return nil
	}
	return s.insert(ctx, TableIngestErrors, ingestErrorColumns(), len(errs), token, func(b driver.Batch, i int) error {
		e := &errs[i]
		return b.Append(e.TS, e.Subject, e.StreamSeq, e.Reason, string(e.Payload))
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

func (s *Sink) insert(ctx context.Context, tableName string, columns []string, n int, token string, appendRow func(driver.Batch, int) error) error {
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"insert_deduplicate":         1,
		"insert_deduplication_token": token,
	}))
	// Table and column names come from the fixed definitions in this package, never from input.
	query := "INSERT INTO " + tableName + " (" + strings.Join(columns, ", ") + ")"
	batch, err := s.conn.PrepareBatch(ctx, query, driver.WithReleaseConnection())
	if err != nil {
		return fmt.Errorf("insert %d rows into %s: prepare batch: %w", n, tableName, err)
	}
	for i := range n {
		if err := appendRow(batch, i); err != nil {
			_ = batch.Abort()
			return fmt.Errorf("insert %d rows into %s: append row %d: %w", n, tableName, i, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("insert %d rows into %s: %w", n, tableName, err)
	}
	return nil
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
