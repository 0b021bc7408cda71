package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/docs"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/chstore/chstoretest"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/consumer/sink"
)

// Every ready query of the docs (docs/sql-cookbook.md, docs.Statements) runs on one server and on two shards, as a
// user's client sends it (no settings of its own; the shards' default profile as the compose
// cluster's), over the same events, and answers the same rows. The "in flight" query's plain NOT
// IN over a Distributed table failed on the shards with code 288 under ClickHouse's default
// distributed_product_mode (deny); the cluster's profile sets global. Every view, plain and
// parameterized, and every Distributed table (request_facts among them) also reads by its
// qualified name from the `default` database on the shards.
func TestReadySQLOnOneServerAndShards(t *testing.T) {
	_, cfg, _ := startSharded(t)
	single, singleCfg := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	client := cfg
	client.Addr, client.Cluster = cfg.Addr[:1], "" // a user's client: one node, no settings of its own
	shards, err := chstore.Open(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	defer shards.Close()
	writer, err := chstore.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()

	now := time.Now().UTC()
	for _, conn := range []driver.Conn{single, writer} {
		s := sink.New(conn)
		for _, k := range schema.Kinds() {
			var evs []schema.Event
			for i := range 300 {
				e := eventgen.Event(k, i, now.Add(-50*time.Minute+time.Duration(i)*9*time.Second))
				if rs, ok := e.(*schema.RequestStarted); ok && i%10 == 0 {
					// Every tenth request is still in flight: started, not finished.
					rs.RequestID += "-in-flight"
				}
				evs = append(evs, e)
			}
			table, _ := sink.TableFor(k)
			if err := s.InsertEvents(ctx, k, evs, sink.Token(table, []string{"ready-sql", string(k)})); err != nil {
				t.Fatalf("insert %s: %v", k, err)
			}
		}
	}

	queries, err := docs.Statements(docs.CookbookPage)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		one, err := answer(ctx, single, q)
		if err != nil {
			t.Errorf("ready query (docs/%s) on one server: %v\n%s", docs.CookbookPage, err, q)
			continue
		}
		two, err := answer(ctx, shards, q)
		if err != nil {
			t.Errorf("ready query (docs/%s) on the shards: %v\n%s", docs.CookbookPage, err, q)
			continue
		}
		if !slices.Equal(one, two) {
			t.Errorf("ready query (docs/%s) answers differently:\n%s\none server: %q\nshards:     %q", docs.CookbookPage, q, one, two)
		}
	}
	t.Logf("%d ready queries of docs/%s answered the same on one server and on two shards", len(queries), docs.CookbookPage)

	other := client
	other.Database = "default"
	def, err := chstore.Open(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	views, err := chstoretest.ReadEveryView(ctx, def, cfg.Database, now.Add(-time.Hour), now)
	if err != nil {
		t.Errorf("the sharded schema's views from database default: %v", err)
	}
	if _, err := chstoretest.ReadEveryView(ctx, def, singleCfg.Database, now.Add(-time.Hour), now); err != nil {
		t.Errorf("one server's views from database default: %v", err)
	}
	if !slices.Contains(views, "request_facts") || !slices.Contains(views, "request_facts_window") {
		t.Errorf("read %v from database default; want request_facts and request_facts_window among them", views)
	}
	t.Logf("%d views and Distributed tables read fully qualified from database default on the shards: %s", len(views), strings.Join(views, ", "))
}

// answer returns q's rows, each formatted as one string, sorted.
func answer(ctx context.Context, conn driver.Conn, q string) ([]string, error) {
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		cols := rows.ColumnTypes()
		vals := make([]any, len(cols))
		for i, c := range cols {
			vals[i] = newScanTarget(c.ScanType())
		}
		if err := rows.Scan(vals...); err != nil {
			return nil, err
		}
		var b strings.Builder
		for i, v := range vals {
			if i > 0 {
				b.WriteString(" | ")
			}
			fmt.Fprint(&b, derefScan(v))
		}
		out = append(out, b.String())
	}
	slices.Sort(out)
	return out, rows.Err()
}
