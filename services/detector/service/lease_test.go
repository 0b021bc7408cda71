package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/lease"
	"github.com/servescope/servescope/services/detector/service"
)

// A detector with DETECTOR_LEASE takes the lease under its instance name and works; when another
// holder's write takes the key from it, it stops with an error wrapping lease.ErrLost (its
// supervisor restarts it as a standby) instead of working on beside the new holder.
func TestServeStopsWhenItLosesTheLease(t *testing.T) {
	t.Parallel()
	_, ch := testenv.ClickHouse(t)
	js, topo, nc := testenv.NATSPrefix(t)
	nc.LeaseTTL = 2 * time.Second
	testenv.Provision(t, js, nc)
	cfg := testConfig(ch)
	cfg.Interval, cfg.Lease, cfg.LeaseKey, cfg.Instance, cfg.NATS = time.Second, true, "detector", "first", nc
	defs, err := service.LoadRules("")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- service.Serve(ctx, cfg, defs, ln, slog.New(slog.NewTextHandler(io.Discard, nil))) }()

	kv, err := js.KeyValue(ctx, topo.LeaseBucket())
	if err != nil {
		t.Fatal(err)
	}
	for {
		if e, err := kv.Get(ctx, "detector"); err == nil && string(e.Value()) == "first" {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Serve returned %v before it took the lease", err)
		case <-ctx.Done():
			t.Fatal("the detector never took the lease")
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := kv.Put(ctx, "detector", []byte("usurper")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, lease.ErrLost) {
			t.Fatalf("Serve = %v, want an error wrapping lease.ErrLost", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve went on after another holder took the key")
	}
}
