// Package pipeline moves servescope events from the JetStream events stream into ClickHouse:
// fetch in batches from a durable pull consumer, decode and validate, batch per table, insert,
// and only then acknowledge.
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
// # Sizing (documented formulas)
//
// With R = CONSUMER_BATCH_ROWS and T = CONSUMER_FLUSH_INTERVAL:
//
//   - fetch size F = min(R, 1000) messages per pull request, waiting at most min(T/2, 1 s);
//   - a table's batch is inserted when it holds R rows, when its oldest row is T old, or — when
//     all tables together hold 2R rows — the largest one at once;
//   - two inserts run at a time, so one slow insert does not hold up the next batch;
//   - MaxAckPending = 4R + F: up to 2R rows being batched, two batches being inserted, one fetch
//     being decoded. JetStream stops delivering at that count, which caps the consumer's memory:
//     about (4R + F) × 2 KB of messages and decoded events live (≈ 80 MB at the default
//     R = 10,000 and 400-byte events), a peak RSS of about 250 MB with the garbage collector's
//     headroom;
//   - AckWait = max(30 s, 10 T): in normal operation a message is acknowledged within about
//     T plus two insert times, far below it. While a batch waits for ClickHouse (an outage, a
//     retry) the consumer sends InProgress for every message it holds each AckWait/3, so the
//     server does not hand them to another instance while this one still has them. After a
//     crash, the messages go to the other instances (or this one restarted) after AckWait.
//
// # Failures
//
//   - Undecodable or invalid message: recorded in ingest_errors (ts = the message's JetStream
//     timestamp, subject, stream_seq, reason, payload) and published to the dead-letter subject
//     (bus.Topology.DLQSubject) with the reason, original subject and stream sequence in
//     headers, then terminated. It takes a row in the ingest_errors batch and never fails or
//     delays the batch of its good neighbours.
//   - ClickHouse down or an insert failing: the batch stays unacknowledged and is retried with
//     capped exponential backoff and jitter; [Pipeline.SinkHealthy] is false until an insert
//     succeeds again. Fetching stops by itself when MaxAckPending messages are held, and the
//     backlog drains after recovery.
//   - NATS down: fetches fail and are retried with backoff while nats.go reconnects (the caller
//     connects with unlimited reconnects); acks sent meanwhile are buffered by nats.go and an
//     ack that is lost only causes a redelivery, which the storage de-duplicates.
//   - Shutdown (the context ends): fetching stops, everything already fetched is inserted and
//     acknowledged, waiting at most Settings.ShutdownTimeout for ClickHouse; what is left then
//     stays unacknowledged for redelivery.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/consumer/sink"
	"github.com/servescope/servescope/services/internal/bus"
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
	// RetryMin and RetryMax bound the backoff between failed inserts or fetches; 0 means 100 ms
	// and 5 s.
	RetryMin, RetryMax time.Duration
}

// FetchRows is the number of messages requested per pull: min(BatchRows, 1000).
func (s Settings) FetchRows() int { return min(s.BatchRows, 1000) }

// MaxAckPending is 4 × BatchRows + FetchRows (see the package documentation).
func (s Settings) MaxAckPending() int { return 4*s.BatchRows + s.FetchRows() }

// inserters is how many batches are inserted at a time.
const inserters = 2

// AckWait is max(30 s, 10 × FlushInterval) (see the package documentation).
func (s Settings) AckWait() time.Duration { return max(30*time.Second, 10*s.FlushInterval) }

func (s Settings) fetchWait() time.Duration {
	return min(max(s.FlushInterval/2, 50*time.Millisecond), time.Second)
}

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

// Validate checks the settings.
func (s Settings) Validate() error {
	if s.Durable == "" || strings.ContainsAny(s.Durable, ". *>\t\r\n") {
		return fmt.Errorf("CONSUMER_DURABLE: %q must be a non-empty name without '.', '*', '>' or spaces", s.Durable)
	}
	if s.BatchRows < 1 || s.BatchRows > 1_000_000 {
		return fmt.Errorf("CONSUMER_BATCH_ROWS: must be between 1 and 1000000, got %d", s.BatchRows)
	}
	if s.FlushInterval < time.Millisecond {
		return fmt.Errorf("CONSUMER_FLUSH_INTERVAL: must be at least 1ms, got %s", s.FlushInterval)
	}
	return nil
}

// ConsumerConfig is the durable pull consumer on t's events stream: explicit acks, AckWait and
// MaxAckPending from s, redelivered without limit (a message is only ever given up on by
// dead-lettering it).
func ConsumerConfig(t bus.Topology, s Settings) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       s.Durable,
		Description:   "servescope consumer: events into ClickHouse, acknowledged after the insert",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.AckWait(),
		MaxDeliver:    -1,
		MaxAckPending: s.MaxAckPending(),
		FilterSubject: t.Subjects(),
	}
}

// Sink is where batches go; *sink.Sink implements it.
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

	sinkOK   atomic.Bool
	acked    atomic.Uint64
	inserted atomic.Uint64
}

