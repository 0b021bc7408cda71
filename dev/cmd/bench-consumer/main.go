// Command bench-consumer is the engine of scripts/bench-consumer. In one run, on an isolated
// subject prefix and ClickHouse databases that it removes afterwards, it measures:
//
//	(a) raw JetStream fetch+ack: a durable pull consumer fetching the pre-filled stream in pulls of
//	    1,000 and acknowledging each message, no decoding and no sink;
//	(b) raw ClickHouse insert: the same rows, already built, inserted by the consumer's sink in
//	    batches of CONSUMER_BATCH_ROWS, two inserts at a time like the consumer, no NATS (its
//	    database is dropped before (c), so that its background merges do not run during (c));
//	(c) the consumer binary (a separate process) draining the stream of N request.finished events
//	    into ClickHouse, from its start until the durable consumer has nothing pending or
//	    unacknowledged.
//
// Bounds for (c): the serial bound 1/(1/a + 1/b), the rate of the two stages run one after the
// other, and the pipelined bound min(a, b), the slower stage alone, which a consumer that
// overlaps decoding, batching and inserting approaches when the machine has the cores for both
// stages at once. Beside them, the CPU bound cores ÷ (CPU per row of (a) + CPU per row of (b))
// says what the machine's cores allow if every stage is CPU-bound (information, not a target).
// Targets: (c) ≥ 1.4 × the serial bound and the consumer's peak RSS (VmHWM) at most 300 MB.
//
// Every phase is metered (benchkit.Meter): its wall time, the cores busy, the CPU time of the
// bench's own processes (this process, the consumer, and the dev NATS and ClickHouse servers
// named by their pid files) per row, and the outside work: busy cores that none of those
// processes used (other programs, a hypervisor's steal). A ratio of rates measured at different
// times means something only when the machine was the bench's: outside work takes exactly the
// idle CPU that a pipelined consumer needs beyond the serial bound, and it comes and goes
// between phases, so a loaded machine lowers (a), (b) and (c) unequally (runs at a load average
// of 15–20 read 1.2–1.4 × the serial bound while a quiet machine read 0.34 ×, and back). The
// bench therefore calls the machine too loaded, and no target met, when in any phase outside
// work took more than 10% of the cores (0.2 of 2), or, when the servers' pid files cannot be read
// and their work cannot be told from outside work, when the 1-minute load average at the start
// exceeds half the cores. It says which phase and how much.
//
// The last line printed is one JSON object with the figures; the exit status is 1 when a target
// was missed or the machine was too loaded to tell, 2 when the benchmark could not run.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
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

// Targets: the drain rate against the serial bound of (a) and (b), and the peak RSS; and the
// most outside work a phase may meet for the ratio to count (see above).
const (
	targetSerialRatio = 1.4
	targetPeakRSSMB   = 300
	maxOutsideShare   = 0.10
)

// benchDurable is the durable consumer (c) drains.
const benchDurable = "bench-consumer"

// phase is one measured phase: its rate, the CPU time of the bench's processes per row, and what
// the machine did meanwhile.
type phase struct {
	RowsPerSecond   float64            `json:"rows_s"`
	CPUMicrosPerRow map[string]float64 `json:"cpu_us_per_row"`
	Usage           benchkit.Usage     `json:"usage"`
}

func newPhase(rows int, rate float64, u benchkit.Usage) phase {
	p := phase{RowsPerSecond: rate, CPUMicrosPerRow: map[string]float64{}, Usage: u}
	for name, s := range u.OwnCPU {
		p.CPUMicrosPerRow[name] = benchkit.Round(s*1e6/float64(rows), 2)
	}
	return p
}

// cpuPerRow is the CPU time of all the bench's processes per row in a phase, in µs.
func (p phase) cpuPerRow() float64 {
	t := 0.0
	for _, v := range p.CPUMicrosPerRow {
		t += v
	}
	return t
}

