package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/services/console/server"
	consumerpipeline "github.com/servescope/servescope/services/consumer/pipeline"
)

// shardDown is how long the shard stays stopped.
const shardDown = 60 * time.Second

// One shard of a live 2-shard ClickHouse stopped for 60 s under steady traffic through the real
// publisher, a 3-node NATS cluster at 3 replicas and the real consumer (its sink.Sharded): the other shard keeps receiving its rows
// throughout — at least a fifth of the events published meanwhile land on it (about half hash to
// it) — while the stopped shard's wait in the Distributed tables' queue on the node that took
// the inserts (system.distribution_queue); once the shard is back the queue drains into it. The
// ledger of every published event_id against requests read with FINAL through the Distributed
// table says lost 0, duplicated 0. (Before, a batch holds rows for both shards, the synchronous
// insert failed as a whole, and the consumer stopped for every shard until the stopped one came
// back: about one batch landed on the live shard in 30 s.) Meanwhile the console says, panel by
// panel, that the stopped shard does not answer, and still serves its pages; once it is back every
// panel answers again.
func TestShardStoppedUnderTrafficLosesNothing(t *testing.T) {
	shards, ch, sharded := startSharded(t)
	ns := testenv.StartNATSCluster(t, 3)
	ncfg := testenv.NATSConfig(t)
	ncfg.URL = ns.URL()
	ncfg.SubjectPrefix = testenv.UniqueName("t")
	ncfg.StreamReplicas = 3
	ncfg.StreamMaxBytes = 256 << 20
	const durable = "shards"
	cons := config.Consumer{Durable: durable, BatchRows: 1000, FlushInterval: 200 * time.Millisecond}
	admin := connectCluster(t, ncfg, "shard-test-admin")
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
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
	live := nodeConn(ctx, t, ch, shards[0].Addr())
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
	stopped, liveBefore := traffic.count(), localRows(ctx, t, live)
	step("shard 2 stopped", shardDown/2)
	consoleSaysShardDown(t, ch, shards[1].Addr())
	step("shard 2 still stopped", shardDown/2)
	published, liveAfter := traffic.count()-stopped, localRows(ctx, t, live)
	queued := scalar(ctx, t, live, "SELECT sum(data_files), sum(data_compressed_bytes), sum(broken_data_files) FROM system.distribution_queue WHERE database = currentDatabase() AND table = 'requests'")
	shards[1].Start()
	t.Logf("shard 2 back after %s: %d events published while it was down, %d rows landed on shard 1 meanwhile; the queue for shard 2 on shard 1 held %s (files, compressed bytes, broken files)",
		shardDown, published, liveAfter-liveBefore, queued)
	if landed := liveAfter - liveBefore; landed*5 < uint64(published) {
		t.Errorf("%d rows landed on shard 1 while shard 2 was down, of %d events published: want a fifth or more (about half hash to it), the other shard's outage held them back", landed, published)
	}

	// The queue drains into shard 2 and the consumer keeps up, still running.
	target := traffic.count()
	catchUp := time.Now().Add(2 * time.Minute)
	for rows := countRows(ctx, t, sharded); rows < uint64(target); rows = countRows(ctx, t, sharded) {
		if time.Now().After(catchUp) {
			t.Fatalf("2 min after the shard came back, %d rows landed of the %d events published before", rows, target)
		}
		step(fmt.Sprintf("catching up, waiting for %d rows", target), time.Second)
	}
	step("caught up", 5*time.Second)
	consoleAnswers(t, ch)

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
	if left := scalar(ctx, t, live, "SELECT sum(data_files) FROM system.distribution_queue WHERE database = currentDatabase()"); left != "0" {
		t.Errorf("rows still queued for shard 2 after the catch-up: %s", left)
	}
}

// nodeConn connects to one node of ch's cluster, its Distributed tables' database selected.
func nodeConn(ctx context.Context, t *testing.T, ch config.ClickHouse, addr string) driver.Conn {
	t.Helper()
	node := ch
	node.Addr = []string{addr}
	conn, err := chstore.Open(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// localRows counts the requests rows the node of conn holds itself (its local table).
func localRows(ctx context.Context, t *testing.T, conn driver.Conn) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+chstore.LocalDatabase(config.ClickHouse{Database: "servescope"})+".requests").Scan(&n); err != nil {
		t.Fatalf("count the node's own requests: %v", err)
	}
	return n
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

// consoleSaysShardDown checks that the console, with one shard of ch's cluster at stopped down,
// serves its dashboard and answers each panel with 503, shard_down and a message naming the shard:
// not a blank 500, not the whole-ClickHouse outage banner.
func consoleSaysShardDown(t *testing.T, ch config.ClickHouse, stopped string) {
	t.Helper()
	srv, err := server.New(server.Config{ClickHouse: ch, ListenAddr: "127.0.0.1:0", Auth: server.AuthProxy, QueryTimeout: time.Minute}, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, _ := get("/"); code != http.StatusOK {
		t.Errorf("console dashboard with a shard down: %d", code)
	}
	code, body := get("/api/panels")
	var panels []server.PanelInfo
	if err := json.Unmarshal([]byte(body), &panels); code != http.StatusOK || err != nil || len(panels) == 0 {
		t.Fatalf("GET /api/panels with a shard down: %d %v", code, err)
	}
	for _, p := range panels {
		code, body := get("/api/panel/" + p.Name)
		var answer struct {
			Error          string `json:"error"`
			ShardDown      bool   `json:"shard_down"`
			ClickHouseDown bool   `json:"clickhouse_down"`
		}
		_ = json.Unmarshal([]byte(body), &answer)
		if code != http.StatusServiceUnavailable || !answer.ShardDown || answer.ClickHouseDown ||
			!strings.Contains(answer.Error, "the ClickHouse shard at "+stopped+" does not answer") || !strings.Contains(answer.Error, "panel "+p.Name) {
			t.Errorf("panel %s with shard %s down: %d %s; want 503 with shard_down and a message naming panel and shard", p.Name, stopped, code, firstLine(body))
			continue
		}
		if p.Name == panels[0].Name {
			t.Logf("panel %s with a shard down: %s", p.Name, firstLine(answer.Error))
		}
	}
}

// consoleAnswers checks that every panel of the console answers 200 on ch's cluster.
func consoleAnswers(t *testing.T, ch config.ClickHouse) {
	t.Helper()
	srv, err := server.New(server.Config{ClickHouse: ch, ListenAddr: "127.0.0.1:0", Auth: server.AuthProxy, QueryTimeout: time.Minute}, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/panels", nil))
	var panels []server.PanelInfo
	if err := json.Unmarshal(rec.Body.Bytes(), &panels); rec.Code != http.StatusOK || err != nil || len(panels) == 0 {
		t.Fatalf("GET /api/panels with every shard back: %d %v", rec.Code, err)
	}
	for _, p := range panels {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/panel/"+p.Name, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("panel %s with every shard back: %d %s", p.Name, rec.Code, firstLine(rec.Body.String()))
		}
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
