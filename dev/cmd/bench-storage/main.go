// Command benchstorage measures the bytes on disk per request and per engine-hour that servescope's
// tables take after merges, with the schema before the compression codecs of migration 000013,
// with them, and at the latest migration (000014's ZSTD level for ids on top), side by side in one
// run (scripts/bench storage).
//
// Method. A private ClickHouse server (the dev build, on free ports, its data in a temporary
// directory: the shared dev server's other databases would blur its parts) gets three databases:
// one migrated to the version before 000013 (every migration up, then down to 000012), one to
// 000013 and one to the latest. All get the same generated history (dev/history: -requests over
// -span, four engines scraped every second, vLLM's stats line every 10 s, a normal day's shape),
// then OPTIMIZE TABLE … FINAL on every table, so each is the one merged part per day it settles
// to. Figures come from system.parts (bytes_on_disk of active parts) and system.parts_columns:
//
//   - bytes per request: requests_started + requests + app_records + engine_spans, ÷ requests;
//   - bytes per engine-hour: engine_samples + engine_logs, ÷ (engines × hours);
//   - id bytes per request: the columns holding random ids (event, request, trace, span, response
//     ids), the floor no codec can go below, since a random id is its own information content;
//   - the read cost: the detector's kind of query (TTFT quantiles over the window's
//     request_facts_window) timed -reads times on each database, interleaved, median.
//
// Target: bytes per request at the latest ≤ -target × before 000013. The last line is one JSON
// object with every figure, the ratios and targets_met; the exit status is 1 when the target is
// missed, 2 when the benchmark could not run. The figures come from a shared, loaded machine only
// in the read times: bytes on disk do not depend on load.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/servescope/servescope/internal/service"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/benchkit"
	"github.com/servescope/servescope/dev/history"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
)

type settings struct {
	requests uint64
	span     time.Duration
	reads    int
	target   float64
	addr     string
}

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("bench-storage", "Usage: bench-storage [flags]\n\nThe engine of scripts/bench storage: bytes per request before and after the codecs migration.")
	var s settings
	c.Flags.Uint64Var(&s.requests, "requests", 100_000, "requests in the generated history")
	c.Flags.DurationVar(&s.span, "span", time.Hour, "the history's span (engine samples and logs: 4 engines over it)")
	c.Flags.IntVar(&s.reads, "reads", 5, "timed reads per database (median)")
	c.Flags.Float64Var(&s.target, "target", 0.5, "max bytes per request after ÷ before")
	c.Flags.StringVar(&s.addr, "addr", "", "use this ClickHouse (native host:port) instead of a private server")
	c.Run = func(_ context.Context, log *slog.Logger, _ []string) error {
		return benchkit.Verdict(run(log, s))
	}
	return c
}

// requestTables hold one row (or about one) per request; engineTables rows per engine and time.
var (
	requestTables = []string{"requests_started", "requests", "app_records", "engine_spans"}
	engineTables  = []string{"engine_samples", "engine_logs"}
	idColumns     = []string{"event_id", "request_id", "trace_id", "span_id", "response_id", "engine_request_id"}
)

type variant struct {
	name    string
	version uint // the migration it is at; 0 for the latest
	cfg     config.ClickHouse
	conn    driver.Conn
	tables  map[string]tableSize
	reads   []time.Duration
}

type tableSize struct {
	Rows        uint64 `json:"rows"`
	BytesOnDisk uint64 `json:"bytes_on_disk"`
	IDBytes     uint64 `json:"id_bytes"`
}

