// Command bench-consumer is the engine of scripts/bench-consumer. In one run, on an isolated
// subject prefix and ClickHouse databases that it removes afterwards, it measures:
//
//	(a) raw JetStream fetch+ack: a durable pull consumer fetching the pre-filled stream in pulls of
//	    1,000 and acknowledging each message, no decoding and no sink;
//	(b) raw ClickHouse insert: the same rows, already built, inserted by the consumer's sink in
//	    batches of CONSUMER_BATCH_ROWS, two inserts at a time like the consumer, no NATS;
//	(c) the consumer binary (a separate process) draining the stream of N request.finished events
//	    into ClickHouse, from its start until the durable consumer has nothing pending or
//	    unacknowledged.
//
// All three share the machine's cores, so the bound for (c) is the serial one,
// 1 / (1/a + 1/b); the target is (c) ≥ 0.8 × bound with the consumer's peak RSS (VmHWM) at most
// 300 MB. The last line printed is one JSON object with the figures; the exit status is 1 when a
// target was missed, 2 when the benchmark could not run.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/benchkit"
	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/service"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/consumer/sink"
)

// Targets: the drain rate against the serial bound of (a) and (b), and the peak RSS (see above).
const (
	targetDrainRatio = 0.8
	targetPeakRSSMB  = 300
)

// benchDurable is the durable consumer (c) drains.
const benchDurable = "bench-consumer"

type result struct {
	Bench                      string  `json:"bench"`
	Events                     int     `json:"events"`
	EventBytes                 int     `json:"event_bytes"`
	RawJetStreamRowsPerSecond  float64 `json:"raw_jetstream_rows_s"`
	RawClickHouseRowsPerSecond float64 `json:"raw_clickhouse_rows_s"`
	BoundRowsPerSecond         float64 `json:"bound_rows_s"`
	ConsumerRowsPerSecond      float64 `json:"consumer_rows_s"`
	DrainRatio                 float64 `json:"drain_ratio"`
	PeakRSSMB                  float64 `json:"peak_rss_mb"`
	TargetsMet                 bool    `json:"targets_met"`
}

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("bench-consumer", "Usage: bench-consumer --consumer BIN [flags]\n\n"+
		"The engine of scripts/bench consumer: raw JetStream, raw ClickHouse and the consumer binary side by side.")
	events := c.Flags.Int("events", 1_000_000, "request.finished events in the pre-filled stream")
	consumerBin := c.Flags.String("consumer", "", "path of the consumer binary (required)")
	batchRows := c.Flags.Int("batch-rows", 10_000, "CONSUMER_BATCH_ROWS for (b) and (c)")
	shards := c.Flags.Int("shards", 0, "instead of (a)-(c): one consumer into the shared server, then as many consumers as shards into "+
		"that many private servers as the shards of a cluster, side by side (0: off)")
	c.Run = func(ctx context.Context, log *slog.Logger, _ []string) error {
		if *consumerBin == "" {
			return service.UsageError(errors.New("--consumer is required"))
		}
		if *shards > 0 {
			res, err := runSharded(ctx, log, *consumerBin, *events, *batchRows, *shards)
			if err != nil {
				return service.Exit(2, err)
			}
			return benchkit.Verdict(true, benchkit.PrintResult(res))
		}
		res, err := run(ctx, log, *consumerBin, *events, *batchRows)
		if err != nil {
			return service.Exit(2, err)
		}
		return benchkit.Verdict(res.TargetsMet, benchkit.PrintResult(res))
	}
	return c
}

