package bus_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
)

// TestSetupKeepsTheDurableConsumerAtTheStreamsReplicas: on a 3-node cluster at 3 replicas, a
// durable consumer someone set to 1 replica (its position and pending acknowledgements on one
// node, every consumer instance stopped when that node is down) is reported by the check the
// services run and put back by the setup step to its stream's replicas, placed on all three
// nodes; the setup then changes nothing more.
func TestSetupKeepsTheDurableConsumerAtTheStreamsReplicas(t *testing.T) {
	cluster := testenv.StartNATSCluster(t, 3)
	nc, err := nats.Connect(cluster.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topo := bus.Topology{Prefix: testenv.UniqueName("t")}
	limits := bus.StreamSettings{MaxBytes: 64 << 20, Replicas: 3}
	d := bus.DurableFor("writer", 500, time.Second)
	if _, err := bus.Setup(ctx, js, topo, limits, d); err != nil {
		t.Fatal(err)
	}

	one := topo.ConsumerConfig(d)
	one.Replicas = 1
	if _, err := js.UpdateConsumer(ctx, topo.Stream(), one); err != nil {
		t.Fatalf("set the durable consumer to 1 replica: %v", err)
	}
	_, diffs, err := bus.CheckConsumer(ctx, js, topo, d, limits)
	if err != nil {
		t.Fatal(err)
	}
	want := bus.Difference{Stream: topo.Stream(), Consumer: "writer", Setting: "num_replicas", Server: "1", Service: "3"}
	if !slices.Contains(diffs, want) {
		t.Errorf("check of a consumer at 1 replica on a stream at 3: %+v, want %+v among them", diffs, want)
	}

	applied, err := bus.Setup(ctx, js, topo, limits, d)
	if err != nil {
		t.Fatal(err)
	}
	wantActions(t, applied, bus.Unchanged, bus.Unchanged, bus.Updated, bus.Unchanged)
	if got := applied[2].String(); !strings.HasSuffix(got, ": updated (num_replicas 1 → 3)") {
		t.Errorf("setup's line for the consumer: %q", got)
	}
	for {
		c, err := js.Consumer(ctx, topo.Stream(), "writer")
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Replicas != 0 {
			t.Fatalf("consumer's replicas %d after the setup, want 0 (its stream's)", info.Config.Replicas)
		}
		current := 0
		if info.Cluster != nil && info.Cluster.Leader != "" {
			current = 1
			for _, p := range info.Cluster.Replicas {
				if p.Current {
					current++
				}
			}
		}
		if current == 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("consumer placed on %d current nodes, want 3", current)
		case <-time.After(250 * time.Millisecond):
		}
	}
	if _, diffs, err := bus.CheckConsumer(ctx, js, topo, d, limits); err != nil || len(diffs) != 0 {
		t.Errorf("check after the setup: %+v, %v; want no difference", diffs, err)
	}
	again, err := bus.Setup(ctx, js, topo, limits, d)
	if err != nil {
		t.Fatal(err)
	}
	wantActions(t, again, bus.Unchanged, bus.Unchanged, bus.Unchanged, bus.Unchanged)
}