func run(log *slog.Logger, s settings) (bool, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, stopServer, err := benchkit.ClickHouse(ctx, s.addr == "", s.addr, log)
	if err != nil {
		return false, err
	}
	defer stopServer()
	spec := history.Normal(time.Now().UTC().Truncate(time.Hour), s.span, s.requests)
	stamp := time.Now().UTC().Format("150405")
	vs := []*variant{{name: "before", version: 12}, {name: "codecs", version: 13}, {name: "after"}}
	for _, v := range vs {
		db, err := benchkit.CreateDatabase(ctx, cfg, "bench_storage_"+v.name+"_"+stamp, v.migrate)
		if err != nil {
			return false, err
		}
		defer db.Drop()
		v.cfg, v.conn = db.Config, db.Conn
		if err := prepare(ctx, log, v, spec); err != nil {
			return false, err
		}
	}
	// The detector's kind of read, interleaved so outside load falls on both alike.
	q := "SELECT quantiles(0.5, 0.9, 0.99)(ttft_s), avg(e2e_s), count() FROM request_facts_window(from = {from:String}, to = {to:String}) WHERE status_code = 200"
	qctx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{
		"from": spec.Start().Format("2006-01-02 15:04:05"), "to": spec.End.Add(time.Hour).Format("2006-01-02 15:04:05")}),
		clickhouse.WithSettings(clickhouse.Settings{"use_query_cache": 0}))
	for i := 0; i < s.reads; i++ {
		for _, v := range vs {
			t0 := time.Now()
			var qs []float64
			var avg float64
			var n uint64
			if err := v.conn.QueryRow(qctx, q).Scan(&qs, &avg, &n); err != nil {
				return false, fmt.Errorf("%s: timed read: %w", v.name, err)
			}
			v.reads = append(v.reads, time.Since(t0))
		}
	}
	return report(s, spec, vs)
}

// migrate applies every migration, then, when v names an earlier version, goes down to it.
func (v *variant) migrate(ctx context.Context, cfg config.ClickHouse) error {
	g, err := chstore.NewMigrator(ctx, cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", v.name, err)
	}
	err = g.Up()
	for err == nil && v.version > 0 {
		var at uint
		if at, _, err = g.Version(); err == nil && at > v.version {
			err = g.Down(1)
			continue
		}
		break
	}
	if cerr := g.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: migrate: %w", v.name, err)
	}
	return nil
}

// prepare fills v's database with the history of spec and reads its tables' sizes.
func prepare(ctx context.Context, log *slog.Logger, v *variant, spec history.Spec) error {
	if err := history.ExtendRetention(ctx, v.conn, spec); err != nil {
		return err
	}
	t0 := time.Now()
	counts, err := spec.Generate(ctx, v.conn, history.Options{})
	if err != nil {
		return fmt.Errorf("%s: generate: %w", v.name, err)
	}
	log.Info("generated", "database", v.cfg.Database, "rows", counts, "took", time.Since(t0).Round(time.Second))
	v.tables = map[string]tableSize{}
	for _, t := range append(cloned(requestTables), engineTables...) {
		if err := v.conn.Exec(ctx, "OPTIMIZE TABLE "+t+" FINAL"); err != nil {
			return fmt.Errorf("%s: optimize %s: %w", v.name, t, err)
		}
		var ts tableSize
		if err := v.conn.QueryRow(ctx, "SELECT sum(rows), sum(bytes_on_disk) FROM system.parts WHERE database = currentDatabase() AND table = {t:String} AND active",
			clickhouse.Named("t", t)).Scan(&ts.Rows, &ts.BytesOnDisk); err != nil {
			return fmt.Errorf("%s: size of %s: %w", v.name, t, err)
		}
		if err := v.conn.QueryRow(ctx, "SELECT sum(column_data_compressed_bytes) FROM system.parts_columns WHERE database = currentDatabase() AND table = {t:String} AND active AND column IN {ids:Array(String)}",
			clickhouse.Named("t", t), clickhouse.Named("ids", idColumns)).Scan(&ts.IDBytes); err != nil {
			return fmt.Errorf("%s: id columns of %s: %w", v.name, t, err)
		}
		v.tables[t] = ts
	}
	return nil
}

func cloned(s []string) []string { return append([]string(nil), s...) }