func run(ctx context.Context, log *slog.Logger, consumerBin string, n, batchRows int) (res result, err error) {
	chCfg, err := config.Load[config.ClickHouse]()
	if err != nil {
		return res, err
	}
	id := benchkit.RunID()
	// The streams, and the durable consumer (c) reads, sized for its CONSUMER_BATCH_ROWS and
	// default flush interval.
	streams, err := benchkit.OpenStreams(ctx, "bench-consumer", "bench_"+id, 0, bus.DurableFor(benchDurable, batchRows, time.Second))
	if err != nil {
		return res, err
	}
	defer streams.Close()
	natsCfg, js, topo := streams.NATS, streams.JS, streams.Topology
	raw, err := benchkit.CreateDatabase(ctx, chCfg, "bench_raw_"+id, nil)
	if err != nil {
		return res, err
	}
	defer raw.Drop()
	consumer, err := benchkit.CreateDatabase(ctx, chCfg, "bench_consumer_"+id, nil)
	if err != nil {
		return res, err
	}
	defer consumer.Drop()
	rawDB, consumerDB := raw.Config, consumer.Config

	// Pre-fill the stream; keep the events for (b).
	evs, eventBytes, err := prefill(ctx, log, js, topo, n)
	if err != nil {
		return res, err
	}
	res.EventBytes = eventBytes
	res.Bench, res.Events = "consumer", n

	if res.RawJetStreamRowsPerSecond, err = rawJetStream(ctx, js, topo, n); err != nil {
		return res, err
	}
	log.Info("(a) raw JetStream fetch+ack", "rows_s", int(res.RawJetStreamRowsPerSecond))
	if res.RawClickHouseRowsPerSecond, err = rawClickHouse(ctx, rawDB, evs, batchRows); err != nil {
		return res, err
	}
	log.Info("(b) raw ClickHouse insert", "rows_s", int(res.RawClickHouseRowsPerSecond))
	evs = nil

	var rss float64
	if res.ConsumerRowsPerSecond, rss, err = consumerDrain(ctx, log, consumerBin, js, topo, natsCfg, consumerDB, n, batchRows, benchDurable, 1); err != nil {
		return res, err
	}
	res.PeakRSSMB = rss
	res.BoundRowsPerSecond = 1 / (1/res.RawJetStreamRowsPerSecond + 1/res.RawClickHouseRowsPerSecond)
	res.DrainRatio = res.ConsumerRowsPerSecond / res.BoundRowsPerSecond
	res.TargetsMet = res.DrainRatio >= targetDrainRatio && res.PeakRSSMB <= targetPeakRSSMB
	fmt.Printf("(a) raw JetStream fetch+ack     %10.0f rows/s\n", res.RawJetStreamRowsPerSecond)
	fmt.Printf("(b) raw ClickHouse insert       %10.0f rows/s\n", res.RawClickHouseRowsPerSecond)
	fmt.Printf("    serial bound 1/(1/a+1/b)    %10.0f rows/s\n", res.BoundRowsPerSecond)
	fmt.Printf("(c) consumer drain              %10.0f rows/s  (%.2f × bound, target ≥ %.1f)\n", res.ConsumerRowsPerSecond, res.DrainRatio, targetDrainRatio)
	fmt.Printf("    consumer peak RSS           %10.1f MB      (target ≤ %d)\n", res.PeakRSSMB, targetPeakRSSMB)
	return res, nil
}

// shardedResult is the last line of the sharded mode: one consumer instance draining the stream
// into one server, and Shards instances sharing one durable consumer draining it into a cluster of
// Shards private servers, one per shard, through the sharded schema (synchronous Distributed
// inserts), side by side on the same machine.
type shardedResult struct {
	Bench                string  `json:"bench"`
	Events               int     `json:"events"`
	Shards               int     `json:"shards"`
	SingleRowsPerSecond  float64 `json:"single_rows_s"`
	ShardedRowsPerSecond float64 `json:"sharded_rows_s"`
	ShardedOverSingle    float64 `json:"sharded_over_single"`
	SinglePeakRSSMB      float64 `json:"single_peak_rss_mb"`
	ShardedPeakRSSMB     float64 `json:"sharded_peak_rss_mb"`
	ShardedConsumers     int     `json:"sharded_consumers"`
	LoadAverageAtStart   float64 `json:"load_average_1m_at_start"`
}

// shardedDurable is the durable consumer the sharded mode's instances share.
const shardedDurable = "bench-consumer-sharded"

