// Package devservices runs the shared dev servers behind scripts/dev-services — NATS JetStream
// and ClickHouse on 127.0.0.1 — once the script has installed their programs: `up` starts what is
// not running, detached, and waits until it serves; `down` stops what `up` started; `status` and
// `logs` show them. `up nats-cluster` adds a JetStream cluster of several nats-server nodes on
// their own loopback ports (see [Config.NATSCluster]), for running the services against
// replicated streams; `up clickhouse-shards` adds ClickHouse servers as the shards of one
// cluster (see [Config.ClickHouseShards]), for a sharded schema; status, down and logs cover
// them once started. The servers are the ones dev/servers describes, run through dev/proc; their
// data, logs and pid files live under the cache directory, laid out as the script has always
// laid them out, so servers started by an earlier version of the script are found, checked and
// stopped like the others.
package devservices

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/servers"
)

// Config is what the commands act on. Load reads it from the environment.
type Config struct {
	// CacheDir holds the programs, data, logs and pid files (SERVESCOPE_DEV_CACHE_DIR, default
	// .cache at the repository root), with symbolic links resolved: the command lines of the
	// servers name it, and a server is recognized by its command line.
	CacheDir string
	// NATSPort, NATSMonitorPort: SERVESCOPE_DEV_NATS_PORT [4222], SERVESCOPE_DEV_NATS_MONITOR_PORT [8222].
	NATSPort, NATSMonitorPort int
	// ClickHouseTCPPort, ClickHouseHTTPPort: SERVESCOPE_DEV_CLICKHOUSE_TCP_PORT [9000],
	// SERVESCOPE_DEV_CLICKHOUSE_HTTP_PORT [8123].
	ClickHouseTCPPort, ClickHouseHTTPPort int
	// ClickHouseLogLevel is the engine's log level: SERVESCOPE_DEV_CLICKHOUSE_LOG_LEVEL [information].
	ClickHouseLogLevel string
	// StartTimeout bounds the wait for each server: SERVESCOPE_DEV_START_TIMEOUT_S [60].
	StartTimeout time.Duration
	// LogLines is how many lines `logs` and failures show: SERVESCOPE_DEV_LOG_LINES [40].
	LogLines int
	// NATSClusterNodes is the size of the cluster `up nats-cluster` runs:
	// SERVESCOPE_DEV_NATS_CLUSTER_NODES [3], from 3 (the least that keeps streams at 3 replicas
	// writable with one node down) to 9.
	NATSClusterNodes int
	// NATSClusterPort, NATSClusterMonitorPort and NATSClusterRoutePort are the first node's client,
	// monitoring and route ports; node i (from 1) takes each plus i-1:
	// SERVESCOPE_DEV_NATS_CLUSTER_PORT [4231], SERVESCOPE_DEV_NATS_CLUSTER_MONITOR_PORT [8231],
	// SERVESCOPE_DEV_NATS_CLUSTER_ROUTE_PORT [6231].
	NATSClusterPort, NATSClusterMonitorPort, NATSClusterRoutePort int
	// ClickHouseShardCount is how many shards `up clickhouse-shards` runs:
	// SERVESCOPE_DEV_CLICKHOUSE_SHARDS [2], from 2 to 9.
	ClickHouseShardCount int
	// ClickHouseShardsTCPPort and ClickHouseShardsHTTPPort are the first shard's native and HTTP
	// ports; shard i (from 1) takes each plus i-1: SERVESCOPE_DEV_CLICKHOUSE_SHARDS_TCP_PORT [9201],
	// SERVESCOPE_DEV_CLICKHOUSE_SHARDS_HTTP_PORT [8201].
	ClickHouseShardsTCPPort, ClickHouseShardsHTTPPort int

	// DemoDatabase is the database the demo console's read-only account may read (scripts/demo's
	// SERVESCOPE_DEMO_DATABASE [servescope_demo]): the ClickHouse server takes its users at start
	// (servers.DevUsersXML).
	DemoDatabase string

	// Out receives status lines and logs; Err the commands' messages.
	Out, Err io.Writer
}

// stopGrace is how long down waits after SIGTERM before SIGKILL.
const stopGrace = 15 * time.Second

