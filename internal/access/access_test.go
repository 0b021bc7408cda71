package access_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	consolepanels "github.com/servescope/servescope/deploy/console"
	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/dev/requestfixture"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/access"
	"github.com/servescope/servescope/internal/access/accesstest"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/panels"
	"github.com/servescope/servescope/internal/requestview"
	"github.com/servescope/servescope/services/consumer/sink"
	"github.com/servescope/servescope/services/detector/rules"
)

// ClickHouse error codes the tests expect (ErrorCodes.cpp).
const (
	codeAccessDenied         = 497
	codeAuthenticationFailed = 516
)

func wantCode(t *testing.T, what string, err error, code int32) {
	t.Helper()
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) || ex.Code != code {
		t.Fatalf("%s: got error %v, want ClickHouse code %d", what, err, code)
	}
}

func TestClickHouseLeastPrivilege(t *testing.T) {
	t.Parallel()
	a := accesstest.Access(t)
	srv, admin := accesstest.Server(t, a)
	ctx := context.Background()
	root := accesstest.Open(t, admin)
	consumer := accesstest.Open(t, accesstest.As(admin, a.Consumer))
	detector := accesstest.Open(t, accesstest.As(admin, a.Detector))
	console := accesstest.Open(t, accesstest.As(admin, a.Console))

	t.Run("consumer", func(t *testing.T) {
		// The consumer's own start-up check reads system.columns: it must see every table it writes.
		if err := sink.New(consumer).Check(ctx); err != nil {
			t.Fatalf("consumer schema check: %v", err)
		}
		for _, table := range access.ConsumerInsertTables {
			// A row outside its TTL is dropped at insert, so the time column is set.
			timeCol := "ts"
			if table == "requests" || table == "requests_started" {
				timeCol = "arrival_ts"
			}
			if err := consumer.Exec(ctx, "INSERT INTO "+table+" ("+timeCol+") VALUES (now64(6))"); err != nil {
				t.Errorf("insert into %s as consumer: %v", table, err)
				continue
			}
			if n := accesstest.Count(t, root, table); n != 1 {
				t.Errorf("%s has %d rows after the consumer's insert, want 1", table, n)
			}
		}
		var n uint64
		wantCode(t, "SELECT as consumer", consumer.QueryRow(ctx, "SELECT count() FROM requests").Scan(&n), codeAccessDenied)
		for _, stmt := range []string{
			"DROP TABLE requests",
			"TRUNCATE TABLE requests",
			"ALTER TABLE requests DELETE WHERE 1",
			"INSERT INTO alerts (rule) VALUES ('forged')",
			"CREATE TABLE evil (x UInt8) ENGINE = Memory",
		} {
			wantCode(t, stmt+" as consumer", consumer.Exec(ctx, stmt), codeAccessDenied)
		}
		if n := accesstest.Count(t, root, "alerts"); n != 0 {
			t.Fatalf("alerts has %d rows after the consumer's refused insert", n)
		}
	})

	t.Run("detector", func(t *testing.T) {
		for _, table := range []string{"requests", "requests_started", "app_records", "engine_samples", "engine_logs", "ingest_errors", "request_facts"} {
			var n uint64
			if err := detector.QueryRow(ctx, "SELECT count() FROM "+table).Scan(&n); err != nil {
				t.Errorf("SELECT from %s as detector: %v", table, err)
			}
		}
		for _, table := range access.DetectorInsertTables {
			stmt := "INSERT INTO " + table + " (ts) VALUES (now64(6))"
			switch table {
			case "diagnose_hourly":
				stmt = "INSERT INTO diagnose_hourly (hour) VALUES (toStartOfHour(now()))"
			case "slo_objectives", "engine_config":
				stmt = "INSERT INTO " + table + " (loaded_at) VALUES (now64(6))"
			}
			if err := detector.Exec(ctx, stmt); err != nil {
				t.Errorf("insert into %s as detector: %v", table, err)
			}
		}
		before := accesstest.Count(t, root, "requests")
		for _, stmt := range []string{
			"INSERT INTO requests (event_id) VALUES ('forged')",
			"INSERT INTO requests_started (event_id) VALUES ('forged')",
			"DROP TABLE requests",
			"TRUNCATE TABLE alerts",
			"ALTER TABLE requests DELETE WHERE 1",
		} {
			wantCode(t, stmt+" as detector", detector.Exec(ctx, stmt), codeAccessDenied)
		}
		if after := accesstest.Count(t, root, "requests"); after != before {
			t.Fatalf("requests went from %d to %d rows through refused statements", before, after)
		}
	})

	t.Run("console", func(t *testing.T) {
		for _, q := range []string{
			"SELECT count() FROM requests",
			"SELECT countIf(status_code >= 500 AND ttft_s > 1) FROM requests",
			"SELECT count() FROM request_facts",
			"SELECT count() FROM engine_samples", "SELECT count() FROM engine_logs",
			"SELECT count() FROM app_records", "SELECT count() FROM alerts",
		} {
			var n uint64
			if err := console.QueryRow(ctx, q).Scan(&n); err != nil {
				t.Errorf("%s as console: %v", q, err)
			}
		}
		// Every query of the console's panels runs on the read-only account.
		defs, err := rules.Load(builtin.Rules, builtin.RulesDir)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := panels.Load(consolepanels.Panels, consolepanels.PanelsDir, defs)
		if err != nil {
			t.Fatal(err)
		}
		req := panels.Request{From: time.Now().Add(-time.Hour), To: time.Now(), Step: time.Minute}
		for _, p := range ps {
			for _, k := range []panels.Kind{panels.SeriesQuery, panels.BaselineQuery, panels.MarksQuery} {
				q, err := p.SQL(k, panels.Console)
				if err != nil || q == "" {
					continue
				}
				rows, err := console.Query(chstore.WithParams(ctx, p.Params(req)), q)
				if err != nil {
					t.Errorf("panel %s %s query as console: %v", p.Name, k, err)
					continue
				}
				rows.Close()
			}
		}
		// The request page and the slowest-requests lists read as the console does, without text;
		// asking for the text is refused.
		story := requestfixture.Tell(requestfixture.Overload("vllm-0"), time.Now().UTC().Add(-10*time.Minute))
		if err := requestfixture.Insert(ctx, root, story.Events...); err != nil {
			t.Fatal(err)
		}
		ms, err := requestview.Find(ctx, console, story.ResponseID)
		if err != nil || len(ms) != 1 {
			t.Fatalf("find a request as console: %v, %v", ms, err)
		}
		if r, err := requestview.Load(ctx, console, ms[0], requestview.Options{}); err != nil || r.Engine == nil || r.State == nil {
			t.Errorf("the request page as console: %+v, %v", r, err)
		}
		for _, order := range requestview.SlowOrders {
			if _, err := requestview.Slowest(ctx, console, time.Now().Add(-time.Hour), time.Now(), "", "", order, false, 10); err != nil {
				t.Errorf("the slowest requests by %s as console: %v", order, err)
			}
		}
		_, err = requestview.Load(ctx, console, ms[0], requestview.Options{Content: true})
		wantCode(t, "the request's text as console", err, codeAccessDenied)
		// Captured prompt and output text stay out of its reach unless ConsoleContent says so.
		for _, col := range access.ContentColumns["requests"] {
			var s string
			wantCode(t, "SELECT "+col+" as console", console.QueryRow(ctx, "SELECT "+col+" FROM requests LIMIT 1").Scan(&s), codeAccessDenied)
		}
		before := accesstest.Count(t, root, "requests")
		for _, stmt := range []string{
			"INSERT INTO requests (event_id) VALUES ('forged')",
			"INSERT INTO alerts (rule) VALUES ('forged')",
			"DROP TABLE requests",
			"TRUNCATE TABLE alerts",
			"ALTER TABLE requests DELETE WHERE 1",
			"CREATE TABLE evil (x UInt8) ENGINE = Memory",
		} {
			wantCode(t, stmt+" as console", console.Exec(ctx, stmt), codeAccessDenied)
		}
		if after := accesstest.Count(t, root, "requests"); after != before {
			t.Fatalf("requests went from %d to %d rows through refused statements", before, after)
		}
	})

	t.Run("wrong or missing password", func(t *testing.T) {
		before := accesstest.Count(t, root, "requests")
		for _, tc := range []struct {
			name string
			cfg  config.ClickHouse
		}{
			{"wrong password", accesstest.As(admin, access.Account{User: a.Consumer.User, Password: a.Consumer.Password + "x"})},
			{"missing password", accesstest.As(admin, access.Account{User: a.Consumer.User})},
			{"detector password for consumer", accesstest.As(admin, access.Account{User: a.Consumer.User, Password: a.Detector.Password})},
		} {
			conn, err := chstore.Open(ctx, tc.cfg)
			if err == nil {
				conn.Close()
				t.Fatalf("%s: connected", tc.name)
			}
			wantCode(t, tc.name, err, codeAuthenticationFailed)
			msg := err.Error()
			if !strings.Contains(msg, "Authentication failed") || !strings.Contains(msg, "ping ClickHouse") {
				t.Errorf("%s: error %q does not say what failed", tc.name, msg)
			}
			if tc.cfg.Password != "" && strings.Contains(msg, tc.cfg.Password) {
				t.Errorf("%s: error shows the password: %q", tc.name, msg)
			}
			// The libchdb engine aborts (SIGABRT) right after refusing a native-protocol login; a
			// restart on the same data path brings it back for the next case and the count.
			srv.Stop()
			srv.Start()
		}
		after := accesstest.Count(t, accesstest.Open(t, admin), "requests")
		if after != before {
			t.Fatalf("requests went from %d to %d rows after refused logins", before, after)
		}
	})
}

