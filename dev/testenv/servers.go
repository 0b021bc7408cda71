package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/servers"
)

// Private servers for fault tests: each StartNATS/StartClickHouse call runs its own server process
// (dev/servers, through dev/proc) on free loopback ports with its data under t.TempDir(), so a test
// can stop, kill and restart it without disturbing the shared servers other tests use. A port
// taken by another process between its pick and the server's bind costs a start on fresh ports,
// not the test (proc.OnFreePorts). The
// programs are the ones scripts/dev-services installs under its cache directory. These are the
// testing.TB face of dev/servers: each method fails the test on error and must run on the test's
// goroutine. A server is killed when its test ends (a clean shutdown is no use to a discarded
// TempDir), and when the test failed its logs' tails are shown.

// NATSServer is a private nats-server with JetStream on 127.0.0.1. Its port and JetStream store
// stay the same across Stop/Kill and Start, so streams and acknowledged messages survive a restart.
type NATSServer struct {
	t testing.TB
	s *servers.NATSServer
}

// StartNATS starts a private nats-server with JetStream on two free loopback ports (client and
// monitoring), its store under t.TempDir(), and returns once /healthz?js-enabled-only=true answers 200.
func StartNATS(t testing.TB) *NATSServer {
	t.Helper()
	in := installed(t)
	dir := t.TempDir()
	n := &NATSServer{t: t}
	onFreePorts(t, 2, func(ctx context.Context, ports []int) error {
		s, err := servers.NewNATS(servers.NATS{
			Bin:         in.NATSServer,
			Port:        ports[0],
			MonitorPort: ports[1],
			StoreDir:    filepath.Join(dir, "jetstream"),
			ServerName:  "testenv-" + strconv.Itoa(ports[0]),
			Log:         filepath.Join(dir, "nats-server.log"),
			StopGrace:   stopGrace,
			// A test binary killed by its timeout leaves no server behind.
			DieWithCaller: true,
		})
		if err != nil {
			return err
		}
		n.s = s
		supervise(t, s.Process)
		return s.Start(ctx)
	})
	return n
}

// onFreePorts runs start on n free loopback ports, and again on fresh ones while a server it
// starts finds one taken (proc.OnFreePorts); the test fails when that does not succeed.
func onFreePorts(t testing.TB, n int, start func(ctx context.Context, ports []int) error) []int {
	t.Helper()
	ports, err := proc.OnFreePorts(t.Context(), n, start)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// URL is the client URL, nats://127.0.0.1:<port>; it stays valid across restarts.
func (n *NATSServer) URL() string { return n.s.URL() }

// StoreDir is the JetStream store directory; it survives Stop, Kill and Start.
func (n *NATSServer) StoreDir() string { return n.s.Config().StoreDir }

// Start (re)starts the server on the same port with the same store and waits until it is healthy.
func (n *NATSServer) Start() { n.t.Helper(); start(n.t, n.s.Process) }

// Stop sends SIGTERM (nats-server then shuts down cleanly) and waits for the process to exit,
// escalating to SIGKILL after 15 s (a test error). Stopping a stopped server does nothing.
func (n *NATSServer) Stop() { n.t.Helper(); stop(n.t, n.s.Process) }

// Kill sends SIGKILL, as a crash would, and waits for the process to exit.
func (n *NATSServer) Kill() { n.t.Helper(); kill(n.t, n.s.Process) }

// ClickHouseServer is a private ClickHouse server (the engine in libchdb.so, run by chlaunch) on
// 127.0.0.1. Its ports and data path stay the same across Stop/Kill and Start, so tables and
// acknowledged inserts survive a restart.
type ClickHouseServer struct {
	t testing.TB
	s *servers.ClickHouseServer
}

// StartClickHouse starts a private ClickHouse server on two free loopback ports (native and HTTP)
// with its data under t.TempDir(), and returns once HTTP `SELECT 1` answers 1. The engine's own log
// is [ClickHouseServer.EngineLog].
func StartClickHouse(t testing.TB) *ClickHouseServer {
	t.Helper()
	return startClickHouse(t, "", nil)
}

// StartClickHouseUsers starts a private ClickHouse server like [StartClickHouse] whose users and
// roles come from a users.xml file: usersXML is a whole <clickhouse> document with <users>,
// <roles>, <profiles> and <quotas> sections (see security.UsersXML). It must keep a `default` user
// without password, which the readiness check and the test's admin connection use. The engine in
// libchdb.so only has the read-only users_xml access storage (CREATE USER and CREATE ROLE fail with
// ACCESS_STORAGE_FOR_INSERTION_NOT_FOUND), so file-defined users are the way to test privileges on it.
func StartClickHouseUsers(t testing.TB, usersXML string) *ClickHouseServer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users.xml")
	if err := os.WriteFile(path, []byte(usersXML), 0o600); err != nil {
		t.Fatalf("write ClickHouse users.xml: %v", err)
	}
	return startClickHouse(t, path, nil)
}