// Load reads the Config of the repository at root from getenv (os.Getenv in the command).
func Load(root string, getenv func(string) string) (Config, error) {
	c := Config{Out: os.Stdout, Err: os.Stderr}
	var errs []error
	port := func(name string, def int) int {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			errs = append(errs, fmt.Errorf("%s=%q: want a port number from 1 to 65535", name, v))
		}
		return n
	}
	positive := func(name string, def int) int {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("%s=%q: want a whole number above 0", name, v))
		}
		return n
	}
	c.NATSPort = port("SERVESCOPE_DEV_NATS_PORT", 4222)
	c.NATSMonitorPort = port("SERVESCOPE_DEV_NATS_MONITOR_PORT", 8222)
	c.ClickHouseTCPPort = port("SERVESCOPE_DEV_CLICKHOUSE_TCP_PORT", 9000)
	c.ClickHouseHTTPPort = port("SERVESCOPE_DEV_CLICKHOUSE_HTTP_PORT", 8123)
	c.ClickHouseLogLevel = getenv("SERVESCOPE_DEV_CLICKHOUSE_LOG_LEVEL")
	if c.ClickHouseLogLevel == "" {
		c.ClickHouseLogLevel = "information"
	}
	c.DemoDatabase = getenv("SERVESCOPE_DEMO_DATABASE")
	if c.DemoDatabase == "" {
		c.DemoDatabase = "servescope_demo"
	}
	c.StartTimeout = time.Duration(positive("SERVESCOPE_DEV_START_TIMEOUT_S", 60)) * time.Second
	c.LogLines = positive("SERVESCOPE_DEV_LOG_LINES", 40)
	c.NATSClusterNodes = positive("SERVESCOPE_DEV_NATS_CLUSTER_NODES", 3)
	if c.NATSClusterNodes < 3 || c.NATSClusterNodes > 9 {
		errs = append(errs, fmt.Errorf("SERVESCOPE_DEV_NATS_CLUSTER_NODES=%d: want 3 to 9 nodes (streams at 3 replicas need 3)", c.NATSClusterNodes))
	}
	c.NATSClusterPort = port("SERVESCOPE_DEV_NATS_CLUSTER_PORT", 4231)
	c.NATSClusterMonitorPort = port("SERVESCOPE_DEV_NATS_CLUSTER_MONITOR_PORT", 8231)
	c.NATSClusterRoutePort = port("SERVESCOPE_DEV_NATS_CLUSTER_ROUTE_PORT", 6231)
	c.ClickHouseShardCount = positive("SERVESCOPE_DEV_CLICKHOUSE_SHARDS", 2)
	if c.ClickHouseShardCount < 2 || c.ClickHouseShardCount > 9 {
		errs = append(errs, fmt.Errorf("SERVESCOPE_DEV_CLICKHOUSE_SHARDS=%d: want 2 to 9 shards", c.ClickHouseShardCount))
	}
	c.ClickHouseShardsTCPPort = port("SERVESCOPE_DEV_CLICKHOUSE_SHARDS_TCP_PORT", 9201)
	c.ClickHouseShardsHTTPPort = port("SERVESCOPE_DEV_CLICKHOUSE_SHARDS_HTTP_PORT", 8201)
	for _, p := range []struct {
		name, what string
		v, n       int
	}{
		{"SERVESCOPE_DEV_NATS_CLUSTER_PORT", "the cluster's nodes", c.NATSClusterPort, c.NATSClusterNodes},
		{"SERVESCOPE_DEV_NATS_CLUSTER_MONITOR_PORT", "the cluster's nodes", c.NATSClusterMonitorPort, c.NATSClusterNodes},
		{"SERVESCOPE_DEV_NATS_CLUSTER_ROUTE_PORT", "the cluster's nodes", c.NATSClusterRoutePort, c.NATSClusterNodes},
		{"SERVESCOPE_DEV_CLICKHOUSE_SHARDS_TCP_PORT", "the ClickHouse shards", c.ClickHouseShardsTCPPort, c.ClickHouseShardCount},
		{"SERVESCOPE_DEV_CLICKHOUSE_SHARDS_HTTP_PORT", "the ClickHouse shards", c.ClickHouseShardsHTTPPort, c.ClickHouseShardCount},
	} {
		if p.v+p.n-1 > 65535 {
			errs = append(errs, fmt.Errorf("%s=%d: %s (%d) take ports up to %d, past 65535", p.name, p.v, p.what, p.n, p.v+p.n-1))
		}
	}
	cache := getenv(servers.CacheDirEnv)
	if cache == "" {
		cache = filepath.Join(root, ".cache")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		errs = append(errs, fmt.Errorf("create the cache directory: %w", err))
	} else if c.CacheDir, err = filepath.EvalSymlinks(cache); err != nil {
		errs = append(errs, fmt.Errorf("resolve the cache directory: %w", err))
	} else if c.CacheDir, err = filepath.Abs(c.CacheDir); err != nil {
		errs = append(errs, fmt.Errorf("resolve the cache directory: %w", err))
	}
	return c, errors.Join(errs...)
}

