// Command benchfreshness measures how soon a finished request is readable in ClickHouse: from the
// moment its request.finished event is published (the gateway publishes it when the request
// ends) to the consumer's insert of its row, at several request rates and two consumer flush
// intervals, side by side in one run (scripts/bench freshness).
//
// Method. On a subject prefix and a ClickHouse database of its own, for each flush interval
// (-flush, default the consumer's 1 s and 200 ms) it runs the consumer binary, then for each rate
// (-rates) publishes request.finished events for -duration, each stamped with its publish time as
// finished_ts, and waits until every row is in requests. A row's freshness is ingested_at (the
// server's now64(6) when the consumer's INSERT of its batch arrived) minus finished_ts: the row is
// readable once that INSERT returns, a few milliseconds later on this scale. The cost of a shorter
// flush is shown beside it: inserts per second (distinct ingested_at values), each a new part for
// ClickHouse to merge.
//
// Target: p99 ≤ -target at 1,000 requests/s with the default flush interval. The last line is
// one JSON object with every figure and targets_met; the exit status is 1 when the target is
// missed, 2 when the benchmark could not run.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/servescope/servescope/internal/service"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/benchkit"
	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema"
)

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("bench-freshness", "Usage: bench-freshness --consumer BIN [flags]\n\nThe engine of scripts/bench freshness: publish of a finished request to its row in ClickHouse.")
	consumerBin := c.Flags.String("consumer", "", "the consumer binary (scripts/bench-freshness builds it)")
	rates := c.Flags.String("rates", "100,1000", "request rates, requests per second, comma-separated")
	flushes := c.Flags.String("flush", "1s,200ms", "consumer flush intervals (CONSUMER_FLUSH_INTERVAL), comma-separated")
	duration := c.Flags.Duration("duration", 5*time.Second, "publishing time per rate")
	target := c.Flags.Duration("target", 2*time.Second, "max p99 at 1,000 requests/s with the first flush interval")
	c.Run = func(ctx context.Context, log *slog.Logger, _ []string) error {
		rs, err := benchkit.PositiveInts("rates", *rates, "rate")
		if err != nil {
			return err
		}
		fs, err := benchkit.PositiveDurations("flush", *flushes)
		if err != nil {
			return err
		}
		if *consumerBin == "" {
			return service.UsageError(fmt.Errorf("--consumer is required"))
		}
		return benchkit.Verdict(run(ctx, log, *consumerBin, rs, fs, *duration, *target))
	}
	return c
}

type level struct {
	FlushInterval    string  `json:"flush_interval"`
	RateTarget       int     `json:"rate_per_s"`
	RateAchieved     float64 `json:"rate_achieved_per_s"`
	Requests         uint64  `json:"requests"`
	P50Ms            float64 `json:"freshness_p50_ms"`
	P99Ms            float64 `json:"freshness_p99_ms"`
	MaxMs            float64 `json:"freshness_max_ms"`
	InsertsPerSecond float64 `json:"inserts_per_s"`
}

