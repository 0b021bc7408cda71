package chstore

import (
	"context"
	"fmt"

	"github.com/servescope/servescope/internal/config"
)

// Sharded schema: when config.ClickHouse.Cluster names a cluster of the servers' remote_servers,
// every node of cfg.Addr holds its share of the rows in its own tables, in the local database
// (LocalDatabase: cfg.Database + "_local"), created there by the same migrations as a single
// server. cfg.Database then holds, on every node, a Distributed table under each name users
// query, over that name in the local database of every shard. Readers and writers need no change
// beyond connecting: reads through a Distributed table run on every shard and merge, inserts go
// to the shard the sharding key picks.
//
// The migrations apply node by node over a direct connection to each, without ON CLUSTER:
// golang-migrate has no cluster mode and keeps its version table per node, and ON CLUSTER needs
// a Keeper-backed DDL queue (the development engine refuses it: "Replicated DDL queries are
// disabled"). A node that is down fails MigrateSharded; it is safe to run again, every step is
// idempotent.
//
// The servers' remote_servers must give every replica <default_database> = the local database:
// request_facts calls the parameterized view request_facts_window, and a view's table-function
// calls resolve in the current database when the query runs on the shard, which is the
// connection's default database.

// LocalDatabase is the database holding a node's own share of a sharded schema's rows.
func LocalDatabase(cfg config.ClickHouse) string { return cfg.Database + "_local" }

// ShardedObject is one name users query in a sharded schema: a Distributed table over the same
// name in the local database of every shard.
type ShardedObject struct {
	Name string
	// ShardingKey picks the shard of an inserted row; empty for views, which take no inserts.
	ShardingKey string
}

// byRequest keeps every event of one request on one shard, so that request_facts' joins of a
// request's landing rows and FINAL's de-duplication (the ORDER BY keys hold request_id and
// event_id) stay shard-local.
const byRequest = "cityHash64(request_id)"

// ShardedObjects are the Distributed tables of the sharded schema, in creation order: every
// landing and detector table and the views without parameters. Engine samples and logs shard by
// engine, so that the engine views' per-engine windows stay shard-local; the detector's tables
// by their de-duplication keys. A Distributed table cannot pass parameters to a view: the
// parameterized views (request_facts_window, engine_requests, app_requests,
// engine_window_histograms, engine_window_averages) have wrappers instead (ParameterizedViews).
var ShardedObjects = []ShardedObject{
	{"requests_started", byRequest},
	{"requests", byRequest},
	{"app_records", byRequest},
	{"engine_spans", byRequest},
	{"engine_samples", "cityHash64(engine)"},
	{"engine_logs", "cityHash64(engine)"},
	{"alerts", "cityHash64(rule, fingerprint)"},
	{"alert_deliveries", "cityHash64(receiver)"},
	{"ingest_errors", "cityHash64(subject, stream_seq)"},
	{"request_facts", ""},
	{"engine_timeline", ""},
}

// ParameterizedViews are the schema's views that take parameters, all of them from and to
// (DateTime64(6, 'UTC')). A Distributed table cannot pass parameters, so the sharded schema
// has, under each of these names, a parameterized view of the same parameters that runs the
// local one on every shard through the cluster table function and unites the answers: each
// groups by request or by engine, which the sharding keys keep on one shard — except app_traces,
// which groups an application's records by trace: a trace whose records carry different
// request_ids can be split over shards and then yields one row per shard (README, "Running past
// one machine").
var ParameterizedViews = []string{
	"engine_window_histograms", "engine_window_averages", "engine_requests", "app_requests", "app_traces", "request_facts_window",
}

// windowArgs passes a parameterized view's parameters on to the local view it wraps.
const windowArgs = "from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')}"

// MigrateSharded applies every pending migration to the local database of each node of
// cfg.Addr, one node at a time, then (re)creates the Distributed tables of ShardedObjects in
// cfg.Database on every node, so that they follow the local tables' columns. cfg.Cluster must
// name the cluster in the nodes' remote_servers, listing the same nodes.
func MigrateSharded(ctx context.Context, cfg config.ClickHouse) error {
	if cfg.Cluster == "" {
		return fmt.Errorf("migrate a sharded schema: SERVESCOPE_CLICKHOUSE_CLUSTER is not set")
	}
	// Every node's local tables first: the structure of a Distributed table over a view is asked
	// of the shards.
	for _, addr := range cfg.Addr {
		local := cfg
		local.Addr = []string{addr}
		local.Database = LocalDatabase(cfg)
		if err := Migrate(ctx, local); err != nil {
			return fmt.Errorf("node %s: %w", addr, err)
		}
	}
	for _, addr := range cfg.Addr {
		node := cfg
		node.Addr = []string{addr}
		if err := EnsureDatabase(ctx, node); err != nil {
			return fmt.Errorf("node %s: %w", addr, err)
		}
		if err := createDistributed(ctx, node); err != nil {
			return fmt.Errorf("node %s: %w", addr, err)
		}
	}
	return nil
}

func createDistributed(ctx context.Context, cfg config.ClickHouse) error {
	conn, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	local := LocalDatabase(cfg)
	var shards uint64
	if err := conn.QueryRow(WithParams(ctx, map[string]string{"cluster": cfg.Cluster}),
		"SELECT uniqExact(shard_num) FROM system.clusters WHERE cluster = {cluster:String}").Scan(&shards); err != nil {
		return fmt.Errorf("read cluster %s from system.clusters: %w", cfg.Cluster, err)
	}
	if shards == 0 {
		return fmt.Errorf("cluster %s is not in the server's remote_servers (SERVESCOPE_CLICKHOUSE_CLUSTER)", cfg.Cluster)
	}
	// Names passed config's identifier checks; the objects' names and keys are this package's.
	for _, o := range ShardedObjects {
		args := fmt.Sprintf("'%s', '%s', '%s'", cfg.Cluster, local, o.Name)
		if o.ShardingKey != "" {
			args += ", " + o.ShardingKey
		}
		q := fmt.Sprintf("CREATE OR REPLACE TABLE `%s`.`%s` AS `%s`.`%s` ENGINE = Distributed(%s)", cfg.Database, o.Name, local, o.Name, args)
		if err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("create Distributed table %s.%s over cluster %s: %w", cfg.Database, o.Name, cfg.Cluster, err)
		}
	}
	for _, name := range ParameterizedViews {
		q := fmt.Sprintf("CREATE OR REPLACE VIEW `%s`.`%s` AS SELECT * FROM cluster('%s', view(SELECT * FROM `%s`.`%s`(%s)))",
			cfg.Database, name, cfg.Cluster, local, name, windowArgs)
		if err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("create view %s.%s over cluster %s: %w", cfg.Database, name, cfg.Cluster, err)
		}
	}
	return nil
}
