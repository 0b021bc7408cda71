package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
)

// TestSetupCommands runs the setup step as an operator (or the compose file's migrate service)
// does, against a fresh subject prefix and database: `migrate up` creates the schema, both streams
// the durable consumer and the lease bucket; a second run changes nothing; `streams up` with another limit updates
// only that; `streams check` with a service's other settings reports the difference and changes
// nothing. It sets the process environment, so it does not run in parallel.
func TestSetupCommands(t *testing.T) {
	_, chCfg := testenv.ClickHouse(t)
	js, topo, natsCfg := testenv.NATSPrefix(t)
	t.Setenv("SERVESCOPE_CLICKHOUSE_DATABASE", chCfg.Database)
	t.Setenv("SERVESCOPE_CLICKHOUSE_ADDR", strings.Join(chCfg.Addr, ","))
	t.Setenv("SERVESCOPE_SUBJECT_PREFIX", natsCfg.SubjectPrefix)
	t.Setenv("SERVESCOPE_STREAM_MAX_BYTES", "268435456")
	t.Setenv("CONSUMER_DURABLE", "cli-writer")
	t.Setenv("CONSUMER_BATCH_ROWS", "500")

	// Before the setup, a check says what is missing and what to run.
	// The CLI prints the error (bus.ErrNotSetUp's message names what is missing and the command).
	if _, code, err := run(t, "streams", "check"); code != 1 || err == nil || !strings.Contains(err.Error(), "does not exist: run `servescope migrate up`") {
		t.Fatalf("streams check before the setup: exit %d, %v", code, err)
	}

	out, code, err := run(t, "migrate", "up")
	if code != 0 {
		t.Fatalf("migrate up: exit %d, %v\n%s", code, err, out)
	}
	for _, want := range []string{
		"stream " + topo.Stream() + ": created (subjects " + topo.Subjects() + ", max_age 168h0m0s, max_bytes 268435456, num_replicas 1, duplicate_window 2m0s)",
		"stream " + topo.DLQStream() + ": created (",
		"durable consumer cli-writer on " + topo.Stream() + ": created (filter_subjects " + topo.Subjects() + ", ack_wait 30s, max_ack_pending 2500, max_deliver -1)",
		"key-value bucket " + topo.LeaseBucket() + ": created (ttl 15s, history 1, num_replicas 1)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("migrate up printed no line %q:\n%s", want, out)
		}
	}

	out, code, err = run(t, "migrate", "up")
	if code != 0 || strings.Count(out, ": unchanged (") != 4 {
		t.Errorf("second migrate up: exit %d, %v; want four resources unchanged:\n%s", code, err, out)
	}

	t.Setenv("SERVESCOPE_STREAM_MAX_AGE", "24h")
	t.Setenv("SERVESCOPE_LEASE_TTL", "10s")
	out, code, err = run(t, "streams", "up")
	if code != 0 || !strings.Contains(out, "stream "+topo.Stream()+": updated (max_age 168h0m0s → 24h0m0s)") ||
		!strings.Contains(out, "stream "+topo.DLQStream()+": unchanged") ||
		!strings.Contains(out, "key-value bucket "+topo.LeaseBucket()+": updated (ttl 15s → 10s)") {
		t.Errorf("streams up with max_age 24h: exit %d, %v:\n%s", code, err, out)
	}

	// A service's settings that differ are reported, and the stream keeps the setup's.
	t.Setenv("SERVESCOPE_STREAM_MAX_AGE", "48h")
	t.Setenv("SERVESCOPE_LEASE_TTL", "20s")
	out, code, err = run(t, "streams", "check")
	if code != 0 || !strings.Contains(out, "stream "+topo.Stream()+": max_age is 24h0m0s, these settings say 48h0m0s") ||
		!strings.Contains(out, "key-value bucket "+topo.LeaseBucket()+" holds the leases (ttl 10s)") ||
		!strings.Contains(out, "key-value bucket "+topo.LeaseBucket()+": ttl is 10s, these settings say 20s") {
		t.Errorf("streams check with max_age 48h: exit %d, %v:\n%s", code, err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, topo.Stream())
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxAge; got != 24*time.Hour {
		t.Errorf("max_age after streams check = %s, want the setup's 24h", got)
	}
	if _, err := js.Consumer(ctx, topo.Stream(), "cli-writer"); errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Error("the durable consumer is gone")
	}
}
