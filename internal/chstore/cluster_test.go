package chstore_test

import (
	"context"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/migrations"
)

// Every table and view the migrations create is either a Distributed table of the sharded schema
// or a parameterized view read through the cluster table function: a migration adding a table
// must say how it is sharded.
func TestShardedObjectsCoverTheSchema(t *testing.T) {
	t.Parallel()
	conn, cfg := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := conn.Query(chstore.WithParams(ctx, map[string]string{"db": cfg.Database}),
		"SELECT name FROM system.tables WHERE database = {db:String} AND name != 'schema_migrations' ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		got = append(got, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, o := range chstore.ShardedObjects {
		want = append(want, o.Name)
	}
	want = append(want, chstore.ParameterizedViews...)
	want = append(want, chstore.NodeTables...)
	want = append(want, chstore.MainViews...)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the migrations create %v;\nShardedObjects and ParameterizedViews name %v", got, want)
	}
}

// A cluster the server does not know is refused with its name, before any Distributed table.
func TestMigrateShardedNeedsAKnownCluster(t *testing.T) {
	t.Parallel()
	cfg := testenv.ClickHouseConfig(t)
	cfg.Database = testenv.UniqueName("t")
	cfg.Cluster = "no_such_cluster"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t.Cleanup(func() {
		admin := cfg
		admin.Database = "default"
		if conn, err := chstore.Open(context.Background(), admin); err == nil {
			_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+cfg.Database+"` SYNC")
			_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+chstore.LocalDatabase(cfg)+"` SYNC")
			_ = conn.Close()
		}
	})
	err := chstore.MigrateSharded(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "no_such_cluster is not in the server's remote_servers") {
		t.Fatalf("MigrateSharded on an unknown cluster: %v", err)
	}
}

// The replicated form of the schema (ReplicatedMigrations: Replicated…MergeTree at
// /clickhouse/tables/{shard}/{database}/{table}, replica {replica}) is accepted by a server with a
// ZooKeeper and the macros in its config: every CREATE TABLE of the migrations, in that form,
// creates its table, registered in ZooKeeper at its shard's path as replica r1. That is as far as
// it goes here: the development engine serves no interserver HTTP (it reports
// "interserver_http(s)_port required for replication" whatever the config says), so its
// Replicated tables stay read-only and take neither the migrations' ALTERs nor inserts.
func TestReplicatedSchemaIsAcceptedWithZooKeeper(t *testing.T) {
	zk := testenv.StartZooKeeper(t)
	const cluster = "servescope_replicated"
	nodes := testenv.StartClickHouseCluster(t, cluster, 1, zk.Addr())
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cfg := testenv.ClickHouseConfig(t)
	cfg.Addr = []string{nodes[0].Addr()}
	cfg.Database = "servescope_local"
	if err := chstore.EnsureDatabase(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	conn, err := chstore.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	files, err := chstore.ReplicatedMigrations(migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	ups, _ := fs.Glob(files, "*.up.sql")
	created := 0
	for _, name := range ups {
		b, _ := fs.ReadFile(files, name)
		for _, stmt := range strings.Split(string(b), ";") {
			if !strings.Contains(stmt, "CREATE TABLE") {
				continue
			}
			if !strings.Contains(stmt, "ENGINE = Replicated") {
				t.Errorf("%s: a table not made Replicated:\n%s", name, stmt)
			}
			if err := conn.Exec(ctx, stmt); err != nil {
				t.Fatalf("%s: the replicated CREATE TABLE is refused: %v\n%s", name, err, stmt)
			}
			created++
		}
	}
	rows, err := conn.Query(ctx, `SELECT t.name, t.engine, r.zookeeper_path, r.replica_name
		FROM system.tables AS t LEFT JOIN system.replicas AS r ON r.database = t.database AND r.table = t.name
		WHERE t.database = currentDatabase() ORDER BY t.name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var name, engine, path, replica string
		if err := rows.Scan(&name, &engine, &path, &replica); err != nil {
			t.Fatal(err)
		}
		got = append(got, name)
		t.Logf("%s: %s at %s, replica %s", name, engine, path, replica)
		if !strings.HasPrefix(engine, "Replicated") || path != "/clickhouse/tables/01/servescope_local/"+name || replica != "r1" {
			t.Errorf("%s: engine %s, ZooKeeper path %q, replica %q; want Replicated… at /clickhouse/tables/01/servescope_local/%s, replica r1",
				name, engine, path, replica, name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Every landing and detector table: the ShardedObjects with a sharding key, and the tables
	// every node holds whole.
	var want []string
	for _, o := range chstore.ShardedObjects {
		if o.ShardingKey != "" {
			want = append(want, o.Name)
		}
	}
	want = append(want, chstore.NodeTables...)
	slices.Sort(want)
	if !slices.Equal(got, want) || created != len(want) {
		t.Errorf("%d CREATE TABLE statements made %v, want %v", created, got, want)
	}
}
