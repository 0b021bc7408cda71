package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/services/consumer/app"
	consumerpipeline "github.com/servescope/servescope/services/consumer/pipeline"
)

// clusterEventsPerSecond is the steady traffic of the cluster test: modest, because the
// machine running it is shared, and enough that every fault lands among events in flight.
const clusterEventsPerSecond = 100

// A 3-node NATS cluster under steady traffic through the real publisher and the real consumer,
// streams and the durable consumer at 3 replicas: one node is SIGKILLed and restarted, then the
// node leading the events stream is SIGKILLed. The ledger of every published event_id against
// the requests table read with FINAL says lost 0, duplicated 0, and rows kept landing while the
// stream's leader was gone.
func TestNATSClusterLosesNothingThroughNodeLoss(t *testing.T) {
	cluster := testenv.StartNATSCluster(t, 3)
	conn, ch := testenv.ClickHouse(t)
	ncfg := testenv.NATSConfig(t)
	ncfg.URL = cluster.URL()
	ncfg.SubjectPrefix = testenv.UniqueName("t")
	ncfg.StreamReplicas = 3
	ncfg.StreamMaxBytes = 256 << 20
	topo := ncfg.Topology()
	const durable = "cluster"
	cons := config.Consumer{Durable: durable, BatchRows: 1000, FlushInterval: 200 * time.Millisecond}

	admin := connectCluster(t, ncfg, "cluster-test-admin")
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute) // the sum of its bounded waits
	defer cancel()
	// The setup step's code, as `servescope migrate up` runs it: streams and durable at R3.
	if _, err := bus.Setup(ctx, js, topo, ncfg.StreamSettings(), cons.DurableConsumer()); err != nil {
		t.Fatalf("set up streams at R3: %v", err)
	}

	// The consumer, in-process, on every node's URL.
	runConsumer(t, cons, ncfg, ch)

	// Both streams and the durable consumer are replicated on all three nodes.
	for _, name := range []string{topo.Stream(), topo.DLQStream()} {
		info := streamInfo(ctx, t, js, name)
		if got := 1 + len(info.Cluster.Replicas); info.Config.Replicas != 3 || got != 3 {
			t.Fatalf("stream %s: %d replicas configured, %d placed; want 3 and 3", name, info.Config.Replicas, got)
		}
	}
	cinfo := waitConsumer(ctx, t, js, topo.Stream(), durable)
	if got := 1 + len(cinfo.Cluster.Replicas); got != 3 {
		t.Fatalf("durable consumer %s has %d replicas, want 3 (inherited from the stream)", durable, got)
	}

	// The publisher, as an application uses it, on every node's URL.
	pubConn := connectCluster(t, ncfg, "cluster-test-publisher", nats.ReconnectBufSize(-1))
	pub, err := publish.New(pubConn, ncfg.SubjectPrefix, publish.Config{
		SpoolDir: t.TempDir(), AckTimeout: 2 * time.Second, RetryInterval: 250 * time.Millisecond, Logger: discardLog(),
	})
	if err != nil {
		t.Fatal(err)
	}
	traffic := startTraffic(t, pub)

	step := func(what string, d time.Duration) {
		t.Helper()
		t.Logf("%s: %s of traffic (%d events published so far)", what, d, traffic.count())
		select {
		case <-time.After(d):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	step("steady", 8*time.Second)

	// A node that does not lead the events stream: SIGKILL, traffic, restart.
	leader := streamInfo(ctx, t, js, topo.Stream()).Cluster.Leader
	var follower *testenv.NATSServer
	for _, n := range cluster.Nodes {
		if n.Name() != leader {
			follower = n
			break
		}
	}
	follower.Kill()
	step("follower "+follower.Name()+" SIGKILLed", 6*time.Second)
	follower.Start()
	cluster.WaitHealthy(2 * time.Minute)
	step("follower "+follower.Name()+" restarted", 6*time.Second)

	// The node leading the events stream, made to lead the durable consumer too (the harder case:
	// the consumer's pull requests die with it): SIGKILL; new leaders take over while traffic goes
	// on, and the consumer catches up past the failover before the node comes back.
	leader = streamInfo(ctx, t, js, topo.Stream()).Cluster.Leader
	leaderNode := cluster.Node(leader)
	if leaderNode == nil {
		t.Fatalf("stream leader %q is none of the cluster's nodes", leader)
	}
	moveConsumerLeader(ctx, t, admin, js, topo.Stream(), durable, leader)
	leaderNode.Kill()
	var newLeader string
	for newLeader == "" || newLeader == leader {
		info, err := tryStreamInfo(ctx, js, topo.Stream())
		if err == nil && info.Cluster != nil {
			newLeader = info.Cluster.Leader
		}
		if newLeader == "" || newLeader == leader {
			step("waiting for a new stream leader", 500*time.Millisecond)
		}
	}
	failover := traffic.count()
	t.Logf("stream and consumer leader %s SIGKILLed, %s leads the stream after %d events", leader, newLeader, failover)
	catchUp := time.Now().Add(90 * time.Second)
	for rows := countRows(ctx, t, conn); rows < uint64(failover); rows = countRows(ctx, t, conn) {
		if time.Now().After(catchUp) {
			t.Fatalf("with %s down, %d rows landed of the %d events published before the failover", leader, rows, failover)
		}
		step(fmt.Sprintf("%s down, %d rows landed, waiting for %d", leader, rows, failover), time.Second)
	}
	step(leader+" down, the consumer caught up", 5*time.Second)
	leaderNode.Start()
	cluster.WaitHealthy(2 * time.Minute)

	// Stop the traffic; everything the publisher took is acknowledged by JetStream or spooled and
	// replayed before Close returns.
	ids := traffic.stop()
	closeCtx, closeCancel := context.WithTimeout(ctx, time.Minute)
	defer closeCancel()
	if err := pub.Close(closeCtx); err != nil {
		t.Errorf("close the publisher: %v", err)
	}
	st := pub.Stats()
	t.Logf("publisher: %d events, %d acknowledged on first send, %d spooled, %d replayed, %d dropped, %d still spooled",
		len(ids), st.Published, st.Spooled, st.Replayed, st.Dropped, st.SpoolEvents)
	if st.Dropped != 0 || st.SpoolEvents != 0 {
		t.Errorf("publisher dropped %d events and holds %d in its spool, want 0 and 0", st.Dropped, st.SpoolEvents)
	}

	// The ledger. A message whose acknowledgement was lost with its node is redelivered after the
	// consumer's AckWait, so the wait allows for a few of those.
	deadline := time.Now().Add(consumerpipeline.Settings{FlushInterval: 200 * time.Millisecond}.AckWait() + time.Minute)
	var lost, dup []string
	var got map[string]uint64
	for {
		got = idCounts(ctx, t, conn, "event_id", "requests FINAL")
		lost, dup = ledger(ids, got)
		if len(lost) == 0 || time.Now().After(deadline) {
			break
		}
		step(fmt.Sprintf("waiting for %d events to land", len(lost)), time.Second)
	}
	raw := idCounts(ctx, t, conn, "event_id", "requests")
	_, rawDup := ledger(ids, raw)
	extra := 0
	for id := range got {
		if _, ok := ids[id]; !ok {
			extra++
		}
	}
	t.Logf("ledger (requests FINAL): published %d, stored %d, lost %d, duplicated %d, unknown %d; before merging %d event ids were stored more than once",
		len(ids), len(got), len(lost), len(dup), extra, len(rawDup))
	if len(lost) != 0 || len(dup) != 0 || extra != 0 {
		t.Errorf("ledger: lost %d%s, duplicated %d%s, unknown %d; want 0, 0, 0", len(lost), sampleIDs(lost), len(dup), sampleIDs(dup), extra)
	}
}

// runConsumer runs the consumer service in-process until the test ends, when it must stop
// without error.
func runConsumer(t *testing.T, cons config.Consumer, n config.NATS, ch config.ClickHouse) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, app.Config{Consumer: cons, MetricsAddr: ln.Addr().String(), NATS: n, ClickHouse: ch}, discardLog(), ln)
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	})
}

