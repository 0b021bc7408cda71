package servers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/servers"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
)

// TestDevUsers starts a ClickHouse server with the dev server's users file and checks both
// accounts: the passwordless administrator creates and migrates a database as it does without a
// users file, and the demo console's account reads the demo's database and nothing more — no
// captured text, no writes, no other database.
func TestDevUsers(t *testing.T) {
	const demoDB = "servescope_demo_users"
	pw, err := servers.ConsolePassword(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	doc, err := servers.DevUsersXML(demoDB, pw)
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.StartClickHouseUsers(t, doc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := config.ClickHouse{Addr: []string{srv.Addr()}, Database: demoDB, User: "default", DialTimeout: 5 * time.Second}
	if err := chstore.Migrate(ctx, admin); err != nil {
		t.Fatalf("migrate as the administrator: %v", err)
	}
	other := admin
	other.Database = "other_db"
	if err := chstore.Migrate(ctx, other); err != nil {
		t.Fatalf("migrate another database as the administrator: %v", err)
	}
	console := admin
	console.User, console.Password = servers.DemoConsoleUser, pw
	conn, err := chstore.Open(ctx, console)
	if err != nil {
		t.Fatalf("log in as %s: %v", servers.DemoConsoleUser, err)
	}
	defer conn.Close()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM requests").Scan(&n); err != nil {
		t.Errorf("the console account cannot read the demo's requests: %v", err)
	}
	for _, q := range []string{
		"SELECT prompt_text FROM requests",
		"INSERT INTO alerts (ts, rule, fingerprint, state) VALUES (now(), 'r', 'f', 'firing')",
		"SELECT count() FROM other_db.requests",
	} {
		err := conn.Exec(ctx, q)
		if err == nil || !strings.Contains(err.Error(), "ACCESS_DENIED") && !strings.Contains(err.Error(), "Not enough privileges") {
			t.Errorf("%s as the console account: %v, want it refused", q, err)
		}
	}
	if _, err := servers.DevUsersXML("x`; DROP", pw); err == nil {
		t.Error("a database name that is no identifier was accepted")
	}
}
