package publish_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/schema/publish"
)

// waitUntil polls cond until it holds or a minute passes (a loaded machine: the outcome, not
// the time, is what the tests assert).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPublisherWaitsForTheSetup starts a publisher of request.started where nothing is set up: its
// stream check reports the missing stream and the command to run, its events go to the spool, and
// no stream appears. Once the setup step has run, the check passes and every event reaches the
// stream exactly once.
func TestPublisherWaitsForTheSetup(t *testing.T) {
	t.Parallel()
	js, topo, cfg := testenv.NATSPrefix(t)
	p, err := publish.New(connect(t, cfg), topo.Prefix, publish.Config{SpoolDir: t.TempDir(), Logger: quiet,
		RetryInterval: 50 * time.Millisecond, Kinds: []schema.Kind{schema.KindRequestStarted}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	waitUntil(t, "the stream check to find nothing set up", func() bool { return errors.Is(p.StreamCheck(), bus.ErrNotSetUp) })
	if err := p.StreamCheck(); !strings.Contains(err.Error(), "stream "+topo.Stream()+" (subjects "+topo.Subjects()+") does not exist: run `servescope migrate up`") {
		t.Errorf("StreamCheck = %v", err)
	}
	const n = 50
	for i := range n {
		st := schema.NewRequestStarted(fmt.Sprintf("r-%d", i), time.Now())
		st.Endpoint = "/v1/chat/completions"
		if err := p.Publish(st); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the events in the spool", func() bool { return p.Stats().Spooled == n })
	if _, err := js.Stream(context.Background(), topo.Stream()); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("stream %s before the setup: %v, want none", topo.Stream(), err)
	}

	testenv.Provision(t, js, cfg)
	waitUntil(t, "the stream check to pass", func() bool { return p.StreamCheck() == nil })
	waitUntil(t, "the spool to drain", func() bool { return p.Stats().SpoolEvents == 0 })
	ids := streamIDs(t, js, topo)
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	if len(ids) != n || len(seen) != n {
		t.Fatalf("%d events (%d distinct) on the stream, want %d once each", len(ids), len(seen), n)
	}
}