// StartClickHouseConfigD starts a private ClickHouse server like [StartClickHouse] with files
// (file name → content) in the config.d directory beside its config, which the engine merges
// into that config as a ClickHouse server merges /etc/clickhouse-server/config.d: a test proves
// that a deployment's config files load. Variables their from_env attributes name must be in the
// test's environment (t.Setenv), which the server inherits.
func StartClickHouseConfigD(t testing.TB, files map[string][]byte) *ClickHouseServer {
	t.Helper()
	return startClickHouse(t, "", files)
}

// startClickHouse starts a private server on two free loopback ports with the users file (when
// set) and the config.d files.
func startClickHouse(t testing.TB, usersFile string, configD map[string][]byte) *ClickHouseServer {
	t.Helper()
	in := installed(t)
	dir := t.TempDir()
	if len(configD) > 0 {
		d := filepath.Join(dir, "config.d")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range configD {
			if err := os.WriteFile(filepath.Join(d, filepath.Base(name)), content, 0o644); err != nil {
				t.Fatalf("write ClickHouse config.d/%s: %v", name, err)
			}
		}
	}
	var c *ClickHouseServer
	onFreePorts(t, 2, func(ctx context.Context, ports []int) error {
		cfg := clickHouseConfig(in, dir, ports[0], ports[1])
		cfg.UsersFile = usersFile
		s, err := newClickHouse(t, cfg)
		if err != nil {
			return err
		}
		c = s
		return s.s.Start(ctx)
	})
	return c
}

// clickHouseConfig describes a private server on the native and HTTP ports tcpPort and httpPort, its data
// and config under dir (config.d beside the config).
func clickHouseConfig(in servers.Installed, dir string, tcpPort, httpPort int) servers.ClickHouse {
	return servers.ClickHouse{
		Launcher:       in.Chlaunch,
		Lib:            in.Libchdb,
		TCPPort:        tcpPort,
		HTTPPort:       httpPort,
		DataDir:        filepath.Join(dir, "data"),
		ConfigFile:     filepath.Join(dir, "config.xml"),
		EngineLog:      filepath.Join(dir, "clickhouse-server.log"),
		EngineErrorLog: filepath.Join(dir, "clickhouse-server.err.log"),
		Log:            filepath.Join(dir, "clickhouse.log"),
		StopGrace:      stopGrace,
		DieWithCaller:  true,
	}
}

// newClickHouse prepares the server cfg describes, killed when the test ends; it does not start it.
func newClickHouse(t testing.TB, cfg servers.ClickHouse) (*ClickHouseServer, error) {
	s, err := servers.NewClickHouse(cfg)
	if err != nil {
		return nil, err
	}
	supervise(t, s.Process)
	return &ClickHouseServer{t: t, s: s}, nil
}

// StartClickHouseShards starts shards private ClickHouse servers, one replica per shard, each
// configured with the cluster name in its remote_servers (every server, in order, one shard) and
// the macros shard (01, 02, ...) and replica (r1). A Distributed table over name on any of them
// reaches them all.
func StartClickHouseShards(t testing.TB, name string, shards int) []*ClickHouseServer {
	t.Helper()
	return StartClickHouseCluster(t, name, shards, "")
}

