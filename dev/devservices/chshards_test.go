package devservices

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/servers"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
)

// TestClickHouseShardsUpStatusDown runs `up clickhouse-shards`, status and down against a private
// cache directory and private ports, and checks through a client that the shards are one cluster:
// the sharded schema migrates over the settings `up` prints, a Distributed table spreads rows over
// both shards and reads them back through either, and an IN subquery over Distributed tables
// answers (the profile's distributed_product_mode). A shard that dies is said stopped and started again by `up`.
func TestClickHouseShardsUpStatusDown(t *testing.T) {
	cache := privateCache(t)
	var out, msgs bytes.Buffer
	cfg, err := Load(t.TempDir(), env(map[string]string{
		servers.CacheDirEnv:                          cache,
		"SERVESCOPE_DEV_NATS_PORT":                   freePort(t),
		"SERVESCOPE_DEV_NATS_MONITOR_PORT":           freePort(t),
		"SERVESCOPE_DEV_CLICKHOUSE_TCP_PORT":         freePort(t),
		"SERVESCOPE_DEV_CLICKHOUSE_HTTP_PORT":        freePort(t),
		"SERVESCOPE_DEV_CLICKHOUSE_SHARDS_TCP_PORT":  strconv.Itoa(freeRun(t, 2)),
		"SERVESCOPE_DEV_CLICKHOUSE_SHARDS_HTTP_PORT": strconv.Itoa(freeRun(t, 2)),
		"SERVESCOPE_DEV_START_TIMEOUT_S":             "120",
	}))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Out, cfg.Err = &out, &msgs
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
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
	status := func() error {
		if err := Status(ctx, cfg); !errors.Is(err, ErrUnhealthy) {
			return fmt.Errorf("status: %v, want ErrUnhealthy (the single servers are stopped)", err)
		}
		return nil
	}
	shards, err := cfg.ClickHouseShards()
	if err != nil {
		t.Fatal(err)
	}
	addrs := shards[0].Addr() + "," + shards[1].Addr()
	settings := "SERVESCOPE_CLICKHOUSE_ADDR=" + addrs + " SERVESCOPE_CLICKHOUSE_CLUSTER=" + ClickHouseClusterName

	step("status before up", status(), []string{"clickhouse   stopped"}, nil, []string{"clickhouse-1", "cluster " + ClickHouseClusterName})
	step("up clickhouse-shards", UpClickHouseShards(ctx, cfg), nil, []string{
		"clickhouse-1 started (pid", "clickhouse-2 started (pid", "shard 2 of cluster " + ClickHouseClusterName, settings,
	}, nil)
	step("status", status(), []string{"clickhouse-1 running pid", "clickhouse-2 running pid", "healthy   tcp " + shards[1].Addr(), settings}, nil, []string{"unhealthy"})

	ch := config.ClickHouse{Addr: strings.Split(addrs, ","), Database: "servescope", User: "default", DialTimeout: 5 * time.Second, Cluster: ClickHouseClusterName}
	if err := chstore.MigrateSharded(ctx, ch); err != nil {
		t.Fatalf("migrate the sharded schema with the settings up printed: %v", err)
	}
	conns := make([]driver.Conn, 2)
	for i, s := range shards {
		c := ch
		c.Addr, c.Cluster = []string{s.Addr()}, ""
		conn, err := chstore.Open(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns[i] = conn
	}
	if err := conns[0].Exec(ctx, "INSERT INTO requests_started (event_id, request_id, arrival_ts) SELECT toString(number), toString(number), now64(6) FROM numbers(100) SETTINGS distributed_foreground_insert = 1"); err != nil {
		t.Fatal(err)
	}
	for i, conn := range conns {
		var total, here uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM requests_started").Scan(&total); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, "SELECT count() FROM servescope_local.requests_started").Scan(&here); err != nil {
			t.Fatal(err)
		}
		if total != 100 || here == 0 || here == 100 {
			t.Errorf("shard %d: %d rows through the Distributed table (want 100), %d of them its own (want some, not all)", i+1, total, here)
		}
	}
	var notFinished uint64
	if err := conns[1].QueryRow(ctx, "SELECT count() FROM requests_started WHERE request_id NOT IN (SELECT request_id FROM requests)").Scan(&notFinished); err != nil || notFinished != 100 {
		t.Errorf("NOT IN over two Distributed tables: %d, %v; want 100 (distributed_product_mode=global)", notFinished, err)
	}
	pid := pidOf(t, shards[1].PidFile)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if found, err := proc.Inspect(shards[1].PidFile, nil); err != nil || found.State == proc.NotRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still runs after SIGKILL", pid)
		}
	}
	step("status with clickhouse-2 down", status(), []string{"clickhouse-2 stopped", fmt.Sprintf("pid %d died", pid), "clickhouse-1 running pid"}, nil, nil)
	step("up with clickhouse-2 dead", UpClickHouseShards(ctx, cfg), nil, []string{
		"clickhouse-1 already running", fmt.Sprintf("clickhouse-2 (pid %d) died since it was started; starting it again", pid), "clickhouse-2 started"}, nil)
	var total uint64
	if err := conns[0].QueryRow(ctx, "SELECT count() FROM requests_started").Scan(&total); err != nil || total != 100 {
		t.Errorf("after clickhouse-2's restart: %d rows, %v; want the 100 kept", total, err)
	}

	step("down", Down(ctx, cfg, ""), nil, []string{"clickhouse-2 stopped", "clickhouse-1 stopped", "clickhouse not running", "nats not running"}, nil)
	step("status after down", status(), []string{"clickhouse   stopped"}, nil, []string{"clickhouse-1", "cluster " + ClickHouseClusterName})
	step("down clickhouse-shards again", Down(ctx, cfg, "clickhouse-shards"), nil, []string{"clickhouse-1 not running"}, nil)
	if got := fmt.Sprint(Down(ctx, cfg, "kafka")); !strings.Contains(got, "clickhouse-shards") {
		t.Errorf("down of an unknown server names the choices: %s", got)
	}
}