type result struct {
	Bench                      string  `json:"bench"`
	Events                     int     `json:"events"`
	EventBytes                 int     `json:"event_bytes"`
	BatchRows                  int     `json:"batch_rows"`
	RawJetStreamRowsPerSecond  float64 `json:"raw_jetstream_rows_s"`
	RawClickHouseRowsPerSecond float64 `json:"raw_clickhouse_rows_s"`
	SerialBoundRowsPerSecond   float64 `json:"serial_bound_rows_s"`
	PipelinedBoundRowsPerSec   float64 `json:"pipelined_bound_rows_s"`
	CPUBoundRowsPerSecond      float64 `json:"cpu_bound_rows_s"`
	ConsumerRowsPerSecond      float64 `json:"consumer_rows_s"`
	SerialRatio                float64 `json:"serial_ratio"`
	PipelinedRatio             float64 `json:"pipelined_ratio"`
	PeakRSSMB                  float64 `json:"peak_rss_mb"`
	// Phases are (a), (b) and (c) as "jetstream", "clickhouse" and "consumer".
	Phases          map[string]phase `json:"phases"`
	Cores           int              `json:"cores"`
	LoadAvgStart    float64          `json:"load_avg_1m_start"`
	LoadAvgEnd      float64          `json:"load_avg_1m_end"`
	OutsideCoresMax float64          `json:"outside_cores_max"`
	TooLoaded       bool             `json:"too_loaded"`
	TooLoadedWhy    string           `json:"too_loaded_why,omitempty"`
	TargetSerial    float64          `json:"target_serial_ratio"`
	TargetPeakRSSMB float64          `json:"target_peak_rss_mb"`
	MaxOutsideShare float64          `json:"max_outside_share"`
	TargetsMet      bool             `json:"targets_met"`
}

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("bench-consumer", "Usage: bench-consumer --consumer BIN [flags]\n\n"+
		"The engine of scripts/bench consumer: raw JetStream, raw ClickHouse and the consumer binary side by side.")
	events := c.Flags.Int("events", 1_000_000, "request.finished events in the pre-filled stream")
	consumerBin := c.Flags.String("consumer", "", "path of the consumer binary (required)")
	batchRows := c.Flags.Int("batch-rows", 10_000, "CONSUMER_BATCH_ROWS for (b) and (c)")
	natsPIDFile := c.Flags.String("nats-pid-file", ".cache/nats/nats-server.pid", "pid file of the dev NATS server the bench uses, to meter its CPU (scripts/dev-services writes it)")
	chPIDFile := c.Flags.String("clickhouse-pid-file", ".cache/clickhouse/clickhouse.pid", "pid file of the dev ClickHouse server the bench uses, to meter its CPU")
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
		servers := map[string]int{"nats-server": benchkit.ReadPID(*natsPIDFile), "clickhouse": benchkit.ReadPID(*chPIDFile)}
		res, err := run(ctx, log, *consumerBin, *events, *batchRows, servers)
		if err != nil {
			return service.Exit(2, err)
		}
		return benchkit.Verdict(res.TargetsMet, benchkit.PrintResult(res))
	}
	return c
}

