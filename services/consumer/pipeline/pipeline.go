// Package pipeline moves servescope events from the JetStream events stream into ClickHouse:
// consume continuously from a durable pull consumer, decode and validate, batch per table,
// insert, and only then acknowledge.
//
// # Delivery guarantees
//
// A message is acknowledged only after ClickHouse accepted the insert that holds it, so a crash,
// a ClickHouse outage or a lost connection never loses a message: it stays unacknowledged and
// JetStream redelivers it after AckWait. The price is at-least-once delivery, and the storage
// makes it exactly-once for readers:
//
//   - Each insert carries insert_deduplication_token = table + SHA-256 of the batch's event ids
//     (sink.Token). A batch retried after an ambiguous failure (the server may have committed it)
//     is dropped by ClickHouse at insert time.
//   - A message that comes back in a different batch (the consumer was killed between insert and
//     ack, an ack was lost with the connection, or another instance took it over after AckWait)
//     is stored a second time with the same event_id. Every landing table is a ReplacingMergeTree
//     whose ORDER BY ends in event_id (ingest_errors: subject and stream_seq), so background
//     merges collapse the copies; until they do, only reads with FINAL (or GROUP BY event_id /
//     argMax) see exactly one row.
//
// Which queries need FINAL: anything that counts or sums rows of the landing tables
// (requests_started, requests, app_records, engine_samples, engine_spans, engine_logs,
// ingest_errors) and must be exact — row counts, error rates, token sums, unfinished = started −
// finished. Quantiles and ratios over many rows (p95 TTFT, share of finish_reason=length, KS test
// of retrieval scores) are insensitive to a few duplicates and may skip FINAL for speed, as may
// "does any row exist" checks. Duplicates only appear after a crash or a redelivery, never in
// normal operation.
//
// Every message ends acknowledged (its row landed) or terminated (it is in the dead-letter
// stream and ingest_errors); none is retried forever and none stays pending, except while
// ClickHouse or NATS is unavailable, when holding it is the point.
//
// # Sizing (documented formulas)
//
// With R = CONSUMER_BATCH_ROWS and T = CONSUMER_FLUSH_INTERVAL:
//
//   - messages arrive through nats.go's [jetstream.Consumer.Consume], which keeps up to
//     F = min(R, 1000) messages requested and buffered ahead of the decoders (PullMaxMessages,
//     and at most max(32 MiB, the server's max_payload) of them), asking for more when half are
//     taken;
//   - a table's batch is sealed when it holds R rows, when its oldest row is T old, or — when
//     all tables together hold 2R rows — the largest one at once; a sealed batch still waiting
//     for an inserter takes the next sealed batch of its table up to R rows, so that slow
//     inserts get larger rather than more numerous;
//   - two inserts run at a time, so one slow insert does not hold up the next batch;
//   - MaxAckPending = 4R + F: up to 2R rows being batched, two batches being inserted, F
//     messages buffered or being decoded. JetStream stops delivering at that count, which caps
//     the consumer's memory: about (4R + F) × 2 KB of messages and decoded events live (≈ 80 MB
//     at the default R = 10,000 and 400-byte events), a peak RSS of about 250 MB with the
//     garbage collector's headroom;
//   - AckWait = max(30 s, 10 T): in normal operation a message is acknowledged within about
//     T plus two insert times, far below it. While a batch waits for ClickHouse (an outage, a
//     retry, a batch being split) the consumer sends InProgress for every message it holds each
//     AckWait/3, so the server does not hand them to another instance while this one still has
//     them. After a crash, the messages go to the other instances (or this one restarted) after
//     AckWait.
//
// MaxAckPending and AckWait are settings of the durable consumer, which the setup step
// (`servescope migrate up`, bus.Setup) creates from the same CONSUMER_BATCH_ROWS and
// CONSUMER_FLUSH_INTERVAL; the consumer only checks it (bus.CheckConsumer). A consumer run with
// other settings than the setup's uses the durable consumer as it is — its MaxAckPending, and its
// AckWait for the InProgress period and the insert timeout — and logs the difference at start.
//
// # Failures
//
//   - Undecodable or invalid message: recorded in ingest_errors (ts = the message's JetStream
//     timestamp, subject, stream_seq, reason, payload) and published to the dead-letter subject
//     (bus.Topology.DLQSubject) with the reason, original subject and stream sequence in
//     headers, then terminated. It takes a row in the ingest_errors batch and never fails or
//     delays the batch of its good neighbours.
//   - An insert not accepted: see the next section.
//   - A dead letter larger than the server's max_payload with its headers (a payload near the
//     limit): the reason header is shortened, then the payload cut, with its full length in
//     bus.HeaderDLQPayloadTruncated; ingest_errors keeps the whole payload.
//   - NATS down: nats.go reconnects (the caller connects with unlimited reconnects) and Consume
//     asks for messages again; acks sent meanwhile are buffered by nats.go and an ack that is
//     lost only causes a redelivery, which the storage de-duplicates. Should consuming stop by
//     itself (the durable consumer deleted), it is started again with backoff.
//   - Shutdown (the context ends): the consumption is drained (messages already delivered to the
//     client are taken), everything taken is inserted and acknowledged, waiting at most
//     Settings.ShutdownTimeout for ClickHouse; what is left then stays unacknowledged for
//     redelivery.
//
// # When ClickHouse does not accept an insert
//
// sink.Classify sorts the error by ClickHouse exception code (the table is in package sink's
// documentation), and the batch is handled by class; every part of it that lands is
// acknowledged at once:
//
//   - Retry (ClickHouse down, overloaded or shutting down; a table, column or grant missing):
//     the batch stays unacknowledged and is retried unchanged with capped exponential backoff
//     and jitter; [Pipeline.SinkError] names the failure until ClickHouse answers again. Intake
//     stops by itself when MaxAckPending messages are held, and the backlog drains after
//     recovery. Nothing is dead-lettered for it, however long it lasts.
//   - Split (code 252, too many partitions in one INSERT block: a backfill spanning more days
//     than max_partitions_per_insert_block): the batch is halved, each half inserted on its own
//     and halved again if need be, until every part is accepted.
//   - Refuse (a value is refused: parse, type, range, constraint errors): when ClickHouse's
//     message points at the row ("violated at row N"), that row is inserted alone to confirm
//     it, then the rest; otherwise, or once a pointer proved wrong, the batch is halved until
//     the refused rows stand alone. Each refused row goes with ClickHouse's message to
//     ingest_errors and the dead-letter stream and is terminated; the rest lands once. One
//     refused row costs two inserts with a pointer, about 2 log2 R without.
//   - Rows the sink sets aside before sending are dead-lettered the same way, without
//     splitting: rows the client cannot encode into the server's column types (a column's type
//     changed under the consumer: clickhouse-go converts no Go type to another column type, so
//     that refuses every row of the table until the consumer is updated, while an Enum refuses
//     only the values it lacks), and rows older than their table's TTL, which ClickHouse would
//     drop at insert without an error (the TTLs are re-read every minute; raise one with
//     `servescope migrate ttl` before a backfill and the rows are kept).
//   - Unknown (a code the table does not list): retried like Retry for 10 attempts (about
//     10–20 s at the default backoff); then the batch is halved, each part tried once, and a
//     single row still failing is dead-lettered with ClickHouse's message. A server-wide unknown
//     failure thus dead-letters rather than stalls: bounded, with every row kept in the
//     dead-letter stream and ingest_errors.
//   - A row that ingest_errors itself refuses is published to the dead-letter stream only, with
//     both reasons, and terminated.
package pipeline

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/retry"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/consumer/sink"
)

