package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema/publish"
)

// streamsCheckSoak is how long the healthy loaded cluster is checked, streamsCheckEvery how often
// (an operator's watch loop), and unreachableWithin how soon a killed node must be named.
const (
	streamsCheckSoak  = 5 * time.Minute
	streamsCheckEvery = 5 * time.Second
	unreachableWithin = 15 * time.Second
)

// `streams check`'s cluster reading (bus.CheckCluster) on a 3-node NATS cluster at 3 replicas
// under steady traffic (the real publisher at clusterEventsPerSecond, about 25 requests/s, and the
// real consumer acknowledging): every 5 s for 5 minutes it finds no fault (before, a replica a few
// operations behind failed about one check in twelve: "1 operations behind"). Then a node that
// leads nothing is SIGKILLed: the check names its replicas "unreachable" within 15 s (before, a
// killed node under traffic was "not current … catches up by itself", its lag never 0).
func TestStreamsCheckUnderLoad(t *testing.T) {
	cluster := testenv.StartNATSCluster(t, 3)
	_, ch := testenv.ClickHouse(t)
	ncfg := testenv.NATSConfig(t)
	ncfg.URL = cluster.URL()
	ncfg.SubjectPrefix = testenv.UniqueName("t")
	ncfg.StreamReplicas = 3
	ncfg.StreamMaxBytes = 256 << 20
	topo := ncfg.Topology()
	const durable = "check"
	cons := config.Consumer{Durable: durable, BatchRows: 1000, FlushInterval: 200 * time.Millisecond}
	admin := connectCluster(t, ncfg, "check-test-admin")
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), streamsCheckSoak+5*time.Minute)
	defer cancel()
	if _, err := bus.Setup(ctx, js, topo, ncfg.StreamSettings(), cons.DurableConsumer()); err != nil {
		t.Fatalf("set up streams at R3: %v", err)
	}
	runConsumer(t, cons, ncfg, ch)
	pubConn := connectCluster(t, ncfg, "check-test-publisher", nats.ReconnectBufSize(-1))
	pub, err := publish.New(pubConn, ncfg.SubjectPrefix, publish.Config{
		SpoolDir: t.TempDir(), AckTimeout: 2 * time.Second, RetryInterval: 250 * time.Millisecond, Logger: discardLog(),
	})
	if err != nil {
		t.Fatal(err)
	}
	traffic := startTraffic(t, pub)
	defer func() {
		traffic.stop()
		closeCtx, closeCancel := context.WithTimeout(context.Background(), time.Minute)
		defer closeCancel()
		_ = pub.Close(closeCtx)
	}()
	wait := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	wait(streamsCheckEvery)

	checks, failed := 0, 0
	for end := time.Now().Add(streamsCheckSoak); time.Now().Before(end); wait(streamsCheckEvery) {
		faults, err := bus.CheckCluster(ctx, js, topo, durable)
		checks++
		if err != nil || len(faults) > 0 {
			failed++
			t.Errorf("check %d on the healthy cluster (%d events published): %v %q", checks, traffic.count(), err, faults)
		}
	}
	t.Logf("healthy cluster under traffic: %d checks, %d failed, %d events published", checks, failed, traffic.count())

	// A node leading neither stream nor the durable consumer: its loss is a replica lost
	// everywhere, nothing else. The leaders may cover every node: then the dead-letter stream's
	// leader steps down (JetStream elects another of its replicas) until a node is free.
	var victim *testenv.NATSServer
	for attempt := 0; victim == nil; attempt++ {
		dlqLeader := streamInfo(ctx, t, js, topo.DLQStream()).Cluster.Leader
		leaders := map[string]bool{streamInfo(ctx, t, js, topo.Stream()).Cluster.Leader: true, dlqLeader: true}
		if c, err := js.Consumer(ctx, topo.Stream(), durable); err == nil && c.CachedInfo().Cluster != nil {
			leaders[c.CachedInfo().Cluster.Leader] = true
		}
		// Nor the node the checking connection is on: the check then waits for its reconnect,
		// which measures the client, not the reading.
		leaders[admin.ConnectedServerName()] = true
		for _, n := range cluster.Nodes {
			if !leaders[n.Name()] {
				victim = n
			}
		}
		if victim != nil {
			break
		}
		if attempt == 10 {
			t.Fatalf("every node leads something or holds the checking connection (%v) after %d step-downs of the dead-letter stream's leader", leaders, attempt)
		}
		if _, err := admin.Request("$JS.API.STREAM.LEADER.STEPDOWN."+topo.DLQStream(), nil, 10*time.Second); err != nil {
			t.Fatalf("step down the leader of %s: %v", topo.DLQStream(), err)
		}
		for streamInfo(ctx, t, js, topo.DLQStream()).Cluster.Leader == dlqLeader {
			wait(250 * time.Millisecond)
		}
	}
	victim.Kill()
	killed := time.Now()
	want := "stream " + topo.Stream() + ": replica on " + victim.Name() + " unreachable"
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		faults, err := bus.CheckCluster(cctx, js, topo, durable)
		cancel()
		named := false
		for _, f := range faults {
			named = named || strings.HasPrefix(f.String(), want)
		}
		if named {
			t.Logf("%s SIGKILLed under traffic: named unreachable after %s: %q", victim.Name(), time.Since(killed).Round(100*time.Millisecond), faults)
			break
		}
		if time.Since(killed) > unreachableWithin {
			t.Fatalf("%s SIGKILLed %s ago: the check says %v %q; want %q", victim.Name(), time.Since(killed).Round(time.Second), err, faults, want)
		}
		wait(time.Second)
	}
	victim.Start()
	cluster.WaitHealthy(2 * time.Minute)
}
