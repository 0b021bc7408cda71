package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/internal/retry"
)

// chunkSize is the most messages handed to a decoder at once.
const chunkSize = 250

// pullMaxBytes is the least byte budget of the messages buffered by Consume; it is raised to
// the server's max_payload when that is larger, as a buffer smaller than one message stalls.
const pullMaxBytes = 32 << 20

// intake receives messages through nats.go's Consume until ctx ends and hands them to the
// decoders in chunks: as many as are waiting, at most chunkSize, so that a trickle is not
// delayed and a backlog is handed over in few channel operations. It closes out when done.
func (p *Pipeline) intake(ctx context.Context, out chan<- []jetstream.Msg) {
	defer close(out)
	msgs := make(chan jetstream.Msg, chunkSize)
	abandon := make(chan struct{})
	handler := func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-abandon:
			// Shutdown stopped waiting for the drain: the message stays unacknowledged and is
			// redelivered after AckWait.
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { chunk(msgs, done, out) })
	p.consume(ctx, handler)
	close(abandon)
	close(done)
	wg.Wait()
}

// chunk moves messages from in to out in chunks until done is closed and in is empty.
func chunk(in <-chan jetstream.Msg, done <-chan struct{}, out chan<- []jetstream.Msg) {
	for {
		var c []jetstream.Msg
		select {
		case m := <-in:
			c = append(make([]jetstream.Msg, 0, chunkSize), m)
		case <-done:
			for {
				c = make([]jetstream.Msg, 0, chunkSize)
			rest:
				for len(c) < chunkSize {
					select {
					case m := <-in:
						c = append(c, m)
					default:
						break rest
					}
				}
				if len(c) == 0 {
					return
				}
				out <- c
			}
		}
	fill:
		for len(c) < chunkSize {
			select {
			case m := <-in:
				c = append(c, m)
			default:
				break fill
			}
		}
		out <- c
	}
}

// consume runs Consume with handler until ctx ends, then drains it: messages nats.go already
// received are handed to handler, no more are requested. If consuming stops by itself (the
// durable consumer deleted, the connection closed) it is started again with backoff.
func (p *Pipeline) consume(ctx context.Context, handler jetstream.MessageHandler) {
	backoff := p.set.retry().Backoff()
	for ctx.Err() == nil {
		maxBytes := pullMaxBytes
		if mp := int(p.js.Conn().MaxPayload()); mp > maxBytes {
			maxBytes = mp
		}
		cc, err := p.cons.Consume(handler,
			jetstream.PullMaxMessagesWithBytesLimit(p.set.PullMessages(), maxBytes),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				// nats.go recovers from these by itself (a missed heartbeat makes it pull
				// again); they are worth a count and a line.
				p.metrics.ConsumeErrors.Inc()
				p.log.Warn("consuming from JetStream", "stream", p.topo.Stream(), "durable", p.set.Durable, "error", err)
			}))
		if err != nil {
			p.metrics.ConsumeErrors.Inc()
			wait := backoff.Next()
			p.log.Warn("start consuming from JetStream failed, retrying", "stream", p.topo.Stream(), "durable", p.set.Durable, "retry_in", wait, "error", err)
			retry.Sleep(ctx, wait)
			continue
		}
		started := time.Now()
		closed := cc.Closed()
		select {
		case <-ctx.Done():
			cc.Drain()
			t := time.NewTimer(p.set.ShutdownTimeout)
			select {
			case <-closed:
			case <-t.C:
				p.log.Warn("shutdown: JetStream consumption did not drain in time; messages not taken are redelivered after AckWait", "waited", p.set.ShutdownTimeout)
				cc.Stop()
			}
			t.Stop()
			return
		case <-closed:
			if time.Since(started) > p.set.RetryMax {
				backoff.Reset() // it ran well; this is a new failure
			}
			p.metrics.ConsumeErrors.Inc()
			wait := backoff.Next()
			p.log.Warn("consuming from JetStream stopped, starting again", "stream", p.topo.Stream(), "durable", p.set.Durable, "retry_in", wait)
			retry.Sleep(ctx, wait)
		}
	}
}
