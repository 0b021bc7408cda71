package servers_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/servers"
	"github.com/servescope/servescope/dev/testenv"
)

// installed returns the programs scripts/dev-services installed; a missing one fails the test
// when SERVESCOPE_REQUIRE_INTEGRATION=1 (as scripts/test sets) and skips it otherwise.
func installed(t *testing.T) servers.Installed {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cache, err := servers.RepoCacheDir(wd)
	if err != nil {
		t.Fatal(err)
	}
	in := servers.InstalledIn(cache)
	if err := in.Check(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	return in
}

// freePort picks a port for a server a test starts itself (one expected to fail, or whose port
// is its subject); startNATS and startClickHouse pick theirs through proc.OnFreePorts.
func freePort(t *testing.T) int {
	t.Helper()
	ports, err := proc.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startNATS starts n on two fresh ports (again on others when one was taken before the server
// bound it).
func startNATS(t *testing.T, ctx context.Context, n servers.NATS) *servers.NATSServer {
	t.Helper()
	var s *servers.NATSServer
	_, err := proc.OnFreePorts(ctx, 2, func(ctx context.Context, ports []int) error {
		n.Port, n.MonitorPort = ports[0], ports[1]
		var err error
		if s, err = servers.NewNATS(n); err != nil {
			return err
		}
		t.Cleanup(func() {
			_ = s.Kill(context.Background())
			if t.Failed() {
				t.Logf("nats-server: %s", s.LogTail())
			}
		})
		return s.Start(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func natsConfig(t *testing.T, in servers.Installed) servers.NATS {
	dir := t.TempDir()
	return servers.NATS{
		Bin:      in.NATSServer,
		StoreDir: filepath.Join(dir, "jetstream"), ServerName: "servers-test",
		ConfigFile: filepath.Join(dir, "nats.conf"), Log: filepath.Join(dir, "nats-server.log"),
		DieWithCaller: true,
	}
}

func TestNATSKeepsStreamsAcrossStopAndKill(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	in := installed(t)
	cfg := natsConfig(t, in)
	cfg.MaxPayloadBytes = 4 << 20
	s := startNATS(t, ctx, cfg)

	nc := natsConnect(t, s.URL())
	if got := nc.MaxPayload(); got != 4<<20 {
		t.Errorf("max payload %d, want the configured 4 MiB", got)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SERVERS", Subjects: []string{"servers.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	// A stream reserving 200 GiB is accepted whatever the disk has free: the budget is
	// MaxFileStoreBytes' 1 TiB, not 75% of the free disk (err 10047 made parallel tests fail).
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RESERVED", Subjects: []string{"reserved.>"}, Storage: jetstream.FileStorage, MaxBytes: 200 << 30}); err != nil {
		t.Fatalf("create a stream reserving 200 GiB: %v", err)
	}
	if err := js.DeleteStream(ctx, "RESERVED"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "servers.a", []byte("before stop")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	nc.Close()

	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	nc = natsConnect(t, s.URL())
	js, _ = jetstream.New(nc)
	if _, err := js.Publish(ctx, "servers.b", []byte("before kill")); err != nil {
		t.Fatalf("publish after restart: %v", err)
	}
	nc.Close()

	if err := s.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Crashed() {
		t.Error("a killed server counted as crashed")
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	nc = natsConnect(t, s.URL())
	js, _ = jetstream.New(nc)
	stream, err := js.Stream(ctx, "SERVERS")
	if err != nil {
		t.Fatalf("stream after kill and restart: %v", err)
	}
	for seq, want := range map[uint64]string{1: "before stop", 2: "before kill"} {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d after restarts: %v", seq, err)
		}
		if string(m.Data) != want {
			t.Errorf("message %d = %q, want %q", seq, m.Data, want)
		}
	}
}

// TestNATSStartFailsOnATakenPort: the server exits at once and Start says why, from its log.
func TestNATSStartFailsOnATakenPort(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	in := installed(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := natsConfig(t, in)
	cfg.Port, cfg.MonitorPort = taken.Addr().(*net.TCPAddr).Port, freePort(t)
	s, err := servers.NewNATS(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start(ctx)
	if err == nil {
		_ = s.Kill(ctx)
		t.Fatal("started on a taken port")
	}
	if !strings.Contains(err.Error(), "exited before it was ready") || !errors.Is(err, proc.ErrAddrInUse) {
		t.Errorf("error does not say why: %v", err)
	}
}

// TestServersComeUpWhenTheirPickedPortIsTaken: a port picked for nats-server, and one picked for
// ClickHouse, is bound by another process before the server starts, as happens on a machine
// shared by several test runs; each server fails its bind, says so, and comes up on fresh ports.
func TestServersComeUpWhenTheirPickedPortIsTaken(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	in := installed(t)
	// occupy binds one port of the first set of ports offered and reports which.
	occupy := func(ports []int, i int) int {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ports[i]))
		if err != nil {
			return 0 // someone else's already: the server fails on it all the same
		}
		t.Cleanup(func() { _ = l.Close() })
		return ports[i]
	}

	cfg := natsConfig(t, in)
	var natsSrv *servers.NATSServer
	var takenNATS int
	natsPorts, err := proc.OnFreePorts(ctx, 2, func(ctx context.Context, ports []int) error {
		if takenNATS == 0 {
			takenNATS = occupy(ports, 0)
		}
		cfg.Port, cfg.MonitorPort = ports[0], ports[1]
		var err error
		if natsSrv, err = servers.NewNATS(cfg); err != nil {
			return err
		}
		t.Cleanup(func() { _ = natsSrv.Kill(context.Background()) })
		return natsSrv.Start(ctx)
	})
	if err != nil {
		t.Fatalf("nats-server with its first client port taken: %v", err)
	}
	if natsPorts[0] == takenNATS {
		t.Fatalf("nats-server started on the taken port %d", takenNATS)
	}
	natsConnect(t, natsSrv.URL())

	dir := t.TempDir()
	var ch *servers.ClickHouseServer
	var takenCH int
	chPorts, err := proc.OnFreePorts(ctx, 2, func(ctx context.Context, ports []int) error {
		if takenCH == 0 {
			takenCH = occupy(ports, 1)
		}
		var err error
		ch, err = servers.NewClickHouse(servers.ClickHouse{
			Launcher: in.Chlaunch, Lib: in.Libchdb, TCPPort: ports[0], HTTPPort: ports[1],
			DataDir: filepath.Join(dir, "data"), ConfigFile: filepath.Join(dir, "config.xml"),
			EngineLog: filepath.Join(dir, "clickhouse-server.log"), EngineErrorLog: filepath.Join(dir, "clickhouse-server.err.log"),
			Log: filepath.Join(dir, "clickhouse.log"), DieWithCaller: true,
		})
		if err != nil {
			return err
		}
		t.Cleanup(func() { _ = ch.Kill(context.Background()) })
		return ch.Start(ctx)
	})
	if err != nil {
		t.Fatalf("ClickHouse with its first HTTP port taken: %v", err)
	}
	if chPorts[1] == takenCH {
		t.Fatalf("ClickHouse started on the taken port %d", takenCH)
	}
	if got := chHTTP(t, ch, "SELECT 1"); got != "1" {
		t.Errorf("SELECT 1 = %q", got)
	}
	if log, _ := os.ReadFile(filepath.Join(dir, "clickhouse.log")); !strings.Contains(strings.ToLower(string(log)), "address already in use") {
		t.Errorf("ClickHouse's first start did not fail on the taken port; its log:\n%s", log)
	}
}

// startClickHouse starts a server on two fresh ports (again on others when one was taken before
// the server bound it).
func startClickHouse(t *testing.T, ctx context.Context, in servers.Installed) *servers.ClickHouseServer {
	t.Helper()
	dir := t.TempDir()
	var s *servers.ClickHouseServer
	_, err := proc.OnFreePorts(ctx, 2, func(ctx context.Context, ports []int) error {
		var err error
		s, err = servers.NewClickHouse(servers.ClickHouse{
			Launcher: in.Chlaunch, Lib: in.Libchdb, TCPPort: ports[0], HTTPPort: ports[1],
			DataDir: filepath.Join(dir, "data"), ConfigFile: filepath.Join(dir, "config.xml"),
			EngineLog: filepath.Join(dir, "clickhouse-server.log"), EngineErrorLog: filepath.Join(dir, "clickhouse-server.err.log"),
			Log: filepath.Join(dir, "clickhouse.log"), DieWithCaller: true,
		})
		if err != nil {
			return err
		}
		t.Cleanup(func() {
			_ = s.Kill(context.Background())
			if t.Failed() {
				t.Logf("clickhouse: %s", s.LogTail())
			}
		})
		return s.Start(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestClickHouseKeepsRowsAcrossStopAndKill(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := startClickHouse(t, ctx, installed(t))

	if version := chHTTP(t, s, "SELECT version()"); !strings.HasPrefix(version, "26.") {
		t.Fatalf("SELECT version() = %q, want 26.x", version)
	}
	chHTTP(t, s, "CREATE TABLE default.restart_check (id UInt32, note String) ENGINE = MergeTree ORDER BY id")
	chHTTP(t, s, "INSERT INTO default.restart_check VALUES (1, 'before stop')")
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	chHTTP(t, s, "INSERT INTO default.restart_check VALUES (2, 'before kill')")
	if err := s.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := chHTTP(t, s, "SELECT id, note FROM default.restart_check ORDER BY id FORMAT TSV"), "1\tbefore stop\n2\tbefore kill"; got != want {
		t.Fatalf("rows after restarts = %q, want %q", got, want)
	}

	// Addr reaches the same server over the native protocol.
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{s.Addr()}})
	if err != nil {
		t.Fatalf("open native connection to %s: %v", s.Addr(), err)
	}
	defer conn.Close()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM default.restart_check").Scan(&n); err != nil {
		t.Fatalf("count over the native protocol: %v", err)
	}
	if n != 2 {
		t.Fatalf("count over the native protocol = %d, want 2", n)
	}

	// The engine keeps its own log, through the config Prepare wrote: each of the three starts
	// wrote its pid there.
	engineLog, err := os.ReadFile(s.Config().EngineLog)
	if err != nil {
		t.Fatalf("read the engine log: %v", err)
	}
	if got := strings.Count(string(engineLog), "StatusFile: Writing pid"); got != 3 {
		t.Fatalf("engine log has %d start lines (StatusFile: Writing pid), want 3", got)
	}
}

// TestClickHouseSurvivesFailedNativeConnections covers what used to end the whole engine
// (clickhouse-local terminates on any exception leaving a connection thread; chlaunch disarms that):
// each failed native connection must leave the server serving the next client.
func TestClickHouseSurvivesFailedNativeConnections(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := startClickHouse(t, ctx, installed(t))
	tests := []struct {
		name    string
		connect func(ctx context.Context) error
		want    string // in the client's error; empty when the client sees none
	}{
		{"default database does not exist", func(ctx context.Context) error {
			return nativePing(ctx, s, clickhouse.Auth{Database: "no_such_database"})
		}, "no_such_database does not exist"},
		{"wrong password", func(ctx context.Context) error {
			return nativePing(ctx, s, clickhouse.Auth{Username: "default", Password: "wrong"})
		}, "Authentication failed"},
		{"handshake cut short", func(ctx context.Context) error {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", s.Addr())
			if err != nil {
				return err
			}
			// The first bytes of a Hello packet, then a normal close.
			if _, err := c.Write([]byte{0, 10, 'c', 'l', 'i'}); err != nil {
				return err
			}
			return c.Close()
		}, ""},
		{"connection reset before the handshake", func(ctx context.Context) error {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", s.Addr())
			if err != nil {
				return err
			}
			// Linger 0 makes Close send RST.
			if err := c.(*net.TCPConn).SetLinger(0); err != nil {
				return err
			}
			return c.Close()
		}, ""},
	}
	for _, tc := range tests {
		err := tc.connect(ctx)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
		// A native ping runs after the engine has handled the failed connection (one connection
		// at a time here); a dying engine would not answer it, or would be gone by the HTTP check.
		if err := nativePing(ctx, s, clickhouse.Auth{}); err != nil {
			t.Fatalf("after %s: native ping: %v", tc.name, err)
		}
		if got := chHTTP(t, s, "SELECT 1"); got != "1" {
			t.Fatalf("after %s: SELECT 1 = %q", tc.name, got)
		}
		if s.Crashed() || !s.Running() {
			t.Fatalf("after %s: the server exited (%v)", tc.name, s.Err())
		}
	}
}

func TestClickHouseConfigFollowsTheLogPolicy(t *testing.T) {
	dir := t.TempDir()
	c := servers.ClickHouse{
		Launcher: "chlaunch", Lib: "libchdb.so", TCPPort: 1, HTTPPort: 2,
		DataDir: filepath.Join(dir, "data"), ConfigFile: filepath.Join(dir, "conf", "config.xml"),
		EngineLog: filepath.Join(dir, "a&b.log"), EngineErrorLog: filepath.Join(dir, "err.log"), Log: filepath.Join(dir, "out.log"),
		UsersFile: filepath.Join(dir, "users.xml"),
	}
	if err := c.Prepare(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(c.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	conf := string(raw)
	for _, want := range []string{
		"<log>" + filepath.Join(dir, "a&amp;b.log") + "</log>",
		"<size>20M</size>", "<count>5</count>", "<errorlog_level>error</errorlog_level>",
		"<users_xml><path>" + c.UsersFile + "</path></users_xml>",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("config lacks %q:\n%s", want, conf)
		}
	}
	if _, err := os.Stat(c.DataDir); err != nil {
		t.Errorf("data directory: %v", err)
	}
	if err := (servers.ClickHouse{}).Prepare(); err == nil {
		t.Error("Prepare accepted an empty description")
	}
}

func TestLastCrash(t *testing.T) {
	got, err := servers.LastCrash(filepath.Join("testdata", "crash.err.log"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "crash.report"))
	if err != nil {
		t.Fatal(err)
	}
	if got != strings.TrimRight(string(want), "\n") {
		t.Errorf("LastCrash =\n%s\nwant\n%s", got, want)
	}
	if got, err := servers.LastCrash(filepath.Join(t.TempDir(), "absent.log")); got != "" || err != nil {
		t.Errorf("LastCrash of a missing log = %q, %v", got, err)
	}
}

func TestInstalledCheck(t *testing.T) {
	in := servers.InstalledIn(t.TempDir())
	if err := in.Check(); !errors.Is(err, servers.ErrNotInstalled) || !strings.Contains(err.Error(), "nats-server") {
		t.Errorf("Check of an empty cache: %v", err)
	}
	t.Setenv(servers.CacheDirEnv, "/elsewhere")
	if got := servers.CacheDir("/repo"); got != "/elsewhere" {
		t.Errorf("CacheDir with %s set = %s", servers.CacheDirEnv, got)
	}
	t.Setenv(servers.CacheDirEnv, "")
	if got := servers.CacheDir("/repo"); got != "/repo/.cache" {
		t.Errorf("CacheDir = %s", got)
	}
	wd, _ := os.Getwd()
	root := filepath.Dir(filepath.Dir(wd)) // dev/servers
	if got, err := servers.RepoCacheDir(wd); err != nil || got != filepath.Join(root, ".cache") {
		t.Errorf("RepoCacheDir(%s) = %s, %v", wd, got, err)
	}
	if _, err := servers.RepoCacheDir("/"); err == nil {
		t.Error("RepoCacheDir found a repository at /")
	}
}

func nativePing(ctx context.Context, s *servers.ClickHouseServer, auth clickhouse.Auth) error {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{s.Addr()}, Auth: auth, DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Ping(ctx)
}

func natsConnect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// chHTTP runs one statement over the HTTP interface and returns the answer without the trailing newline.
func chHTTP(t *testing.T, s *servers.ClickHouseServer, query string) string {
	t.Helper()
	resp, err := http.Post(s.HTTPURL()+"/?"+url.Values{"query": {query}}.Encode(), "text/plain", nil)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: read answer: %v", query, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s: %s", query, resp.Status, body)
	}
	return strings.TrimRight(string(body), "\n")
}

// Every node of a cluster listens for routes on its own port and solicits every other node's,
// never its own; a node without a stable name is refused, as JetStream's peers know it by name.
func TestNATSClusterRoutesEveryNodeToTheOthers(t *testing.T) {
	base := func(name string, port int) servers.NATS {
		return servers.NATS{Bin: "nats-server", Port: port, MonitorPort: port + 1, StoreDir: "/s/" + name, ServerName: name, Log: "/l/" + name}
	}
	nodes, err := servers.NATSCluster("c", []servers.NATS{base("a", 4001), base("b", 4011), base("c", 4021)}, []int{6001, 6011, 6021})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"--cluster", "nats://127.0.0.1:6001", "--cluster_name", "c", "--routes", "nats://127.0.0.1:6011,nats://127.0.0.1:6021"},
		{"--cluster", "nats://127.0.0.1:6011", "--cluster_name", "c", "--routes", "nats://127.0.0.1:6001,nats://127.0.0.1:6021"},
		{"--cluster", "nats://127.0.0.1:6021", "--cluster_name", "c", "--routes", "nats://127.0.0.1:6001,nats://127.0.0.1:6011"},
	}
	for i, n := range nodes {
		args := n.Args()
		if got := args[len(args)-6:]; strings.Join(got, " ") != strings.Join(want[i], " ") {
			t.Errorf("node %s: cluster arguments %q, want %q", n.ServerName, got, want[i])
		}
	}
	if got, want := servers.ClientURLs(nodes), "nats://127.0.0.1:4001,nats://127.0.0.1:4011,nats://127.0.0.1:4021"; got != want {
		t.Errorf("ClientURLs = %q, want %q", got, want)
	}
	unnamed := base("", 4031)
	if _, err := servers.NATSCluster("c", []servers.NATS{base("a", 4001), unnamed}, []int{6001, 6031}); err == nil {
		t.Error("a cluster node without ServerName was accepted")
	}
	if _, err := servers.NATSCluster("c", []servers.NATS{base("a", 4001)}, []int{6001, 6011}); err == nil {
		t.Error("a cluster with more ports than nodes was accepted")
	}
}

// A cluster description becomes the engine's remote_servers (shards in order, replicas by address,
// no default database) and macros; a name that cannot be an XML element is refused.
func TestClickHouseConfigDescribesTheCluster(t *testing.T) {
	dir := t.TempDir()
	c := servers.ClickHouse{
		Launcher: "chlaunch", Lib: "libchdb.so", TCPPort: 1, HTTPPort: 2,
		DataDir: filepath.Join(dir, "data"), ConfigFile: filepath.Join(dir, "config.xml"),
		EngineLog: filepath.Join(dir, "e.log"), EngineErrorLog: filepath.Join(dir, "err.log"), Log: filepath.Join(dir, "out.log"),
		Clusters: map[string][][]string{"obs": {{"127.0.0.1:9001"}, {"127.0.0.1:9002", "127.0.0.1:9003"}}},
		Macros:   map[string]string{"shard": "02", "replica": "r1"},
	}
	if err := c.Prepare(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(c.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.Join(strings.Fields(string(raw)), "")
	for _, want := range []string{
		"<remote_servers><obs><shard><internal_replication>true</internal_replication>" +
			"<replica><host>127.0.0.1</host><port>9001</port></replica></shard>" +
			"<shard><internal_replication>true</internal_replication>" +
			"<replica><host>127.0.0.1</host><port>9002</port></replica>" +
			"<replica><host>127.0.0.1</host><port>9003</port></replica></shard></obs></remote_servers>",
		"<macros><replica>r1</replica><shard>02</shard></macros>",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("config lacks %s:\n%s", want, raw)
		}
	}
	for _, bad := range []servers.ClickHouse{
		{Clusters: map[string][][]string{"a b": {{"127.0.0.1:1"}}}},
		{Clusters: map[string][][]string{"obs": {{}}}},
		{Clusters: map[string][][]string{"obs": {{"127.0.0.1"}}}},
		{Macros: map[string]string{"<x>": "1"}},
	} {
		b := c
		b.Clusters, b.Macros = bad.Clusters, bad.Macros
		if err := b.Prepare(); err == nil {
			t.Errorf("Prepare accepted clusters %v macros %v", bad.Clusters, bad.Macros)
		}
	}
}
