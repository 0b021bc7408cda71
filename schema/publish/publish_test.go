package publish

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testnet"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/schema"
)

// unreachableConn returns a connection that keeps trying a loopback port nobody listens on, as a
// service's connection does while NATS is down.
func unreachableConn(t *testing.T) *nats.Conn {
	t.Helper()
	addr := testnet.RefusingAddr(t)
	nc, err := nats.Connect("nats://"+addr, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatalf("connect with retry: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func TestPublisherSpoolsWhileNATSIsAway(t *testing.T) {
	nc := unreachableConn(t)
	dir := t.TempDir()
	var logBuf bytes.Buffer
	reg := prometheus.NewRegistry()
	p, err := New(nc, "t", Config{SpoolDir: dir, Logger: testLogger(&logBuf), Registerer: reg, QueueSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := range n {
		if err := p.Publish(schema.NewAppRecord("req-"+string(rune('a'+i%26)), "app", time.Now())); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	bad := schema.NewAppRecord("", "app", time.Now()) // request_id is required
	var verr schema.ValidationErrors
	if err := p.Publish(bad); !errors.As(err, &verr) {
		t.Fatalf("publish invalid event = %v, want ValidationErrors", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	st := p.Stats()
	if st.Spooled != n || st.Published != 0 || st.Dropped != 0 || st.SpoolEvents != n {
		t.Fatalf("stats after close = %+v, want %d spooled and waiting", st, n)
	}
	if got := counterValue(t, reg, "servescope_publish_events_spooled_total"); got != n {
		t.Fatalf("spooled metric = %v, want %d", got, n)
	}
	if err := p.Publish(schema.NewAppRecord("r", "app", time.Now())); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after close = %v, want ErrClosed", err)
	}

	// The next publisher on the directory finds the events.
	p2, err := New(nc, "t", Config{SpoolDir: dir, Logger: testLogger(&logBuf)})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close(ctx)
	if st := p2.Stats(); st.SpoolEvents != n {
		t.Fatalf("spool events seen by the next publisher = %d, want %d", st.SpoolEvents, n)
	}
}

func TestPublisherDropsOnlyWhenSpoolIsFull(t *testing.T) {
	nc := unreachableConn(t)
	var logBuf bytes.Buffer
	p, err := New(nc, "t", Config{SpoolDir: t.TempDir(), SpoolMaxBytes: 2000, Logger: testLogger(&logBuf)})
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		if err := p.Publish(schema.NewAppRecord("r", "app", time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.Dropped == 0 || st.Spooled+st.Dropped != 40 || st.SpoolBytes > 2000 {
		t.Fatalf("stats = %+v: want some dropped, spooled+dropped = 40, spool within 2000 bytes", st)
	}
	if !bytes.Contains(logBuf.Bytes(), []byte("level=ERROR")) || !bytes.Contains(logBuf.Bytes(), []byte("event dropped")) {
		t.Fatalf("drop not logged as an error:\n%s", logBuf.String())
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	nc := unreachableConn(t)
	for name, cfg := range map[string]Config{
		"no spool dir": {},
		"bad fsync":    {SpoolDir: t.TempDir(), Fsync: "sometimes"},
	} {
		if _, err := New(nc, "t", cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	if _, err := New(nc, "", Config{SpoolDir: t.TempDir()}); err == nil {
		t.Error("empty prefix: New succeeded")
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}