func runSharded(ctx context.Context, log *slog.Logger, consumerBin string, n, batchRows, shards int) (res shardedResult, err error) {
	res = shardedResult{Bench: "consumer_sharded", Events: n, Shards: shards, ShardedConsumers: shards, LoadAverageAtStart: benchkit.LoadAvg()}
	chCfg, err := config.Load[config.ClickHouse]()
	if err != nil {
		return res, err
	}
	id := benchkit.RunID()
	streams, err := benchkit.OpenStreams(ctx, "bench-consumer", "bench_"+id, 0,
		bus.DurableFor(benchDurable, batchRows, time.Second), bus.DurableFor(shardedDurable, batchRows, time.Second))
	if err != nil {
		return res, err
	}
	defer streams.Close()
	single, err := benchkit.CreateDatabase(ctx, chCfg, "bench_consumer_"+id, nil)
	if err != nil {
		return res, err
	}
	defer single.Drop()
	if _, _, err := prefill(ctx, log, streams.JS, streams.Topology, n); err != nil {
		return res, err
	}

	root, err := os.Getwd()
	if err != nil {
		return res, err
	}
	const cluster = "bench_shards"
	sharded := chCfg
	sharded.Database, sharded.Cluster, sharded.Addr = "servescope", cluster, nil
	nodes, err := benchkit.StartPrivateShards(ctx, root, "", cluster, shards, log)
	if err != nil {
		return res, err
	}
	defer func() {
		for _, p := range nodes {
			p.Stop()
		}
	}()
	for _, p := range nodes {
		sharded.Addr = append(sharded.Addr, p.Addr())
	}
	if err := chstore.MigrateSharded(ctx, sharded); err != nil {
		return res, err
	}

	if res.SingleRowsPerSecond, res.SinglePeakRSSMB, err = consumerDrain(ctx, log, consumerBin, streams.JS, streams.Topology,
		streams.NATS, single.Config, n, batchRows, benchDurable, 1); err != nil {
		return res, err
	}
	if res.ShardedRowsPerSecond, res.ShardedPeakRSSMB, err = consumerDrain(ctx, log, consumerBin, streams.JS, streams.Topology,
		streams.NATS, sharded, n, batchRows, shardedDurable, shards); err != nil {
		return res, err
	}
	res.ShardedOverSingle = benchkit.Round(res.ShardedRowsPerSecond/res.SingleRowsPerSecond, 3)
	fmt.Printf("1 consumer, 1 server               %10.0f rows/s  (peak RSS %.1f MB)\n", res.SingleRowsPerSecond, res.SinglePeakRSSMB)
	fmt.Printf("%d consumers, %d shards (Distributed) %10.0f rows/s  (peak RSS %.1f MB)  ×%.2f\n",
		shards, shards, res.ShardedRowsPerSecond, res.ShardedPeakRSSMB, res.ShardedOverSingle)
	return res, nil
}

// prefill publishes n request.finished events to the stream and returns them with the size of
// one encoded event.
func prefill(ctx context.Context, log *slog.Logger, js jetstream.JetStream, topo bus.Topology, n int) ([]schema.Event, int, error) {
	base := time.Now().Add(-time.Hour)
	evs := make([]schema.Event, n)
	subject := topo.Subject(schema.KindRequestFinished)
	start := time.Now()
	size := 0
	for i := range n {
		e := eventgen.RequestFinished(i, base)
		data := eventgen.Encode(e)
		if i == 0 {
			size = len(data)
		}
		evs[i] = e
		m := nats.NewMsg(subject)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, e.EventID)
		var err error
		for {
			if _, err = js.PublishMsgAsync(m); !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				break
			}
			<-js.PublishAsyncComplete()
		}
		if err != nil {
			return nil, 0, fmt.Errorf("pre-fill: publish event %d: %w", i, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-time.After(2 * time.Minute):
		return nil, 0, errors.New("pre-fill: publishes not acknowledged after 2 min")
	}
	log.Info("pre-filled stream", "events", n, "event_bytes", size, "seconds", time.Since(start).Seconds())
	return evs, size, nil
}

// rawJetStream drains the stream with a throw-away durable consumer, fetching like the consumer
// does and acknowledging every message, and returns messages per second.
func rawJetStream(ctx context.Context, js jetstream.JetStream, topo bus.Topology, n int) (float64, error) {
	cons, err := js.CreateOrUpdateConsumer(ctx, topo.Stream(), jetstream.ConsumerConfig{
		Durable: "bench-raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 41_000, AckWait: 30 * time.Second,
	})
	if err != nil {
		return 0, fmt.Errorf("(a) create consumer: %w", err)
	}
	defer func() { _ = js.DeleteConsumer(context.WithoutCancel(ctx), topo.Stream(), "bench-raw") }()
	start := time.Now()
	got := 0
	for got < n {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		mb, err := cons.Fetch(1000, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return 0, fmt.Errorf("(a) fetch: %w", err)
		}
		for m := range mb.Messages() {
			if err := m.Ack(); err != nil {
				return 0, fmt.Errorf("(a) ack: %w", err)
			}
			got++
		}
	}
	// The acks must have reached the server for the rate to be honest.
	if err := js.Conn().FlushTimeout(30 * time.Second); err != nil {
		return 0, fmt.Errorf("(a) flush acks: %w", err)
	}
	return float64(got) / time.Since(start).Seconds(), nil
}

