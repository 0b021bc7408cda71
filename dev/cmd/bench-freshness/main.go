// Command benchfreshness measures how soon a finished request is readable in ClickHouse: from the
// moment the gateway's publisher is handed its request.finished event (the gateway does so when
// the request ends) to the consumer's insert of its row, at several request rates and two
// consumer flush intervals, side by side in one run (scripts/bench freshness), and times each
// stage on the way.
//
// Method. On a subject prefix and a ClickHouse database of its own, for each flush interval
// (-flush, default the consumer's 1 s and 200 ms) it runs the consumer binary, then for each rate
// (-rates) hands request.finished events to a schema/publish Publisher (the gateway's, with its
// spool and its default linger, -linger) for -duration, each stamped with the time of the hand-over
// as finished_ts, and waits until every row is in requests. A row's freshness is ingested_at (the
// server's now64(6) when the consumer's INSERT of its batch arrived) minus finished_ts: the row is
// readable once that INSERT returns. The stages of that time, per row, p50 and p99:
//
//   - publish: finished_ts to the message's timestamp in the stream (when JetStream stored it): the
//     publisher's linger, queue and the broker's write;
//   - batch: that timestamp to ingested_at: delivery to the consumer, the wait in its batch (the
//     flush interval for the batch's first row), and the INSERT's query and data on the wire;
//   - insert: the consumer's own time per INSERT (mean, from its
//     servescope_consumer_flush_duration_seconds), which ends when the part is committed.
//
// The cost of a shorter flush is shown beside it: inserts per second (distinct ingested_at
// values), each a new part for ClickHouse to merge, and the table's active parts after the level.
//
// Target: p99 ≤ -target at 1,000 requests/s with the first flush interval. The last line is one
// JSON object with every figure and targets_met; the exit status is 1 when the target is missed,
// 2 when the benchmark could not run.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/servescope/servescope/dev/benchkit"
	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/service"
	"github.com/servescope/servescope/schema/publish"
)

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("bench-freshness", "Usage: bench-freshness --consumer BIN [flags]\n\nThe engine of scripts/bench freshness: a finished request's hand-over to the publisher to its row in ClickHouse.")
	var s settings
	c.Flags.StringVar(&s.bin, "consumer", "", "the consumer binary (scripts/bench-freshness builds it)")
	rates := c.Flags.String("rates", "100,1000,4000", "request rates, requests per second, comma-separated")
	flushes := c.Flags.String("flush", "1s,200ms", "consumer flush intervals (CONSUMER_FLUSH_INTERVAL), comma-separated")
	c.Flags.DurationVar(&s.duration, "duration", 5*time.Second, "publishing time per rate")
	c.Flags.DurationVar(&s.linger, "linger", 5*time.Millisecond, "the publisher's linger (the gateway's GATEWAY_PUBLISH_LINGER default)")
	c.Flags.DurationVar(&s.target, "target", 2*time.Second, "max p99 at 1,000 requests/s with the first flush interval")
	c.Run = func(ctx context.Context, log *slog.Logger, _ []string) error {
		var err error
		if s.rates, err = benchkit.PositiveInts("rates", *rates, "rate"); err != nil {
			return err
		}
		if s.flushes, err = benchkit.PositiveDurations("flush", *flushes); err != nil {
			return err
		}
		if s.bin == "" {
			return service.UsageError(fmt.Errorf("--consumer is required"))
		}
		return benchkit.Verdict(run(ctx, log, s))
	}
	return c
}

type settings struct {
	bin                      string
	rates                    []int
	flushes                  []time.Duration
	duration, linger, target time.Duration
}

