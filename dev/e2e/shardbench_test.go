package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/go-faster/city"

	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/consumer/sink"
)

// shardBenchRows is the rows of one insert in BenchmarkShardedInserts.
const shardBenchRows = 5000

// BenchmarkShardedInserts weighs the ways of writing a batch of request.finished rows into two
// shards (development servers on this machine) against each other, the measurement behind the
// consumer's sink.Sharded:
//   - sync: through the Distributed table, distributed_foreground_insert=1 (the consumer's way
//     while every shard answers: the insert returns once each shard holds its rows);
//   - async: through the Distributed table, distributed_foreground_insert=0 (what sink.Sharded
//     falls back to while a shard is out): the node writes its own shard's rows and queues the
//     others'. "async+flush" adds the queue's delivery (SYSTEM FLUSH DISTRIBUTED) to each insert,
//     the cost until every row is on its shard;
//   - per-shard: clickhouse_sinker's model, the client splitting each batch by the sharding key
//     (cityHash64(request_id) mod 2, go-faster/city's CH64 being ClickHouse's cityHash64) and
//     inserting each part into its shard's local table directly, both at once.
//
// Run: go test ./dev/e2e/ -run '^$' -bench BenchmarkShardedInserts -benchtime 20x. rows/s is
// the figure; the machine's load sets it (report it with the load average).
func BenchmarkShardedInserts(b *testing.B) {
	shards := testenv.StartClickHouseShards(b, testCluster, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cfg := testenv.ClickHouseConfig(b)
	cfg.Addr = []string{shards[0].Addr(), shards[1].Addr()}
	cfg.Database = "servescope"
	cfg.Cluster = testCluster
	if err := chstore.MigrateSharded(ctx, cfg); err != nil {
		b.Fatalf("migrate the sharded schema: %v", err)
	}
	open := func(c config.ClickHouse) driver.Conn {
		conn, err := chstore.Open(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	syncCfg := cfg
	syncCfg.Addr = cfg.Addr[:1]
	asyncCfg := syncCfg
	asyncCfg.Cluster = "" // no settings: the server's default, distributed_foreground_insert=0
	syncConn, asyncConn := open(syncCfg), open(asyncCfg)
	var local [2]*sink.Sink
	for i, s := range shards {
		c := asyncCfg
		c.Addr, c.Database = []string{s.Addr()}, chstore.LocalDatabase(cfg)
		local[i] = sink.New(open(c))
	}
	batch := 0
	events := func() []schema.Event {
		batch++
		now := time.Now()
		evs := make([]schema.Event, shardBenchRows)
		for i := range evs {
			e := eventgen.RequestFinished(batch*shardBenchRows+i, now)
			e.RequestID = fmt.Sprintf("bench-%d-%d", batch, i)
			evs[i] = e
		}
		return evs
	}
	run := func(b *testing.B, insert func(evs []schema.Event) error) {
		for b.Loop() {
			b.StopTimer()
			evs := events()
			b.StartTimer()
			if err := insert(evs); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*shardBenchRows)/b.Elapsed().Seconds(), "rows/s")
	}
	token := func(evs []schema.Event) string {
		return sink.Token(sink.TableRequests, []string{evs[0].Head().EventID})
	}
	b.Run("sync", func(b *testing.B) {
		s := sink.New(syncConn)
		run(b, func(evs []schema.Event) error {
			return s.InsertEvents(ctx, schema.KindRequestFinished, evs, token(evs))
		})
	})
	b.Run("async", func(b *testing.B) {
		s := sink.New(asyncConn)
		run(b, func(evs []schema.Event) error {
			return s.InsertEvents(ctx, schema.KindRequestFinished, evs, token(evs))
		})
		if err := asyncConn.Exec(ctx, "SYSTEM FLUSH DISTRIBUTED requests"); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("async+flush", func(b *testing.B) {
		s := sink.New(asyncConn)
		run(b, func(evs []schema.Event) error {
			if err := s.InsertEvents(ctx, schema.KindRequestFinished, evs, token(evs)); err != nil {
				return err
			}
			return asyncConn.Exec(ctx, "SYSTEM FLUSH DISTRIBUTED requests")
		})
	})
	b.Run("per-shard", func(b *testing.B) {
		run(b, func(evs []schema.Event) error {
			var parts [2][]schema.Event
			for _, e := range evs {
				n := city.CH64([]byte(e.Head().RequestID)) % 2
				parts[n] = append(parts[n], e)
			}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range parts {
				wg.Go(func() {
					errs[i] = local[i].InsertEvents(ctx, schema.KindRequestFinished, parts[i], token(parts[i]))
				})
			}
			wg.Wait()
			return errors.Join(errs...)
		})
	})
	// The per-shard split is the Distributed table's own: each row is on the shard it would have
	// sent it to.
	var misplaced uint64
	if err := syncConn.QueryRow(ctx, "SELECT count() FROM requests WHERE startsWith(request_id, 'bench-') AND cityHash64(request_id) % 2 != shardNum() - 1").Scan(&misplaced); err != nil {
		b.Fatal(err)
	}
	if misplaced != 0 {
		b.Errorf("%d rows on another shard than cityHash64(request_id) %% 2 picks", misplaced)
	}
}
