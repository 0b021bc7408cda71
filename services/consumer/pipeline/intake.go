package pipeline

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/internal/retry"
)

// chunkSize is the most messages handed to a decoder at once.
const chunkSize = 250

// chunkLinger is the longest the first message of a chunk waits for more before the chunk goes
// to the decoders. Without it, a consumer as fast as its pulls (an idle machine) hands every
// message over on its own, paying a goroutine wake-up per message at every stage; with it, a
// backlog moves in chunks while a trickle waits a few milliseconds against the second of
// CONSUMER_FLUSH_INTERVAL.
const chunkLinger = 2 * time.Millisecond

// fetchers is how many pulls are in flight at a time: while one pull's messages are handed on,
// the next one is already on its way, so a pull's round trip is no gap in the flow.
const fetchers = 2

// pullMaxBytes is the least byte budget of the messages requested at a time; it is raised to the
// server's max_payload when that is larger, as a pull smaller than one message stalls.
const pullMaxBytes = 32 << 20

// disconnectedPoll is how often a fetcher looks whether a lost NATS connection is back.
const disconnectedPoll = 100 * time.Millisecond

// intake pulls messages from the durable consumer until ctx ends and hands them to the decoders
// in chunks, fetchers pulls at a time. It closes out when every pull in flight has ended.
//
// Pulls are explicit requests (jetstream.Consumer.Fetch), not nats.go's Consume: Consume asks
// for more messages only while handling one, and skips asking while its previous request is
// still being sent; when the last messages it expects all pass in that moment, it never asks
// again until its missed-heartbeat timer (30 s) starts it over. Draining a backlog, that stall
// happened about once a million messages on an idle machine and several times under load,
// and held the drain at a third of its bound (the consumer's package documentation has the
// measurement).
func (p *Pipeline) intake(ctx context.Context, out chan<- []jetstream.Msg) {
	defer close(out)
	var wg sync.WaitGroup
	for range fetchers {
		wg.Go(func() { p.fetchLoop(ctx, out) })
	}
	wg.Wait()
}

// fetchLoop sends one pull after the other until ctx ends, handing each pull's messages to out
// as they arrive. A pull in flight when ctx ends is finished (it ends within fetchWait), so that
// every message the server delivered is taken.
func (p *Pipeline) fetchLoop(ctx context.Context, out chan<- []jetstream.Msg) {
	backoff := p.set.retry().Backoff()
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	nc := p.js.Conn()
	batch := max(1, p.set.PullMessages()/fetchers)
	for ctx.Err() == nil {
		if !nc.IsConnected() {
			// A pull sent now would wait in nats.go's reconnect buffer and reach the server after
			// this fetcher stopped listening for it: its messages would wait for AckWait.
			retry.Sleep(ctx, disconnectedPoll)
			continue
		}
		// The pulls in flight hold at most pullMaxBytes together, and each at least one message
		// of the largest size the server takes.
		maxBytes := max(pullMaxBytes/fetchers, int(nc.MaxPayload()))
		mb, err := p.cons.Fetch(batch, jetstream.FetchMaxWait(p.set.fetchWait()), jetstream.FetchMaxBytes(maxBytes))
		if err != nil {
			p.pullFailed(ctx, backoff, err)
			continue
		}
		took := take(mb.Messages(), out, linger)
		if err := mb.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
			p.pullFailed(ctx, backoff, err)
			continue
		}
		if took > 0 {
			backoff.Reset()
		}
	}
}

// pullFailed counts and logs a failed pull and waits before the next.
func (p *Pipeline) pullFailed(ctx context.Context, backoff *retry.Backoff, err error) {
	p.metrics.ConsumeErrors.Inc()
	wait := backoff.Next()
	p.log.Warn("pull from JetStream failed, retrying", "stream", p.topo.Stream(), "durable", p.set.Durable, "retry_in", wait, "error", err)
	retry.Sleep(ctx, wait)
}

// take hands the messages of one pull to out as they arrive, in chunks of at most chunkSize, and
// returns how many it took. A chunk goes out when it is full, when the pull ends, or chunkLinger
// after its first message arrived (linger is a stopped timer take may use).
func take(msgs <-chan jetstream.Msg, out chan<- []jetstream.Msg, linger *time.Timer) int {
	took := 0
	var c []jetstream.Msg
	var due <-chan time.Time
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				linger.Stop()
				if len(c) > 0 {
					out <- c
				}
				return took
			}
			if c == nil {
				c = make([]jetstream.Msg, 0, chunkSize)
				linger.Reset(chunkLinger)
				due = linger.C
			}
			c = append(c, m)
			took++
			if len(c) == chunkSize {
				linger.Stop()
				out <- c
				c, due = nil, nil
			}
		case <-due:
			out <- c
			c, due = nil, nil
		}
	}
}