// New returns a pipeline reading from cons (created with [ConsumerConfig]), writing to snk and
// dead-lettering through js on topo's dead-letter subjects.
func New(set Settings, topo bus.Topology, js jetstream.JetStream, cons jetstream.Consumer, snk Sink, m *Metrics, log *slog.Logger) *Pipeline {
	p := &Pipeline{set: set.withDefaults(), topo: topo, js: js, cons: cons, sink: snk, metrics: m, log: log}
	p.sinkOK.Store(true)
	return p
}

// SinkHealthy is false from a failed insert until the next successful one.
func (p *Pipeline) SinkHealthy() bool { return p.sinkOK.Load() }

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

// batch is the unacknowledged messages of one table, in arrival order.
type batch struct {
	table   string
	kind    schema.Kind // "" for ingest_errors
	msgs    []jetstream.Msg
	events  []schema.Event
	errs    []sink.IngestError
	reasons []string
	started time.Time // when the first message was added
	touched time.Time // when the messages' ack timers were last reset (fetch or InProgress)
	token   string
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

// Run consumes until ctx ends, then finishes what it fetched (see the package documentation)
// and returns. It retries every failure itself and returns nil.
func (p *Pipeline) Run(ctx context.Context) error {
	// Inserts outlive ctx by at most ShutdownTimeout, so that a shutdown flushes and acks.
	flushCtx, cancelFlush := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelFlush()
	stopTimer := context.AfterFunc(ctx, func() {
		time.AfterFunc(p.set.ShutdownTimeout, cancelFlush)
	})
	defer stopTimer()

	fetched := make(chan []jetstream.Msg, p.set.Decoders)
	decoded := make(chan []item, p.set.Decoders)
	ready := make(chan *batch)

	var wg sync.WaitGroup
	wg.Go(func() { p.pollLag(ctx) })
	wg.Go(func() { p.fetchLoop(ctx, fetched) })
	var decoders sync.WaitGroup
	for range p.set.Decoders {
		decoders.Go(func() { p.decodeLoop(fetched, decoded) })
	}
	wg.Go(func() { decoders.Wait(); close(decoded) })
	wg.Go(func() { p.batchLoop(decoded, ready) })
	for range inserters {
		wg.Go(func() { p.flushLoop(flushCtx, ready) })
	}
	wg.Wait()
	return nil
}

// fetchLoop pulls messages until ctx ends, in chunks for the decoders.
func (p *Pipeline) fetchLoop(ctx context.Context, out chan<- []jetstream.Msg) {
	defer close(out)
	const chunkSize = 250
	delay := p.set.RetryMin
	for ctx.Err() == nil {
		mb, err := p.cons.Fetch(p.set.FetchRows(), jetstream.FetchMaxWait(p.set.fetchWait()))
		if err == nil {
			chunk := make([]jetstream.Msg, 0, chunkSize)
			for m := range mb.Messages() {
				chunk = append(chunk, m)
				if len(chunk) == chunkSize {
					out <- chunk
					chunk = make([]jetstream.Msg, 0, chunkSize)
				}
			}
			if len(chunk) > 0 {
				out <- chunk
			}
			err = mb.Error()
		}
		if err == nil || errors.Is(err, nats.ErrTimeout) {
			delay = p.set.RetryMin
			continue
		}
		p.metrics.FetchErrors.Inc()
		p.log.Warn("fetch from JetStream failed, retrying", "stream", p.topo.Stream(), "durable", p.set.Durable, "retry_in", delay, "error", err)
		sleep(ctx, jitter(delay))
		delay = min(2*delay, p.set.RetryMax)
	}
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
	ref := &sink.IngestError{TS: now.UTC(), Subject: subject, Reason: err.Error(), Payload: m.Data()}
	if meta, merr := m.Metadata(); merr == nil {
		ref.TS, ref.StreamSeq = meta.Timestamp.UTC(), meta.Sequence.Stream
	}
	return item{msg: m, refusal: ref, reason: refusalReason(err)}
}

// batchLoop sorts items into per-table batches and hands full or due batches to the inserter.
// It never blocks on the inserter, so it keeps receiving (and fetching stays bounded by
// MaxAckPending) and can send InProgress for what it holds during an outage.
func (p *Pipeline) batchLoop(in <-chan []item, out chan<- *batch) {
	defer close(out)
	open := map[string]*batch{}
	var queue []*batch
	held := 0 // messages in open batches
	seal := func(b *batch) {
		delete(open, b.table)
		held -= len(b.msgs)
		queue = append(queue, b)
	}
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
		case send <- next:
			queue = queue[1:]
		case now := <-tick.C:
			for _, b := range open {
				if now.Sub(b.started) >= p.set.FlushInterval {
					seal(b)
				}
			}
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
// reset, so that JetStream does not redeliver messages this instance still holds.
func (p *Pipeline) keepAlive(b *batch, now time.Time) {
	if now.Sub(b.touched) < p.set.AckWait()/3 {
		return
	}
	for _, m := range b.msgs {
		// A failed InProgress only risks a redelivery, which the storage de-duplicates.
		_ = m.InProgress()
	}
	b.touched = now
}

func (p *Pipeline) flushLoop(ctx context.Context, in <-chan *batch) {
	for b := range in {
		if ctx.Err() != nil {
			// Shutdown timed out: leave the batch unacknowledged for redelivery.
			continue
		}
		p.flush(ctx, b)
	}
}

// flush writes b until it succeeds or ctx ends, then acknowledges its messages.
func (p *Pipeline) flush(ctx context.Context, b *batch) {
	b.token = p.token(b)
	delay := p.set.RetryMin
	for attempt := 1; ; attempt++ {
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, max(p.set.AckWait()/3, 10*time.Second))
		err := p.write(actx, b)
		cancel()
		if err == nil {
			p.ack(b)
			p.sinkOK.Store(true)
			p.inserted.Add(uint64(len(b.msgs)))
			p.metrics.RowsInserted.WithLabelValues(b.table).Add(float64(len(b.msgs)))
			p.metrics.BatchRows.WithLabelValues(b.table).Observe(float64(len(b.msgs)))
			p.metrics.FlushSeconds.WithLabelValues(b.table).Observe(time.Since(start).Seconds())
			if attempt > 1 {
				p.log.Info("insert succeeded after retries", "table", b.table, "rows", len(b.msgs), "attempts", attempt)
			}
			return
		}
		if ctx.Err() != nil {
			p.log.Warn("shutdown: batch left unacknowledged for redelivery", "table", b.table, "rows", len(b.msgs), "error", err)
			return
		}
		p.sinkOK.Store(false)
		p.metrics.InsertErrors.WithLabelValues(b.table).Inc()
		p.log.Warn("insert failed, batch stays unacknowledged and is retried", "table", b.table, "rows", len(b.msgs), "attempt", attempt, "retry_in", delay, "error", err)
		wait := jitter(delay)
		delay = min(2*delay, p.set.RetryMax)
		for wait > 0 && ctx.Err() == nil {
			step := min(wait, time.Second)
			sleep(ctx, step)
			wait -= step
			p.keepAlive(b, time.Now())
		}
		if ctx.Err() != nil {
			p.log.Warn("shutdown: batch left unacknowledged for redelivery", "table", b.table, "rows", len(b.msgs))
			return
		}
	}
}

func (p *Pipeline) token(b *batch) string {
	if b.kind == "" {
		return sink.ErrorsToken(b.errs)
	}
	ids := make([]string, len(b.events))
	for i, e := range b.events {
		ids[i] = e.Head().EventID
	}
	return sink.Token(b.table, ids)
}

func (p *Pipeline) write(ctx context.Context, b *batch) error {
	if b.kind != "" {
		return p.sink.InsertEvents(ctx, b.kind, b.events, b.token)
	}
	if err := p.sink.InsertErrors(ctx, b.errs, b.token); err != nil {
		return err
	}
	return p.deadLetter(ctx, b.errs)
}

// deadLetter publishes refused messages to the dead-letter stream and waits for the stream to
// store them. Nats-Msg-Id is the original stream and sequence, so a retry within the stream's
// duplicate window stores each once.
func (p *Pipeline) deadLetter(ctx context.Context, errs []sink.IngestError) error {
	futures := make([]jetstream.PubAckFuture, 0, len(errs))
	for _, e := range errs {
		m := nats.NewMsg(p.topo.DLQSubject(e.Subject))
		m.Data = e.Payload
		m.Header.Set(bus.HeaderDLQReason, headerValue(e.Reason))
		m.Header.Set(bus.HeaderDLQSubject, e.Subject)
		m.Header.Set(bus.HeaderDLQStreamSeq, strconv.FormatUint(e.StreamSeq, 10))
		m.Header.Set(jetstream.MsgIDHeader, p.topo.Stream()+"-"+strconv.FormatUint(e.StreamSeq, 10))
		f, err := p.js.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("publish dead letter of %s seq %d: %w", e.Subject, e.StreamSeq, err)
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish dead letter of %s seq %d: %w", errs[i].Subject, errs[i].StreamSeq, err)
		case <-ctx.Done():
			return fmt.Errorf("publish dead letters: %w", ctx.Err())
		}
	}
	return nil
}

// headerValue keeps a reason on one line and within a size a NATS header comfortably holds.
func headerValue(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
	return schema.Truncate(s, 2048)
}

func (p *Pipeline) ack(b *batch) {
	terminate := b.kind == ""
	for _, m := range b.msgs {
		var err error
		if terminate {
			err = m.Term()
		} else {
			err = m.Ack()
		}
		if err != nil {
			// The message is redelivered and de-duplicated; nothing is lost.
			p.metrics.AckErrors.Inc()
			continue
		}
		p.acked.Add(1)
		p.metrics.Acked.Inc()
	}
	for _, r := range b.reasons {
		p.metrics.DeadLettered.WithLabelValues(r).Inc()
	}
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

// jitter returns a duration uniformly in [d/2, d).
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
