package demo

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go"

	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/schema/publish"
)

// Baseline describes the synthetic normal day the demo publishes before its scenarios. The
// detector compares every window with the same system's previous day (minus the last hour); a
// fresh machine has none, and some rules (retrieval_version_change) have no meaning without one.
type Baseline struct {
	// From and To bound the day; To is at least an hour before the demo so the demo's own
	// traffic never falls into it.
	From, To time.Time
	// RatePerSecond is the arrival rate of each of the two request streams (RAG app and plain API).
	RatePerSecond float64
	// Model, App, Engine, EmbeddingModel and IndexVersion name the demo's own system so the
	// detector's per-app and per-engine baselines find it.
	Model, App, Engine, EmbeddingModel, IndexVersion string
}

// Traffic generates the day: RAG requests of App (top passage score ≈ 0.88 with the index's
// embedding model, 0.1% wrong-script answers, no 5xx), plain API requests without an app, and an
// engine sample every minute with nothing waiting.
func (b Baseline) Traffic(seed uint64) *synth.Traffic {
	g := synth.New(seed)
	rag := synth.NormalShape()
	rag.Model, rag.App, rag.EmbeddingModelVersion, rag.IndexVersion = b.Model, b.App, b.EmbeddingModel, b.IndexVersion
	api := rag
	api.App, api.EmbeddingModelVersion, api.IndexVersion, api.TopScore = "", "", "", 0
	t := g.Requests(b.From, b.To, synth.Constant(b.RatePerSecond), rag)
	t.Add(g.Requests(b.From, b.To, synth.Constant(b.RatePerSecond), api))
	eng := synth.NormalEngine(synth.Constant(2*b.RatePerSecond), 2.1)
	eng.Engine, eng.Model, eng.Every = b.Engine, b.Model, time.Minute
	t.Add(g.Samples(b.From, b.To, eng))
	return t
}

// baselineBatch is how many baseline events are published before waiting for their acknowledgements.
const baselineBatch = 1000

// PublishBaseline publishes t through NATS JetStream (the same path as the gateway's and the
// collector's events) and waits until the consumer has written every request into ClickHouse.
func PublishBaseline(ctx context.Context, nc *nats.Conn, prefix, spoolDir string, conn driver.Conn, t *synth.Traffic, log *slog.Logger) error {
	pub, err := publish.New(nc, prefix, publish.Config{SpoolDir: spoolDir, Fsync: publish.FsyncNever, Logger: log})
	if err != nil {
		return fmt.Errorf("open baseline publisher: %w", err)
	}
	abort := func() { _ = closeBounded(pub, 10*time.Second) }
	for i, e := range t.Events() {
		if err := pub.Publish(e); err != nil {
			abort()
			return fmt.Errorf("publish baseline event %s: %w", e.Head().EventID, err)
		}
		// A day of events in one burst would outrun the publisher's window of unacknowledged
		// messages and spill to its spool; pace the burst by acknowledgements instead.
		if n := uint64(i + 1); n%baselineBatch == 0 {
			if err := waitFor(ctx, 60*time.Second, func() (bool, error) {
				st := pub.Stats()
				return st.Published+st.Spooled >= n, nil
			}, "JetStream to acknowledge the baseline events"); err != nil {
				abort()
				return err
			}
		}
	}
	// Events whose acknowledgement is late go to the publisher's spool and are replayed from
	// there; Close does not wait for the replay, so wait here until the spool is empty.
	if err := waitFor(ctx, 90*time.Second, func() (bool, error) {
		st := pub.Stats()
		return st.QueueEvents == 0 && st.SpoolEvents == 0, nil
	}, "JetStream to acknowledge the baseline events"); err != nil {
		abort()
		return err
	}
	if err := closeBounded(pub, time.Minute); err != nil {
		return fmt.Errorf("flush baseline events to NATS: %w", err)
	}
	if st := pub.Stats(); st.Dropped > 0 || st.SpoolEvents > 0 {
		return fmt.Errorf("baseline events not all acknowledged by JetStream: %d dropped, %d still spooled", st.Dropped, st.SpoolEvents)
	}
	want := uint64(len(t.Finished))
	return waitFor(ctx, 90*time.Second, func() (bool, error) {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM requests WHERE arrival_ts < now64() - INTERVAL 1 HOUR").Scan(&n); err != nil {
			return false, fmt.Errorf("count baseline requests: %w", err)
		}
		return n >= want, nil
	}, fmt.Sprintf("the consumer to write the %d baseline requests", want))
}

// closeBounded closes pub with a deadline of d, and gives up waiting a little after it: the demo
// must end even if a publisher cannot finish its Close.
func closeBounded(pub *publish.Publisher, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- pub.Close(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d + 5*time.Second):
		return fmt.Errorf("the publisher did not close within %s", d+5*time.Second)
	}
}

// waitFor polls cond every 250 ms until it holds, fails, ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error), what string) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