// connectCluster connects to every URL of n the way the services do: reconnecting forever.
func connectCluster(t *testing.T, n config.NATS, name string, extra ...nats.Option) *nats.Conn {
	t.Helper()
	opts := append([]nats.Option{nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(250 * time.Millisecond), nats.Timeout(3 * time.Second),
		nats.NoCallbacksAfterClientClose()}, extra...)
	nc, err := n.Connect(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func tryStreamInfo(ctx context.Context, js jetstream.JetStream, name string) (*jetstream.StreamInfo, error) {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(ictx, name)
	if err != nil {
		return nil, err
	}
	return s.Info(ictx)
}

// streamInfo returns the stream's information once a leader answers it.
func streamInfo(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	for {
		info, err := tryStreamInfo(ctx, js, name)
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
			return info
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream %s: no leader answers: %v", name, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitConsumer returns the durable consumer's information once the consumer service created it.
func waitConsumer(ctx context.Context, t *testing.T, js jetstream.JetStream, stream, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	for {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := js.Consumer(ictx, stream, durable)
		var info *jetstream.ConsumerInfo
		if err == nil {
			info, err = c.Info(ictx)
		}
		cancel()
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
			return info
		}
		select {
		case <-ctx.Done():
			t.Fatalf("durable consumer %s: %v", durable, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// traffic publishes request.finished events at clusterEventsPerSecond and keeps their event_ids.
type traffic struct {
	mu   sync.Mutex
	ids  map[string]struct{}
	quit chan struct{}
	done chan struct{}
}

func startTraffic(t *testing.T, pub *publish.Publisher) *traffic {
	tr := &traffic{ids: map[string]struct{}{}, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(time.Second / clusterEventsPerSecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-tr.quit:
				return
			case <-tick.C:
			}
			e := eventgen.RequestFinished(i, time.Now())
			if err := pub.Publish(e); err != nil {
				t.Errorf("publish event %d: %v", i, err)
				return
			}
			tr.mu.Lock()
			tr.ids[e.EventID] = struct{}{}
			tr.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		select {
		case <-tr.quit:
		default:
			close(tr.quit)
		}
		<-tr.done
	})
	return tr
}

func (tr *traffic) count() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.ids)
}

// stop ends the traffic and returns the event_ids published.
func (tr *traffic) stop() map[string]struct{} {
	close(tr.quit)
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.ids
}

// idCounts returns how many rows of from ("requests" or "requests FINAL") carry each value of
// the column (event_id, request_id).
func idCounts(ctx context.Context, t *testing.T, conn driver.Conn, column, from string) map[string]uint64 {
	t.Helper()
	rows, err := conn.Query(ctx, "SELECT "+column+", count() FROM "+from+" GROUP BY "+column)
	if err != nil {
		t.Fatalf("read %s of %s: %v", column, from, err)
	}
	defer rows.Close()
	out := map[string]uint64{}
	for rows.Next() {
		var id string
		var n uint64
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func countRows(ctx context.Context, t *testing.T, conn driver.Conn) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM requests").Scan(&n); err != nil {
		t.Fatalf("count requests: %v", err)
	}
	return n
}

// ledger returns the published ids not stored (lost) and the ids stored more than once (dup).
func ledger(published map[string]struct{}, stored map[string]uint64) (lost, dup []string) {
	for id := range published {
		if stored[id] == 0 {
			lost = append(lost, id)
		}
	}
	for id, n := range stored {
		if n > 1 {
			dup = append(dup, id)
		}
	}
	sort.Strings(lost)
	sort.Strings(dup)
	return lost, dup
}

func sampleIDs(ids []string) string {
	if len(ids) > 3 {
		ids = ids[:3]
	}
	if len(ids) == 0 {
		return ""
	}
	return fmt.Sprintf(" (e.g. %v)", ids)
}

// moveConsumerLeader makes node lead the durable consumer: a leader step-down naming it as the
// preferred successor (nats-server 2.11 and later), then a wait until the consumer's information says so.
func moveConsumerLeader(ctx context.Context, t *testing.T, nc *nats.Conn, js jetstream.JetStream, stream, durable, node string) {
	t.Helper()
	if waitConsumer(ctx, t, js, stream, durable).Cluster.Leader == node {
		return
	}
	req, err := json.Marshal(map[string]any{"placement": map[string]string{"preferred": node}})
	if err != nil {
		t.Fatal(err)
	}
	subject := "$JS.API.CONSUMER.LEADER.STEPDOWN." + stream + "." + durable
	resp, err := nc.RequestWithContext(ctx, subject, req)
	if err != nil {
		t.Fatalf("step down the consumer's leader: %v", err)
	}
	var answer struct {
		Success bool `json:"success"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &answer); err != nil || !answer.Success {
		t.Fatalf("step down the consumer's leader: %s (%v)", resp.Data, err)
	}
	for waitConsumer(ctx, t, js, stream, durable).Cluster.Leader != node {
		select {
		case <-ctx.Done():
			t.Fatalf("consumer %s: leadership did not move to %s", durable, node)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
