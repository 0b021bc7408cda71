// Package accesstest starts a private ClickHouse server whose users come from an [access.Access]'s
// users.d file, for tests of the least-privilege accounts (internal/access, dev/security).
package accesstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/servers"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/access"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
)

// adminUserXML is the passwordless administrator the private server's readiness check and the
// tests' migrations use; it never exists in a deployment's users.d file.
const adminUserXML = `    <default>
      <password></password>
      <networks><ip>::/0</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
`

// RandomSecret is prefix followed by 24 random hex digits.
func RandomSecret(t testing.TB, prefix string) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

// Access is the three accounts under their conventional names, with random passwords, for the
// database servescope_access.
func Access(t testing.TB) access.Access {
	return access.Access{
		Database: "servescope_access",
		Detector: access.Account{User: "servescope_detector", Password: RandomSecret(t, "det-")},
		Consumer: access.Account{User: "servescope_consumer", Password: RandomSecret(t, "con-")},
		Console:  access.Account{User: "servescope_console", Password: RandomSecret(t, "cons-")},
	}
}

// Server starts a private ClickHouse whose users are a's accounts (from [access.Access.UsersXML])
// plus a passwordless administrator, migrates a.Database as the administrator and returns the
// administrator's settings. It is stopped when t ends.
func Server(t *testing.T, a access.Access) (*testenv.ClickHouseServer, config.ClickHouse) {
	t.Helper()
	body, err := a.UsersXML()
	if err != nil {
		t.Fatal(err)
	}
	doc := string(body)
	if !strings.HasPrefix(doc, "<clickhouse>\n") || !strings.Contains(doc, "  <users>\n") {
		t.Fatalf("users.d file has an unexpected shape:\n%s", doc)
	}
	doc = strings.Replace(doc, "<clickhouse>\n", "<clickhouse>\n  <profiles><default></default></profiles>\n  <quotas><default></default></quotas>\n", 1)
	doc = strings.Replace(doc, "  <users>\n", "  <users>\n"+adminUserXML, 1)
	srv := testenv.StartClickHouseUsers(t, doc)
	admin := config.ClickHouse{Addr: []string{srv.Addr()}, Database: a.Database, User: "default", DialTimeout: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := chstore.Migrate(ctx, admin); err != nil {
		t.Fatalf("migrate as admin: %v", err)
	}
	return srv, admin
}

// As is admin's settings logged in as acc.
func As(admin config.ClickHouse, acc access.Account) config.ClickHouse {
	c := admin
	c.User, c.Password = acc.User, acc.Password
	return c
}

// Open connects with cfg, failing t on error; the connection is closed when t ends.
func Open(t *testing.T, cfg config.ClickHouse) driver.Conn {
	t.Helper()
	conn, err := chstore.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open as %s: %v", cfg.User, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Count is table's row count read through conn, failing t on error.
func Count(t *testing.T, conn driver.Conn, table string) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// ShardedCluster is the remote_servers cluster of [ShardedServers].
const ShardedCluster = "servescope_access"

// ShardedServers starts two private ClickHouse servers as the two shards of ShardedCluster, with
// a cluster secret (a query one shard sends the other runs there as the user who asked, as in
// deploy/clickhouse/cluster/config.d/remote_servers.xml) and a's accounts from
// [access.Access.UsersXML] plus a passwordless administrator, the default profile giving
// servers.ClusterProfile as a deployed cluster's does. a.LocalDatabase must be set (the roles'
// grants on each node's local database). It migrates the sharded schema as the administrator and
// returns the shards and the administrator's settings (Cluster set, both nodes in Addr).
func ShardedServers(t *testing.T, a access.Access) ([]*testenv.ClickHouseServer, config.ClickHouse) {
	t.Helper()
	if a.LocalDatabase == "" {
		t.Fatal("ShardedServers: a.LocalDatabase is not set")
	}
	body, err := a.UsersXML()
	if err != nil {
		t.Fatal(err)
	}
	doc := string(body)
	if !strings.HasPrefix(doc, "<clickhouse>\n") || !strings.Contains(doc, "  <users>\n") {
		t.Fatalf("users.d file has an unexpected shape:\n%s", doc)
	}
	var profile strings.Builder
	for _, k := range slices.Sorted(maps.Keys(servers.ClusterProfile)) {
		fmt.Fprintf(&profile, "<%s>%s</%s>", k, servers.ClusterProfile[k], k)
	}
	doc = strings.Replace(doc, "<clickhouse>\n", "<clickhouse>\n  <profiles><default>"+profile.String()+"</default></profiles>\n  <quotas><default></default></quotas>\n", 1)
	doc = strings.Replace(doc, "  <users>\n", "  <users>\n"+adminUserXML, 1)
	shards := testenv.StartClickHouseClusterOf(t, testenv.ClickHouseCluster{
		Name: ShardedCluster, Shards: 2, Secret: RandomSecret(t, "cluster-"), UsersXML: doc,
	})
	admin := config.ClickHouse{Addr: []string{shards[0].Addr(), shards[1].Addr()}, Database: a.Database, User: "default",
		DialTimeout: 5 * time.Second, Cluster: ShardedCluster}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := chstore.MigrateSharded(ctx, admin); err != nil {
		t.Fatalf("migrate the sharded schema as admin: %v", err)
	}
	return shards, admin
}
