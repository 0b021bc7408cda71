package sink

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/schema"
)

// Sharded is the sink of a sharded schema (internal/chstore's MigrateSharded): it inserts through
// the Distributed tables as [Sink] does, synchronously (config.ClickHouse sets
// distributed_foreground_insert=1 on a cluster), so that an insert returns, and the pipeline
// acknowledges its messages, once the shard of every row holds it.
//
// One shard's outage must not stop the others' rows. A batch holds rows for every shard, and the
// pipeline acknowledges a batch whole, so a synchronous insert that fails because one shard does
// not answer (the node that took it answered: [chstore.ShardUnavailable]) held every shard's rows back,
// and the consumer stopped at MaxAckPending. Sharded then inserts the same batch, with the same
// deduplication token, asynchronously (distributed_foreground_insert=0): the node that takes it
// writes the rows of its own shard at once and queues every other shard's part on its disk
// (Distributed's per-shard queue, fsynced before the insert returns: the tables' fsync_after_insert
// and fsync_directories), and sends each part once its shard answers again; the rows of shards
// that answer land within a moment. The insert returns once the node holds the rows, and the
// messages are acknowledged: for the batches of an outage the guarantee is "a node of the cluster
// holds them on disk, and ClickHouse delivers them", not "their shard holds them" — losing that
// node's disk before the shard is back loses them (system.distribution_queue shows what waits,
// per table and shard). The block's deduplication token travels with each queued part, so a part
// its shard already took before the failure is not stored twice.
//
// Rows a shard refuses when the queue delivers them (a constraint of the local table) cannot be
// dead-lettered any more: ClickHouse moves the part to the queue's broken/ directory. Rows are
// checked against the column types and the local tables' TTLs before sending ([RowsError]), so
// that leaves the local tables' own constraints, which the migrations do not declare.
//
// While a shard is out, every synchronous attempt would wait for its connection tries to fail
// (seconds a batch) before queueing: for QueueFor after a ShardUnavailable answer, batches go to
// the queues at once, then the synchronous insert is tried again. Once one succeeds (every shard
// answers), Sharded sends what it queued at once (SYSTEM FLUSH DISTRIBUTED of each table it queued
// rows of, on the node its connection reaches, which took them) rather than leaving it to the
// queue's sender and its backoff (up to distributed_background_insert_max_sleep_time_ms, 30 s by
// default; the development engine of libchdb runs no sender at all). A flush that fails is tried
// again after QueueFor.
type Sharded struct {
	*Sink
	// OnQueued, when set, is called after a batch went to the per-shard queues: table, rows, and
	// the error of the synchronous insert that sent it there (which names the shard that did not
	// answer), or nil when it went there at once, within QueueFor of such an error.
	OnQueued func(table string, rows int, cause error)
	// OnFlush, when set, is called after each flush of a table's queues: nil once they are sent.
	OnFlush func(table string, err error)
	// QueueFor is how long batches go to the queues at once after a shard did not answer, and
	// how long a failed flush waits to be tried again; 0 means 10 s.
	QueueFor time.Duration
	// now is time.Now; tests replace it.
	now func() time.Time

	mu         sync.Mutex
	queueUntil time.Time
	// queued are the tables with rows sent to the queues and not flushed since; flushAfter is
	// when the next flush may be tried.
	queued     map[string]bool
	flushAfter time.Time
}

func (s *Sharded) queueFor() time.Duration {
	if s.QueueFor <= 0 {
		return 10 * time.Second
	}
	return s.QueueFor
}

// NewSharded returns the sink of the sharded schema conn's database holds.
func NewSharded(conn driver.Conn) *Sharded { return &Sharded{Sink: New(conn), now: time.Now} }

// InsertEvents inserts events as [Sink.InsertEvents], through the per-shard queues when a shard
// does not answer (see [Sharded]).
func (s *Sharded) InsertEvents(ctx context.Context, k schema.Kind, events []schema.Event, token string) error {
	table, _ := TableFor(k)
	return s.insert(ctx, table, len(events), func(ctx context.Context) error { return s.Sink.InsertEvents(ctx, k, events, token) })
}

// InsertErrors inserts refused messages as [Sink.InsertErrors], through the per-shard queues
// when a shard does not answer.
func (s *Sharded) InsertErrors(ctx context.Context, errs []IngestError, token string) error {
	return s.insert(ctx, TableIngestErrors, len(errs), func(ctx context.Context) error { return s.Sink.InsertErrors(ctx, errs, token) })
}

// insert runs do synchronously, or through the queues (see [Sharded]).
func (s *Sharded) insert(ctx context.Context, table string, rows int, do func(context.Context) error) error {
	if s.queueing() {
		if err := do(queueingCtx(ctx)); err != nil {
			return err
		}
		s.markQueued(table, rows, nil)
		return nil
	}
	cause := do(ctx)
	if cause == nil {
		s.flush(ctx)
		return nil
	}
	if !chstore.ShardUnavailable(cause) {
		return cause
	}
	s.mu.Lock()
	s.queueUntil = s.now().Add(s.queueFor())
	s.mu.Unlock()
	if err := do(queueingCtx(ctx)); err != nil {
		return fmt.Errorf("%w; queueing the rows for the shard instead failed too: %w", cause, err)
	}
	s.markQueued(table, rows, cause)
	return nil
}

// markQueued records that rows of table went to the queues.
func (s *Sharded) markQueued(table string, rows int, cause error) {
	s.mu.Lock()
	if s.queued == nil {
		s.queued = map[string]bool{}
	}
	s.queued[table] = true
	s.mu.Unlock()
	if s.OnQueued != nil {
		s.OnQueued(table, rows, cause)
	}
}

// flush sends the queues of the tables with queued rows, after a synchronous insert succeeded:
// every shard answers again. The table names are package sink's own.
func (s *Sharded) flush(ctx context.Context) {
	s.mu.Lock()
	if len(s.queued) == 0 || s.now().Before(s.flushAfter) {
		s.mu.Unlock()
		return
	}
	var tables []string
	for _, t := range Tables() {
		if s.queued[t] {
			tables = append(tables, t)
		}
	}
	s.mu.Unlock()
	for _, t := range tables {
		err := s.conn.Exec(ctx, "SYSTEM FLUSH DISTRIBUTED "+t)
		s.mu.Lock()
		if err == nil {
			delete(s.queued, t)
		} else {
			s.flushAfter = s.now().Add(s.queueFor())
		}
		s.mu.Unlock()
		if s.OnFlush != nil {
			s.OnFlush(t, err)
		}
		if err != nil {
			return
		}
	}
}

// queueing reports whether batches go to the queues at once: within QueueFor of a shard's
// ShardUnavailable answer.
func (s *Sharded) queueing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now().Before(s.queueUntil)
}

// queueingCtx is ctx with the insert made asynchronous: the node that takes it queues each other
// shard's rows on its disk.
func queueingCtx(ctx context.Context) context.Context {
	return withSettings(ctx, clickhouse.Settings{"distributed_foreground_insert": 0})
}