// NATS is the dev NATS server: store <cache>/nats/data, log <cache>/nats/nats-server.log, pid
// file <cache>/nats/nats-server.pid.
func (c Config) NATS() servers.NATS {
	dir := filepath.Join(c.CacheDir, "nats")
	return servers.NATS{
		Bin:          servers.InstalledIn(c.CacheDir).NATSServer,
		Port:         c.NATSPort,
		MonitorPort:  c.NATSMonitorPort,
		StoreDir:     filepath.Join(dir, "data"),
		ServerName:   "servescope-dev",
		Log:          filepath.Join(dir, "nats-server.log"),
		PidFile:      filepath.Join(dir, "nats-server.pid"),
		ReadyTimeout: c.StartTimeout,
		StopGrace:    stopGrace,
	}
}

// ClickHouse is the dev ClickHouse server: data <cache>/clickhouse/data, launcher log
// <cache>/clickhouse/clickhouse.log, the engine's own logs clickhouse-server.log and
// clickhouse-server.err.log beside it, pid file <cache>/clickhouse/clickhouse.pid, users
// <cache>/clickhouse/users.xml (servers.DevUsersXML: the passwordless administrator `default` and
// the demo console's read-only account, whose password is in servers.ConsolePasswordFile).
func (c Config) ClickHouse() servers.ClickHouse {
	dir := filepath.Join(c.CacheDir, "clickhouse")
	in := servers.InstalledIn(c.CacheDir)
	return servers.ClickHouse{
		Launcher:       in.Chlaunch,
		Lib:            in.Libchdb,
		TCPPort:        c.ClickHouseTCPPort,
		HTTPPort:       c.ClickHouseHTTPPort,
		DataDir:        filepath.Join(dir, "data"),
		ConfigFile:     filepath.Join(dir, "config.xml"),
		EngineLog:      filepath.Join(dir, "clickhouse-server.log"),
		EngineErrorLog: filepath.Join(dir, "clickhouse-server.err.log"),
		LogLevel:       c.ClickHouseLogLevel,
		Log:            filepath.Join(dir, "clickhouse.log"),
		PidFile:        filepath.Join(dir, "clickhouse.pid"),
		UsersFile:      filepath.Join(dir, "users.xml"),
		ReadyTimeout:   c.StartTimeout,
		StopGrace:      stopGrace,
	}
}

// prepareClickHouse writes the server's users file, then its config.
func (c Config) prepareClickHouse() error {
	ch := c.ClickHouse()
	pw, err := servers.ConsolePassword(c.CacheDir)
	if err != nil {
		return err
	}
	users, err := servers.DevUsersXML(c.DemoDatabase, pw)
	if err != nil {
		return fmt.Errorf("SERVESCOPE_DEMO_DATABASE: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(ch.UsersFile), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(ch.UsersFile, []byte(users), 0o600); err != nil {
		return fmt.Errorf("write the ClickHouse users file: %w", err)
	}
	return ch.Prepare()
}

// server is what the commands need to know of one dev server.
type server struct {
	name    string // as the commands name it: nats, clickhouse
	spec    proc.Spec
	prepare func() error
	healthy func(ctx context.Context) error
	// health says what answered, for the messages.
	health string
	// where says where it listens, for the messages.
	where string
	// status is the status line's tail for a server dev-services started.
	status func(pid int, health string) string
	// foreign is the status line's tail for a healthy server dev-services did not start.
	foreign string
	// lastCrash returns the server's own report of its last crash ("" when it keeps none).
	lastCrash func() (string, error)
}

func (c Config) servers() []server {
	n, ch := c.NATS(), c.ClickHouse()
	return []server{
		{
			name: "nats", spec: n.Spec(), prepare: n.Prepare, healthy: n.Healthy,
			health: fmt.Sprintf("127.0.0.1:%d already answers healthz", n.MonitorPort),
			where:  fmt.Sprintf("on 127.0.0.1:%d, monitoring :%d", n.Port, n.MonitorPort),
			status: func(pid int, health string) string {
				return fmt.Sprintf("running pid %-8d %-9s %s  monitor %s  data %s", pid, health, n.URL(), n.MonitorURL(), n.StoreDir)
			},
			foreign:   "healthy " + n.URL(),
			lastCrash: func() (string, error) { return "", nil },
		},
		{
			name: "clickhouse", spec: ch.Spec(), prepare: c.prepareClickHouse, healthy: ch.Healthy,
			health: fmt.Sprintf("127.0.0.1:%d already answers SELECT 1", ch.HTTPPort),
			where:  fmt.Sprintf("on 127.0.0.1:%d (http :%d)", ch.TCPPort, ch.HTTPPort),
			status: func(pid int, health string) string {
				return fmt.Sprintf("running pid %-8d %-9s tcp %s  http %s  data %s", pid, health, ch.Addr(), ch.HTTPURL(), ch.DataDir)
			},
			foreign:   "healthy tcp " + ch.Addr(),
			lastCrash: func() (string, error) { return servers.LastCrash(ch.EngineErrorLog) },
		},
	}
}

func (c Config) say(format string, a ...any) {
	fmt.Fprintf(c.Err, "dev-services: "+format+"\n", a...)
}

// healthyNow checks s's health once, as a status line does.
func healthyNow(ctx context.Context, s server) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return s.healthy(ctx) == nil
}