// Settings tune the pipeline.
type Settings struct {
	// Durable is the durable consumer's name, shared by every instance.
	Durable string
	// BatchRows is the row count at which a table's batch is inserted.
	BatchRows int
	// FlushInterval is the longest a row waits in a batch before the batch is inserted.
	FlushInterval time.Duration
	// Decoders is how many goroutines decode messages; 0 means GOMAXPROCS.
	Decoders int
	// ShutdownTimeout bounds the final inserts after the context ends; 0 means 30 s.
	ShutdownTimeout time.Duration
	// RetryMin and RetryMax bound the backoff between failed inserts or attempts to consume (the
	// nominal wait doubles from RetryMin to RetryMax; each wait is drawn from its upper half, as
	// package retry does); 0 means 100 ms and 5 s.
	RetryMin, RetryMax time.Duration
}

// retry is the policy of the pipeline's retries.
func (s Settings) retry() retry.Policy { return retry.Policy{Min: s.RetryMin, Max: s.RetryMax} }

// PullMessages is the number of messages nats.go keeps requested and buffered ahead of the
// decoders: min(BatchRows, 1000).
func (s Settings) PullMessages() int { return min(s.BatchRows, 1000) }

// MaxAckPending is 4 × BatchRows + PullMessages (see the package documentation): the durable
// consumer's max_ack_pending that the setup step gives it (bus.DurableFor).
func (s Settings) MaxAckPending() int { return s.durable().MaxAckPending }