type level struct {
	FlushInterval    string  `json:"flush_interval"`
	RateTarget       int     `json:"rate_per_s"`
	RateAchieved     float64 `json:"rate_achieved_per_s"`
	Requests         uint64  `json:"requests"`
	P50Ms            float64 `json:"freshness_p50_ms"`
	P99Ms            float64 `json:"freshness_p99_ms"`
	MaxMs            float64 `json:"freshness_max_ms"`
	PublishP50Ms     float64 `json:"publish_p50_ms"`
	PublishP99Ms     float64 `json:"publish_p99_ms"`
	BatchP50Ms       float64 `json:"batch_p50_ms"`
	BatchP99Ms       float64 `json:"batch_p99_ms"`
	InsertMeanMs     float64 `json:"insert_mean_ms"`
	RowsPerInsert    float64 `json:"rows_per_insert"`
	InsertsPerSecond float64 `json:"inserts_per_s"`
	ActiveParts      uint64  `json:"active_parts_after"`
}

// bench is one run's connections and the publisher every level hands its events to.
type bench struct {
	streams  *benchkit.Streams
	conn     driver.Conn
	pub      *publish.Publisher
	consumer string // the consumer's HTTP server, http://host:port
	seq      int
	handed   uint64
}

func run(ctx context.Context, log *slog.Logger, s settings) (bool, error) {
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
	db, err := benchkit.CreateDatabase(ctx, chCfg, "bench_freshness_"+id, nil)
	if err != nil {
		return false, err
	}
	defer db.Drop()
	spool, err := streams.Spool("bench-freshness")
	if err != nil {
		return false, err
	}
	pub, err := publish.New(streams.Conn, streams.NATS.SubjectPrefix, publish.Config{
		SpoolDir: spool, Linger: s.linger, Logger: log.With("component", "publish"),
	})
	if err != nil {
		return false, err
	}
	defer pub.Close(context.Background())
	b := &bench{streams: streams, conn: db.Conn, pub: pub}
	var levels []level
	met := true
	for fi, flush := range s.flushes {
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
		// On a fresh port again when another process took the one picked before the consumer
		// bound it.
		p, _, err := proc.StartOnFreePorts(ctx, 1, func(ports []int) (proc.Spec, error) {
			addr := "127.0.0.1:" + strconv.Itoa(ports[0])
			b.consumer = "http://" + addr
			return proc.Spec{
				Name: "consumer", Path: s.bin, Log: logFile.Name(), StopGrace: 30 * time.Second,
				Env: []string{
					"SERVESCOPE_NATS_URL=" + streams.NATS.URL,
					"SERVESCOPE_SUBJECT_PREFIX=" + streams.NATS.SubjectPrefix,
					"SERVESCOPE_CLICKHOUSE_ADDR=" + strings.Join(db.Config.Addr, ","),
					"SERVESCOPE_CLICKHOUSE_DATABASE=" + db.Config.Database,
					"CONSUMER_DURABLE=bench-freshness",
					"CONSUMER_FLUSH_INTERVAL=" + flush.String(),
					"CONSUMER_METRICS_ADDR=" + addr,
				},
				Ready: func(ctx context.Context) error { return b.get(ctx, "/readyz", nil) },
			}, nil
		})
		if err != nil {
			return false, fmt.Errorf("start consumer: %w", err)
		}
		for _, rate := range s.rates {
			l, err := b.measure(ctx, rate, s.duration)
			if err != nil {
				_ = p.Kill(context.Background())
				return false, fmt.Errorf("flush %s, %d requests/s: %w\n%s", flush, rate, err, p.LogTail())
			}
			l.FlushInterval = flush.String()
			levels = append(levels, l)
			fmt.Printf("flush %-6s %5d req/s (achieved %7.1f) | freshness p50 %7.1f ms p99 %7.1f ms max %7.1f ms | publish p99 %6.1f ms, batch p99 %7.1f ms, insert %6.1f ms (%5.0f rows) | %.1f inserts/s, %d parts | load %.1f\n",
				flush, rate, l.RateAchieved, l.P50Ms, l.P99Ms, l.MaxMs, l.PublishP99Ms, l.BatchP99Ms, l.InsertMeanMs, l.RowsPerInsert, l.InsertsPerSecond, l.ActiveParts, benchkit.LoadAvg())
			if fi == 0 && rate == 1000 && l.P99Ms > benchkit.Ms(s.target) {
				met = false
			}
		}
		if err := p.Stop(ctx); err != nil {
			return false, fmt.Errorf("consumer did not exit cleanly: %w", err)
		}
	}
	return met, benchkit.PrintResult(map[string]any{
		"bench": "freshness", "levels": levels, "duration_s": s.duration.Seconds(), "publisher_linger_ms": benchkit.Ms(s.linger),
		"target_p99_ms_at_1000_per_s": benchkit.Ms(s.target), "load_avg_1m": benchkit.LoadAvg(), "targets_met": met,
	})
}

