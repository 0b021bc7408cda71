package pipeline

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/retry"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/consumer/sink"
)

// labelClickHouse is the dead_lettered_total reason of rows ClickHouse refused.
const labelClickHouse = "clickhouse"

func (p *Pipeline) flushLoop(ctx context.Context, in <-chan *batch) {
	for b := range in {
		if ctx.Err() != nil {
			// Shutdown timed out: leave the batch unacknowledged for redelivery.
			continue
		}
		p.flush(ctx, b)
	}
}

// refusal is a message whose row ClickHouse will not take.
type refusal struct {
	msg    jetstream.Msg
	reason string // ClickHouse's refusal
	// orig and label are the message's ingest_errors row and metric label when the refused row
	// was itself a dead letter (ingest_errors refused it); nil and "" for events.
	orig  *sink.IngestError
	label string
}

// flush inserts b, in parts when ClickHouse demands it (see the package documentation),
// acknowledges each part once it landed and dead-letters the rows ClickHouse refuses. It returns
// when every message of b is acknowledged or terminated, or when ctx ends (the shutdown timed
// out), leaving the rest unacknowledged for redelivery.
func (p *Pipeline) flush(ctx context.Context, b *batch) {
	b.unknownLeft = unknownAttempts
	todo := []*batch{b} // a stack of parts still to insert
	var refused []refusal
	for len(todo) > 0 {
		part := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		next, ref, ok := p.insertPart(ctx, b, part)
		if !ok {
			return
		}
		todo = append(todo, next...)
		refused = append(refused, ref...)
		p.keepAlive(b, time.Now())
	}
	if len(refused) == 0 {
		return
	}
	if b.kind == "" {
		p.deadLetterOnly(ctx, b, refused)
		return
	}
	p.log.Warn("ClickHouse refused rows; they go to the dead-letter stream and ingest_errors, the rest of the batch landed",
		"table", b.table, "rows", len(refused), "batch_rows", len(b.msgs), "reason", refused[0].reason)
	now := time.Now()
	eb := &batch{table: sink.TableIngestErrors}
	for _, r := range refused {
		eb.add(item{msg: r.msg, refusal: ingestError(r.msg, r.reason, now), reason: labelClickHouse}, now)
	}
	eb.touched = b.touched
	p.flush(ctx, eb)
}

// insertPart inserts part of whole until it lands (ok, nothing else), is split (next), has rows
// refused (refused, and next for the rest), or ctx ends (not ok).
func (p *Pipeline) insertPart(ctx context.Context, whole, part *batch) (next []*batch, refused []refusal, ok bool) {
	token := p.token(part)
	backoff := p.set.retry().Backoff()
	for attempt := 1; ; attempt++ {
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, p.insertTimeout())
		err := p.write(actx, part, token)
		cancel()
		if err == nil {
			p.landed(part, start, attempt)
			return nil, nil, true
		}
		if ctx.Err() != nil {
			p.log.Warn("shutdown: batch left unacknowledged for redelivery", "table", part.table, "rows", len(part.msgs), "error", err)
			return nil, nil, false
		}
		v := sink.Classify(err)
		p.metrics.InsertErrors.WithLabelValues(part.table, v.Class.String()).Inc()
		if v.Class == sink.Split || v.Class == sink.Refuse {
			p.answered(part.table)
		}
		switch v.Class {
		case sink.Split:
			if len(part.msgs) > 1 {
				p.log.Info("ClickHouse refused the batch for its shape; inserting it in halves", "table", part.table, "rows", len(part.msgs), "code", v.Code, "error", v.Message)
				return p.halves(part, part.unknownLeft), nil, true
			}
			return nil, []refusal{p.refuse(part, 0, v.Reason())}, true
		case sink.Refuse:
			if v.Rows != nil {
				rest, ref := p.without(part, v)
				return rest, ref, true
			}
			if len(part.msgs) > 1 {
				if v.Row >= 0 && v.Row < len(part.msgs) && !part.noHint {
					return p.isolate(part, v.Row), nil, true
				}
				return p.halves(part, part.unknownLeft), nil, true
			}
			return nil, []refusal{p.refuse(part, 0, v.Reason())}, true
		case sink.Unknown:
			part.unknownLeft--
			if part.unknownLeft <= 0 {
				p.answered(part.table)
				if len(part.msgs) > 1 {
					p.log.Warn("insert keeps failing with an exception code not known to be transient; looking for the rows it refuses", "table", part.table, "rows", len(part.msgs), "code", v.Code, "error", v.Message)
					return p.halves(part, 1), nil, true
				}
				return nil, []refusal{p.refuse(part, 0, v.Reason())}, true
			}
		}
		// Retry, or Unknown with attempts left.
		p.failing(part.table, v)
		wait := backoff.Next()
		p.log.Warn("insert failed, batch stays unacknowledged and is retried", "table", part.table, "rows", len(part.msgs),
			"attempt", attempt, "class", v.Class.String(), "retry_in", wait, "error", err)
		for wait > 0 && ctx.Err() == nil {
			step := min(wait, time.Second)
			retry.Sleep(ctx, step)
			wait -= step
			p.keepAlive(whole, time.Now())
		}
		if ctx.Err() != nil {
			p.log.Warn("shutdown: batch left unacknowledged for redelivery", "table", part.table, "rows", len(part.msgs))
			return nil, nil, false
		}
	}
}