// lock serializes up and down across every user of the cache directory: several people and
// tests share one tree, and earlier versions of the script take the same lock.
func (c Config) lock() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(c.CacheDir, "dev-services.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open the dev-services lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("take the dev-services lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// Up starts every server that is not running and waits until each serves. A server already
// running is left as it is: only checked, and reported when it does not answer in time. A server
// that died since it was started is started again, with its last crash report shown. It fails
// when a server does not come up, with its log's tail.
func Up(ctx context.Context, c Config) error {
	if err := servers.InstalledIn(c.CacheDir).Check(); err != nil {
		return err
	}
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	for _, s := range c.servers() {
		if err := c.up(ctx, s); err != nil {
			c.say("%s: %v", s.name, err)
			if errors.Is(err, proc.ErrAddrInUse) {
				// Said apart so that a caller on picked ports (a test) can try others.
				errs = append(errs, fmt.Errorf("%s did not come up: %w", s.name, proc.ErrAddrInUse))
				continue
			}
			errs = append(errs, fmt.Errorf("%s did not come up", s.name))
		}
	}
	return errors.Join(errs...)
}

func (c Config) up(ctx context.Context, s server) error {
	found, err := proc.Inspect(s.spec.PidFile, &s.spec)
	if err != nil {
		return err
	}
	if found.State == proc.Running {
		// A server serving others is only slow on a loaded machine: never stop it here.
		err := proc.AwaitReady(ctx, s.spec)
		if err == nil {
			c.say("%s already running (pid %d) %s", s.name, found.Pid, s.where)
			return nil
		}
		if again, ierr := proc.Inspect(s.spec.PidFile, &s.spec); ierr != nil || again.State == proc.Running {
			return fmt.Errorf("%w; left running", err)
		}
		found.State = proc.NotRunning
	}
	if healthyNow(ctx, s) {
		c.say("%s: %s from a process dev-services did not start; using it", s.name, s.health)
		return nil
	}
	if found.State == proc.NotRunning && found.Pid != 0 {
		// down and failed starts remove the pid file: the server died on its own.
		c.say("%s (pid %d) died since it was started; starting it again", s.name, found.Pid)
		if report, err := s.lastCrash(); err != nil {
			c.say("%v", err)
		} else if report != "" {
			c.say("last crash report of %s:\n%s", s.name, report)
		}
	}
	if err := os.Remove(s.spec.PidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := s.prepare(); err != nil {
		return err
	}
	spec := s.spec
	spec.TailLines = c.LogLines
	pid, err := proc.StartDetached(ctx, spec)
	if err != nil {
		return err
	}
	c.say("%s started (pid %d) %s", s.name, pid, s.where)
	return nil
}

// Down stops the servers dev-services started (all when which is empty, else the one named
// nats or clickhouse, the cluster's nodes for nats-cluster, the shards for clickhouse-shards):
// SIGTERM to the process group, SIGKILL after 15 s.
func Down(ctx context.Context, c Config, which string) error {
	all := c.servers()
	cluster, err := c.clusterServers()
	if err != nil {
		return err
	}
	slices.Reverse(cluster)
	shards, err := c.shardServers()
	if err != nil {
		return err
	}
	slices.Reverse(shards)
	var targets []server
	switch which {
	case "":
		// The reverse of the start order. The cluster's nodes and the shards are named only once
		// started, so a plain `down` says nothing of a cluster nobody ran.
		for _, group := range [][]server{shards, cluster} {
			started, err := clusterStarted(ctx, group)
			if err != nil {
				return err
			}
			if started {
				targets = append(targets, group...)
			}
		}
		targets = append(targets, all[1], all[0])
	case "nats":
		targets = all[:1]
	case "clickhouse":
		targets = all[1:]
	case "nats-cluster":
		targets = cluster
	case "clickhouse-shards":
		targets = shards
	default:
		return fmt.Errorf("down: unknown server %q (clickhouse, nats, nats-cluster or clickhouse-shards)", which)
	}
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	for _, s := range targets {
		found, err := proc.StopPidFile(ctx, s.spec.PidFile, &s.spec, stopGrace)
		switch {
		case errors.Is(err, proc.ErrKilledAfterGrace):
			c.say("%s (pid %d) ignored SIGTERM for %s; killed it", s.name, found.Pid, stopGrace)
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
			continue
		}
		if found.State == proc.Running {
			c.say("%s stopped (pid %d)", s.name, found.Pid)
		} else {
			c.say("%s not running", s.name)
		}
	}
	return errors.Join(errs...)
}

// ErrUnhealthy is returned by Status when a server is stopped or does not answer.
var ErrUnhealthy = errors.New("not every dev server is running and healthy")

// Status prints one line a server (and, for one that died, its last crash report).
// The cluster's nodes (see UpNATSCluster) and the shards (UpClickHouseShards) are shown, and
// count, only once one was started.
func Status(ctx context.Context, c Config) error {
	ok := true
	list := c.servers()
	cluster, err := c.clusterServers()
	if err != nil {
		return err
	}
	started, err := clusterStarted(ctx, cluster)
	if err != nil {
		return err
	}
	if started {
		list = append(list, cluster...)
	}
	shards, err := c.shardServers()
	if err != nil {
		return err
	}
	shardsStarted, err := clusterStarted(ctx, shards)
	if err != nil {
		return err
	}
	if shardsStarted {
		list = append(list, shards...)
	}
	for _, s := range list {
		found, err := proc.Inspect(s.spec.PidFile, &s.spec)
		if err != nil {
			return err
		}
		healthy := healthyNow(ctx, s)
		ok = ok && healthy
		switch {
		case found.State == proc.Running:
			health := "healthy"
			if !healthy {
				health = "unhealthy"
			}
			fmt.Fprintf(c.Out, "%-12s %s\n", s.name, s.status(found.Pid, health))
			if found.ExeDeleted {
				fmt.Fprintf(c.Out, "             runs an older %s than %s; `down %s` then `up` applies it\n",
					filepath.Base(s.spec.Path), s.spec.Path, s.name)
			}
		case healthy:
			fmt.Fprintf(c.Out, "%-12s running (not started by dev-services) %s\n", s.name, s.foreign)
		default:
			fmt.Fprintf(c.Out, "%-12s stopped\n", s.name)
			if found.State == proc.NotRunning && found.Pid != 0 {
				report, err := s.lastCrash()
				if err != nil {
					report = err.Error()
				}
				if report == "" {
					report = "(none: the server logged no fatal error)"
				}
				fmt.Fprintf(c.Out, "             pid %d died; last crash report:\n%s\n", found.Pid, report)
			}
		}
	}
	if started {
		fmt.Fprintf(c.Out, "%-12s %s\n", "", c.clusterStatus(ctx))
	}
	if shardsStarted {
		fmt.Fprintf(c.Out, "%-12s %s\n", "", c.shardsStatus())
	}
	if !ok {
		return ErrUnhealthy
	}
	return nil
}

// LogFiles are the logs `logs` shows, those that exist: NATS's, the ClickHouse launcher's, the
// engine's error log, the cluster nodes' and the shards' (launcher and engine errors).
func (c Config) LogFiles() []string {
	ch := c.ClickHouse()
	logs := []string{c.NATS().Log, ch.Log, ch.EngineErrorLog}
	if nodes, err := c.NATSCluster(); err == nil {
		for _, n := range nodes {
			logs = append(logs, n.Log)
		}
	}
	if shards, err := c.ClickHouseShards(); err == nil {
		for _, n := range shards {
			logs = append(logs, n.Log, n.EngineErrorLog)
		}
	}
	var files []string
	for _, f := range logs {
		if _, err := os.Stat(f); err == nil {
			files = append(files, f)
		}
	}
	return files
}
