package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/lease"
)

// ttl is short so takeovers happen within the test; every wait below is bounded generously
// (the machine is shared), and only lower bounds, which the server guarantees, are asserted
// on time.
const ttl = 2 * time.Second

// bucket provisions the test's lease bucket through the setup step, with a TTL of ttl.
func bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	js, topo, cfg := testenv.NATSPrefix(t)
	cfg.LeaseTTL = ttl
	testenv.Provision(t, js, cfg)
	kv, _, err := bus.CheckLeases(t.Context(), js, topo, cfg.StreamSettings())
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func candidate(t *testing.T, kv jetstream.KeyValue, holder string) *lease.Lease {
	t.Helper()
	l, err := lease.New(t.Context(), kv, "job", holder, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// waitUntil polls cond every 20 ms for up to a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after a minute", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// term is one holder's run of lead: from when lead started to when it returned.
type term struct {
	holder     string
	start, end time.Time
}

// terms records the terms of several candidates running at once.
type terms struct {
	mu   sync.Mutex
	list []term
	// leading counts the candidates inside lead right now; max is its highest value.
	leading, max int
}

func (ts *terms) lead(holder string) func(context.Context) error {
	return func(ctx context.Context) error {
		ts.mu.Lock()
		ts.leading++
		ts.max = max(ts.max, ts.leading)
		start := time.Now()
		ts.mu.Unlock()
		<-ctx.Done()
		ts.mu.Lock()
		ts.leading--
		ts.list = append(ts.list, term{holder, start, time.Now()})
		ts.mu.Unlock()
		return nil
	}
}

func (ts *terms) current() (leading, most int) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.leading, ts.max
}

// Three candidates for one key: one leads at a time; when the holder stops gracefully it gives the
// lease up and another takes over, until all have led once.
func TestOneHolderAtATimeAndHandover(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	var ts terms
	type running struct {
		l      *lease.Lease
		cancel context.CancelFunc
		done   chan error
	}
	var cs []*running
	for i := range 3 {
		ctx, cancel := context.WithCancel(t.Context())
		r := &running{l: candidate(t, kv, fmt.Sprintf("c%d", i)), cancel: cancel, done: make(chan error, 1)}
		go func() { r.done <- r.l.Run(ctx, ts.lead(fmt.Sprintf("c%d", i))) }()
		cs = append(cs, r)
		t.Cleanup(cancel)
	}
	for round := range 3 {
		waitUntil(t, fmt.Sprintf("led by one candidate (round %d)", round), func() bool {
			n, _ := ts.current()
			return n == 1
		})
		var holder *running
		for _, c := range cs {
			if c.l.Held() {
				if holder != nil {
					t.Fatal("two candidates report Held")
				}
				holder = c
			}
		}
		if holder == nil {
			t.Fatal("a candidate leads but none reports Held")
		}
		holder.cancel()
		select {
		case err := <-holder.done:
			if err != nil {
				t.Fatalf("Run after a graceful stop = %v, want nil", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Run did not return after its context ended")
		}
		if holder.l.Held() {
			t.Error("Held after Run returned")
		}
		cs = removeRunning(cs, holder)
	}
	if _, most := ts.current(); most != 1 {
		t.Fatalf("%d candidates led at once", most)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.list) != 3 {
		t.Fatalf("terms %+v, want one per candidate", ts.list)
	}
	for i := 1; i < len(ts.list); i++ {
		if ts.list[i].start.Before(ts.list[i-1].end) {
			t.Errorf("term %+v began before term %+v ended", ts.list[i], ts.list[i-1])
		}
	}
}

func removeRunning[T comparable](list []T, x T) []T {
	var out []T
	for _, v := range list {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}

// A holder that died leaves its key behind: a candidate takes the lease only once the server
// has expired it, no sooner than one TTL after the dead holder's last write.
func TestTakeoverAfterTheDeadHoldersTTL(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	written := time.Now()
	if _, err := kv.Create(t.Context(), "job", []byte("dead-holder")); err != nil {
		t.Fatal(err)
	}
	l := candidate(t, kv, "standby")
	took := make(chan time.Time, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		_ = l.Run(ctx, func(ctx context.Context) error {
			took <- time.Now()
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case at := <-took:
		if at.Sub(written) < ttl {
			t.Fatalf("took the lease %s after the dead holder's write, before its TTL (%s)", at.Sub(written), ttl)
		}
	case <-time.After(time.Minute):
		t.Fatal("the standby never took the expired lease")
	}
}

// A holder whose key another writer changed finds out at its next renewal: its term ends, lead's
// context is cancelled with ErrLost as the cause, and Run returns ErrLost.
func TestLostWhenAnotherWriterTakesTheKey(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	l := candidate(t, kv, "holder")
	var changes []bool
	var mu sync.Mutex
	l.OnChange = func(held bool) { mu.Lock(); changes = append(changes, held); mu.Unlock() }
	leading := make(chan struct{})
	cause := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- l.Run(t.Context(), func(ctx context.Context) error {
			close(leading)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil
		})
	}()
	select {
	case <-leading:
	case <-time.After(time.Minute):
		t.Fatal("the only candidate never took the lease")
	}
	if _, err := kv.Put(t.Context(), "job", []byte("usurper")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, lease.ErrLost) {
			t.Fatalf("Run = %v, want ErrLost", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not notice the key was taken")
	}
	if c := <-cause; !errors.Is(c, lease.ErrLost) {
		t.Errorf("lead's context ended with cause %v, want ErrLost", c)
	}
	if l.Held() {
		t.Error("Held after the lease was lost")
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(changes) != "[true false]" {
		t.Errorf("OnChange calls %v, want [true false]", changes)
	}
	e, err := kv.Get(t.Context(), "job")
	if err != nil || string(e.Value()) != "usurper" {
		t.Errorf("key after the loss: %v, %v; the loser must not delete another holder's key", e, err)
	}
}

// A bucket without a TTL would keep a dead holder's lease for ever: New refuses it.
func TestBucketWithoutTTLIsRefused(t *testing.T) {
	t.Parallel()
	js, topo, _ := testenv.NATSPrefix(t)
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: topo.LeaseBucket(), History: 1, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.New(t.Context(), kv, "job", "h", nil); err == nil {
		t.Fatal("New accepted a bucket without a TTL")
	}
	if _, _, err := bus.CheckLeases(t.Context(), js, topo, bus.StreamSettings{}); !errors.Is(err, bus.ErrNotSetUp) {
		t.Fatalf("CheckLeases = %v, want a setup error", err)
	}
}
