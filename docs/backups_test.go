package docs

import (
	"context"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
)

// TestBackupAndRestore runs the backups page as written: its config.d file on a private server,
// its full and incremental BACKUP with rows added between them, then the database dropped and its
// RESTORE, and checks every row and the migration version came back.
func TestBackupAndRestore(t *testing.T) {
	t.Parallel()
	const page = "operations/backups.md"
	raw, err := fs.ReadFile(Pages, page)
	if err != nil {
		t.Fatal(err)
	}
	xml := regexp.MustCompile("(?s)```xml\n(.*?)```").FindStringSubmatch(string(raw))
	if xml == nil {
		t.Fatalf("%s has no ```xml block (the backup disk's config.d file)", page)
	}
	const pagePath = "/var/lib/clickhouse/backups/"
	if !strings.Contains(xml[1], pagePath) {
		t.Fatalf("the backup disk of %s is not at %s", page, pagePath)
	}
	dir := t.TempDir() + string(filepath.Separator)
	srv := testenv.StartClickHouseConfigD(t, map[string][]byte{"backups.xml": []byte(strings.ReplaceAll(xml[1], pagePath, dir))})

	stmts, err := Statements(page)
	if err != nil {
		t.Fatal(err)
	}
	pick := func(prefix, contains string) string {
		t.Helper()
		for _, s := range stmts {
			if strings.HasPrefix(s, prefix) && strings.Contains(s, contains) {
				return s
			}
		}
		t.Fatalf("%s has no statement starting %q holding %q", page, prefix, contains)
		return ""
	}
	full, incr := pick("BACKUP DATABASE servescope", "servescope-full"), pick("BACKUP DATABASE servescope", "base_backup")
	status, restore := pick("SELECT", "system.backups"), pick("RESTORE DATABASE servescope", "")
	if len(stmts) != 4 {
		t.Fatalf("%s holds %d statements; this test runs 4: %q", page, len(stmts), stmts)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := testenv.ClickHouseConfig(t)
	cfg.Addr, cfg.Database, cfg.Cluster = []string{srv.Addr()}, "servescope", ""
	m, err := chstore.NewMigrator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Up(); err != nil {
		t.Fatal(err)
	}
	version, _, err := m.Version()
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Close()
	conn, err := chstore.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	exec := func(q string) {
		t.Helper()
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	insert := func(from, n int) {
		t.Helper()
		exec("INSERT INTO requests (event_id, request_id, arrival_ts, model) SELECT concat('e', toString(number)), concat('r', toString(number)), now64(6) - INTERVAL 1 MINUTE, 'm' FROM numbers(" +
			strconv.Itoa(from) + ", " + strconv.Itoa(n) + ")")
	}
	count := func() uint64 {
		t.Helper()
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM servescope.requests FINAL").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	insert(0, 1000)
	exec(full)
	insert(1000, 500)
	exec(incr)
	backups := scanStrings(t, ctx, conn, status)
	if len(backups) != 2 {
		t.Fatalf("system.backups lists %q, want the full and the incremental backup", backups)
	}
	for _, b := range backups {
		if !strings.Contains(b, "BACKUP_CREATED") {
			t.Errorf("backup not created: %s", b)
		}
	}
	exec("DROP DATABASE servescope SYNC")
	exec(restore)
	if n := count(); n != 1500 {
		t.Errorf("after the restore requests holds %d rows, want the 1500 of both backups", n)
	}
	var restored int64
	if err := conn.QueryRow(ctx, "SELECT max(version) FROM servescope.schema_migrations").Scan(&restored); err != nil {
		t.Fatal(err)
	}
	if restored != int64(version) {
		t.Errorf("restored migration version %d, want %d", restored, version)
	}
	var facts uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM servescope.request_facts").Scan(&facts); err != nil {
		t.Fatalf("the restored views do not answer: %v", err)
	}
	if facts != 1500 {
		t.Errorf("request_facts holds %d rows after the restore, want 1500", facts)
	}
}

// scanStrings returns each row of q as its columns in one string.
func scanStrings(t *testing.T, ctx context.Context, conn driver.Conn, q string) []string {
	t.Helper()
	rows, err := conn.Query(ctx, "SELECT toString(tuple(*)) FROM ("+q+")")
	if err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