// measure hands rate events a second for duration to the publisher, each finished at the time
// of the hand-over, waits for their rows and reads their freshness and its stages.
func (b *bench) measure(ctx context.Context, rate int, duration time.Duration) (level, error) {
	first := b.seq
	n := int(float64(rate) * duration.Seconds())
	stream, err := b.streams.JS.Stream(ctx, b.streams.Topology.Stream())
	if err != nil {
		return level{}, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return level{}, err
	}
	fromSeq := info.State.LastSeq + 1
	inserts0, err := b.insertTotals(ctx)
	if err != nil {
		return level{}, err
	}
	start := time.Now()
	for i := range n {
		// Paced against the start, so a late send is followed by quicker ones.
		if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
			time.Sleep(d)
		}
		if err := b.pub.Publish(eventgen.RequestFinished(b.seq, time.Now())); err != nil {
			return level{}, fmt.Errorf("publish: %w", err)
		}
		b.seq++
	}
	achieved := float64(n) / time.Since(start).Seconds()
	b.handed += uint64(n)
	lo, hi := fmt.Sprintf("req-%09d", first), fmt.Sprintf("req-%09d", b.seq)
	args := []any{clickhouse.Named("lo", lo), clickhouse.Named("hi", hi)}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var rows uint64
		if err := b.conn.QueryRow(ctx, "SELECT count() FROM requests WHERE request_id >= {lo:String} AND request_id < {hi:String}", args...).Scan(&rows); err != nil {
			return level{}, err
		}
		if rows >= uint64(n) {
			break
		}
		if time.Now().After(deadline) {
			st := b.pub.Stats()
			return level{}, fmt.Errorf("%d of %d rows after 2 min (publisher: %+v)", rows, n, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st := b.pub.Stats(); st.Spooled > 0 {
		return level{}, fmt.Errorf("the publisher spooled %d events: JetStream did not keep up, the figures would be the spool's", st.Spooled)
	}
	inserts1, err := b.insertTotals(ctx)
	if err != nil {
		return level{}, err
	}
	stored, err := b.storedTimes(ctx, fromSeq, n)
	if err != nil {
		return level{}, err
	}
	rows, err := b.conn.Query(ctx, `SELECT request_id, finished_ts, ingested_at FROM requests FINAL
		WHERE request_id >= {lo:String} AND request_id < {hi:String}`, args...)
	if err != nil {
		return level{}, err
	}
	defer rows.Close()
	var total, pubs, batches []time.Duration
	insertTimes := map[time.Time]bool{}
	var minFinished, maxFinished time.Time
	for rows.Next() {
		var req string
		var finished, ingested time.Time
		if err := rows.Scan(&req, &finished, &ingested); err != nil {
			return level{}, err
		}
		total = append(total, ingested.Sub(finished))
		insertTimes[ingested] = true
		if minFinished.IsZero() || finished.Before(minFinished) {
			minFinished = finished
		}
		if finished.After(maxFinished) {
			maxFinished = finished
		}
		if at, ok := stored[req]; ok {
			pubs = append(pubs, at.Sub(finished))
			batches = append(batches, ingested.Sub(at))
		}
	}
	if err := rows.Err(); err != nil {
		return level{}, err
	}
	if len(pubs) != len(total) {
		return level{}, fmt.Errorf("%d of %d rows found in the stream", len(pubs), len(total))
	}
	var parts uint64
	if err := b.conn.QueryRow(ctx, "SELECT count() FROM system.parts WHERE database = currentDatabase() AND table = 'requests' AND active").Scan(&parts); err != nil {
		return level{}, err
	}
	for _, d := range [][]time.Duration{total, pubs, batches} {
		slices.Sort(d)
	}
	span := max(maxFinished.Sub(minFinished).Seconds(), 0.001)
	l := level{RateTarget: rate, RateAchieved: benchkit.Round(achieved, 1), Requests: uint64(n),
		P50Ms: benchkit.Ms(benchkit.PctSorted(total, 50)), P99Ms: benchkit.Ms(benchkit.PctSorted(total, 99)), MaxMs: benchkit.Ms(total[len(total)-1]),
		PublishP50Ms: benchkit.Ms(benchkit.PctSorted(pubs, 50)), PublishP99Ms: benchkit.Ms(benchkit.PctSorted(pubs, 99)),
		BatchP50Ms: benchkit.Ms(benchkit.PctSorted(batches, 50)), BatchP99Ms: benchkit.Ms(benchkit.PctSorted(batches, 99)),
		InsertsPerSecond: benchkit.Round(float64(len(insertTimes))/span, 2), ActiveParts: parts}
	if c := inserts1.count - inserts0.count; c > 0 {
		l.InsertMeanMs = benchkit.Round((inserts1.seconds-inserts0.seconds)/c*1000, 1)
		l.RowsPerInsert = benchkit.Round((inserts1.rows-inserts0.rows)/c, 1)
	}
	return l, nil
}

// storedTimes reads n messages of the events stream from sequence from on, and returns when
// JetStream stored each, by request id.
func (b *bench) storedTimes(ctx context.Context, from uint64, n int) (map[string]time.Time, error) {
	cons, err := b.streams.JS.OrderedConsumer(ctx, b.streams.Topology.Stream(), jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
	})
	if err != nil {
		return nil, fmt.Errorf("read the stream: %w", err)
	}
	out := make(map[string]time.Time, n)
	for len(out) < n {
		batch, err := cons.Fetch(min(n-len(out), 1000), jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read the stream: %w", err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			var head struct {
				RequestID string `json:"request_id"`
			}
			if err := json.Unmarshal(m.Data(), &head); err != nil {
				return nil, fmt.Errorf("message %d: %w", meta.Sequence.Stream, err)
			}
			out[head.RequestID] = meta.Timestamp
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read the stream: %w", err)
		}
		if got == 0 {
			return nil, fmt.Errorf("read the stream: %d of %d messages", len(out), n)
		}
	}
	return out, nil
}

