package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/consumer/sink"
)

// publishEvents publishes n events cycling through kinds (index i gets kinds[i%len]) and returns
// how many of each kind were published.
func publishEvents(t *testing.T, js jetstream.JetStream, topo bus.Topology, kinds []schema.Kind, from, n int, base time.Time) map[schema.Kind]int {
	t.Helper()
	counts := map[schema.Kind]int{}
	for i := from; i < from+n; i++ {
		k := kinds[i%len(kinds)]
		publishRaw(t, js, topo.Subject(k), eventgen.Encode(eventgen.Event(k, i, base)), "")
		counts[k]++
	}
	waitPublished(t, js)
	return counts
}

// publishRaw publishes data asynchronously with msgID as Nats-Msg-Id (none when empty).
func publishRaw(t *testing.T, js jetstream.JetStream, subject string, data []byte, msgID string) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = data
	if msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	for {
		_, err := js.PublishMsgAsync(m)
		if err == nil {
			return
		}
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			t.Fatalf("publish to %s: %v", subject, err)
		}
		waitPublished(t, js)
	}
}

func waitPublished(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(60 * time.Second):
		t.Fatalf("publishes not acknowledged after 60 s (%d pending)", js.PublishAsyncPending())
	}
}

// startConsumer runs the consumer in this process until the test ends or stop is called; stop
// returns Run's error after a graceful shutdown.
func startConsumer(t *testing.T, cfg Config) (addr string, stop func() error) {
	t.Helper()
	setUp(t, cfg.NATS, cfg.Consumer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	go func() { done <- Run(ctx, cfg, log, ln) }()
	stopped := false
	var runErr error
	stop = func() error {
		if stopped {
			return runErr
		}
		stopped = true
		cancel()
		select {
		case runErr = <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("consumer did not stop within 60 s of cancel")
		}
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return ln.Addr().String(), stop
}

// testWriter sends log lines to t.Log, but only until the test ends.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	if os.Getenv("CONSUMER_TEST_LOG") != "" {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func testConfig(natsCfg config.NATS, chCfg config.ClickHouse) Config {
	return Config{
		Consumer:    config.Consumer{Durable: "servescope-writer", BatchRows: 10000, FlushInterval: 200 * time.Millisecond},
		MetricsAddr: "127.0.0.1:0",
		NATS:        natsCfg,
		ClickHouse:  chCfg,
	}
}

// setupConfig is what the setup step reads to set up the streams and the durable consumer.
type setupConfig struct {
	NATS     config.NATS
	Consumer config.Consumer
}

// setUp runs the setup step for the consumer c on n's streams: the same code as
// `servescope migrate up`, creating or updating the streams and c's durable consumer.
func setUp(t *testing.T, n config.NATS, c config.Consumer) {
	t.Helper()
	nc, err := n.Connect(t.Name()+"-setup", nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect to NATS for the setup: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Provision(t, js, n, c.DurableConsumer())
}

// drainDeadline is how long a test waits for events to land and the consumer's lag to reach 0.
// It is generous on purpose: the tests share a small machine with other work, where a drain
// that takes seconds alone can take minutes; a test asserts the outcome, never the time.
const drainDeadline = 7 * time.Minute

// waitFor polls cond every 100 ms until it returns "" or timeout passes, then fails with its
// last answer.
func waitFor(t *testing.T, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func count(t *testing.T, conn driver.Conn, query string) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// landed reports "" when every table holds exactly want[kind] rows with FINAL, else what differs.
func landed(t *testing.T, conn driver.Conn, want map[schema.Kind]int) string {
	t.Helper()
	var diffs []string
	for _, k := range schema.Kinds() {
		table, _ := sink.TableFor(k)
		var n uint64
		if err := conn.QueryRow(context.Background(), "SELECT count() FROM "+table+" FINAL").Scan(&n); err != nil {
			return fmt.Sprintf("count %s: %v", table, err)
		}
		if n != uint64(want[k]) {
			diffs = append(diffs, fmt.Sprintf("%s has %d rows, want %d", table, n, want[k]))
		}
	}
	return strings.Join(diffs, "; ")
}

// lag returns the durable consumer's num_pending and num_ack_pending; ok is false while the
// consumer does not exist yet.
func lag(t *testing.T, js jetstream.JetStream, topo bus.Topology, durable string) (pending uint64, ackPending int, ok bool) {
	t.Helper()
	// A busy JetStream can take seconds to answer; the callers wait minutes for the lag to fall.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, topo.Stream(), durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, 0, false
	}
	if err != nil {
		t.Fatalf("consumer %s: %v", durable, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info %s: %v", durable, err)
	}
	return info.NumPending, info.NumAckPending, true
}

func drained(t *testing.T, js jetstream.JetStream, topo bus.Topology) string {
	p, a, ok := lag(t, js, topo, "servescope-writer")
	if !ok {
		return "durable consumer not created yet"
	}
	if p != 0 || a != 0 {
		return fmt.Sprintf("consumer lag: %d pending, %d unacknowledged", p, a)
	}
	return ""
}

// scrape returns the value of a metric (summed over its series) from the consumer's /metrics.
func scrape(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	f, ok := families[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// httpStatus returns the status code and body of GET http://addr/path.
func httpStatus(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
