package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
)

// TestStreamsUpOnACluster runs the setup step against a 3-node JetStream cluster named by all of
// its URLs, as a team does when it moves from one NATS server to a cluster: streams created at
// one replica, then SERVESCOPE_STREAM_REPLICAS=3 and `streams up` again. Both streams and the
// durable consumer end up with three replicas placed on three nodes, `streams check` finds no
// difference, and a `streams up` without the setting keeps the three replicas. With one node
// SIGKILLed the check and the setup still answer, and the check fails naming the replica lost;
// with two, the check fails naming the streams without a leader (their remaining replica still
// answers with their configuration, which is all the check used to read). With the nodes back,
// SERVESCOPE_STREAM_REPLICAS=1 scales down, and says so. It sets the process environment, so it
// does not run in parallel.
func TestStreamsUpOnACluster(t *testing.T) {
	cluster := testenv.StartNATSCluster(t, 3)
	prefix := testenv.UniqueName("t")
	t.Setenv("SERVESCOPE_NATS_URL", cluster.URL())
	t.Setenv("SERVESCOPE_SUBJECT_PREFIX", prefix)
	t.Setenv("SERVESCOPE_STREAM_MAX_BYTES", "67108864")
	t.Setenv("CONSUMER_DURABLE", "cluster-writer")
	t.Setenv("CONSUMER_BATCH_ROWS", "500")
	stream, dlq := strings.ToUpper(prefix), strings.ToUpper(prefix)+"_DLQ"

	out, code, err := run(t, "streams", "up")
	if code != 0 || strings.Count(out, ": created (") != 4 || !strings.Contains(out, "num_replicas 1") {
		t.Fatalf("streams up at one replica: exit %d, %v:\n%s", code, err, out)
	}

	t.Setenv("SERVESCOPE_STREAM_REPLICAS", "3")
	out, code, err = run(t, "streams", "check")
	if code != 0 || !strings.Contains(out, "stream "+stream+": num_replicas is 1, these settings say 3") ||
		!strings.Contains(out, "stream "+dlq+": num_replicas is 1, these settings say 3") {
		t.Errorf("streams check at 3 replicas before the setup: exit %d, %v:\n%s", code, err, out)
	}
	out, code, err = run(t, "streams", "up")
	if code != 0 || !strings.Contains(out, "stream "+stream+": updated (num_replicas 1 → 3)") ||
		!strings.Contains(out, "stream "+dlq+": updated (num_replicas 1 → 3)") {
		t.Fatalf("streams up at 3 replicas: exit %d, %v:\n%s", code, err, out)
	}

	nc, err := nats.Connect(cluster.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// Scaling a stream up is asynchronous: the new replicas catch up, then the information lists them.
	for _, name := range []string{stream, dlq, "KV_" + stream + "_LEASES"} {
		waitPlaced(ctx, t, name, func() (int, int, error) {
			s, err := js.Stream(ctx, name)
			if err != nil {
				return 0, 0, err
			}
			info, err := s.Info(ctx)
			if err != nil {
				return 0, 0, err
			}
			if info.Cluster == nil || info.Cluster.Leader == "" {
				return info.Config.Replicas, 0, nil
			}
			return info.Config.Replicas, 1 + current(info.Cluster.Replicas), nil
		})
	}
	waitPlaced(ctx, t, "durable consumer cluster-writer", func() (int, int, error) {
		c, err := js.Consumer(ctx, stream, "cluster-writer")
		if err != nil {
			return 0, 0, err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return 0, 0, err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return info.Config.Replicas, 0, nil
		}
		// The setup leaves the consumer's replica count at 0: it follows its stream's.
		configured := info.Config.Replicas
		if configured == 0 {
			configured = 3
		}
		return configured, 1 + current(info.Cluster.Replicas), nil
	})

	out, code, err = run(t, "streams", "check")
	if code != 0 || strings.Contains(out, " is ") {
		t.Errorf("streams check at 3 replicas after the setup: exit %d, %v; want no difference:\n%s", code, err, out)
	}

	// Without SERVESCOPE_STREAM_REPLICAS the setup keeps the replicas in force: its default (one
	// replica) is for what it creates, never a scale-down of an R3 setup.
	t.Setenv("SERVESCOPE_STREAM_REPLICAS", "")
	out, code, err = run(t, "streams", "up")
	// (The durable consumer's line has no num_replicas: it follows its stream's.)
	if code != 0 || strings.Count(out, ": unchanged (") != 4 || strings.Count(out, "num_replicas 3") != 3 {
		t.Errorf("streams up without SERVESCOPE_STREAM_REPLICAS: exit %d, %v; want four resources unchanged, both streams and the bucket at 3 replicas:\n%s", code, err, out)
	}
	for _, name := range []string{stream, dlq, "KV_" + stream + "_LEASES"} {
		if s, err := js.Stream(ctx, name); err != nil || s.CachedInfo().Config.Replicas != 3 {
			t.Errorf("%s after streams up without SERVESCOPE_STREAM_REPLICAS: %v; want 3 replicas", name, err)
		}
	}

	// One node down: the check and the setup still answer through the other URLs, and the check
	// fails naming each replica lost (one more node lost stops the streams).
	t.Setenv("SERVESCOPE_STREAM_REPLICAS", "3")
	down := cluster.Nodes[0]
	down.Kill()
	// Its peers first see the node's replica fall behind, then offline.
	waitCheck(ctx, t, "stream "+stream+": replica on "+down.Name()+" ")
	out, code, err = run(t, "streams", "up")
	if code != 0 || strings.Count(out, ": unchanged (") != 4 {
		t.Errorf("streams up with a node down: exit %d, %v; want four resources unchanged:\n%s", code, err, out)
	}

	// Two of three nodes down: no majority, no leader. The remaining replica still answers with
	// the streams' configuration; the check reads their cluster state and fails naming them.
	cluster.Nodes[1].Kill()
	// Each stream is its own raft group: the dead-letter stream's leader may go on serving for a
	// few seconds after the events stream lost its own (a CI run saw its last peer "last seen
	// 10 s ago"), so the check is waited for until it names both.
	waitCheck(ctx, t, "stream "+stream+": no leader")
	out = waitCheck(ctx, t, "stream "+dlq+": no leader")
	t.Logf("streams check with two nodes down:\n%s", out)
	for _, want := range []string{"stream " + stream + ": no leader", "start the stopped NATS nodes"} {
		if !strings.Contains(out, want) {
			t.Errorf("streams check with two nodes down: no %q:\n%s", want, out)
		}
	}

	// The nodes back: no fault once the replicas caught up; then a scale-down asked for is done
	// and said.
	cluster.Nodes[0].Start()
	cluster.Nodes[1].Start()
	cluster.WaitHealthy(2 * time.Minute)
	for {
		out, code, err = run(t, "streams", "check")
		if code == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("streams check with every node back: exit %d, %v:\n%s", code, err, out)
		case <-time.After(time.Second):
		}
	}
	t.Setenv("SERVESCOPE_STREAM_REPLICAS", "1")
	out, code, err = run(t, "streams", "up")
	for _, want := range []string{
		"stream " + stream + ": updated (num_replicas 3 → 1: scaled down, as the settings ask)",
		"stream " + dlq + ": updated (num_replicas 3 → 1: scaled down, as the settings ask)",
		"key-value bucket " + stream + "_LEASES: updated (num_replicas 3 → 1: scaled down, as the settings ask)",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("streams up at 1 replica: exit %d, %v; want %q:\n%s", code, err, want, out)
		}
	}
}