// insertTotals are the consumer's cumulative inserts into requests: how many, their seconds and
// their rows.
type insertTotals struct{ count, seconds, rows float64 }

// insertTotals scrapes the consumer's servescope_consumer_flush_duration_seconds and
// servescope_consumer_batch_rows histograms of the requests table.
func (b *bench) insertTotals(ctx context.Context) (insertTotals, error) {
	var fams map[string]*dto.MetricFamily
	if err := b.get(ctx, "/metrics", func(body io.Reader) error {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		var err error
		fams, err = parser.TextToMetricFamilies(body)
		return err
	}); err != nil {
		return insertTotals{}, err
	}
	var t insertTotals
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			table := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "table" {
					table = l.GetValue()
				}
			}
			if table != "requests" {
				continue
			}
			h := m.GetHistogram()
			switch name {
			case "servescope_consumer_flush_duration_seconds":
				t.count, t.seconds = float64(h.GetSampleCount()), h.GetSampleSum()
			case "servescope_consumer_batch_rows":
				t.rows = h.GetSampleSum()
			}
		}
	}
	return t, nil
}

// get asks the consumer's HTTP server for path and hands the body of a 200 answer to read (nil:
// the status is all that counts).
func (b *bench) get(ctx context.Context, path string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.consumer+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("consumer %s: %s", path, resp.Status)
	}
	if read == nil {
		return nil
	}
	if err := read(resp.Body); err != nil {
		return fmt.Errorf("consumer %s: %w", path, err)
	}
	return nil
}