// rawClickHouse inserts the events with the consumer's sink, batchRows per insert, two inserts
// at a time as the consumer runs them, and returns rows per second.
func rawClickHouse(ctx context.Context, db config.ClickHouse, evs []schema.Event, batchRows int) (float64, error) {
	conn, err := chstore.Open(ctx, db)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	s := sink.New(conn)
	const inserters = 2 // as in package pipeline
	batches := make(chan []schema.Event)
	errs := make(chan error, inserters)
	start := time.Now()
	for range inserters {
		go func() {
			var first error
			for b := range batches {
				if first != nil {
					continue
				}
				ids := make([]string, len(b))
				for j, e := range b {
					ids[j] = e.Head().EventID
				}
				if err := s.InsertEvents(ctx, schema.KindRequestFinished, b, sink.Token(sink.TableRequests, ids)); err != nil {
					first = fmt.Errorf("(b) %w", err)
				}
			}
			errs <- first
		}()
	}
	for i := 0; i < len(evs); i += batchRows {
		batches <- evs[i:min(i+batchRows, len(evs))]
	}
	close(batches)
	for range inserters {
		if err := <-errs; err != nil {
			return 0, err
		}
	}
	return float64(len(evs)) / time.Since(start).Seconds(), nil
}

// consumerDrain runs instances of the consumer binary, sharing the durable consumer durable,
// until it has drained the stream, and returns rows per second and the largest peak RSS of an
// instance in MB. db.Cluster, when set, is passed on (the instances write through the sharded
// schema's synchronous Distributed inserts).
func consumerDrain(ctx context.Context, log *slog.Logger, bin string, js jetstream.JetStream, topo bus.Topology,
	natsCfg config.NATS, db config.ClickHouse, n, batchRows int, durable string, instances int) (float64, float64, error) {
	var ps []*proc.Process
	for i := range instances {
		logFile, err := os.CreateTemp("", "bench-consumer-*.log")
		if err != nil {
			return 0, 0, err
		}
		logFile.Close()
		defer os.Remove(logFile.Name())
		p, err := proc.New(proc.Spec{
			Name: "consumer-" + strconv.Itoa(i+1), Path: bin, Log: logFile.Name(), StopGrace: 30 * time.Second,
			Env: []string{
				"SERVESCOPE_NATS_URL=" + natsCfg.URL,
				"SERVESCOPE_SUBJECT_PREFIX=" + natsCfg.SubjectPrefix,
				"SERVESCOPE_CLICKHOUSE_ADDR=" + strings.Join(db.Addr, ","),
				"SERVESCOPE_CLICKHOUSE_DATABASE=" + db.Database,
				"SERVESCOPE_CLICKHOUSE_CLUSTER=" + db.Cluster,
				"CONSUMER_DURABLE=" + durable,
				"CONSUMER_BATCH_ROWS=" + strconv.Itoa(batchRows),
				"CONSUMER_METRICS_ADDR=127.0.0.1:0",
			},
		})
		if err != nil {
			return 0, 0, err
		}
		ps = append(ps, p)
	}
	start := time.Now()
	for _, p := range ps {
		if err := p.Start(ctx); err != nil {
			return 0, 0, fmt.Errorf("(c) start consumer: %w", err)
		}
		defer func() { _ = p.Kill(context.Background()) }()
	}
	var elapsed time.Duration
	for {
		for _, p := range ps {
			select {
			case <-p.Done():
				return 0, 0, fmt.Errorf("(c) %s exited early: %v\n%s", p.Spec().Name, p.Err(), p.LogTail())
			default:
			}
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		c, err := js.Consumer(ctx, topo.Stream(), durable)
		if err != nil {
			continue
		}
		info, err := c.Info(ctx)
		if err != nil {
			continue
		}
		if info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream >= uint64(n) {
			elapsed = time.Since(start)
			break
		}
		if time.Since(start) > 10*time.Minute {
			return 0, 0, errors.New("(c) consumer did not drain the stream within 10 min")
		}
	}
	var rss float64
	for _, p := range ps {
		r, err := peakRSSMB(p.Pid())
		if err != nil {
			return 0, 0, err
		}
		rss = max(rss, r)
		if err := p.Stop(ctx); err != nil {
			return 0, 0, fmt.Errorf("(c) %s did not exit cleanly: %w", p.Spec().Name, err)
		}
	}
	conn, err := chstore.Open(ctx, db)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	var rows uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM requests FINAL").Scan(&rows); err != nil {
		return 0, 0, fmt.Errorf("(c) count rows: %w", err)
	}
	if rows != uint64(n) {
		return 0, 0, fmt.Errorf("(c) requests holds %d rows after the drain, want %d", rows, n)
	}
	log.Info("(c) consumer drained the stream", "instances", instances, "cluster", db.Cluster, "seconds", elapsed.Seconds(), "peak_rss_mb", rss)
	return float64(n) / elapsed.Seconds(), rss, nil
}

// peakRSSMB reads VmHWM (the peak resident set size) of pid from /proc, in MB.
func peakRSSMB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read peak RSS: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			if err != nil {
				return 0, fmt.Errorf("parse VmHWM %q: %w", rest, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}