// StartClickHouseCluster is StartClickHouseShards with, when zooKeeper (host:port) is set, that
// coordination node in every server's config, so that Replicated tables can be created on them.
func StartClickHouseCluster(t testing.TB, name string, shards int, zooKeeper string) []*ClickHouseServer {
	t.Helper()
	return StartClickHouseClusterOf(t, ClickHouseCluster{Name: name, Shards: shards, ZooKeeper: zooKeeper})
}

// ClickHouseCluster describes private ClickHouse servers started as the shards of one cluster
// (one replica each) by [StartClickHouseClusterOf].
type ClickHouseCluster struct {
	// Name is the cluster's name in every server's remote_servers; Shards how many servers.
	Name   string
	Shards int
	// ZooKeeper, when set (host:port), is the coordination node in every server's config.
	ZooKeeper string
	// Secret, when set, is the cluster's secret: a query one server sends to another runs there as
	// the user who asked it, as in deploy/clickhouse/cluster/config.d/remote_servers.xml.
	Secret string
	// UsersXML is every server's users.xml (see StartClickHouseUsers): it must keep a passwordless
	// default user, and should give the default profile servers.ClusterProfile, as a deployed
	// cluster does. Empty: servers.ClusterUsersXML().
	UsersXML string
}

// StartClickHouseClusterOf starts c.Shards private ClickHouse servers, one replica per shard, each
// with c.Name in its remote_servers (every server, in order, one shard), the macros shard (01,
// 02, ...) and replica (r1), and its users from c.UsersXML. A Distributed table over c.Name on any
// of them reaches them all.
func StartClickHouseClusterOf(t testing.TB, c ClickHouseCluster) []*ClickHouseServer {
	t.Helper()
	in := installed(t)
	users := c.UsersXML
	if users == "" {
		users = servers.ClusterUsersXML()
	}
	usersFile := filepath.Join(t.TempDir(), "users.xml")
	if err := os.WriteFile(usersFile, []byte(users), 0o600); err != nil {
		t.Fatalf("write ClickHouse users.xml: %v", err)
	}
	var out []*ClickHouseServer
	// Every server names every other's native port in its remote_servers: a port lost by one is
	// a new set of ports for all.
	onFreePorts(t, 2*c.Shards, func(ctx context.Context, ports []int) error {
		cfgs := make([]servers.ClickHouse, c.Shards)
		layout := make([][]string, c.Shards)
		for i := range cfgs {
			cfgs[i] = clickHouseConfig(in, t.TempDir(), ports[2*i], ports[2*i+1])
			layout[i] = []string{cfgs[i].Addr()}
		}
		out = make([]*ClickHouseServer, c.Shards)
		for i := range cfgs {
			cfgs[i].Clusters = map[string][][]string{c.Name: layout}
			cfgs[i].ClusterSecret = c.Secret
			cfgs[i].UsersFile = usersFile
			cfgs[i].Macros = map[string]string{"shard": fmt.Sprintf("%02d", i+1), "replica": "r1"}
			if c.ZooKeeper != "" {
				cfgs[i].ZooKeeper = []string{c.ZooKeeper}
			}
			var err error
			if out[i], err = newClickHouse(t, cfgs[i]); err != nil {
				return err
			}
		}
		procs := make([]*proc.Process, c.Shards)
		for i, s := range out {
			procs[i] = s.s.Process
		}
		return startAll(ctx, procs)
	})
	return out
}

