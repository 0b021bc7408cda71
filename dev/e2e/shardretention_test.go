package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/consumer/sink"
)

// On a sharded cluster a record older than the retention of the local table its rows land in is
// dead-lettered with the reason, never acknowledged into nothing: the Distributed table under the
// name has no TTL of its own, and the consumer used to read that one and enforce none, so a 40-day
// old request.finished was acknowledged and then dropped by the shard's TTL at insert (not stored,
// not in ingest_errors, not in the dead-letter stream). A 20-day old one, within the 30 days, is
// stored. `servescope migrate ttl` changes the TTL of every node's local table
// (chstore.SetTTLSharded), and the sink reads the new one from there.
func TestShardedRetentionDeadLettersWhatTheShardsWouldDrop(t *testing.T) {
	shards, ch, sharded := startSharded(t)
	js, topo, ncfg := testenv.JetStream(t)
	cons := config.Consumer{Durable: "retention", BatchRows: 100, FlushInterval: 200 * time.Millisecond}
	testenv.Provision(t, js, ncfg, cons.DurableConsumer())
	runConsumer(t, cons, ncfg, ch)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	now := time.Now().UTC()
	old := eventgen.RequestFinished(1, now.Add(-40*24*time.Hour))
	recent := eventgen.RequestFinished(2, now.Add(-20*24*time.Hour))
	var oldSeq uint64
	for _, e := range []*schema.RequestFinished{old, recent} {
		ack, err := js.Publish(ctx, topo.Subject(schema.KindRequestFinished), eventgen.Encode(e), jetstream.WithMsgID(e.EventID))
		if err != nil {
			t.Fatal(err)
		}
		if e == old {
			oldSeq = ack.Sequence
		}
	}

	// The recent one lands; the old one is in ingest_errors (through the Distributed table) with
	// the local table's TTL as its reason.
	var reason string
	waitFor(t, 3*time.Minute, "the 20-day old record stored and the 40-day old one in ingest_errors", func(ctx context.Context) (bool, string, error) {
		var stored uint64
		if err := sharded.QueryRow(chstore.WithParams(ctx, map[string]string{"id": recent.EventID}),
			"SELECT count() FROM requests FINAL WHERE event_id = {id:String}").Scan(&stored); err != nil {
			return false, "", err
		}
		reason = ""
		rows, err := sharded.Query(chstore.WithParams(ctx, map[string]string{"seq": strconv.FormatUint(oldSeq, 10)}),
			"SELECT reason FROM ingest_errors FINAL WHERE stream_seq = {seq:UInt64}")
		if err != nil {
			return false, "", err
		}
		defer rows.Close()
		if rows.Next() {
			if err := rows.Scan(&reason); err != nil {
				return false, "", err
			}
		}
		return stored == 1 && reason != "", fmt.Sprintf("stored %d, reason %q", stored, reason), rows.Err()
	})
	local := chstore.LocalDatabase(ch)
	for _, want := range []string{"arrival_ts " + old.ArrivalTS.UTC().Format(time.RFC3339Nano), "older than the TTL of " + local + ".requests (toDateTime(arrival_ts) + toIntervalDay(30))", "servescope migrate ttl requests DAYS"} {
		if !strings.Contains(reason, want) {
			t.Errorf("ingest_errors' reason for the 40-day old record:\n%s\nwant it to contain %q", reason, want)
		}
	}
	var kept uint64
	if err := sharded.QueryRow(chstore.WithParams(ctx, map[string]string{"id": old.EventID}),
		"SELECT count() FROM requests WHERE event_id = {id:String}").Scan(&kept); err != nil || kept != 0 {
		t.Errorf("the 40-day old record is in requests %d times (%v), want 0", kept, err)
	}
	dlq, err := js.Stream(ctx, topo.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	msg, err := dlq.GetLastMsgForSubject(ctx, topo.DLQSubject(topo.Subject(schema.KindRequestFinished)))
	if err != nil {
		t.Fatalf("the dead-letter stream holds nothing for request.finished: %v", err)
	}
	if got := msg.Header.Get(bus.HeaderDLQStreamSeq); got != strconv.FormatUint(oldSeq, 10) || !strings.Contains(msg.Header.Get(bus.HeaderDLQReason), "older than the TTL of "+local+".requests") {
		t.Errorf("dead letter: stream seq %s (want %d), reason %q", got, oldSeq, msg.Header.Get(bus.HeaderDLQReason))
	}
	t.Logf("40-day old request.finished (stream seq %d) dead-lettered: %s", oldSeq, reason)

	// migrate ttl on a cluster: every node's local table, and the sink reads the new TTL there.
	nodes, err := chstore.SetTTLSharded(ctx, ch, "requests", 60)
	if err != nil || len(nodes) != len(shards) {
		t.Fatalf("SetTTLSharded: nodes %v, %v; want all %d", nodes, err, len(shards))
	}
	for _, s := range shards {
		node := ch
		node.Addr, node.Cluster, node.Database = []string{s.Addr()}, "", local
		conn, err := chstore.Open(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		var engine string
		err = conn.QueryRow(ctx, "SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = 'requests'").Scan(&engine)
		conn.Close()
		if err != nil || !strings.Contains(engine, "TTL toDateTime(arrival_ts) + toIntervalDay(60)") {
			t.Errorf("node %s: requests is %q, %v; want TTL 60 days", s.Addr(), engine, err)
		}
	}
	ret, err := sink.New(sharded).LoadRetention(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := ret[sink.TableRequests]; r.Keep != 60*24*time.Hour || r.Table != local+".requests" {
		t.Errorf("retention of requests after migrate ttl 60: %+v, want 60 days from %s.requests", r, local)
	}
	shards[1].Stop()
	if _, err := chstore.SetTTLSharded(ctx, ch, "requests", 45); err == nil || !strings.Contains(err.Error(), shards[1].Addr()) || !strings.Contains(err.Error(), "run it again") {
		t.Errorf("SetTTLSharded with a node down: %v, want an error naming it and saying to run again", err)
	}
	shards[1].Start()
}