func run(ctx context.Context, log *slog.Logger, bin string, rates []int, flushes []time.Duration, duration, target time.Duration) (bool, error) {
	chCfg, err := config.Load[config.ClickHouse]()
	if err != nil {
		return false, err
	}
	id := benchkit.RunID()
	// The durable consumer is set up per flush interval below.
	streams, err := benchkit.OpenStreams(ctx, "bench-freshness", "fresh_"+id, 256<<20)
	if err != nil {
		return false, err
	}
	defer streams.Close()
	natsCfg, js, topo := streams.NATS, streams.JS, streams.Topology
	db, err := benchkit.CreateDatabase(ctx, chCfg, "bench_freshness_"+id, nil)
	if err != nil {
		return false, err
	}
	defer db.Drop()
	chCfg, conn := db.Config, db.Conn
	var levels []level
	seq := 0
	met := true
	for fi, flush := range flushes {
		// The durable consumer as the setup step makes it for this CONSUMER_FLUSH_INTERVAL (and
		// the consumer's default CONSUMER_BATCH_ROWS).
		if err := streams.Setup(ctx, bus.DurableFor("bench-freshness", 10_000, flush)); err != nil {
			return false, err
		}
		logFile, err := os.CreateTemp("", "freshnessbench-*.log")
		if err != nil {
			return false, err
		}
		logFile.Close()
		defer os.Remove(logFile.Name())
		p, err := proc.New(proc.Spec{
			Name: "consumer", Path: bin, Log: logFile.Name(), StopGrace: 30 * time.Second,
			Env: []string{
				"SERVESCOPE_NATS_URL=" + natsCfg.URL,
				"SERVESCOPE_SUBJECT_PREFIX=" + natsCfg.SubjectPrefix,
				"SERVESCOPE_CLICKHOUSE_ADDR=" + strings.Join(chCfg.Addr, ","),
				"SERVESCOPE_CLICKHOUSE_DATABASE=" + chCfg.Database,
				"CONSUMER_DURABLE=bench-freshness",
				"CONSUMER_FLUSH_INTERVAL=" + flush.String(),
				"CONSUMER_METRICS_ADDR=127.0.0.1:0",
			},
		})
		if err != nil {
			return false, err
		}
		if err := p.Start(ctx); err != nil {
			return false, fmt.Errorf("start consumer: %w", err)
		}
		for _, rate := range rates {
			l, err := measure(ctx, js, conn, topo, rate, duration, &seq)
			if err != nil {
				_ = p.Kill(context.Background())
				return false, fmt.Errorf("flush %s, %d requests/s: %w\n%s", flush, rate, err, p.LogTail())
			}
			l.FlushInterval = flush.String()
			levels = append(levels, l)
			fmt.Printf("flush %-6s %5d req/s (achieved %7.1f) | freshness p50 %7.1f ms p99 %7.1f ms max %7.1f ms | %.1f inserts/s | load %.1f\n",
				flush, rate, l.RateAchieved, l.P50Ms, l.P99Ms, l.MaxMs, l.InsertsPerSecond, benchkit.LoadAvg())
			if fi == 0 && rate == 1000 && l.P99Ms > benchkit.Ms(target) {
				met = false
			}
		}
		if err := p.Stop(ctx); err != nil {
			return false, fmt.Errorf("consumer did not exit cleanly: %w", err)
		}
	}
	return met, benchkit.PrintResult(map[string]any{
		"bench": "freshness", "levels": levels, "duration_s": duration.Seconds(),
		"target_p99_ms_at_1000_per_s": benchkit.Ms(target), "load_avg_1m": benchkit.LoadAvg(), "targets_met": met,
	})
}

// measure publishes rate events a second for duration, each finished at its publish time, waits
// for their rows and reads their freshness.
func measure(ctx context.Context, js jetstream.JetStream, conn driver.Conn, topo bus.Topology, rate int, duration time.Duration, seq *int) (level, error) {
	subject := topo.Subject(schema.KindRequestFinished)
	first := *seq
	n := int(float64(rate) * duration.Seconds())
	start := time.Now()
	for i := range n {
		// Paced against the start, so a late send is followed by quicker ones.
		if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
			time.Sleep(d)
		}
		e := eventgen.RequestFinished(*seq, time.Now())
		*seq++
		m := nats.NewMsg(subject)
		m.Data = eventgen.Encode(e)
		m.Header.Set(jetstream.MsgIDHeader, e.EventID)
		var err error
		for {
			if _, err = js.PublishMsgAsync(m); !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				break
			}
			<-js.PublishAsyncComplete()
		}
		if err != nil {
			return level{}, fmt.Errorf("publish: %w", err)
		}
	}
	achieved := float64(n) / time.Since(start).Seconds()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return level{}, errors.New("publishes not acknowledged after 1 min")
	}
	lo, hi := fmt.Sprintf("req-%09d", first), fmt.Sprintf("req-%09d", *seq)
	args := []any{clickhouse.Named("lo", lo), clickhouse.Named("hi", hi)}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var rows uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM requests WHERE request_id >= {lo:String} AND request_id < {hi:String}", args...).Scan(&rows); err != nil {
			return level{}, err
		}
		if rows >= uint64(n) {
			break
		}
		if time.Now().After(deadline) {
			return level{}, fmt.Errorf("%d of %d rows after 2 min", rows, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var qs []float64
	var maxS float64
	var inserts uint64
	var span float64
	if err := conn.QueryRow(ctx, `SELECT quantilesExact(0.5, 0.99)(f), max(f), uniqExact(ingested_at),
		    greatest(0.001, dateDiff('microsecond', min(finished_ts), max(finished_ts)) / 1e6)
		FROM (SELECT dateDiff('microsecond', finished_ts, ingested_at) / 1e6 AS f, ingested_at, finished_ts
		      FROM requests FINAL WHERE request_id >= {lo:String} AND request_id < {hi:String})`, args...).Scan(&qs, &maxS, &inserts, &span); err != nil {
		return level{}, err
	}
	ms := func(s float64) float64 { return benchkit.Round(s*1000, 1) }
	return level{RateTarget: rate, RateAchieved: benchkit.Round(achieved, 1), Requests: uint64(n),
		P50Ms: ms(qs[0]), P99Ms: ms(qs[1]), MaxMs: ms(maxS), InsertsPerSecond: benchkit.Round(float64(inserts)/span, 2)}, nil
}