// durable is the durable consumer these settings call for.
func (s Settings) durable() bus.Durable {
	return bus.DurableFor(s.Durable, s.BatchRows, s.FlushInterval)
}

// inserters is how many batches are inserted at a time.
const inserters = 2

// unknownAttempts is how many times a batch failing with an exception code that package sink
// does not list is retried before it is split (see the package documentation).
const unknownAttempts = 10

// AckWait is max(30 s, 10 × FlushInterval) (see the package documentation): the durable
// consumer's ack_wait that the setup step gives it (bus.DurableFor). A pipeline times its work
// by the durable consumer's ack_wait in force, which is this unless the durable consumer was set
// up with other settings.
func (s Settings) AckWait() time.Duration { return s.durable().AckWait }

func (s Settings) tick() time.Duration {
	return min(max(s.FlushInterval/4, 10*time.Millisecond), 250*time.Millisecond)
}

func (s Settings) withDefaults() Settings {
	if s.Decoders <= 0 {
		s.Decoders = runtime.GOMAXPROCS(0)
	}
	if s.ShutdownTimeout <= 0 {
		s.ShutdownTimeout = 30 * time.Second
	}
	if s.RetryMin <= 0 {
		s.RetryMin = 100 * time.Millisecond
	}
	if s.RetryMax <= 0 {
		s.RetryMax = 5 * time.Second
	}
	return s
}

// Sink is where batches go; *sink.Sink implements it. Its errors are sorted by sink.Classify.
type Sink interface {
	InsertEvents(ctx context.Context, k schema.Kind, events []schema.Event, token string) error
	InsertErrors(ctx context.Context, errs []sink.IngestError, token string) error
}

// Pipeline is one consumer instance. Several instances (processes) share the durable consumer
// and split the messages between them.
type Pipeline struct {
	set     Settings
	topo    bus.Topology
	js      jetstream.JetStream
	cons    jetstream.Consumer
	sink    Sink
	metrics *Metrics
	log     *slog.Logger

	failMu   sync.Mutex
	failures map[string]string // table → why its inserts fail; absent while they succeed
	acked    atomic.Uint64
	inserted atomic.Uint64

	// ackWait is the durable consumer's ack_wait in force on the server, by which the pipeline
	// times its InProgress signals and bounds an insert.
	ackWait time.Duration
}

// New returns a pipeline reading from cons (the durable consumer that bus.Setup creates and
// bus.CheckConsumer returns), writing to snk and dead-lettering through js on topo's dead-letter
// subjects. It follows cons's ack_wait as the server has it, which differs from set.AckWait()
// only when the durable consumer was set up with other settings.
func New(set Settings, topo bus.Topology, js jetstream.JetStream, cons jetstream.Consumer, snk Sink, m *Metrics, log *slog.Logger) *Pipeline {
	p := &Pipeline{set: set.withDefaults(), topo: topo, js: js, cons: cons, sink: snk, metrics: m, log: log, failures: map[string]string{}}
	p.ackWait = p.set.AckWait()
	if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 {
		p.ackWait = info.Config.AckWait
	}
	return p
}

// insertTimeout bounds one insert attempt, so that a hung connection counts as a failure well
// before the messages' ack_wait runs out.
func (p *Pipeline) insertTimeout() time.Duration { return max(p.ackWait/3, 10*time.Second) }

// SinkError is "" while inserts succeed, else what failed: for each table whose last insert
// attempt failed for a reason that is retried (ClickHouse unreachable, overloaded, not set up),
// until an insert into it succeeds. Rows refused for their values do not count: they are
// dead-lettered and the pipeline goes on.
func (p *Pipeline) SinkError() string {
	p.failMu.Lock()
	defer p.failMu.Unlock()
	var out []string
	for _, table := range sink.Tables() {
		if why, ok := p.failures[table]; ok {
			out = append(out, why)
		}
	}
	return strings.Join(out, "; ")
}

