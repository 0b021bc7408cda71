package devservices

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/servescope/servescope/dev/servers"
)

// ClickHouseClusterName is the remote_servers cluster of the shards `up clickhouse-shards` runs:
// give it to the services as SERVESCOPE_CLICKHOUSE_CLUSTER.
const ClickHouseClusterName = "servescope_dev"

// ClickHouseShards describes the dev ClickHouse shards: shard i (from 1) is one development
// server taking the native protocol on ClickHouseShardsTCPPort+i-1 and HTTP on
// ClickHouseShardsHTTPPort+i-1, under <cache>/clickhouse-shards/shard-<i>/ (data, config.xml,
// the launcher's and the engine's logs, pid file), laid out like the single dev server. Every
// shard's config names every shard in remote_servers (cluster ClickHouseClusterName, one replica
// a shard, internal_replication, a secret shared by the shards so that a query runs on every
// shard as the user who asked), its own macros (shard 01, 02, ...; replica r1), and its users
// from <cache>/clickhouse-shards/users.xml (servers.ClusterUsersXML: the passwordless default
// user, profile default with servers.ClusterProfile). The secret is made at random once and kept
// in <cache>/clickhouse-shards/secret.
func (c Config) ClickHouseShards() ([]servers.ClickHouse, error) {
	dir := filepath.Join(c.CacheDir, "clickhouse-shards")
	secret, err := readSecret(filepath.Join(dir, "secret"))
	if err != nil {
		return nil, err
	}
	in := servers.InstalledIn(c.CacheDir)
	nodes := make([]servers.ClickHouse, c.ClickHouseShardCount)
	layout := make([][]string, c.ClickHouseShardCount)
	for i := range nodes {
		d := filepath.Join(dir, "shard-"+strconv.Itoa(i+1))
		nodes[i] = servers.ClickHouse{
			Launcher:       in.Chlaunch,
			Lib:            in.Libchdb,
			TCPPort:        c.ClickHouseShardsTCPPort + i,
			HTTPPort:       c.ClickHouseShardsHTTPPort + i,
			DataDir:        filepath.Join(d, "data"),
			ConfigFile:     filepath.Join(d, "config.xml"),
			EngineLog:      filepath.Join(d, "clickhouse-server.log"),
			EngineErrorLog: filepath.Join(d, "clickhouse-server.err.log"),
			LogLevel:       c.ClickHouseLogLevel,
			Log:            filepath.Join(d, "clickhouse.log"),
			PidFile:        filepath.Join(d, "clickhouse.pid"),
			UsersFile:      filepath.Join(dir, "users.xml"),
			ClusterSecret:  secret,
			Macros:         map[string]string{"shard": fmt.Sprintf("%02d", i+1), "replica": "r1"},
			ReadyTimeout:   c.StartTimeout,
			StopGrace:      stopGrace,
		}
		layout[i] = []string{nodes[i].Addr()}
	}
	for i := range nodes {
		nodes[i].Clusters = map[string][][]string{ClickHouseClusterName: layout}
	}
	return nodes, nil
}

// readSecret returns the secret kept in file, "" while there is none yet (prepareShards makes it).
func readSecret(file string) (string, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the shards' cluster secret: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// prepareShards makes the shards' secret once and writes their users.xml, before any is described
// for a start.
func (c Config) prepareShards() error {
	dir := filepath.Join(c.CacheDir, "clickhouse-shards")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	file := filepath.Join(dir, "secret")
	if s, err := readSecret(file); err != nil {
		return err
	} else if s == "" {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		if err := os.WriteFile(file, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
			return fmt.Errorf("write the shards' cluster secret: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "users.xml"), []byte(servers.ClusterUsersXML()), 0o600); err != nil {
		return fmt.Errorf("write the shards' users.xml: %w", err)
	}
	return nil
}

// shardServers are the shards as the commands handle them, named clickhouse-1, clickhouse-2, ...
func (c Config) shardServers() ([]server, error) {
	nodes, err := c.ClickHouseShards()
	if err != nil {
		return nil, err
	}
	out := make([]server, len(nodes))
	for i, n := range nodes {
		out[i] = server{
			name: "clickhouse-" + strconv.Itoa(i+1), spec: n.Spec(), prepare: n.Prepare, healthy: n.Healthy,
			health: fmt.Sprintf("127.0.0.1:%d already answers SELECT 1", n.HTTPPort),
			where:  fmt.Sprintf("on 127.0.0.1:%d (http :%d), shard %d of cluster %s", n.TCPPort, n.HTTPPort, i+1, ClickHouseClusterName),
			status: func(pid int, health string) string {
				return fmt.Sprintf("running pid %-8d %-9s tcp %s  http %s  shard %d  data %s", pid, health, n.Addr(), n.HTTPURL(), i+1, n.DataDir)
			},
			foreign:   "healthy tcp " + n.Addr(),
			lastCrash: func() (string, error) { return servers.LastCrash(n.EngineErrorLog) },
		}
	}
	return out, nil
}

// shardAddrs is SERVESCOPE_CLICKHOUSE_ADDR's value for the shards: every shard's native address.
func shardAddrs(nodes []servers.ClickHouse) string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	return strings.Join(addrs, ",")
}

// UpClickHouseShards starts every dev shard that is not running, as Up starts a server, waits
// until each serves, and says what to give the services.
func UpClickHouseShards(ctx context.Context, c Config) error {
	if err := servers.InstalledIn(c.CacheDir).Check(); err != nil {
		return err
	}
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := c.prepareShards(); err != nil {
		return err
	}
	shards, err := c.shardServers()
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range shards {
		if err := c.up(ctx, s); err != nil {
			c.say("%s: %v", s.name, err)
			errs = append(errs, fmt.Errorf("%s did not come up", s.name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
	defer cancel()
	for _, s := range shards {
		if err := waitHealthy(wctx, s); err != nil {
			return fmt.Errorf("%s does not answer after %s: %w", s.name, c.StartTimeout, err)
		}
	}
	c.say("%s", c.shardsStatus())
	c.say("set up the sharded schema once: SERVESCOPE_CLICKHOUSE_ADDR=… SERVESCOPE_CLICKHOUSE_CLUSTER=%s servescope migrate up", ClickHouseClusterName)
	return nil
}

// shardsStatus is the status line under the shards': the settings to give the services.
func (c Config) shardsStatus() string {
	nodes, err := c.ClickHouseShards()
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("clickhouse cluster %s: %d shards; SERVESCOPE_CLICKHOUSE_ADDR=%s SERVESCOPE_CLICKHOUSE_CLUSTER=%s",
		ClickHouseClusterName, len(nodes), shardAddrs(nodes), ClickHouseClusterName)
}
