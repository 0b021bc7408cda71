package devservices

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/servers"
	"github.com/servescope/servescope/dev/testenv"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoad(t *testing.T) {
	root := t.TempDir()
	cfg, err := Load(root, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATSPort != 4222 || cfg.NATSMonitorPort != 8222 || cfg.ClickHouseTCPPort != 9000 || cfg.ClickHouseHTTPPort != 8123 ||
		cfg.ClickHouseLogLevel != "information" || cfg.StartTimeout != time.Minute || cfg.LogLines != 40 ||
		cfg.NATSClusterNodes != 3 || cfg.NATSClusterPort != 4231 || cfg.NATSClusterMonitorPort != 8231 || cfg.NATSClusterRoutePort != 6231 ||
		cfg.ClickHouseShardCount != 2 || cfg.ClickHouseShardsTCPPort != 9201 || cfg.ClickHouseShardsHTTPPort != 8201 {
		t.Errorf("defaults: %+v", cfg)
	}
	if want := filepath.Join(root, ".cache"); cfg.CacheDir != want {
		t.Errorf("cache directory %s, want %s", cfg.CacheDir, want)
	}

	// A cache reached through a symbolic link (a worktree's .cache) is named by its real path:
	// the servers' command lines, by which they are recognized, hold that one.
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "cache")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	cfg, err = Load(root, env(map[string]string{servers.CacheDirEnv: link, "SERVESCOPE_DEV_NATS_PORT": "14222", "SERVESCOPE_DEV_START_TIMEOUT_S": "5"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CacheDir != real || cfg.NATSPort != 14222 || cfg.StartTimeout != 5*time.Second {
		t.Errorf("overrides: %+v", cfg)
	}

	_, err = Load(root, env(map[string]string{"SERVESCOPE_DEV_CLICKHOUSE_TCP_PORT": "nine", "SERVESCOPE_DEV_LOG_LINES": "0"}))
	if err == nil || !strings.Contains(err.Error(), "SERVESCOPE_DEV_CLICKHOUSE_TCP_PORT") || !strings.Contains(err.Error(), "SERVESCOPE_DEV_LOG_LINES") {
		t.Errorf("bad settings: %v", err)
	}
	for _, bad := range []map[string]string{
		{"SERVESCOPE_DEV_NATS_CLUSTER_NODES": "2"},
		{"SERVESCOPE_DEV_NATS_CLUSTER_NODES": "10"},
		{"SERVESCOPE_DEV_NATS_CLUSTER_ROUTE_PORT": "65534"},
	} {
		if _, err := Load(root, env(bad)); err == nil || !strings.Contains(err.Error(), "SERVESCOPE_DEV_NATS_CLUSTER_") {
			t.Errorf("%v: %v, want an error naming the variable", bad, err)
		}
	}
	for _, bad := range []map[string]string{
		{"SERVESCOPE_DEV_CLICKHOUSE_SHARDS": "1"},
		{"SERVESCOPE_DEV_CLICKHOUSE_SHARDS": "10"},
		{"SERVESCOPE_DEV_CLICKHOUSE_SHARDS_HTTP_PORT": "65535"},
	} {
		if _, err := Load(root, env(bad)); err == nil || !strings.Contains(err.Error(), "SERVESCOPE_DEV_CLICKHOUSE_SHARDS") {
			t.Errorf("%v: %v, want an error naming the variable", bad, err)
		}
	}
}

// TestCommandLines pins the servers' command lines to those earlier versions of scripts/dev-services
// ran: a server such a version started is recognized by its command line (its pid file holds only
// the pid), so a change here would leave the shared dev servers unrecognized.
func TestCommandLines(t *testing.T) {
	cfg := Config{CacheDir: "/c", NATSPort: 4222, NATSMonitorPort: 8222, ClickHouseTCPPort: 9000, ClickHouseHTTPPort: 8123, ClickHouseLogLevel: "information"}
	n, ch := cfg.NATS().Spec(), cfg.ClickHouse().Spec()
	cfg.NATSClusterNodes, cfg.NATSClusterPort, cfg.NATSClusterMonitorPort, cfg.NATSClusterRoutePort = 3, 4231, 8231, 6231
	nodes, err := cfg.NATSCluster()
	if err != nil {
		t.Fatal(err)
	}
	node := nodes[1].Spec()
	for _, tc := range []struct{ got, want string }{
		{strings.Join(append([]string{n.Path}, n.Args...), " "),
			"/c/bin/nats-server -c /c/nats/data/servescope-nats.conf --addr 127.0.0.1 --port 4222 --http_port 8222 --jetstream --store_dir /c/nats/data --server_name servescope-dev"},
		{strings.Join(append([]string{ch.Path}, ch.Args...), " "),
			"/c/bin/chlaunch --lib /c/chdb/node_modules/@chdb/lib-linux-x64-gnu/libchdb.so --path /c/clickhouse/data --tcp-port 9000 --http-port 8123 --listen-host 127.0.0.1 --config /c/clickhouse/config.xml --log-level information"},
		{n.PidFile + " " + n.Log, "/c/nats/nats-server.pid /c/nats/nats-server.log"},
		{strings.Join(append([]string{node.Path}, node.Args...), " "),
			"/c/bin/nats-server -c /c/nats-cluster/nats-2/data/servescope-nats.conf --addr 127.0.0.1 --port 4232 --http_port 8232 --jetstream --store_dir /c/nats-cluster/nats-2/data --server_name servescope-dev-2" +
				" --cluster nats://127.0.0.1:6232 --cluster_name servescope-dev-cluster --routes nats://127.0.0.1:6231,nats://127.0.0.1:6233"},
		{node.PidFile, "/c/nats-cluster/nats-2/nats-server.pid"},
		{ch.PidFile + " " + ch.Log, "/c/clickhouse/clickhouse.pid /c/clickhouse/clickhouse.log"},
	} {
		if tc.got != tc.want {
			t.Errorf("got  %s\nwant %s", tc.got, tc.want)
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ports, err := proc.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(ports[0])
}

// privateCache is a cache directory of its own whose programs are those scripts/dev-services
// installed in the repository's cache; a missing one fails the test under
// SERVESCOPE_REQUIRE_INTEGRATION=1 and skips it otherwise.
func privateCache(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	repoCache, err := servers.RepoCacheDir(wd)
	if err != nil {
		t.Fatal(err)
	}
	in := servers.InstalledIn(repoCache)
	if err := in.Check(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	cache := t.TempDir()
	mine := servers.InstalledIn(cache)
	for from, to := range map[string]string{in.NATSServer: mine.NATSServer, in.Chlaunch: mine.Chlaunch, in.Libchdb: mine.Libchdb} {
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(from, to); err != nil {
			t.Fatal(err)
		}
	}
	return cache
}

// TestUpStatusDown runs the commands against a private cache directory and private ports, as
// scripts/dev-services does against the shared ones.
func TestUpStatusDown(t *testing.T) {
	cache := privateCache(t)
	var out, msgs bytes.Buffer
	root := t.TempDir()
	load := func(ports []int) Config {
		t.Helper()
		cfg, err := Load(root, env(map[string]string{
			servers.CacheDirEnv:                   cache,
			"SERVESCOPE_DEV_NATS_PORT":            strconv.Itoa(ports[0]),
			"SERVESCOPE_DEV_NATS_MONITOR_PORT":    strconv.Itoa(ports[1]),
			"SERVESCOPE_DEV_CLICKHOUSE_TCP_PORT":  strconv.Itoa(ports[2]),
			"SERVESCOPE_DEV_CLICKHOUSE_HTTP_PORT": strconv.Itoa(ports[3]),
		}))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Out, cfg.Err = &out, &msgs
		return cfg
	}
	var cfg Config
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		_ = Down(context.Background(), cfg, "")
		if t.Failed() {
			t.Logf("messages:\n%s\nstatus output:\n%s", msgs.String(), out.String())
		}
	})
	step := func(what string, err error, wantOut, wantMsgs []string) {
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
		out.Reset()
		msgs.Reset()
	}

	// Up on picked ports, on fresh ones when another process took one before its server bound it.
	_, err := proc.OnFreePorts(ctx, 4, func(ctx context.Context, ports []int) error {
		cfg = load(ports)
		if err := Status(ctx, cfg); !errors.Is(err, ErrUnhealthy) {
			t.Fatalf("status before up: %v, want ErrUnhealthy", err)
		}
		step("status before up", nil, []string{"nats         stopped", "clickhouse   stopped"}, nil)
		err := Up(ctx, cfg)
		if err != nil {
			_ = Down(context.Background(), cfg, "")
			out.Reset()
			msgs.Reset()
		}
		return err
	})
	step("up", err, nil, []string{"nats started (pid", "clickhouse started (pid"})
	step("status", Status(ctx, cfg), []string{"nats         running pid", "clickhouse   running pid", "healthy"}, nil)
	step("up again", Up(ctx, cfg), nil, []string{"nats already running", "clickhouse already running"})

	// A pid file as earlier versions of the script wrote it: the pid alone.
	natsPid := pidOf(t, cfg.NATS().PidFile)
	if err := os.WriteFile(cfg.NATS().PidFile, []byte(fmt.Sprintln(natsPid)), 0o644); err != nil {
		t.Fatal(err)
	}
	step("status with a pid-only file", Status(ctx, cfg), []string{fmt.Sprintf("nats         running pid %-8d healthy", natsPid)}, nil)

	// ClickHouse dies on its own: status says so, up starts it again.
	chPid := pidOf(t, cfg.ClickHouse().PidFile)
	if err := syscall.Kill(chPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The server is detached: its exit is seen through its pid file, as status sees it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if found, err := proc.Inspect(cfg.ClickHouse().PidFile, nil); err != nil || found.State == proc.NotRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still runs after SIGKILL", chPid)
		}
	}
	if err := Status(ctx, cfg); !errors.Is(err, ErrUnhealthy) {
		t.Fatalf("status after the crash: %v, want ErrUnhealthy", err)
	}
	step("status after the crash", nil, []string{"clickhouse   stopped", fmt.Sprintf("pid %d died", chPid)}, nil)
	step("up after the crash", Up(ctx, cfg), nil, []string{
		"nats already running", fmt.Sprintf("clickhouse (pid %d) died since it was started; starting it again", chPid), "clickhouse started"})

	step("down nats", Down(ctx, cfg, "nats"), nil, []string{fmt.Sprintf("nats stopped (pid %d)", natsPid)})
	step("down", Down(ctx, cfg, ""), nil, []string{"clickhouse stopped", "nats not running"})
	if err := Status(ctx, cfg); !errors.Is(err, ErrUnhealthy) {
		t.Fatalf("status after down: %v, want ErrUnhealthy", err)
	}
	step("status after down", nil, []string{"nats         stopped", "clickhouse   stopped"}, nil)
	if out := fmt.Sprint(Down(ctx, cfg, "kafka")); !strings.Contains(out, "unknown server") {
		t.Errorf("down of an unknown server: %s", out)
	}
}

func pidOf(t *testing.T, pidFile string) int {
	t.Helper()
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(raw), "\n", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}