func run(ctx context.Context, log *slog.Logger, consumerBin string, n, batchRows int, servers map[string]int) (res result, err error) {
	res = result{Bench: "consumer", Events: n, BatchRows: batchRows, Cores: runtime.NumCPU(), LoadAvgStart: benchkit.LoadAvg(),
		TargetSerial: targetSerialRatio, TargetPeakRSSMB: targetPeakRSSMB, MaxOutsideShare: maxOutsideShare, Phases: map[string]phase{}}
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

	self := os.Getpid()
	m := benchkit.StartMeter(map[string]int{"bench": self, "nats-server": servers["nats-server"]})
	if res.RawJetStreamRowsPerSecond, err = rawJetStream(ctx, js, topo, n); err != nil {
		return res, err
	}
	res.Phases["jetstream"] = newPhase(n, res.RawJetStreamRowsPerSecond, m.Stop())
	log.Info("(a) raw JetStream fetch+ack", "rows_s", int(res.RawJetStreamRowsPerSecond), "usage", res.Phases["jetstream"].Usage.String())
	m = benchkit.StartMeter(map[string]int{"bench": self, "clickhouse": servers["clickhouse"]})
	if res.RawClickHouseRowsPerSecond, err = rawClickHouse(ctx, rawDB, evs, batchRows); err != nil {
		return res, err
	}
	res.Phases["clickhouse"] = newPhase(n, res.RawClickHouseRowsPerSecond, m.Stop())
	log.Info("(b) raw ClickHouse insert", "rows_s", int(res.RawClickHouseRowsPerSecond), "usage", res.Phases["clickhouse"].Usage.String())
	evs = nil
	// (b)'s parts would be merged in the background during (c).
	if err := raw.Drop(); err != nil {
		return res, err
	}

	var rss float64
	m = benchkit.StartMeter(map[string]int{"bench": self, "nats-server": servers["nats-server"], "clickhouse": servers["clickhouse"]})
	if res.ConsumerRowsPerSecond, rss, err = consumerDrain(ctx, log, consumerBin, js, topo, natsCfg, consumerDB, n, batchRows, benchDurable, 1, m); err != nil {
		return res, err
	}
	res.Phases["consumer"] = newPhase(n, res.ConsumerRowsPerSecond, m.Stop())
	res.LoadAvgEnd = benchkit.LoadAvg()
	res.PeakRSSMB = benchkit.Round(rss, 1)

	a, b, c := res.RawJetStreamRowsPerSecond, res.RawClickHouseRowsPerSecond, res.ConsumerRowsPerSecond
	res.SerialBoundRowsPerSecond = benchkit.Round(1/(1/a+1/b), 0)
	res.PipelinedBoundRowsPerSec = benchkit.Round(min(a, b), 0)
	if cpu := res.Phases["jetstream"].cpuPerRow() + res.Phases["clickhouse"].cpuPerRow(); cpu > 0 {
		res.CPUBoundRowsPerSecond = benchkit.Round(float64(res.Cores)*1e6/cpu, 0)
	}
	res.SerialRatio = benchkit.Round(c/res.SerialBoundRowsPerSecond, 3)
	res.PipelinedRatio = benchkit.Round(c/res.PipelinedBoundRowsPerSec, 3)
	res.TooLoaded, res.TooLoadedWhy = tooLoaded(res, servers)
	for _, p := range res.Phases {
		res.OutsideCoresMax = max(res.OutsideCoresMax, p.Usage.OutsideCores)
	}
	res.TargetsMet = !res.TooLoaded && res.SerialRatio >= targetSerialRatio && res.PeakRSSMB <= targetPeakRSSMB

	cpu := func(p phase) string {
		var parts []string
		for _, name := range []string{"bench", "consumer", "nats-server", "clickhouse"} {
			if v, ok := p.CPUMicrosPerRow[name]; ok {
				parts = append(parts, fmt.Sprintf("%s %.1f", name, v))
			}
		}
		return strings.Join(parts, ", ") + " µs CPU/row"
	}
	pa, pb, pc := res.Phases["jetstream"], res.Phases["clickhouse"], res.Phases["consumer"]
	fmt.Printf("(a) raw JetStream fetch+ack     %10.0f rows/s  %s; %s\n", a, cpu(pa), pa.Usage)
	fmt.Printf("(b) raw ClickHouse insert       %10.0f rows/s  %s; %s\n", b, cpu(pb), pb.Usage)
	fmt.Printf("    serial bound 1/(1/a+1/b)    %10.0f rows/s\n", res.SerialBoundRowsPerSecond)
	fmt.Printf("    pipelined bound min(a, b)   %10.0f rows/s\n", res.PipelinedBoundRowsPerSec)
	fmt.Printf("    CPU bound cores/(a+b CPU)   %10.0f rows/s  (what %d cores allow if both stages are CPU-bound; information)\n", res.CPUBoundRowsPerSecond, res.Cores)
	fmt.Printf("(c) consumer drain              %10.0f rows/s  %.2f × serial (target ≥ %.1f), %.2f × pipelined; %s; %s\n",
		c, res.SerialRatio, targetSerialRatio, res.PipelinedRatio, cpu(pc), pc.Usage)
	fmt.Printf("    consumer peak RSS           %10.1f MB      (target ≤ %d)\n", res.PeakRSSMB, targetPeakRSSMB)
	if res.TooLoaded {
		fmt.Printf("    machine TOO LOADED to tell: %s; no target is called met\n", res.TooLoadedWhy)
	} else {
		fmt.Printf("    machine quiet enough: outside work at most %.2f of %d cores in every phase (limit %.0f%%), load average %.1f → %.1f\n",
			res.OutsideCoresMax, res.Cores, 100*maxOutsideShare, res.LoadAvgStart, res.LoadAvgEnd)
	}
	return res, nil
}

// tooLoaded says whether outside work took so much of the machine during a phase that the
// ratios mean nothing (see the command's documentation), and why.
func tooLoaded(res result, servers map[string]int) (bool, string) {
	if servers["nats-server"] == 0 || servers["clickhouse"] == 0 {
		// The servers' work cannot be told from outside work: judge by the load before the run.
		if limit := float64(res.Cores) / 2; res.LoadAvgStart > limit {
			return true, fmt.Sprintf("the servers' pid files could not be read, and the 1-minute load average at the start was %.1f, over half the %d cores (%.1f)",
				res.LoadAvgStart, res.Cores, limit)
		}
		return false, ""
	}
	var why []string
	for _, name := range []string{"jetstream", "clickhouse", "consumer"} {
		u := res.Phases[name].Usage
		if u.OutsideShare() > maxOutsideShare {
			why = append(why, fmt.Sprintf("outside work took %.2f of %d cores (%.0f%%) during %s", u.OutsideCores, u.Cores, 100*u.OutsideShare(), name))
		}
	}
	if len(why) == 0 {
		return false, ""
	}
	return true, strings.Join(why, "; ") + fmt.Sprintf(" (limit %.0f%%: outside work takes the idle CPU a pipelined drain needs, and unequally in each phase)", 100*maxOutsideShare)
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
		streams.NATS, single.Config, n, batchRows, benchDurable, 1, nil); err != nil {
		return res, err
	}
	if res.ShardedRowsPerSecond, res.ShardedPeakRSSMB, err = consumerDrain(ctx, log, consumerBin, streams.JS, streams.Topology,
		streams.NATS, sharded, n, batchRows, shardedDurable, shards, nil); err != nil {
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
	natsCfg config.NATS, db config.ClickHouse, n, batchRows int, durable string, instances int, meter *benchkit.Meter) (float64, float64, error) {
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
		if meter != nil {
			meter.Add("consumer", p.Pid(), true) // one instance when metered
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
	if meter != nil {
		meter.Stop() // while the consumer still runs
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
