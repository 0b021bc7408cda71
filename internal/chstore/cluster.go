package chstore

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing/fstest"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/migrations"
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
// The views' calls of parameterized views name their database (QualifyViews, run after each
// node's migrations), so a shard reads them the same whatever the current database of the query
// it is sent: remote_servers need not name a <default_database> (before, they had to name the
// local one).

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
// engine, so that the engine views' per-engine windows stay shard-local; the detector's and
// diagnose's tables by their de-duplication keys. A Distributed table cannot pass parameters to a view: the
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
	{"diagnose_hourly", "cityHash64(model, hour)"},
	{"request_facts", ""},
	{"engine_timeline", ""},
}

// ParameterizedViews are the schema's views that take parameters, all of them from and to
// (DateTime64(6, 'UTC')). A Distributed table cannot pass parameters, so the sharded schema
// has, under each of these names, a parameterized view of the same parameters that runs the
// local one on every shard through the cluster table function and unites the answers. The
// wrappers are SQL SECURITY DEFINER views of the user who ran MigrateSharded, so that readers
// need no READ ON REMOTE grant (the cluster table function's); that user must keep it. A query
// must not join a Distributed table with one of these views itself: ClickHouse 26.7 sends such a
// join to the shards naming the view without its parameters, which they refuse; the join goes
// into a view of this list instead (request_timings_window, request_facts_window,
// request_timings_sampled, request_phases_sampled). Each view
// groups by request or by engine, which the sharding keys keep on one shard — except app_traces,
// which groups an application's records by trace: a trace whose records carry different
// request_ids can be split over shards and then yields one row per shard (docs/operations/cluster.md,
// "ClickHouse: shards").
var ParameterizedViews = []string{
	"engine_window_histograms", "engine_window_averages", "engine_requests", "app_requests", "app_traces", "request_facts_window",
	"request_timings_window", "request_timings_sampled", "request_phases_sampled", "slo_requests_window",
}

// NodeTables are small tables of configuration that every node holds whole in its local
// database, because the parameterized views each shard runs read them there (slo_requests_window
// judges a shard's requests by slo_objectives): their writer writes every node (EveryNode). In
// cfg.Database each is a view of the node's own copy.
var NodeTables = []string{"slo_objectives", "engine_config"}

// MainViews are views that must see every shard's rows at once: they aggregate over requests and
// engines, which live on different shards (the engines' samples shard by engine, the requests by
// request). In cfg.Database each is the local view's own definition with every name it reads
// moved from the local database to cfg.Database (mainDefinition): its tables become the
// Distributed tables, its calls of parameterized views the cluster wrappers.
var MainViews = []string{"slo_goodput", "slo_error_budget", "cost_window", "capacity_window"}

// mainDefinition returns the local view's stored definition (system.tables.create_table_query,
// "CREATE VIEW local.name ...") as a CREATE OR REPLACE VIEW of the same name in database, reading
// database's objects where it read local's. ClickHouse stores a view's tables qualified with the
// database it was created in, and QualifyViews has qualified its calls of parameterized views, so
// a copy left as stored would read the node's own shard only: slo_goodput on a cluster counted
// the requests of one shard.
func mainDefinition(create, local, database, name string) (string, error) {
	head := "CREATE VIEW " + local + "." + name + " "
	if !strings.HasPrefix(create, head) {
		return "", fmt.Errorf("view %s.%s: its definition does not start with %q", local, name, head)
	}
	body := strings.TrimPrefix(create, head)
	named, inQuoted := localNames(local)
	body = named.ReplaceAllString(body, "${1}`"+database+"`.")
	body = inQuoted.ReplaceAllString(body, "${1}`"+database+".")
	return fmt.Sprintf("CREATE OR REPLACE VIEW `%s`.`%s` %s", database, name, body), nil
}

// localNames match the local database's name qualifying a name, not as the tail of another
// identifier: named as local.requests or `local`.requests, inQuoted inside one quoted name, as
// ClickHouse stores a qualified call of a parameterized view: `local.slo_requests_window`(...).
func localNames(local string) (named, inQuoted *regexp.Regexp) {
	q := regexp.QuoteMeta(local)
	const before = "(^|[^A-Za-z0-9_.`])"
	return regexp.MustCompile(before + "(?:" + q + "|`" + q + "`)\\."), regexp.MustCompile(before + "`" + q + "\\.")
}

// windowArgs passes a parameterized view's parameters on to the local view it wraps.
const windowArgs = "from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')}"

// mergeTreeEngine is a table engine clause of the migrations: plain or replacing MergeTree, with
// no arguments (the migrations give none).
var mergeTreeEngine = regexp.MustCompile(`(?m)\bENGINE\s*=\s*(Replacing)?MergeTree\s*$`)

