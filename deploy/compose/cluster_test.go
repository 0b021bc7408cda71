package compose

import (
	"context"
	"encoding/xml"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/access"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
)

// The cluster profile's shape, as the tests below hold it: 3 NATS nodes, 3 Keeper nodes,
// ClickHouse as 2 shards of 2 replicas.
const (
	clusterProfile        = "cluster"
	clusterNATSNodes      = 3
	clusterKeeperNodes    = 3
	clusterShards         = 2
	clusterReplicasAShard = 2
)

func inProfile(s service, profile string) bool { return slices.Contains(s.Profiles, profile) }

// clusterServices returns the names of the cluster profile's services that pass keep, sorted.
func clusterServices(c composeFile, keep func(service) bool) []string {
	var out []string
	for name, s := range c.Services {
		if inProfile(s, clusterProfile) && keep(s) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func isNATS(s service) bool { return strings.HasPrefix(s.Image, "nats:") }

// isKeeper: a ClickHouse image running `clickhouse keeper`.
func isKeeper(s service) bool {
	return strings.HasPrefix(s.Image, "clickhouse/") && strings.Contains(strings.Join(argv(s.Entrypoint), " "), "keeper")
}

func isClickHouse(s service) bool { return strings.HasPrefix(s.Image, "clickhouse/") && !isKeeper(s) }

// mounts returns a service's bind mounts of repository files: container path → path under root.
func mounts(s service) map[string]string {
	out := map[string]string{}
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && strings.HasPrefix(parts[0], "./") {
			out[parts[1]] = strings.TrimPrefix(parts[0], "./")
		}
	}
	return out
}

// flag returns the value after name in args ("" when absent).
func flag(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func readXML(t *testing.T, root, rel string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

// TestMountedFilesExist: every repository file a service mounts is there.
func TestMountedFilesExist(t *testing.T) {
	c, root := load(t)
	n := 0
	for name, s := range c.Services {
		for _, rel := range mounts(s) {
			n++
			if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
				t.Errorf("service %s mounts %s: %v", name, rel, err)
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d mounted files found; the parser is missing them", n)
	}
}

// TestClusterNATS: the profile's NATS nodes are one JetStream cluster: the tested release, a
// server name each, one cluster name, routes to exactly the other nodes, the store on a named
// volume, healthy only once the meta leader is known. Every service of the profile that uses
// NATS names all of them.
func TestClusterNATS(t *testing.T) {
	c, _ := load(t)
	nodes := clusterServices(c, isNATS)
	if len(nodes) != clusterNATSNodes {
		t.Fatalf("cluster profile has NATS nodes %v, want %d", nodes, clusterNATSNodes)
	}
	routeURL := map[string]string{}
	clusterName := ""
	for _, name := range nodes {
		s := c.Services[name]
		args := argv(s.Command)
		if s.Image != c.Services["nats"].Image {
			t.Errorf("%s runs %s, the single-node profile %s: one tested release", name, s.Image, c.Services["nats"].Image)
		}
		if got := flag(args, "--server_name"); got != name {
			t.Errorf("%s: --server_name %q, want its service name (the routes and the stream placement name it)", name, got)
		}
		if cn := flag(args, "--cluster_name"); cn == "" || clusterName != "" && cn != clusterName {
			t.Errorf("%s: --cluster_name %q, the others %q", name, cn, clusterName)
		} else {
			clusterName = cn
		}
		m := regexp.MustCompile(`^nats://0\.0\.0\.0:(\d+)$`).FindStringSubmatch(flag(args, "--cluster"))
		if m == nil {
			t.Errorf("%s: --cluster %q, want nats://0.0.0.0:<port>", name, flag(args, "--cluster"))
			continue
		}
		routeURL[name] = "nats://" + name + ":" + m[1]
		if !slices.Contains(args, "-js") || flag(args, "-sd") == "" {
			t.Errorf("%s: JetStream is not on with a store directory: %q", name, args)
		}
		if sd := flag(args, "-sd"); !onNamedVolume(c, s, sd) {
			t.Errorf("%s: the JetStream store %s is not on a named volume", name, sd)
		}
		if h := strings.Join(s.Healthcheck.Test, " "); !strings.Contains(h, "/healthz") || strings.Contains(h, "js-enabled-only") {
			t.Errorf("%s: healthcheck %q, want /healthz without js-enabled-only (healthy once the meta leader is known)", name, h)
		}
	}
	for _, name := range nodes {
		got := strings.Split(flag(argv(c.Services[name].Command), "--routes"), ",")
		var want []string
		for _, peer := range nodes {
			if peer != name {
				want = append(want, routeURL[peer])
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s routes to %q, want every other node %q", name, got, want)
		}
	}

	wantURLs := make([]string, len(nodes))
	for i, n := range nodes {
		wantURLs[i] = "nats://" + n + ":4222"
	}
	users := 0
	for name, s := range c.Services {
		u, ok := s.Environment["SERVESCOPE_NATS_URL"]
		if !ok || !inProfile(s, clusterProfile) {
			continue
		}
		users++
		got := strings.Split(u, ",")
		slices.Sort(got)
		if !slices.Equal(got, wantURLs) {
			t.Errorf("%s: SERVESCOPE_NATS_URL %q, want every node %q", name, u, wantURLs)
		}
	}
	if users < 4 {
		t.Errorf("only %d services of the cluster profile use NATS; want the setup, gateways, consumers and collector", users)
	}
	if got := c.Services["cluster-migrate"].Environment["SERVESCOPE_STREAM_REPLICAS"]; got != "3" {
		t.Errorf("cluster-migrate sets SERVESCOPE_STREAM_REPLICAS %q, want 3: the streams and the durable consumer at 3 replicas", got)
	}
}

func onNamedVolume(c composeFile, s service, path string) bool {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && (parts[1] == path || strings.HasPrefix(path, parts[1]+"/")) {
			if _, named := c.Volumes[parts[0]]; named {
				return true
			}
		}
	}
	return false
}

// remoteServers is a ClickHouse config file's <remote_servers>.
type remoteServers struct {
	RemoteServers struct {
		Clusters []remoteCluster `xml:",any"`
	} `xml:"remote_servers"`
}

// remoteCluster is one cluster of <remote_servers>.
type remoteCluster struct {
	XMLName xml.Name
	Secret  struct {
		FromEnv string `xml:"from_env,attr"`
	} `xml:"secret"`
	Shards []struct {
		InternalReplication bool `xml:"internal_replication"`
		Replicas            []struct {
			Host            string `xml:"host"`
			Port            int    `xml:"port"`
			DefaultDatabase string `xml:"default_database"`
		} `xml:"replica"`
	} `xml:"shard"`
}

// macrosFile is a ClickHouse config file's <macros>.
type macrosFile struct {
	Macros *struct {
		Cluster string `xml:"cluster"`
		Shard   string `xml:"shard"`
		Replica string `xml:"replica"`
	} `xml:"macros"`
}

// keeperClient is a ClickHouse config file's <zookeeper>.
type keeperClient struct {
	ZooKeeper *struct {
		Nodes []struct {
			Host string `xml:"host"`
			Port int    `xml:"port"`
		} `xml:"node"`
	} `xml:"zookeeper"`
}

// keeperServer is a ClickHouse Keeper config.
type keeperServer struct {
	Keeper struct {
		TCPPort     int    `xml:"tcp_port"`
		ServerID    int    `xml:"server_id"`
		LogStorage  string `xml:"log_storage_path"`
		HTTPControl struct {
			Port int `xml:"port"`
		} `xml:"http_control"`
		Raft []raftPeer `xml:"raft_configuration>server"`
	} `xml:"keeper_server"`
}

type raftPeer struct {
	ID       int    `xml:"id"`
	Hostname string `xml:"hostname"`
	Port     int    `xml:"port"`
}

// clickHouseNode is what a cluster ClickHouse node's config.d files say.
type clickHouseNode struct {
	remote, macros, keeper string // the repository files holding each
	servers                remoteServers
	m                      macrosFile
	k                      keeperClient
}

// readClickHouseNode reads the config.d files node mounts and sorts them by what they hold.
func readClickHouseNode(t *testing.T, root string, s service) clickHouseNode {
	t.Helper()
	var n clickHouseNode
	for dst, rel := range mounts(s) {
		if !strings.HasPrefix(dst, "/etc/clickhouse-server/config.d/") {
			continue
		}
		var rs remoteServers
		var m macrosFile
		var k keeperClient
		readXML(t, root, rel, &rs)
		readXML(t, root, rel, &m)
		readXML(t, root, rel, &k)
		if len(rs.RemoteServers.Clusters) > 0 {
			n.remote, n.servers = rel, rs
		}
		if m.Macros != nil {
			n.macros, n.m = rel, m
		}
		if k.ZooKeeper != nil {
			n.keeper, n.k = rel, k
		}
	}
	return n
}

// TestClusterClickHouse: every ClickHouse node of the profile mounts the one remote_servers file,
// the one Keeper client file and macros of its own; remote_servers lays out 2 shards of 2
// replicas over exactly the profile's nodes, under the cluster name the services are given, with
// the sharded schema's Replicated local tables under internal_replication and no default database; each node's macros
// name its shard (its position in remote_servers) and itself as replica, unique across nodes;
// its hostname, which a replica gives the others to fetch parts from, is its service name; and
// the setup step is given every node.
func TestClusterClickHouse(t *testing.T) {
	c, root := load(t)
	nodes := clusterServices(c, isClickHouse)
	if len(nodes) != clusterShards*clusterReplicasAShard {
		t.Fatalf("cluster profile has ClickHouse nodes %v, want %d shards × %d replicas", nodes, clusterShards, clusterReplicasAShard)
	}
	setup := c.Services["cluster-migrate"].Environment
	clusterName, db := setup["SERVESCOPE_CLICKHOUSE_CLUSTER"], setup["SERVESCOPE_CLICKHOUSE_DATABASE"]
	if clusterName == "" || db == "" {
		t.Fatalf("cluster-migrate has no SERVESCOPE_CLICKHOUSE_CLUSTER or _DATABASE: %v", setup)
	}

	remoteFile, keeperFile := "", ""
	seenMacros := map[string]string{} // shard/replica → node
	var layout remoteServers
	for _, name := range nodes {
		s := c.Services[name]
		if s.Image != c.Services["clickhouse"].Image {
			t.Errorf("%s runs %s, the single-node profile %s: one tested release", name, s.Image, c.Services["clickhouse"].Image)
		}
		if s.Hostname != name {
			t.Errorf("%s: hostname %q, want its service name", name, s.Hostname)
		}
		if !onNamedVolume(c, s, "/var/lib/clickhouse") {
			t.Errorf("%s: /var/lib/clickhouse is not on a named volume", name)
		}
		n := readClickHouseNode(t, root, s)
		switch {
		case n.remote == "" || n.macros == "" || n.keeper == "":
			t.Errorf("%s mounts remote_servers %q, macros %q, keeper %q into config.d: want all three", name, n.remote, n.macros, n.keeper)
			continue
		case remoteFile != "" && (n.remote != remoteFile || n.keeper != keeperFile):
			t.Errorf("%s mounts %s and %s, the others %s and %s: every node needs the same cluster", name, n.remote, n.keeper, remoteFile, keeperFile)
		}
		remoteFile, keeperFile, layout = n.remote, n.keeper, n.servers
		key := n.m.Macros.Shard + "/" + n.m.Macros.Replica
		if other, dup := seenMacros[key]; dup {
			t.Errorf("%s and %s share the macros shard/replica %s (%s)", name, other, key, n.macros)
		}
		seenMacros[key] = name
		if n.m.Macros.Replica != name || n.m.Macros.Cluster != clusterName {
			t.Errorf("%s: macros replica %q, cluster %q; want %q and %q", name, n.m.Macros.Replica, n.m.Macros.Cluster, name, clusterName)
		}
		// Its shard is where remote_servers lists it.
		want := ""
		for _, cl := range n.servers.RemoteServers.Clusters {
			for i, sh := range cl.Shards {
				for _, r := range sh.Replicas {
					if r.Host == name {
						want = fmt.Sprintf("%02d", i+1)
					}
				}
			}
		}
		if n.m.Macros.Shard != want {
			t.Errorf("%s: macro shard %q, but remote_servers lists it in shard %q", name, n.m.Macros.Shard, want)
		}
		if sec := secretEnv(layout, clusterName); sec == "" || !strings.HasPrefix(s.Environment[sec], "${"+sec+":?") {
			t.Errorf("%s: remote_servers' secret comes from %q, which the node does not take from .env: %q", name, sec, s.Environment[sec])
		}
	}

	var cl *remoteCluster
	for i := range layout.RemoteServers.Clusters {
		if layout.RemoteServers.Clusters[i].XMLName.Local == clusterName {
			cl = &layout.RemoteServers.Clusters[i]
		}
	}
	if cl == nil {
		t.Fatalf("%s has no cluster %s (SERVESCOPE_CLICKHOUSE_CLUSTER)", remoteFile, clusterName)
	}
	if len(cl.Shards) != clusterShards {
		t.Errorf("%s: %d shards, want %d", remoteFile, len(cl.Shards), clusterShards)
	}
	var hosts []string
	for i, sh := range cl.Shards {
		if len(sh.Replicas) != clusterReplicasAShard {
			t.Errorf("%s: shard %d has %d replicas, want %d", remoteFile, i+1, len(sh.Replicas), clusterReplicasAShard)
		}
		// The local tables are ReplicatedReplacingMergeTree (chstore.ReplicatedMigrations):
		// a Distributed table writes one replica and Keeper copies the rows to the other.
		// With internal_replication false it would write both, and each row twice.
		if !sh.InternalReplication || setup["SERVESCOPE_CLICKHOUSE_REPLICATED"] != "true" {
			t.Errorf("%s: shard %d internal_replication %v, cluster-migrate SERVESCOPE_CLICKHOUSE_REPLICATED %q; want true and Replicated local tables",
				remoteFile, i+1, sh.InternalReplication, setup["SERVESCOPE_CLICKHOUSE_REPLICATED"])
		}
		for _, r := range sh.Replicas {
			hosts = append(hosts, r.Host)
			// No default_database: the views name their databases (chstore.QualifyViews), and a
			// replica naming one is taken by its own node for a remote replica.
			if r.Port != 9000 || r.DefaultDatabase != "" {
				t.Errorf("%s: replica %s port %d, default_database %q; want 9000 and none", remoteFile, r.Host, r.Port, r.DefaultDatabase)
			}
		}
	}
	slices.Sort(hosts)
	if !slices.Equal(hosts, nodes) {
		t.Errorf("%s lists replicas %q, the profile's ClickHouse nodes are %q", remoteFile, hosts, nodes)
	}

	for name, s := range c.Services {
		addr, ok := s.Environment["SERVESCOPE_CLICKHOUSE_ADDR"]
		if !ok || !inProfile(s, clusterProfile) {
			continue
		}
		got := strings.Split(addr, ",")
		slices.Sort(got)
		want := make([]string, len(nodes))
		for i, n := range nodes {
			want[i] = n + ":9000"
		}
		if !slices.Equal(got, want) || s.Environment["SERVESCOPE_CLICKHOUSE_CLUSTER"] != clusterName {
			t.Errorf("%s: SERVESCOPE_CLICKHOUSE_ADDR %q, _CLUSTER %q; want every node %q on %s", name, addr, s.Environment["SERVESCOPE_CLICKHOUSE_CLUSTER"], want, clusterName)
		}
	}
}

// secretEnv returns the variable remote_servers' cluster takes its secret from.
func secretEnv(rs remoteServers, cluster string) string {
	for _, cl := range rs.RemoteServers.Clusters {
		if cl.XMLName.Local == cluster {
			return cl.Secret.FromEnv
		}
	}
	return ""
}

// TestClusterKeeper: three Keeper nodes with unique server ids, the same Raft peer list, each
// peer's hostname the Keeper service with that id, their data on named volumes, and every
// ClickHouse node pointed at all of them on their client port.
func TestClusterKeeper(t *testing.T) {
	c, root := load(t)
	keepers := clusterServices(c, isKeeper)
	if len(keepers) != clusterKeeperNodes {
		t.Fatalf("cluster profile has Keeper nodes %v, want %d", keepers, clusterKeeperNodes)
	}
	byID := map[int]string{}
	var peers []raftPeer
	tcpPort := 0
	for _, name := range keepers {
		s := c.Services[name]
		if s.Image != c.Services["clickhouse"].Image {
			t.Errorf("%s runs %s, the ClickHouse nodes %s: one tested release", name, s.Image, c.Services["clickhouse"].Image)
		}
		file := mounts(s)[flag(argv(s.Entrypoint), "--config-file")]
		if file == "" {
			t.Errorf("%s: no mounted file at its --config-file: %q", name, argv(s.Entrypoint))
			continue
		}
		var k keeperServer
		readXML(t, root, file, &k)
		if other, dup := byID[k.Keeper.ServerID]; dup || k.Keeper.ServerID <= 0 {
			t.Errorf("%s (%s): server_id %d, also %q's", name, file, k.Keeper.ServerID, other)
		}
		byID[k.Keeper.ServerID] = name
		if peers != nil && !slices.Equal(peers, k.Keeper.Raft) {
			t.Errorf("%s (%s): raft_configuration %v, the others %v", name, file, k.Keeper.Raft, peers)
		}
		peers, tcpPort = k.Keeper.Raft, k.Keeper.TCPPort
		if s.Hostname != name {
			t.Errorf("%s: hostname %q, want its service name", name, s.Hostname)
		}
		if !onNamedVolume(c, s, k.Keeper.LogStorage) {
			t.Errorf("%s: Keeper's log %s is not on a named volume", name, k.Keeper.LogStorage)
		}
		if h := strings.Join(s.Healthcheck.Test, " "); !strings.Contains(h, ":"+strconv.Itoa(k.Keeper.HTTPControl.Port)+"/ready") {
			t.Errorf("%s: healthcheck %q does not ask http_control's /ready on port %d", name, h, k.Keeper.HTTPControl.Port)
		}
	}
	if len(peers) != clusterKeeperNodes {
		t.Errorf("raft_configuration has %d peers, want %d", len(peers), clusterKeeperNodes)
	}
	for _, p := range peers {
		if byID[p.ID] != p.Hostname {
			t.Errorf("raft peer %d is %q, but server_id %d is service %q", p.ID, p.Hostname, p.ID, byID[p.ID])
		}
	}
	for _, name := range clusterServices(c, isClickHouse) {
		n := readClickHouseNode(t, root, c.Services[name])
		var got []string
		if n.k.ZooKeeper != nil {
			for _, node := range n.k.ZooKeeper.Nodes {
				got = append(got, node.Host+":"+strconv.Itoa(node.Port))
			}
		}
		slices.Sort(got)
		var want []string
		for _, k := range keepers {
			want = append(want, k+":"+strconv.Itoa(tcpPort))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s finds Keeper at %q (%s), want %q", name, got, n.keeper, want)
		}
		for k := range c.Services[name].DependsOn {
			if !slices.Contains(keepers, k) {
				t.Errorf("%s depends on %s", name, k)
			}
		}
		if len(c.Services[name].DependsOn) != len(keepers) {
			t.Errorf("%s does not wait for every Keeper node: %v", name, slices.Collect(maps.Keys(c.Services[name].DependsOn)))
		}
	}
}

// TestClusterServices: the profile runs several instances of the pipeline's services (two
// gateways, each with its own spool and port, two consumers sharing the durable consumer), the
// console's read-only account reads both the Distributed tables and the shards' local ones, and
// the command the file's header gives starts exactly the profile's long-running services.
func TestClusterServices(t *testing.T) {
	c, root := load(t)
	byBinary := map[string][]string{}
	for _, name := range clusterServices(c, func(s service) bool { return binary(s) != "" }) {
		byBinary[binary(c.Services[name])] = append(byBinary[binary(c.Services[name])], name)
	}
	if g := byBinary["gateway"]; len(g) < 2 {
		t.Errorf("cluster profile runs gateways %v, want at least 2", g)
	}
	spools, ports := map[string]string{}, map[string]string{}
	for _, name := range byBinary["gateway"] {
		s := c.Services[name]
		for _, v := range s.Volumes {
			vol := strings.Split(v, ":")[0]
			if other, dup := spools[vol]; dup {
				t.Errorf("%s and %s share the spool volume %s", name, other, vol)
			}
			spools[vol] = name
		}
		for _, p := range s.Ports {
			host := p[:strings.LastIndex(p, ":")]
			if other, dup := ports[host]; dup {
				t.Errorf("%s and %s publish the same port %s", name, other, host)
			}
			ports[host] = name
		}
	}
	for _, name := range append(slices.Clone(byBinary["gateway"]), byBinary["collector"]...) {
		s := c.Services[name]
		dir := s.Environment["GATEWAY_SPOOL_DIR"] + s.Environment["COLLECTOR_SPOOL_DIR"]
		if dir == "" || !onNamedVolume(c, s, dir) {
			t.Errorf("%s: spool %q is not on a named volume", name, dir)
		}
	}
	consumers := byBinary["consumer"]
	if len(consumers) < 2 {
		t.Errorf("cluster profile runs consumers %v, want at least 2", consumers)
	}
	for _, name := range consumers {
		if d := c.Services[name].Environment["CONSUMER_DURABLE"]; d == "" || d != c.Services["cluster-migrate"].Environment["CONSUMER_DURABLE"] {
			t.Errorf("%s reads durable consumer %q, the setup creates %q", name, d, c.Services["cluster-migrate"].Environment["CONSUMER_DURABLE"])
		}
	}

	// The console's account on the cluster: servescope access's grants on both databases.
	db := c.Services["cluster-migrate"].Environment["SERVESCOPE_CLICKHOUSE_DATABASE"]
	local := chstore.LocalDatabase(config.ClickHouse{Database: db})
	var u consoleUsers
	const clusterConsoleUsers = "deploy/clickhouse/cluster/users.d/servescope-console.xml"
	readXML(t, root, clusterConsoleUsers, &u)
	a := access.Access{Database: db, LocalDatabase: local, Console: access.Account{User: u.Users.User.XMLName.Local, Password: "x"}}
	want := a.RoleGrants()[access.ConsoleRole]
	if got := u.Roles.Role.Grants; !slices.Equal(got, want) {
		t.Errorf("%s grants %q, want servescope access's console grants on %s and %s: %q", clusterConsoleUsers, got, db, local, want)
	}
	for _, name := range clusterServices(c, isClickHouse) {
		if mounts(c.Services[name])["/etc/clickhouse-server/users.d/servescope-console.xml"] != clusterConsoleUsers {
			t.Errorf("%s does not mount %s", name, clusterConsoleUsers)
		}
	}
	if u := c.Services["cluster-console"].Environment["SERVESCOPE_CLICKHOUSE_USER"]; u != "servescope_console" {
		t.Errorf("cluster-console logs in as %q", u)
	}

	// The header's command names every long-running service of the profile, and only those.
	raw, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^#\s+docker compose --profile cluster --profile sim up -d (.*?)\\?\n#\s+(.*)$`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("docker-compose.yml's header gives no `docker compose --profile cluster ... up -d` command")
	}
	named := strings.Fields(string(m[1]) + " " + string(m[2]))
	var wantNamed []string
	for _, name := range clusterServices(c, func(s service) bool { return binary(s) != "" && s.Restart != "no" }) {
		wantNamed = append(wantNamed, name)
	}
	wantNamed = append(wantNamed, "vllmsim")
	slices.Sort(named)
	slices.Sort(wantNamed)
	if !slices.Equal(named, wantNamed) {
		t.Errorf("the header's command starts %q, the profile's long-running services are %q", named, wantNamed)
	}
}

// TestClusterNodeConfigOnClickHouse starts a development ClickHouse with a cluster node's
// remote_servers and macros files in its config.d, as the compose file mounts them (the Keeper
// client file left out: the development engine serves no replication), and reads back what the
// server made of them: the cluster's shards and replicas in system.clusters and the node's
// macros in system.macros.
func TestClusterNodeConfigOnClickHouse(t *testing.T) {
	c, root := load(t)
	const node = "clickhouse-s2r1"
	n := readClickHouseNode(t, root, c.Services[node])
	clusterName := c.Services["cluster-migrate"].Environment["SERVESCOPE_CLICKHOUSE_CLUSTER"]
	t.Setenv(secretEnv(n.servers, clusterName), "test-cluster-secret")
	files := map[string][]byte{}
	for _, rel := range []string{n.remote, n.macros} {
		raw, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(rel)] = raw
	}
	srv := testenv.StartClickHouseConfigD(t, files)
	cfg := testenv.ClickHouseConfig(t)
	cfg.Addr, cfg.Database = []string{srv.Addr()}, "default"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := chstore.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	rows, err := conn.Query(ctx, "SELECT shard_num, replica_num, host_name, port FROM system.clusters WHERE cluster = $1 ORDER BY shard_num, replica_num", clusterName)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var shard, replica uint32
		var host string
		var port uint16
		if err := rows.Scan(&shard, &replica, &host, &port); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d/%d %s:%d", shard, replica, host, port))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"1/1 clickhouse-s1r1:9000", "1/2 clickhouse-s1r2:9000", "2/1 clickhouse-s2r1:9000", "2/2 clickhouse-s2r2:9000"}
	if !slices.Equal(got, want) {
		t.Errorf("system.clusters for %s: %q, want %q", clusterName, got, want)
	}

	macros := map[string]string{}
	mrows, err := conn.Query(ctx, "SELECT macro, substitution FROM system.macros")
	if err != nil {
		t.Fatal(err)
	}
	for mrows.Next() {
		var k, v string
		if err := mrows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		macros[k] = v
	}
	if err := mrows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"cluster": clusterName, "shard": "02", "replica": node}; !maps.Equal(macros, want) {
		t.Errorf("system.macros on %s's config: %v, want %v", node, macros, want)
	}
}