// Acked is the number of messages acknowledged or terminated so far.
func (p *Pipeline) Acked() uint64 { return p.acked.Load() }

// Inserted is the number of rows ClickHouse accepted so far (events and ingest_errors).
func (p *Pipeline) Inserted() uint64 { return p.inserted.Load() }

// item is one decoded message.
type item struct {
	msg     jetstream.Msg
	event   schema.Event      // nil when refused
	refusal *sink.IngestError // set when refused
	reason  string            // the refusal's metric label
}

// batch is unacknowledged messages of one table, in arrival order, or a part of such a batch
// being split.
type batch struct {
	table   string
	kind    schema.Kind // "" for ingest_errors
	msgs    []jetstream.Msg
	events  []schema.Event
	errs    []sink.IngestError
	reasons []string
	started time.Time // when the first message was added
	touched time.Time // when the messages' ack timers were last reset (delivery or InProgress)
	// unknownLeft is how many more attempts an Unknown error gets before the batch is split.
	unknownLeft int
	// noHint is set once ClickHouse pointed at a row of the batch that it then accepted: the
	// batch is halved instead of following its pointers. hintFor is, on a row isolated on
	// ClickHouse's pointer, the rest of its batch.
	noHint  bool
	hintFor *batch
}

func (b *batch) add(it item, now time.Time) {
	if len(b.msgs) == 0 {
		b.started, b.touched = now, now
	}
	b.msgs = append(b.msgs, it.msg)
	if it.event != nil {
		b.events = append(b.events, it.event)
	} else {
		b.errs = append(b.errs, *it.refusal)
		b.reasons = append(b.reasons, it.reason)
	}
}

// merge appends o's messages to b. b keeps the earlier start, and the earlier of the two ack
// timer resets, so that keepAlive is never late for any of them.
func (b *batch) merge(o *batch) {
	b.msgs = append(b.msgs, o.msgs...)
	b.events = append(b.events, o.events...)
	b.errs = append(b.errs, o.errs...)
	b.reasons = append(b.reasons, o.reasons...)
	if o.touched.Before(b.touched) {
		b.touched = o.touched
	}
}

// Run consumes until ctx ends, then finishes what it took (see the package documentation) and
// returns. It retries every failure itself and returns nil.
func (p *Pipeline) Run(ctx context.Context) error {
	// Inserts outlive ctx by at most ShutdownTimeout, so that a shutdown flushes and acks.
	flushCtx, cancelFlush := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelFlush()
	stopTimer := context.AfterFunc(ctx, func() {
		time.AfterFunc(p.set.ShutdownTimeout, cancelFlush)
	})
	defer stopTimer()

	received := make(chan []jetstream.Msg, p.set.Decoders)
	decoded := make(chan []item, p.set.Decoders)
	ready := make(chan *batch)

	var wg sync.WaitGroup
	wg.Go(func() { p.pollLag(ctx) })
	wg.Go(func() { p.intake(ctx, received) })
	var decoders sync.WaitGroup
	for range p.set.Decoders {
		decoders.Go(func() { p.decodeLoop(received, decoded) })
	}
	wg.Go(func() { decoders.Wait(); close(decoded) })
	wg.Go(func() { p.batchLoop(decoded, ready) })
	for range inserters {
		wg.Go(func() { p.flushLoop(flushCtx, ready) })
	}
	wg.Wait()
	return nil
}

func (p *Pipeline) decodeLoop(in <-chan []jetstream.Msg, out chan<- []item) {
	for chunk := range in {
		now := time.Now()
		items := make([]item, len(chunk))
		for i, m := range chunk {
			items[i] = p.decodeMsg(m, now)
		}
		out <- items
	}
}

func (p *Pipeline) decodeMsg(m jetstream.Msg, now time.Time) item {
	subject := m.Subject()
	e, err := decode(subject, m.Data(), now)
	if err == nil {
		return item{msg: m, event: e}
	}
	return item{msg: m, refusal: ingestError(m, err.Error(), now), reason: refusalReason(err)}
}