// ReplicatedPath is the Keeper path of a replicated local table: one per shard, database and
// table, which every replica of the shard shares. {shard}, {database} and {table} are expanded by
// the server ({shard} from its macros), {replica} names the replica.
const ReplicatedPath = "/clickhouse/tables/{shard}/{database}/{table}"

// ReplicatedMigrations returns the migrations of files with every MergeTree and
// ReplacingMergeTree table made Replicated at ReplicatedPath, replica {replica}: the local tables
// of a replicated sharded schema (config.ClickHouse.Replicated). Each replica applies them
// itself, as MigrateSharded runs them node by node: the CREATE of the second replica joins the
// first's path, and every ALTER of the migrations is idempotent (IF NOT EXISTS), so running it on
// each replica is harmless where replication has already carried it over.
func ReplicatedMigrations(files fs.FS) (fs.FS, error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	out := fstest.MapFS{}
	engine := "ENGINE = Replicated${1}MergeTree('" + ReplicatedPath + "', '{replica}')"
	for _, name := range names {
		b, err := fs.ReadFile(files, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		out[name] = &fstest.MapFile{Data: mergeTreeEngine.ReplaceAll(b, []byte(engine)), Mode: 0o444}
	}
	return out, nil
}

// MigrateSharded applies every pending migration to the local database of each node of
// cfg.Addr, one node at a time (ReplicatedMigrations' form when cfg.Replicated), then (re)creates the Distributed tables of ShardedObjects in
// cfg.Database on every node, so that they follow the local tables' columns. cfg.Cluster must
// name the cluster in the nodes' remote_servers, listing the same nodes.
func MigrateSharded(ctx context.Context, cfg config.ClickHouse) error {
	if cfg.Cluster == "" {
		return fmt.Errorf("migrate a sharded schema: SERVESCOPE_CLICKHOUSE_CLUSTER is not set")
	}
	// Every node's local tables first: the structure of a Distributed table over a view is asked
	// of the shards.
	var files fs.FS = migrations.FS
	if cfg.Replicated {
		var err error
		if files, err = ReplicatedMigrations(migrations.FS); err != nil {
			return err
		}
	}
	for _, addr := range cfg.Addr {
		local := cfg
		local.Addr = []string{addr}
		local.Database = LocalDatabase(cfg)
		if err := migrateUp(ctx, local, files); err != nil {
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
		// fsync: an insert the consumer makes asynchronous while a shard is out (its sink's
		// Sharded) returns, and is acknowledged, once the node holds the queued rows on disk.
		q := fmt.Sprintf("CREATE OR REPLACE TABLE `%s`.`%s` AS `%s`.`%s` ENGINE = Distributed(%s) SETTINGS fsync_after_insert = 1, fsync_directories = 1",
			cfg.Database, o.Name, local, o.Name, args)
		if err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("create Distributed table %s.%s over cluster %s: %w", cfg.Database, o.Name, cfg.Cluster, err)
		}
	}
	for _, name := range ParameterizedViews {
		// SQL SECURITY DEFINER: the cluster table function needs READ ON REMOTE, which would let a
		// reader make the server connect anywhere; the wrapper calls it as the user who ran the
		// migration, and the shards still run the local view as the reader (remote_servers'
		// secret), with the reader's grants on the local database.
		q := fmt.Sprintf("CREATE OR REPLACE VIEW `%s`.`%s` DEFINER = CURRENT_USER SQL SECURITY DEFINER AS SELECT * FROM cluster('%s', view(SELECT * FROM `%s`.`%s`(%s)))",
			cfg.Database, name, cfg.Cluster, local, name, windowArgs)
		if err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("create view %s.%s over cluster %s: %w", cfg.Database, name, cfg.Cluster, err)
		}
	}
	for _, name := range NodeTables {
		q := fmt.Sprintf("CREATE OR REPLACE VIEW `%s`.`%s` AS SELECT * FROM `%s`.`%s`", cfg.Database, name, local, name)
		if err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("create view %s.%s of the node's own copy: %w", cfg.Database, name, err)
		}
	}
	for _, name := range MainViews {
		var create string
		if err := conn.QueryRow(WithParams(ctx, map[string]string{"db": local, "name": name}),
			"SELECT create_table_query FROM system.tables WHERE database = {db:String} AND name = {name:String}").Scan(&create); err != nil {
			return fmt.Errorf("read the definition of view %s.%s: %w", local, name, err)
		}
		q, err := mainDefinition(create, local, cfg.Database, name)
		if err != nil {
			return err
		}
		if err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("create view %s.%s over the cluster-wide tables: %w", cfg.Database, name, err)
		}
	}
	return nil
}
