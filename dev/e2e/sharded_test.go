package e2e

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/consumer/sink"
	"github.com/servescope/servescope/services/detector/slo"
)

// shardedRequests is how many requests the differential test writes, each with one event of
// every kind.
const shardedRequests = 600

// The same event set written to one server and to a live 2-shard cluster (Distributed tables
// over per-node ReplacingMergeTree tables, migrated node by node) gives identical request_facts
// counts and sums. Every batch is written twice with its deduplication token, as the consumer
// retries an ambiguous insert; the sharding key keeps every event of a request on one shard, so
// request_facts' joins and FINAL work shard by shard.
func TestShardedClickHouseAnswersAsOneServer(t *testing.T) {
	shards, cfg, sharded := startSharded(t)
	single, singleCfg := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	// Running the migration again changes nothing and fails nothing.
	if err := chstore.MigrateSharded(ctx, cfg); err != nil {
		t.Fatalf("migrate the sharded schema again: %v", err)
	}

	base := time.Now().Add(-time.Hour).UTC()
	byKind := map[schema.Kind][]schema.Event{}
	for i := range shardedRequests {
		for _, k := range schema.Kinds() {
			byKind[k] = append(byKind[k], eventgen.Event(k, i, base))
		}
	}
	for _, conn := range []driver.Conn{single, sharded} {
		s := sink.New(conn)
		for _, k := range schema.Kinds() {
			token := fmt.Sprintf("sharded-test-%s", k)
			for range 2 {
				if err := s.InsertEvents(ctx, k, byKind[k], token); err != nil {
					t.Fatalf("insert %s: %v", k, err)
				}
			}
		}
	}

	// Every landing table holds every event once, read with FINAL, on both.
	for _, k := range schema.Kinds() {
		table, _ := sink.TableFor(k)
		q := "SELECT count() FROM " + table + " FINAL"
		one, two := scalar(ctx, t, single, q), scalar(ctx, t, sharded, q)
		if one != two || one != fmt.Sprint(len(byKind[k])) {
			t.Errorf("%s: one server %s, sharded %s, want %d on both", q, one, two, len(byKind[k]))
		}
		raw := "SELECT count() FROM " + table
		if one, two := scalar(ctx, t, single, raw), scalar(ctx, t, sharded, raw); one != two {
			t.Errorf("%s (a batch written twice with its token): one server %s, sharded %s", raw, one, two)
		}
	}

	one, two := scalar(ctx, t, single, requestFactsSums), scalar(ctx, t, sharded, requestFactsSums)
	t.Logf("request_facts: one server %s; sharded %s", one, two)
	if one != two {
		t.Errorf("request_facts differs:\n one server %s\n sharded    %s", one, two)
	}
	// A parameterized view, read under its own name: the sharded schema's wrapper runs it on every
	// shard through the cluster table function.
	from, to := base.Add(-time.Minute).Format("2006-01-02 15:04:05"), base.Add(time.Minute).Format("2006-01-02 15:04:05")
	window := fmt.Sprintf("request_facts_window(from = '%s', to = '%s')", from, to)
	const windowCols = "count(), sum(prompt_tokens), round(sum(e2e_s), 6), sum(engine_children), sum(app_records)"
	one = scalar(ctx, t, single, "SELECT "+windowCols+" FROM "+window)
	two = scalar(ctx, t, sharded, "SELECT "+windowCols+" FROM "+window)
	t.Logf("request_facts_window: one server %s; sharded %s", one, two)
	if one != two || strings.HasPrefix(one, "0 ") {
		t.Errorf("request_facts_window differs or is empty:\n one server %s\n sharded    %s", one, two)
	}
	// The SLO views: every node holds the SLOs (slo.Sync writes each), each shard judges its own
	// requests, and slo_goodput and slo_error_budget, created over the cluster-wide tables, add
	// them up: the same figures as one server's; so do cost_window and capacity_window, which read
	// the requests and the engines of every shard.
	def, err := slo.Parse("e2e.yaml", []byte("name: e2e\nobjectives:\n  ttft: {p50: 300ms}\n  e2e: {under: 3s, target: 90%}\n  availability: {target: 99%}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := slo.Sync(ctx, singleCfg, single, []*slo.Definition{def}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := slo.Sync(ctx, cfg, sharded, []*slo.Definition{def}, time.Now()); err != nil {
		t.Fatal(err)
	}
	// The engines file too, which the cost and capacity views read on every node.
	engines, err := slo.ParseEngines("engines.yaml", []byte("default: {price_per_hour: 1.2, max_num_seqs: 256}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := slo.SyncEngines(ctx, singleCfg, single, engines, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := slo.SyncEngines(ctx, cfg, sharded, engines, time.Now()); err != nil {
		t.Fatal(err)
	}
	ranged := fmt.Sprintf("(from = '%s', to = '%s')", from, to)
	for _, q := range []string{
		"SELECT kind, sum(requests), round(sum(engine_hours), 9), round(sum(cost), 9) FROM cost_window" + ranged + " GROUP BY kind ORDER BY kind",
		"SELECT count(), sum(finished), max(slot_limit) FROM capacity_window" + ranged,
		"SELECT count(), sum(judged), sum(good), sum(ttft_bad), sum(availability_bad) FROM slo_requests_window" + ranged,
		"SELECT sum(judged), sum(good), sum(ttft_bad), sum(e2e_bad), round(sum(goodput_rps), 9) FROM slo_goodput" + ranged,
		"SELECT objective, round(budget_left, 9), judged FROM slo_error_budget" + ranged + " ORDER BY objective",
	} {
		one, two := scalar(ctx, t, single, q), scalar(ctx, t, sharded, q)
		t.Logf("%s: one server %s; sharded %s", q, one, two)
		if one != two || strings.HasPrefix(one, "0") {
			t.Errorf("%s differs or is empty:\n one server %s\n sharded    %s", q, one, two)
		}
	}
	if want := fmt.Sprint(shardedRequests); scalar(ctx, t, sharded, "SELECT count() FROM request_facts") != want {
		t.Errorf("sharded request_facts does not hold the %s requests", want)
	}

	// Both shards hold rows, and each holds every landing row of its requests.
	local := chstore.LocalDatabase(cfg)
	for i, s := range shards {
		node := cfg
		node.Addr = []string{s.Addr()}
		node.Database = local
		conn, err := chstore.Open(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		n := scalar(ctx, t, conn, "SELECT count() FROM requests FINAL")
		strays := scalar(ctx, t, conn, `SELECT
			(SELECT count() FROM engine_spans WHERE request_id NOT IN (SELECT request_id FROM requests)) +
			(SELECT count() FROM app_records WHERE request_id NOT IN (SELECT request_id FROM requests)) +
			(SELECT count() FROM requests_started WHERE request_id NOT IN (SELECT request_id FROM requests))`)
		conn.Close()
		t.Logf("shard %d holds %s of %d requests", i+1, n, shardedRequests)
		if n == "0" || n == fmt.Sprint(shardedRequests) {
			t.Errorf("shard %d holds %s of %d requests: the sharding key does not spread them", i+1, n, shardedRequests)
		}
		if strays != "0" {
			t.Errorf("shard %d holds %s rows of requests it does not hold: one request's events are split", i+1, strays)
		}
	}
}

// testCluster is the remote_servers cluster of the sharded tests' servers.
const testCluster = "servescope_test"

// startSharded starts two private ClickHouse servers as the two shards of testCluster, migrates
// the sharded schema (database servescope over servescope_local) and connects to it through the
// first node, as a service given both nodes does.
func startSharded(t *testing.T) ([]*testenv.ClickHouseServer, config.ClickHouse, driver.Conn) {
	t.Helper()
	shards := testenv.StartClickHouseShards(t, testCluster, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cfg := testenv.ClickHouseConfig(t)
	cfg.Addr = []string{shards[0].Addr(), shards[1].Addr()}
	cfg.Database = "servescope"
	cfg.Cluster = testCluster
	if err := chstore.MigrateSharded(ctx, cfg); err != nil {
		t.Fatalf("migrate the sharded schema: %v", err)
	}
	conn, err := chstore.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return shards, cfg, conn
}

// scalar returns the first row of q's answer, formatted.
func scalar(ctx context.Context, t *testing.T, conn driver.Conn, q string) string {
	t.Helper()
	rows, err := conn.Query(ctx, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	if !rows.Next() {
		t.Fatalf("%s: no row (%v)", q, rows.Err())
	}
	cols := rows.ColumnTypes()
	vals := make([]any, len(cols))
	for i, c := range cols {
		vals[i] = newScanTarget(c.ScanType())
	}
	if err := rows.Scan(vals...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	out := ""
	for i, v := range vals {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprint(derefScan(v))
	}
	return out
}

func newScanTarget(t reflect.Type) any { return reflect.New(t).Interface() }

// derefScan returns what v points to, and what that points to for a Nullable column ("NULL" for nil).
func derefScan(v any) any {
	e := reflect.ValueOf(v).Elem()
	for e.Kind() == reflect.Pointer {
		if e.IsNil() {
			return "NULL"
		}
		e = e.Elem()
	}
	return e.Interface()
}