// ingestError is the ingest_errors row of message m refused for reason.
func ingestError(m jetstream.Msg, reason string, now time.Time) *sink.IngestError {
	ref := &sink.IngestError{TS: now.UTC(), Subject: m.Subject(), Reason: reason, Payload: m.Data()}
	if meta, err := m.Metadata(); err == nil {
		ref.TS, ref.StreamSeq = meta.Timestamp.UTC(), meta.Sequence.Stream
	}
	return ref
}

// batchLoop sorts items into per-table batches and hands full or due batches to the inserter.
// It never blocks on the inserter, so it keeps receiving (and intake stays bounded by
// MaxAckPending) and can send InProgress for what it holds during an outage.
func (p *Pipeline) batchLoop(in <-chan []item, out chan<- *batch) {
	defer close(out)
	open := map[string]*batch{}
	var queue []*batch
	held := 0 // messages in open batches
	seal := func(b *batch) {
		delete(open, b.table)
		held -= len(b.msgs)
		// A batch of the same table still waiting for an inserter takes these rows, up to R: when
		// inserts are slow, batches grow instead of queueing many small inserts behind each other.
		for _, q := range queue {
			if q.table == b.table && len(q.msgs)+len(b.msgs) <= p.set.BatchRows {
				q.merge(b)
				return
			}
		}
		queue = append(queue, b)
	}
	// due fires when the oldest open batch is FlushInterval old, so that a batch is sealed on
	// time: sealing on the tick instead added up to a tick (250 ms) to every row's wait.
	due := time.NewTimer(time.Hour)
	due.Stop()
	var dueAt time.Time
	arm := func() {
		var oldest time.Time
		for _, b := range open {
			if oldest.IsZero() || b.started.Before(oldest) {
				oldest = b.started
			}
		}
		switch at := oldest.Add(p.set.FlushInterval); {
		case oldest.IsZero():
			due.Stop()
			dueAt = time.Time{}
		case !at.Equal(dueAt):
			dueAt = at
			due.Reset(time.Until(at))
		}
	}
	// tick paces the InProgress signals for what is held.
	tick := time.NewTicker(p.set.tick())
	defer tick.Stop()
	for in != nil || len(queue) > 0 {
		var send chan<- *batch
		var next *batch
		if len(queue) > 0 {
			send, next = out, queue[0]
		}
		select {
		case items, ok := <-in:
			if !ok {
				in = nil
				for _, table := range sink.Tables() {
					if b := open[table]; b != nil {
						seal(b)
					}
				}
				arm()
				continue
			}
			now := time.Now()
			for _, it := range items {
				table := sink.TableIngestErrors
				var kind schema.Kind
				if it.event != nil {
					kind = it.event.Kind()
					table, _ = sink.TableFor(kind)
				}
				b := open[table]
				if b == nil {
					b = &batch{table: table, kind: kind}
					open[table] = b
				}
				b.add(it, now)
				held++
				if len(b.msgs) >= p.set.BatchRows {
					seal(b)
				}
			}
			for held >= 2*p.set.BatchRows {
				var largest *batch
				for _, b := range open {
					if largest == nil || len(b.msgs) > len(largest.msgs) {
						largest = b
					}
				}
				seal(largest)
			}
			arm()
		case send <- next:
			queue = queue[1:]
		case now := <-due.C:
			dueAt = time.Time{}
			for _, b := range open {
				if now.Sub(b.started) >= p.set.FlushInterval {
					seal(b)
				}
			}
			arm()
		case now := <-tick.C:
			for _, b := range open {
				p.keepAlive(b, now)
			}
			for _, b := range queue {
				p.keepAlive(b, now)
			}
		}
	}
}

// keepAlive resets the ack timers of b's messages when a third of AckWait passed since the last
// reset, so that JetStream does not redeliver messages this instance still holds. Messages of b
// already acknowledged (parts of a split batch) are skipped by nats.go without a round trip.
func (p *Pipeline) keepAlive(b *batch, now time.Time) {
	if now.Sub(b.touched) < p.ackWait/3 {
		return
	}
	for _, m := range b.msgs {
		// A failed InProgress only risks a redelivery, which the storage de-duplicates.
		_ = m.InProgress()
	}
	b.touched = now
}

// pollLag updates the pending gauges from the consumer info until ctx ends.
func (p *Pipeline) pollLag(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := p.cons.Info(ictx)
		cancel()
		if err == nil {
			p.metrics.Pending.Set(float64(info.NumPending))
			p.metrics.AckPending.Set(float64(info.NumAckPending))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