// waitCheck runs `streams check` until it fails with want in its output (a node's loss is seen
// by its peers within seconds, a leader steps down once it has lost its majority) and returns
// that output. The error must name the faults.
func waitCheck(ctx context.Context, t *testing.T, want string) string {
	t.Helper()
	for {
		out, code, err := run(t, "streams", "check")
		if code != 0 && strings.Contains(out, want) {
			if err == nil || !strings.Contains(err.Error(), "the JetStream cluster has faults") {
				t.Errorf("streams check failed with %v; want the faults named", err)
			}
			return out
		}
		select {
		case <-ctx.Done():
			t.Fatalf("streams check never failed with %q; last: exit %d, %v:\n%s", want, code, err, out)
		case <-time.After(time.Second):
		}
	}
}

// current counts the replicas that are current (caught up with the leader).
func current(peers []*jetstream.PeerInfo) int {
	n := 0
	for _, p := range peers {
		if p.Current {
			n++
		}
	}
	return n
}

// waitPlaced waits until info reports 3 replicas configured and 3 current.
func waitPlaced(ctx context.Context, t *testing.T, what string, info func() (configured, placed int, err error)) {
	t.Helper()
	for {
		configured, placed, err := info()
		if err == nil && configured == 3 && placed == 3 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %d replicas configured, %d current (%v); want 3 and 3", what, configured, placed, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
