package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
)

// On a cluster only `migrate up` spans the nodes; the commands that read or move one version
// table say how to address a node's local database instead of acting on the Distributed one.
func TestMigrateOnAClusterNamesTheNode(t *testing.T) {
	t.Setenv("SERVESCOPE_CLICKHOUSE_CLUSTER", "servescope")
	t.Setenv("SERVESCOPE_CLICKHOUSE_DATABASE", "obs")
	for _, args := range [][]string{{"migrate", "version"}, {"migrate", "down"}, {"migrate", "force", "3"}} {
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), "SERVESCOPE_CLICKHOUSE_DATABASE=obs_local") {
			t.Errorf("%v on a cluster: %v, want the node's local database named", args, err)
		}
	}
}

// On a cluster, `migrate up` sets up every node and `migrate ttl` changes the TTL of every node's
// local table (the Distributed table under the name has none), one line a node. It sets the
// process environment, so it does not run in parallel.
func TestMigrateTTLOnACluster(t *testing.T) {
	shards := testenv.StartClickHouseShards(t, "servescope_ttl", 2)
	addrs := []string{shards[0].Addr(), shards[1].Addr()}
	t.Setenv("SERVESCOPE_CLICKHOUSE_ADDR", strings.Join(addrs, ","))
	t.Setenv("SERVESCOPE_CLICKHOUSE_CLUSTER", "servescope_ttl")
	t.Setenv("SERVESCOPE_CLICKHOUSE_DATABASE", "obs")
	if out, code, err := run(t, "migrate", "up", "--streams=false"); code != 0 || !strings.Contains(out, "2 nodes migrated (obs_local)") {
		t.Fatalf("migrate up on the cluster: exit %d, %v:\n%s", code, err, out)
	}
	out, code, err := run(t, "migrate", "ttl", "engine_logs", "21")
	if code != 0 {
		t.Fatalf("migrate ttl on the cluster: exit %d, %v:\n%s", code, err, out)
	}
	for _, a := range addrs {
		if want := "obs_local.engine_logs on " + a + " keeps rows for 21 days"; !strings.Contains(out, want) {
			t.Errorf("migrate ttl's output lacks %q:\n%s", want, out)
		}
		cfg := testenv.ClickHouseConfig(t)
		cfg.Addr, cfg.Cluster, cfg.Database = []string{a}, "", "obs_local"
		conn, err := chstore.Open(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		var engine string
		err = conn.QueryRow(t.Context(), "SELECT engine_full FROM system.tables WHERE database = 'obs_local' AND name = 'engine_logs'").Scan(&engine)
		conn.Close()
		if err != nil || !strings.Contains(engine, "TTL toDateTime(ts) + toIntervalDay(21)") {
			t.Errorf("node %s: engine_logs %q, %v; want TTL 21 days", a, engine, err)
		}
	}
}
