package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema/publish"
	consumerpipeline "github.com/servescope/servescope/services/consumer/pipeline"
)

// shardDown is how long the shard stays stopped.
const shardDown = 30 * time.Second

// One shard of a live 2-shard ClickHouse stopped for 30 s under steady traffic through the real
// publisher and the real consumer, which writes through the sharded schema's synchronous
// Distributed inserts: an insert whose batch has rows for the stopped shard fails, the consumer
// holds the batch's messages unacknowledged and retries, and once the shard is back it catches
// up. The ledger of every published event_id against requests read with FINAL through the
// Distributed table says lost 0, duplicated 0.
func TestShardStoppedUnderTrafficLosesNothing(t *testing.T) {
	shards, ch, sharded := startSharded(t)
	ns := testenv.StartNATS(t)
	ncfg := testenv.NATSConfig(t)
	ncfg.URL = ns.URL()
	ncfg.SubjectPrefix = testenv.UniqueName("t")
	const durable = "shards"
	cons := config.Consumer{Durable: durable, BatchRows: 1000, FlushInterval: 200 * time.Millisecond}
	admin := connectCluster(t, ncfg, "shard-test-admin")
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if _, err := bus.Setup(ctx, js, ncfg.Topology(), ncfg.StreamSettings(), cons.DurableConsumer()); err != nil {
		t.Fatalf("set up streams: %v", err)
	}

	runConsumer(t, cons, ncfg, ch)

	pub, err := publish.New(connectCluster(t, ncfg, "shard-test-publisher"), ncfg.SubjectPrefix, publish.Config{
		SpoolDir: t.TempDir(), AckTimeout: 2 * time.Second, RetryInterval: 250 * time.Millisecond, Logger: discardLog(),
	})
	if err != nil {
		t.Fatal(err)
	}
	traffic := startTraffic(t, pub)
	step := func(what string, d time.Duration) {
		t.Helper()
		t.Logf("%s: %s of traffic (%d events published so far, %d rows on the shards that answer)", what, d, traffic.count(), reachableRows(ctx, t, sharded))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	step("steady", 8*time.Second)

	shards[1].Stop()
	stopped := traffic.count()
	step("shard 2 stopped", shardDown)
	held := reachableRows(ctx, t, sharded)
	shards[1].Start()
	t.Logf("shard 2 back after %s: %d events published while it was down, %d rows had landed by then", shardDown, traffic.count()-stopped, held)

	// The consumer catches up with the traffic, still running, once the shard is back.
	target := traffic.count()
	catchUp := time.Now().Add(2 * time.Minute)
	for rows := countRows(ctx, t, sharded); rows < uint64(target); rows = countRows(ctx, t, sharded) {
		if time.Now().After(catchUp) {
			t.Fatalf("2 min after the shard came back, %d rows landed of the %d events published before", rows, target)
		}
		step(fmt.Sprintf("catching up, waiting for %d rows", target), time.Second)
	}
	step("caught up", 5*time.Second)

	ids := traffic.stop()
	closeCtx, closeCancel := context.WithTimeout(ctx, time.Minute)
	defer closeCancel()
	if err := pub.Close(closeCtx); err != nil {
		t.Errorf("close the publisher: %v", err)
	}
	deadline := time.Now().Add(consumerpipeline.Settings{FlushInterval: cons.FlushInterval}.AckWait() + time.Minute)
	var lost, dup []string
	var got map[string]uint64
	for {
		got = idCounts(ctx, t, sharded, "event_id", "requests FINAL")
		lost, dup = ledger(ids, got)
		if len(lost) == 0 || time.Now().After(deadline) {
			break
		}
		step(fmt.Sprintf("waiting for %d events to land", len(lost)), time.Second)
	}
	_, rawDup := ledger(ids, idCounts(ctx, t, sharded, "event_id", "requests"))
	extra := 0
	for id := range got {
		if _, ok := ids[id]; !ok {
			extra++
		}
	}
	t.Logf("ledger (requests FINAL through the Distributed table): published %d, stored %d, lost %d, duplicated %d, unknown %d; before merging %d event ids were stored more than once",
		len(ids), len(got), len(lost), len(dup), extra, len(rawDup))
	t.Logf("ingest_errors: %s", scalar(ctx, t, sharded, "SELECT count(), groupUniqArray(reason) FROM ingest_errors"))
	if len(lost) != 0 || len(dup) != 0 || extra != 0 {
		t.Errorf("ledger: lost %d%s, duplicated %d%s, unknown %d; want 0, 0, 0", len(lost), sampleIDs(lost), len(dup), sampleIDs(dup), extra)
	}
	if held >= uint64(target) {
		t.Errorf("%d rows landed while shard 2 was down, of %d published by its return: the stop did not hold the consumer back", held, target)
	}
}

// reachableRows counts the requests rows of the shards that answer (skip_unavailable_shards): a
// read through a Distributed table fails while one of its shards is down.
func reachableRows(ctx context.Context, t *testing.T, conn driver.Conn) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM requests SETTINGS skip_unavailable_shards = 1").Scan(&n); err != nil {
		t.Fatalf("count requests: %v", err)
	}
	return n
}