// TestAccessSQL checks the SQL form of the accounts: every statement parses on the real engine and
// no clear-text password appears in them. (The libchdb engine has no writable user directory, so
// running them needs a clickhouse-server; the privileges themselves are the ones UsersXML grants,
// tested above.)
func TestAccessSQL(t *testing.T) {
	t.Parallel()
	a := accesstest.Access(t)
	stmts, err := a.SQL()
	if err != nil {
		t.Fatal(err)
	}
	conn, _ := testenv.ClickHouse(t)
	ctx := context.Background()
	var roles, users int
	for _, s := range stmts {
		if strings.Contains(s, a.Detector.Password) || strings.Contains(s, a.Consumer.Password) || strings.Contains(s, a.Console.Password) {
			t.Fatalf("statement shows a password: %s", s)
		}
		if strings.HasPrefix(s, "CREATE ROLE") {
			roles++
		}
		if strings.HasPrefix(s, "CREATE USER") {
			users++
		}
		rows, err := conn.Query(ctx, "EXPLAIN AST "+s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		rows.Close()
	}
	if roles != 3 || users != 3 {
		t.Fatalf("%d CREATE ROLE and %d CREATE USER statements, want 3 and 3:\n%s", roles, users, strings.Join(stmts, "\n"))
	}
}

func TestAccessValidate(t *testing.T) {
	good := accesstest.Access(t)
	tests := []struct {
		name   string
		modify func(*access.Access)
		want   string
	}{
		{"good", func(*access.Access) {}, ""},
		{"database with quote", func(a *access.Access) { a.Database = "x`; DROP" }, "database"},
		{"user with markup", func(a *access.Access) { a.Detector.User = "a<b>" }, "detector user"},
		{"default user", func(a *access.Access) { a.Consumer.User = "default" }, "must not be the default user"},
		{"no password", func(a *access.Access) { a.Consumer.Password = "" }, "has no password"},
		{"same user", func(a *access.Access) { a.Consumer.User = a.Detector.User }, "different users"},
		{"user named like a role", func(a *access.Access) { a.Detector.User = access.DetectorRole }, "named like a role"},
		{"network markup", func(a *access.Access) { a.Networks = []string{"</ip>"} }, "network"},
		{"no console", func(a *access.Access) { a.Console = access.Account{} }, ""},
		{"console without password", func(a *access.Access) { a.Console.Password = "" }, "console user servescope_console has no password"},
		{"console is the detector", func(a *access.Access) { a.Console.User = a.Detector.User }, "console's user"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := good
			tc.modify(&a)
			err := a.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if _, err := a.UsersXML(); err == nil {
				t.Fatal("UsersXML accepted an invalid Access")
			}
			if _, err := a.SQL(); err == nil {
				t.Fatal("SQL accepted an invalid Access")
			}
		})
	}
}