// landed records that part was inserted and acknowledges its messages.
func (p *Pipeline) landed(part *batch, start time.Time, attempt int) {
	if part.hintFor != nil {
		// ClickHouse pointed at a row that it then accepted alone: its pointer cannot be
		// trusted for this batch, which is halved from now on.
		part.hintFor.noHint = true
	}
	p.ack(part)
	p.answered(part.table)
	n := len(part.msgs)
	p.inserted.Add(uint64(n))
	p.metrics.RowsInserted.WithLabelValues(part.table).Add(float64(n))
	p.metrics.BatchRows.WithLabelValues(part.table).Observe(float64(n))
	p.metrics.FlushSeconds.WithLabelValues(part.table).Observe(time.Since(start).Seconds())
	if attempt > 1 {
		p.log.Info("insert succeeded after retries", "table", part.table, "rows", n, "attempts", attempt)
	}
}

// answered records that ClickHouse took or judged an insert into table: whatever failed before
// is over.
func (p *Pipeline) answered(table string) {
	p.failMu.Lock()
	delete(p.failures, table)
	p.failMu.Unlock()
}

// failing records that inserts into table fail for a reason that is retried.
func (p *Pipeline) failing(table string, v sink.Verdict) {
	msg := "inserts into " + table + " failing: " + v.Message
	if v.Code != 0 {
		msg = fmt.Sprintf("inserts into %s failing: code %d %s: %s", table, v.Code, v.Name, v.Message)
	}
	p.failMu.Lock()
	p.failures[table] = msg
	p.failMu.Unlock()
}

// halves splits b in two, each part getting unknownLeft attempts for Unknown errors; the first
// half is last, to be inserted first from a stack.
func (p *Pipeline) halves(b *batch, unknownLeft int) []*batch {
	p.metrics.BatchSplits.WithLabelValues(b.table).Inc()
	mid := len(b.msgs) / 2
	l, r := b.slice(0, mid), b.slice(mid, len(b.msgs))
	l.unknownLeft, r.unknownLeft = max(1, unknownLeft), max(1, unknownLeft)
	return []*batch{r, l}
}

// isolate splits row i, the one ClickHouse pointed at, from the rest of b: the row is inserted
// alone first, to confirm the pointer (a row refused alone is refused for itself), then the rest.
func (p *Pipeline) isolate(b *batch, i int) []*batch {
	rest := b.without(map[int]bool{i: true})
	row := b.slice(i, i+1)
	row.hintFor = rest
	return []*batch{rest, row}
}

// slice is rows [i, j) of b.
func (b *batch) slice(i, j int) *batch {
	s := &batch{table: b.table, kind: b.kind, msgs: b.msgs[i:j:j], started: b.started, touched: b.touched, unknownLeft: b.unknownLeft, noHint: b.noHint}
	if b.kind != "" {
		s.events = b.events[i:j:j]
	} else {
		s.errs, s.reasons = b.errs[i:j:j], b.reasons[i:j:j]
	}
	return s
}

// without returns part without the rows v names (the sink set them aside), and their refusals.
func (p *Pipeline) without(part *batch, v sink.Verdict) ([]*batch, []refusal) {
	drop := make(map[int]bool, len(v.Rows))
	refused := make([]refusal, len(v.Rows))
	for i, r := range v.Rows {
		drop[r] = true
		refused[i] = p.refuse(part, r, v.Reasons[i])
	}
	rest := part.without(drop)
	if len(rest.msgs) == 0 {
		return nil, refused
	}
	return []*batch{rest}, refused
}

// without is a copy of b without the rows in drop.
func (b *batch) without(drop map[int]bool) *batch {
	rest := &batch{table: b.table, kind: b.kind, started: b.started, touched: b.touched, unknownLeft: b.unknownLeft, noHint: b.noHint}
	for i, m := range b.msgs {
		if drop[i] {
			continue
		}
		rest.msgs = append(rest.msgs, m)
		if b.kind != "" {
			rest.events = append(rest.events, b.events[i])
		} else {
			rest.errs, rest.reasons = append(rest.errs, b.errs[i]), append(rest.reasons, b.reasons[i])
		}
	}
	return rest
}

