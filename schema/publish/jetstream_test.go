package publish_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testnet"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/schema/publish"
)

func TestMain(m *testing.M) {
	// Small streams: JetStream reserves max_bytes on the shared server.
	if os.Getenv("SERVESCOPE_STREAM_MAX_BYTES") == "" {
		os.Setenv("SERVESCOPE_STREAM_MAX_BYTES", "268435456")
	}
	os.Exit(m.Run())
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func connect(t *testing.T, cfg config.NATS) *nats.Conn {
	t.Helper()
	nc, err := cfg.Connect(t.Name(), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// streamIDs returns the event ids on the stream in stream order.
func streamIDs(t *testing.T, js jetstream.JetStream, topo bus.Topology) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, topo.Stream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get message %d: %v", seq, err)
		}
		e, err := schema.Decode(m.Subject, m.Data)
		if err != nil {
			t.Fatalf("decode message %d: %v", seq, err)
		}
		ids = append(ids, e.Head().EventID)
	}
	return ids
}

func TestSpoolFromAnEarlierRunIsReplayedInOrder(t *testing.T) {
	t.Parallel()
	js, topo, cfg := testenv.JetStream(t)
	dir := t.TempDir()

	// First run: NATS unreachable, everything goes to the spool.
	down := cfg
	down.URL = "nats://" + testnet.RefusingAddr(t)
	p1, err := publish.New(connect(t, down), topo.Prefix, publish.Config{SpoolDir: dir, Logger: quiet, SegmentBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 300 {
		e := schema.NewAppRecord(fmt.Sprintf("req-%03d", i), "app", time.Now())
		if err := p1.Publish(e); err != nil {
			t.Fatal(err)
		}
		want = append(want, e.EventID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := p1.Stats(); st.Spooled != 300 || st.SpoolEvents != 300 {
		t.Fatalf("first run stats %+v", st)
	}

	// Second run: NATS is there; the spool is replayed before anything new.
	p2, err := publish.New(connect(t, cfg), topo.Prefix, publish.Config{SpoolDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		e := schema.NewAppRecord(fmt.Sprintf("new-%03d", i), "app", time.Now())
		if err := p2.Publish(e); err != nil {
			t.Fatal(err)
		}
		want = append(want, e.EventID)
	}
	if err := p2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := streamIDs(t, js, topo)
	if len(got) != len(want) {
		t.Fatalf("%d events on the stream, want %d (stats %+v)", len(got), len(want), p2.Stats())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("event %d on the stream is %s, want %s: order not kept", i, got[i], want[i])
		}
	}
	// The new events queued behind the spool, so they were replayed too.
	if st := p2.Stats(); st.Replayed != 350 || st.Spooled != 50 || st.Dropped != 0 || st.SpoolEvents != 0 {
		t.Fatalf("second run stats %+v", st)
	}
}

func TestCloseDeliversEverythingQueued(t *testing.T) {
	t.Parallel()
	js, topo, cfg := testenv.JetStream(t)
	p, err := publish.New(connect(t, cfg), topo.Prefix, publish.Config{SpoolDir: t.TempDir(), Logger: quiet, Linger: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	for i := range n {
		st := schema.NewRequestStarted(fmt.Sprintf("r-%d", i), time.Now())
		st.Endpoint = "/v1/chat/completions"
		if err := p.Publish(st); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.Published+st.Replayed != n || st.Dropped != 0 || st.SpoolEvents != 0 {
		t.Fatalf("stats after close %+v, want %d delivered", st, n)
	}
	if got := len(streamIDs(t, js, topo)); got != n {
		t.Fatalf("%d events on the stream after Close, want %d", got, n)
	}
}

// TestBatchesAreAcknowledgedWhileRunning checks that every event of lingered batches is counted
// as published as soon as JetStream acknowledges it, not only at Close: a batch whose
// acknowledgement bookkeeping stalled would show up as Published short of n until the close
// deadline (and then as spooled events).
func TestBatchesAreAcknowledgedWhileRunning(t *testing.T) {
	t.Parallel()
	js, topo, cfg := testenv.JetStream(t)
	// The test is about bookkeeping, not latency: an acknowledgement slower than the default 5 s
	// on a loaded machine would spool an event and fail it for the wrong reason.
	p, err := publish.New(connect(t, cfg), topo.Prefix, publish.Config{SpoolDir: t.TempDir(), Logger: quiet, Linger: 5 * time.Millisecond, AckTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const bursts, per = 20, 37
	var want []string
	for b := range bursts {
		for i := range per {
			e := schema.NewRequestStarted(fmt.Sprintf("r-%d-%d", b, i), time.Now())
			e.Endpoint = "/v1/chat/completions"
			if err := p.Publish(e); err != nil {
				t.Fatal(err)
			}
			want = append(want, e.EventID)
		}
		time.Sleep(7 * time.Millisecond) // past the linger: the next burst is another batch
	}
	deadline := time.Now().Add(2 * time.Minute)
	for p.Stats().Published < bursts*per && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := p.Stats(); st.Published != bursts*per || st.Spooled != 0 || st.Dropped != 0 {
		t.Fatalf("stats while running %+v, want %d published and none spooled", st, bursts*per)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := streamIDs(t, js, topo)
	if len(got) != len(want) {
		t.Fatalf("%d events on the stream, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("event %d on the stream is %s, want %s: order not kept", i, got[i], want[i])
		}
	}
}