// TestRoleGrantsOnAShardedSchema: every role holds the same privileges on the nodes' local
// database as on the Distributed one, so a query routed to the shards as its user is allowed there;
// the consumer may also flush the Distributed tables it writes (rows queued for a shard that was out).
func TestRoleGrantsOnAShardedSchema(t *testing.T) {
	single := accesstest.Access(t)
	sharded := single
	sharded.LocalDatabase = single.Database + "_local"
	if err := sharded.Validate(); err != nil {
		t.Fatal(err)
	}
	for role, gs := range single.RoleGrants() {
		got := sharded.RoleGrants()[role]
		var want []string
		want = append(want, gs...)
		if role == access.ConsumerRole {
			// The consumer sends what it queued for a shard that did not answer.
			for _, t := range access.ConsumerInsertTables {
				want = append(want, "GRANT SYSTEM FLUSH DISTRIBUTED ON `"+single.Database+"`.`"+t+"`")
			}
		}
		for _, g := range gs {
			want = append(want, strings.Replace(g, "`"+single.Database+"`", "`"+sharded.LocalDatabase+"`", 1))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s on a sharded schema:\n%s\nwant\n%s", role, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	same := single
	same.LocalDatabase = single.Database
	if err := same.Validate(); err == nil || !strings.Contains(err.Error(), "local database") {
		t.Errorf("local database equal to the database: got %v, want an error naming the local database", err)
	}
}