// startAll starts every process at once and waits for all; when one fails, the others are
// killed (a set of ports given up on is left with nothing running) and the errors returned.
func startAll(ctx context.Context, procs []*proc.Process) error {
	errs := make(chan error, len(procs))
	for _, p := range procs {
		go func() { errs <- p.Start(ctx) }()
	}
	var failed []error
	for range procs {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	for _, p := range procs {
		_ = p.Kill(context.Background())
	}
	return errors.Join(failed...)
}

// ZooKeeperServer is a private standalone ZooKeeper (Debian's zookeeper package) on 127.0.0.1.
type ZooKeeperServer struct {
	t testing.TB
	s *servers.ZooKeeper
}

// StartZooKeeper installs Debian's zookeeper package when it is missing (servers.InstallZooKeeper:
// apt-get, as root), starts a private standalone server on a free loopback port with its data
// under t.TempDir(), and returns once it answers ruok. When it cannot be installed (not root, no
// apt-get, the Debian mirror unreachable) the test ends through Unavailable with the reason: a
// failure under SERVESCOPE_REQUIRE_INTEGRATION=1.
func StartZooKeeper(t testing.TB) *ZooKeeperServer {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	apt, err := os.Create(filepath.Join(dir, "apt-get.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer apt.Close()
	if err := servers.InstallZooKeeper(ctx, apt); err != nil {
		Unavailable(t, "%v; apt-get's output:\n%s", err, proc.Tail(apt.Name(), 20))
	}
	z := &ZooKeeperServer{t: t}
	onFreePorts(t, 1, func(ctx context.Context, ports []int) error {
		s, err := servers.NewZooKeeper(servers.ZooKeeperConfig{
			Port:       ports[0],
			DataDir:    filepath.Join(dir, "data"),
			ConfigFile: filepath.Join(dir, "zoo.cfg"),
			Log:        filepath.Join(dir, "zookeeper.log"),
			// The JVM starts slowly on a loaded machine.
			ReadyTimeout:  2 * time.Minute,
			DieWithCaller: true,
		})
		if err != nil {
			return err
		}
		z.s = s
		supervise(t, s.Process)
		return s.Start(ctx)
	})
	return z
}

// Addr is the client address, 127.0.0.1:<port>.
func (z *ZooKeeperServer) Addr() string { return z.s.Addr() }

// Addr is the native protocol address, 127.0.0.1:<port>, for clickhouse-go.
func (c *ClickHouseServer) Addr() string { return c.s.Addr() }

// HTTPURL is the HTTP interface's base URL, http://127.0.0.1:<port>, without a trailing slash.
func (c *ClickHouseServer) HTTPURL() string { return c.s.HTTPURL() }

// DataDir is the server's data path; it survives Stop, Kill and Start.
func (c *ClickHouseServer) DataDir() string { return c.s.Config().DataDir }

// EngineLog is the engine's own log at level information, beside the data path; a crash report
// (signal, query, stack) lands here and in the error log next to it.
func (c *ClickHouseServer) EngineLog() string { return c.s.Config().EngineLog }

// Start (re)starts the server on the same ports and data path and waits until `SELECT 1` answers.
func (c *ClickHouseServer) Start() { c.t.Helper(); start(c.t, c.s.Process) }

// Stop sends SIGTERM and waits for the process to exit. The launcher exits at once on SIGTERM,
// without the engine's graceful cancel; acknowledged inserts are already on disk. Stopping a stopped
// server does nothing.
func (c *ClickHouseServer) Stop() { c.t.Helper(); stop(c.t, c.s.Process) }

// Kill sends SIGKILL, as a crash would, and waits for the process to exit.
func (c *ClickHouseServer) Kill() { c.t.Helper(); kill(c.t, c.s.Process) }

// stopGrace is how long a test's server has after SIGTERM: a JetStream flush or a ClickHouse
// shutdown under inserts outlasts proc's 15 s on a loaded machine, and a kill after the grace
// fails the test (stop).
const stopGrace = time.Minute

func start(t testing.TB, p *proc.Process) {
	t.Helper()
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func stop(t testing.TB, p *proc.Process) {
	t.Helper()
	err := p.Stop(t.Context())
	switch {
	case errors.Is(err, proc.ErrKilledAfterGrace):
		// The server is gone all the same; the test may go on, but it should not pass.
		t.Error(err)
	case err != nil:
		t.Fatal(err)
	}
}

func kill(t testing.TB, p *proc.Process) {
	t.Helper()
	if err := p.Kill(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// supervise kills p when the test ends and shows its logs' tails when the test failed.
func supervise(t testing.TB, p *proc.Process) {
	t.Cleanup(func() {
		_ = p.Kill(context.Background())
		if t.Failed() && p.Pid() != 0 {
			t.Logf("%s: %s", p.Spec().Name, p.LogTail())
		}
	})
}

// installed returns the server programs scripts/dev-services installed, ending the test through
// Unavailable when one is missing, like an unreachable shared server: a failure under
// SERVESCOPE_REQUIRE_INTEGRATION=1, a skip otherwise.
func installed(t testing.TB) servers.Installed {
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
		Unavailable(t, "%v", err)
	}
	return in
}

// NATSCluster is a private JetStream cluster of nats-server nodes on 127.0.0.1, each a
// [NATSServer] that can be killed and restarted on its ports and store.
type NATSCluster struct {
	t     testing.TB
	Nodes []*NATSServer
}

// StartNATSCluster starts a private cluster of n nats-server nodes with JetStream, routed to each
// other on free loopback ports, and returns once every node answers /healthz (the JetStream meta
// leader is elected and known to all).
func StartNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	in := installed(t)
	c := &NATSCluster{t: t}
	// Each node routes to every other's cluster port: a port lost by one is a new set of ports
	// (and a new cluster, in a new directory) for all.
	onFreePorts(t, 3*n, func(ctx context.Context, ports []int) error {
		dir := t.TempDir()
		name := "testenv-" + strconv.Itoa(ports[0])
		nodes := make([]servers.NATS, n)
		clusterPorts := make([]int, n)
		for i := range nodes {
			node := "n" + strconv.Itoa(i+1)
			nodes[i] = servers.NATS{
				Bin:           in.NATSServer,
				Port:          ports[3*i],
				MonitorPort:   ports[3*i+1],
				StoreDir:      filepath.Join(dir, node, "jetstream"),
				ServerName:    name + "-" + node,
				Log:           filepath.Join(dir, node, "nats-server.log"),
				StopGrace:     stopGrace,
				DieWithCaller: true,
			}
			clusterPorts[i] = ports[3*i+2]
		}
		nodes, err := servers.NATSCluster(name, nodes, clusterPorts)
		if err != nil {
			return err
		}
		c.Nodes = nil
		procs := make([]*proc.Process, 0, n)
		for _, cfg := range nodes {
			s, err := servers.NewNATS(cfg)
			if err != nil {
				return err
			}
			supervise(t, s.Process)
			c.Nodes = append(c.Nodes, &NATSServer{t: t, s: s})
			procs = append(procs, s.Process)
		}
		// A node is ready (JetStream on) before its peers run; all start before any is waited on.
		return startAll(ctx, procs)
	})
	c.WaitHealthy(2 * time.Minute)
	return c
}

// URL is every node's client URL, comma-separated (SERVESCOPE_NATS_URL's form).
func (c *NATSCluster) URL() string {
	cfgs := make([]servers.NATS, len(c.Nodes))
	for i, n := range c.Nodes {
		cfgs[i] = n.s.Config()
	}
	return servers.ClientURLs(cfgs)
}

// Node returns the node whose server name is name, or nil.
func (c *NATSCluster) Node(name string) *NATSServer {
	for _, n := range c.Nodes {
		if n.Name() == name {
			return n
		}
	}
	return nil
}

// WaitHealthy waits until every running node answers 200 on /healthz, failing the test after
// timeout with the last answer.
func (c *NATSCluster) WaitHealthy(timeout time.Duration) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), timeout)
	defer cancel()
	for _, n := range c.Nodes {
		if !n.s.Running() {
			continue
		}
		for {
			err := n.s.Config().ClusterHealthy(ctx)
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				c.t.Fatalf("NATS node %s not healthy after %s: %v", n.Name(), timeout, err)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// Name is the server's name (the node's name in JetStream's cluster information).
func (n *NATSServer) Name() string { return n.s.Config().ServerName }
