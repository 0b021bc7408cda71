package devservices

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/servers"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/schema"
)

// freeRun returns the first of n consecutive loopback ports that are free now.
func freeRun(t *testing.T, n int) int {
	t.Helper()
	for range 200 {
		base := 20000 + rand.IntN(40000)
		var ls []net.Listener
		for i := range n {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if len(ls) == n {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// TestNATSClusterUpStatusDown runs `up nats-cluster`, status and down against a private cache
// directory and private ports, and checks through a client that the nodes are one JetStream
// cluster: a stream at 3 replicas is placed on all three and stays writable while a node is down.
func TestNATSClusterUpStatusDown(t *testing.T) {
	cache := privateCache(t)
	var out, msgs bytes.Buffer
	cfg, err := Load(t.TempDir(), env(map[string]string{
		servers.CacheDirEnv:                        cache,
		"SERVESCOPE_DEV_NATS_PORT":                 freePort(t),
		"SERVESCOPE_DEV_NATS_MONITOR_PORT":         freePort(t),
		"SERVESCOPE_DEV_CLICKHOUSE_TCP_PORT":       freePort(t),
		"SERVESCOPE_DEV_CLICKHOUSE_HTTP_PORT":      freePort(t),
		"SERVESCOPE_DEV_NATS_CLUSTER_PORT":         strconv.Itoa(freeRun(t, 3)),
		"SERVESCOPE_DEV_NATS_CLUSTER_MONITOR_PORT": strconv.Itoa(freeRun(t, 3)),
		"SERVESCOPE_DEV_NATS_CLUSTER_ROUTE_PORT":   strconv.Itoa(freeRun(t, 3)),
		"SERVESCOPE_DEV_START_TIMEOUT_S":           "120",
	}))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Out, cfg.Err = &out, &msgs
	nodes, err := cfg.NATSCluster()
	if err != nil {
		t.Fatal(err)
	}
	url := servers.ClientURLs(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		_ = Down(context.Background(), cfg, "")
		if t.Failed() {
			t.Logf("messages:\n%s\nstatus output:\n%s", msgs.String(), out.String())
		}
	})
	step := func(what string, err error, wantOut, wantMsgs, notOut []string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for _, w := range wantOut {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", what, w, out.String())
			}
		}
		for _, w := range wantMsgs {
			if !strings.Contains(msgs.String(), w) {
				t.Errorf("%s: messages lack %q:\n%s", what, w, msgs.String())
			}
		}
		for _, w := range notOut {
			if strings.Contains(out.String(), w) {
				t.Errorf("%s: output has %q:\n%s", what, w, out.String())
			}
		}
		out.Reset()
		msgs.Reset()
	}
	// status: the single server and ClickHouse are not run here, so it always reports unhealthy.
	status := func() error {
		if err := Status(ctx, cfg); !errors.Is(err, ErrUnhealthy) {
			return fmt.Errorf("status: %v, want ErrUnhealthy (the single servers are stopped)", err)
		}
		return nil
	}

	step("status before up", status(), []string{"nats         stopped"}, nil, []string{"nats-1", "cluster " + NATSClusterName})
	step("up nats-cluster", UpNATSCluster(ctx, cfg), nil, []string{
		"nats-1 started (pid", "nats-2 started (pid", "nats-3 started (pid",
		"nats cluster " + NATSClusterName + ": 3 nodes healthy, JetStream meta leader servescope-dev-",
		"SERVESCOPE_NATS_URL=" + url,
	}, nil)
	step("status", status(), []string{
		"nats-1       running pid", "nats-2       running pid", "nats-3       running pid", "healthy   " + nodes[2].URL(),
		"cluster " + NATSClusterName + ": JetStream meta leader servescope-dev-", "SERVESCOPE_NATS_URL=" + url,
	}, nil, []string{"unhealthy"})

	// The nodes are one cluster: the setup step's streams at 3 replicas are placed on all three.
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	topo := bus.Topology{Prefix: testenv.UniqueName("t")}
	if _, err := bus.Setup(ctx, js, topo, bus.StreamSettings{MaxBytes: 64 << 20, Replicas: 3}); err != nil {
		t.Fatalf("set up streams at 3 replicas: %v", err)
	}
	info := replicatedInfo(ctx, t, js, topo.Stream())
	if placed := 1 + len(info.Cluster.Replicas); placed != 3 || info.Cluster.Name != NATSClusterName {
		t.Fatalf("stream %s: %d replicas placed in cluster %q, want 3 in %s", topo.Stream(), placed, info.Cluster.Name, NATSClusterName)
	}

	// A node dies: status says so, the stream stays writable, up starts the node again.
	pid := pidOf(t, nodes[1].PidFile)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if found, err := proc.Inspect(nodes[1].PidFile, nil); err != nil || found.State == proc.NotRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still runs after SIGKILL", pid)
		}
	}
	step("status with nats-2 down", status(), []string{"nats-2       stopped", fmt.Sprintf("pid %d died", pid), "nats-1       running pid"}, nil, nil)
	// Each attempt waits 5 s for its acknowledgement: a publish that reaches the stream while it
	// elects a new leader is never acknowledged, and one attempt holding the whole minute made
	// this test fail on a loaded machine (the election itself took seconds).
	for deadline := time.Now().Add(time.Minute); ; {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := js.Publish(pctx, topo.Subject(schema.KindRequestFinished), []byte(`{}`), jetstream.WithRetryAttempts(20))
		pcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("publish with nats-2 down: %v", err)
			break
		}
	}
	step("up with nats-2 dead", UpNATSCluster(ctx, cfg), nil, []string{
		"nats-1 already running", fmt.Sprintf("nats-2 (pid %d) died since it was started; starting it again", pid), "nats-2 started", "3 nodes healthy"}, nil)

	step("down", Down(ctx, cfg, ""), nil, []string{"nats-3 stopped", "nats-2 stopped", "nats-1 stopped", "clickhouse not running", "nats not running"}, nil)
	step("status after down", status(), []string{"nats         stopped"}, nil, []string{"nats-1", "cluster " + NATSClusterName})
	step("down nats-cluster again", Down(ctx, cfg, "nats-cluster"), nil, []string{"nats-1 not running"}, nil)
	if got := fmt.Sprint(Down(ctx, cfg, "kafka")); !strings.Contains(got, "nats-cluster") {
		t.Errorf("down of an unknown server names the choices: %s", got)
	}
}

// replicatedInfo returns name's stream information once a leader answers it.
func replicatedInfo(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	for {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var info *jetstream.StreamInfo
		s, err := js.Stream(ictx, name)
		if err == nil {
			info, err = s.Info(ictx)
		}
		cancel()
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