// refuse is the refusal of row i of part.
func (p *Pipeline) refuse(part *batch, i int, reason string) refusal {
	r := refusal{msg: part.msgs[i], reason: reason}
	if part.kind == "" {
		r.orig, r.label = &part.errs[i], part.reasons[i]
	}
	return r
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

func (p *Pipeline) write(ctx context.Context, b *batch, token string) error {
	if b.kind != "" {
		return p.sink.InsertEvents(ctx, b.kind, b.events, token)
	}
	if err := p.sink.InsertErrors(ctx, b.errs, token); err != nil {
		return err
	}
	// A NATS error carries no ClickHouse exception, so sink.Classify makes it Retry.
	return p.deadLetter(ctx, b.errs)
}

// deadLetter publishes refused messages to the dead-letter stream and waits for the stream to
// store them. Nats-Msg-Id is the original stream and sequence, so a retry within the stream's
// duplicate window stores each once.
func (p *Pipeline) deadLetter(ctx context.Context, errs []sink.IngestError) error {
	maxPayload := int(p.js.Conn().MaxPayload())
	futures := make([]jetstream.PubAckFuture, 0, len(errs))
	for _, e := range errs {
		f, err := p.js.PublishMsgAsync(p.deadLetterMsg(e, maxPayload))
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

// deadLetterMsg is the dead letter of e, made to fit maxPayload (0: unknown, not checked) with
// its headers: the reason is shortened first, then the payload cut as a last resort, since a
// message the server cannot take would be retried forever.
func (p *Pipeline) deadLetterMsg(e sink.IngestError, maxPayload int) *nats.Msg {
	m := nats.NewMsg(p.topo.DLQSubject(e.Subject))
	m.Data = e.Payload
	reason := headerValue(e.Reason)
	m.Header.Set(bus.HeaderDLQReason, reason)
	m.Header.Set(bus.HeaderDLQSubject, e.Subject)
	m.Header.Set(bus.HeaderDLQStreamSeq, strconv.FormatUint(e.StreamSeq, 10))
	m.Header.Set(jetstream.MsgIDHeader, p.topo.Stream()+"-"+strconv.FormatUint(e.StreamSeq, 10))
	if maxPayload <= 0 || msgSize(m) <= maxPayload {
		return m
	}
	m.Header.Set(bus.HeaderDLQReason, schema.Truncate(reason, 256))
	m.Header.Set(bus.HeaderDLQPayloadTruncated, strconv.Itoa(len(e.Payload)))
	if over := msgSize(m) - maxPayload; over > 0 {
		m.Data = e.Payload[:max(0, len(e.Payload)-over)]
	}
	return m
}

// msgSize is the size nats.go checks against max_payload: the payload and the encoded headers
// ("NATS/1.0\r\n", "Key: Value\r\n" each, "\r\n").
func msgSize(m *nats.Msg) int {
	n := len(m.Data) + len("NATS/1.0\r\n\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
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

// deadLetterOnly publishes rows that ingest_errors itself refused to the dead-letter stream,
// with both reasons, retrying while NATS fails, then terminates them. It gives up only when ctx
// ends; the messages are then redelivered.
func (p *Pipeline) deadLetterOnly(ctx context.Context, whole *batch, refused []refusal) {
	errs := make([]sink.IngestError, len(refused))
	for i, r := range refused {
		errs[i] = *r.orig
		errs[i].Reason = r.orig.Reason + "; not recorded in ingest_errors, which refused it: " + r.reason
	}
	p.log.Error("ingest_errors refused rows; they are in the dead-letter stream only", "rows", len(refused), "reason", refused[0].reason)
	policy := p.set.retry()
	policy.AttemptTimeout = p.insertTimeout()
	if err := retry.Do(ctx, policy, func(ctx context.Context) error { return p.deadLetter(ctx, errs) },
		func(_ int, err error, wait time.Duration) {
			p.log.Warn("publish dead letters failed, retrying", "retry_in", wait, "error", err)
			p.keepAlive(whole, time.Now())
		}); err != nil {
		return // ctx ended
	}
	for _, r := range refused {
		p.terminate(r.msg, r.label)
	}
}

func (p *Pipeline) ack(b *batch) {
	if b.kind == "" {
		for i, m := range b.msgs {
			p.terminate(m, b.reasons[i])
		}
		return
	}
	for _, m := range b.msgs {
		if err := m.Ack(); err != nil {
			// The message is redelivered and de-duplicated; nothing is lost.
			p.metrics.AckErrors.Inc()
			continue
		}
		p.acked.Add(1)
		p.metrics.Acked.Inc()
	}
}

// terminate ends a dead-lettered message: JetStream never redelivers it, and its advisory
// carries the reason label.
func (p *Pipeline) terminate(m jetstream.Msg, label string) {
	p.metrics.DeadLettered.WithLabelValues(label).Inc()
	if err := m.TermWithReason("dead-lettered: " + label); err != nil {
		// Redelivered, refused again and stored once more under the same ingest_errors key
		// and Nats-Msg-Id; nothing is lost.
		p.metrics.AckErrors.Inc()
		return
	}
	p.acked.Add(1)
	p.metrics.Acked.Inc()
}
