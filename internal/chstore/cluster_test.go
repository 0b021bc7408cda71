package chstore_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
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