func report(s settings, spec history.Spec, vs []*variant) (bool, error) {
	before, codecs, after := vs[0], vs[1], vs[2]
	engineHours := float64(spec.Engines) * spec.Span.Hours()
	per := func(v *variant) (perRequest, idPerRequest, perEngineHour float64) {
		var req, ids, eng uint64
		for _, t := range requestTables {
			req += v.tables[t].BytesOnDisk
			ids += v.tables[t].IDBytes
		}
		for _, t := range engineTables {
			eng += v.tables[t].BytesOnDisk
		}
		n := float64(spec.Requests)
		return float64(req) / n, float64(ids) / n, float64(eng) / engineHours
	}
	bReq, bIDs, bEng := per(before)
	cReq, cIDs, cEng := per(codecs)
	aReq, aIDs, aEng := per(after)
	ratio := benchkit.Round(aReq/bReq, 3)
	bRead, cRead, aRead := benchkit.Median(ms(before.reads)), benchkit.Median(ms(codecs.reads)), benchkit.Median(ms(after.reads))
	out := map[string]any{
		"bench": "storage", "requests": spec.Requests, "span_h": spec.Span.Hours(), "engines": spec.Engines,
		"before_bytes_per_request": benchkit.Round(bReq, 1), "codecs_bytes_per_request": benchkit.Round(cReq, 1), "after_bytes_per_request": benchkit.Round(aReq, 1),
		"before_id_bytes_per_request": benchkit.Round(bIDs, 1), "codecs_id_bytes_per_request": benchkit.Round(cIDs, 1), "after_id_bytes_per_request": benchkit.Round(aIDs, 1),
		"before_bytes_per_engine_hour": benchkit.Round(bEng, 0), "codecs_bytes_per_engine_hour": benchkit.Round(cEng, 0), "after_bytes_per_engine_hour": benchkit.Round(aEng, 0),
		"bytes_per_request_ratio":           ratio,
		"bytes_per_request_ratio_to_codecs": benchkit.Round(aReq/cReq, 3),
		"bytes_per_engine_hour_ratio":       benchkit.Round(aEng/bEng, 3),
		"after_mb_per_million_requests":     benchkit.Round(aReq, 1), // bytes per request × 1e6 ÷ 1e6
		"before_read_ms":                    bRead, "codecs_read_ms": cRead, "after_read_ms": aRead,
		"read_ratio": benchkit.Round(aRead/bRead, 3), "read_ratio_to_codecs": benchkit.Round(aRead/cRead, 3),
		"before_tables": before.tables, "codecs_tables": codecs.tables, "after_tables": after.tables,
		"load_avg_1m":                    benchkit.LoadAvg(),
		"target_bytes_per_request_ratio": s.target,
	}
	met := ratio <= s.target
	if !met {
		out["notes"] = fmt.Sprintf("random ids take %.0f of the %.0f bytes per request at the latest migration (%.0f%%): at their information content, no codec lowers them, so half of %.0f bytes cannot hold without storing fewer ids",
			aIDs, aReq, 100*aIDs/aReq, bReq)
	}
	out["targets_met"] = met
	fmt.Printf("bytes/request before 000013 %.1f, with it %.1f, latest %.1f (×%.3f) | ids %.1f → %.1f → %.1f | bytes/engine-hour %.0f → %.0f → %.0f | read %.1f / %.1f / %.1f ms | load %.1f\n",
		bReq, cReq, aReq, ratio, bIDs, cIDs, aIDs, bEng, cEng, aEng, bRead, cRead, aRead, benchkit.LoadAvg())
	for _, t := range append(cloned(requestTables), engineTables...) {
		b, c, a := before.tables[t], codecs.tables[t], after.tables[t]
		fmt.Printf("  %-17s %9d rows  %10d → %10d → %10d bytes (×%.3f)\n", t, a.Rows, b.BytesOnDisk, c.BytesOnDisk, a.BytesOnDisk, float64(a.BytesOnDisk)/float64(b.BytesOnDisk))
	}
	return met, benchkit.PrintResult(out)
}

func ms(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, x := range d {
		out[i] = benchkit.Ms(x)
	}
	return out
}
