package app

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/consumer/sink"
)

// 100,000 events of every kind land as exactly that many rows per kind, all acknowledged, and
// the consumer's lag is 0. The consumer runs as its own process (built without the race
// detector, which would make 100,000 events slow); the other tests run it in-process under -race.
func TestAllKindsLandExactlyOnce(t *testing.T) {
	t.Parallel()
	bin := buildConsumer(t)
	js, topo, natsCfg := testenv.JetStream(t)
	conn, chCfg := testenv.ClickHouse(t)
	const n = 100_000
	want := publishEvents(t, js, topo, schema.Kinds(), 0, n, time.Now().Add(-time.Hour))
	proc := startProcess(t, bin, processEnv(natsCfg, chCfg))
	addr := proc.metricsAddr(t)
	waitFor(t, drainDeadline, func() string {
		if why := drained(t, js, topo); why != "" {
			return why
		}
		return landed(t, conn, want)
	})
	// The lag gauge is polled every 2 s.
	waitFor(t, time.Minute, func() string {
		if v := scrape(t, addr, "servescope_consumer_acked_messages_total"); v != n {
			return "acked_messages_total = " + strconv.FormatFloat(v, 'f', -1, 64)
		}
		if v := scrape(t, addr, "servescope_consumer_pending_messages"); v != 0 {
			return "pending_messages = " + strconv.FormatFloat(v, 'f', -1, 64)
		}
		return ""
	})
	// Readiness checks have 2 s each: a ClickHouse slow for a moment reads as not ready, so the
	// state is waited for, not read once.
	waitFor(t, time.Minute, func() string {
		if code, body := httpStatus(t, addr, "/readyz"); code != http.StatusOK {
			return "/readyz = " + strconv.Itoa(code) + " " + body + ", want 200"
		}
		return ""
	})
	if v := scrape(t, addr, "servescope_consumer_rows_inserted_total"); v != n {
		t.Errorf("rows_inserted_total = %v, want %d", v, n)
	}
	proc.signal(syscall.SIGTERM)
	if code := proc.ExitCode(); code != 0 {
		t.Errorf("consumer exit status after SIGTERM = %d, want 0", code)
	}
	// In normal operation nothing is even stored twice: FINAL is only needed after a crash.
	for _, k := range schema.Kinds() {
		table, _ := sink.TableFor(k)
		if raw := count(t, conn, "SELECT count() FROM "+table); raw != uint64(want[k]) {
			t.Errorf("%s stores %d rows before merging, want %d", table, raw, want[k])
		}
	}
	if got := count(t, conn, "SELECT count() FROM ingest_errors"); got != 0 {
		t.Errorf("ingest_errors has %d rows, want 0", got)
	}
}

// Malformed messages of every kind, interleaved with good ones: each bad one is in the DLQ and in
// ingest_errors with its reason, every good one lands.
func TestMalformedGoToDeadLetters(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	conn, chCfg := testenv.ClickHouse(t)
	base := time.Now().Add(-time.Hour)
	type bad struct {
		subject, reason string
		data            []byte
	}
	var bads []bad
	want := map[schema.Kind]int{}
	i := 0
	published := time.Now().Add(-time.Second) // the stream stamps the messages from here on
	for _, k := range schema.Kinds() {
		for _, m := range eventgen.MalformedFor(k, i, base) {
			for range 3 { // good ones around every bad one
				publishRaw(t, js, topo.Subject(k), eventgen.Encode(eventgen.Event(k, i, base)), "")
				want[k]++
				i++
			}
			publishRaw(t, js, topo.Subject(k), m.Data, "")
			bads = append(bads, bad{subject: topo.Subject(k), reason: m.Reason, data: m.Data})
		}
	}
	unknown := topo.Prefix + ".v1.request.cancelled"
	publishRaw(t, js, unknown, []byte(`{"schema":"request.cancelled/v1"}`), "")
	bads = append(bads, bad{subject: unknown, reason: "unknown event kind", data: []byte(`{"schema":"request.cancelled/v1"}`)})
	waitPublished(t, js)

	addr, _ := startConsumer(t, testConfig(natsCfg, chCfg))
	waitFor(t, drainDeadline, func() string {
		if why := drained(t, js, topo); why != "" {
			return why
		}
		if got := count(t, conn, "SELECT count() FROM ingest_errors FINAL"); got != uint64(len(bads)) {
			return "ingest_errors has " + strconv.FormatUint(got, 10) + " rows"
		}
		return landed(t, conn, want)
	})

	// ingest_errors: one row per bad message, with its subject, payload and reason.
	ctx := context.Background()
	rows, err := conn.Query(ctx, "SELECT subject, stream_seq, reason, payload, ts FROM ingest_errors FINAL ORDER BY stream_seq")
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		subject, reason, payload string
		seq                      uint64
		ts                       time.Time
	}
	var recs []rec
	for rows.Next() {
		var r rec
		if err := rows.Scan(&r.subject, &r.seq, &r.reason, &r.payload, &r.ts); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	rows.Close()
	if len(recs) != len(bads) {
		t.Fatalf("ingest_errors has %d rows, want %d", len(recs), len(bads))
	}
	for j, b := range bads {
		r := recs[j]
		if r.subject != b.subject || r.payload != string(b.data) || !strings.Contains(r.reason, b.reason) {
			t.Errorf("ingest_errors row %d = {%s %q %q}, want subject %s, payload %q, reason containing %q", j, r.subject, r.reason, r.payload, b.subject, b.data, b.reason)
		}
		if r.ts.Before(published) || r.ts.After(time.Now()) {
			t.Errorf("ingest_errors row %d ts %s is not the message's stream timestamp", j, r.ts)
		}
	}

	// The dead-letter stream: each bad message with the reason, original subject and sequence.
	got := deadLetters(t, js, topo) // every message the stream holds, however slowly fetched
	if len(got) != len(bads) {
		t.Fatalf("dead-letter stream holds %d messages, want %d", len(got), len(bads))
	}
	// Dead letters are published as each batch settles, not in stream order: pair each with its
	// message by the original sequence it names (recs and bads are both in stream order).
	bySeq := make(map[string]int, len(recs))
	for j, r := range recs {
		bySeq[strconv.FormatUint(r.seq, 10)] = j
	}
	for _, m := range got {
		h := m.Headers()
		j, ok := bySeq[h.Get(bus.HeaderDLQStreamSeq)]
		if !ok {
			t.Errorf("dead letter %q names original sequence %q, which no refused message has", m.Data(), h.Get(bus.HeaderDLQStreamSeq))
			continue
		}
		delete(bySeq, h.Get(bus.HeaderDLQStreamSeq))
		b, r := bads[j], recs[j]
		if m.Subject() != topo.DLQSubject(b.subject) || string(m.Data()) != string(b.data) ||
			h.Get(bus.HeaderDLQSubject) != b.subject || h.Get(bus.HeaderDLQStreamSeq) != strconv.FormatUint(r.seq, 10) ||
			!strings.Contains(h.Get(bus.HeaderDLQReason), b.reason) {
			t.Errorf("dead letter %d: subject %s headers %v data %q; want subject %s, original %s seq %d, reason containing %q",
				j, m.Subject(), h, m.Data(), topo.DLQSubject(b.subject), b.subject, r.seq, b.reason)
		}
	}
	if v := scrape(t, addr, "servescope_consumer_dead_lettered_total"); v != float64(len(bads)) {
		t.Errorf("dead_lettered_total = %v, want %d", v, len(bads))
	}
}

// Two instances (processes) on the same durable consumer split the work; nothing is lost or
// doubled.
func TestTwoInstancesShareTheWork(t *testing.T) {
	t.Parallel()
	bin := buildConsumer(t)
	js, topo, natsCfg := testenv.JetStream(t)
	conn, chCfg := testenv.ClickHouse(t)
	env := processEnv(natsCfg, chCfg)
	env["CONSUMER_BATCH_ROWS"] = "2000" // smaller batches so that both instances get some
	procA, procB := startProcess(t, bin, env), startProcess(t, bin, env)
	addrA, addrB := procA.metricsAddr(t), procB.metricsAddr(t)
	const n = 50_000
	want := publishEvents(t, js, topo, schema.Kinds(), 0, n, time.Now().Add(-time.Hour))
	waitFor(t, drainDeadline, func() string {
		if why := drained(t, js, topo); why != "" {
			return why
		}
		return landed(t, conn, want)
	})
	a := scrape(t, addrA, "servescope_consumer_acked_messages_total")
	b := scrape(t, addrB, "servescope_consumer_acked_messages_total")
	procA.signal(syscall.SIGTERM)
	procB.signal(syscall.SIGTERM)
	t.Logf("instance A acked %v, instance B acked %v", a, b)
	if a == 0 || b == 0 || a+b != n {
		t.Errorf("instances acked %v and %v, want both > 0 and %d in total", a, b, n)
	}
	for _, k := range schema.Kinds() {
		table, _ := sink.TableFor(k)
		if raw := count(t, conn, "SELECT count() FROM "+table); raw != uint64(want[k]) {
			t.Errorf("%s stores %d rows, want %d", table, raw, want[k])
		}
	}
}

// A graceful shutdown inserts and acknowledges what was fetched, even when neither the batch
// size nor the flush interval was reached.
func TestShutdownFlushesAndAcks(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	conn, chCfg := testenv.ClickHouse(t)
	cfg := testConfig(natsCfg, chCfg)
	cfg.BatchRows = 100_000
	cfg.FlushInterval = 10 * time.Minute
	addr, stop := startConsumer(t, cfg)
	want := publishEvents(t, js, topo, schema.Kinds(), 0, 3000, time.Now().Add(-time.Hour))
	waitFor(t, 30*time.Second, func() string {
		if _, a, _ := lag(t, js, topo, cfg.Durable); a != 3000 {
			return "consumer holds " + strconv.Itoa(a) + " messages, want 3000"
		}
		return ""
	})
	if got := count(t, conn, "SELECT count() FROM requests"); got != 0 {
		t.Fatalf("rows inserted before the batch was due: %d", got)
	}
	if code, _ := httpStatus(t, addr, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if why := landed(t, conn, want); why != "" {
		t.Error(why)
	}
	if why := drained(t, js, topo); why != "" {
		t.Error(why)
	}
}

// Started against a database without the tables, the consumer stops with a clear error.
func TestMissingTablesFailClearly(t *testing.T) {
	t.Parallel()
	_, _, natsCfg := testenv.JetStream(t)
	conn, chCfg := testenv.ClickHouse(t)
	if err := conn.Exec(context.Background(), "DROP TABLE requests SYNC"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(natsCfg, chCfg)
	setUp(t, cfg.NATS, cfg.Consumer)
	err = Run(ctx, cfg, discardLogger(), ln)
	if !errors.Is(err, sink.ErrMissingTables) || !strings.Contains(err.Error(), "table requests") || !strings.Contains(err.Error(), "servescope migrate up") {
		t.Fatalf("Run = %v, want an error naming table requests and `servescope migrate up`", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run waited for the context instead of failing")
	}
}

// Started where the setup step never ran, the consumer waits SERVESCOPE_SETUP_WAIT for the
// streams and its durable consumer, then stops with an error that says what to run; it creates
// nothing itself.
func TestNotSetUpFailsClearly(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.NATSPrefix(t)
	_, chCfg := testenv.ClickHouse(t)
	natsCfg.SetupWait = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	err = Run(ctx, testConfig(natsCfg, chCfg), discardLogger(), ln)
	if !errors.Is(err, bus.ErrNotSetUp) || !strings.Contains(err.Error(), "stream "+topo.Stream()) || !strings.Contains(err.Error(), "run `servescope migrate up`") {
		t.Fatalf("Run = %v, want an error naming stream %s and `servescope migrate up`", err, topo.Stream())
	}
	if ctx.Err() != nil {
		t.Fatal("Run waited for the context instead of failing")
	}
	if _, err := js.Stream(context.Background(), topo.Stream()); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the consumer created or found stream %s: %v", topo.Stream(), err)
	}

	// With the streams but not its durable consumer, the error names the durable consumer.
	testenv.Provision(t, js, natsCfg)
	err = Run(ctx, testConfig(natsCfg, chCfg), discardLogger(), nil)
	if !errors.Is(err, bus.ErrNotSetUp) || !strings.Contains(err.Error(), "durable consumer servescope-writer on stream "+topo.Stream()+" does not exist") {
		t.Fatalf("Run = %v, want an error naming the durable consumer", err)
	}
}

func TestConfigFromEnvironment(t *testing.T) {
	cfg, err := config.LoadFrom[Config](map[string]string{
		"CONSUMER_BATCH_ROWS":            "500",
		"CONSUMER_FLUSH_INTERVAL":        "250ms",
		"SERVESCOPE_CLICKHOUSE_DATABASE": "obs",
		"SERVESCOPE_SUBJECT_PREFIX":      "tenant-a",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Durable != "servescope-writer" || cfg.BatchRows != 500 || cfg.FlushInterval != 250*time.Millisecond ||
		cfg.MetricsAddr != ":9101" || cfg.ClickHouse.Database != "obs" || cfg.NATS.SubjectPrefix != "tenant-a" {
		t.Errorf("config = %+v", cfg)
	}
	set := cfg.Settings()
	if set.MaxAckPending() != 4*500+500 || set.AckWait() != 30*time.Second {
		t.Errorf("MaxAckPending = %d, AckWait = %s; want 2500 and 30s", set.MaxAckPending(), set.AckWait())
	}
	for _, tc := range []struct{ key, value, want string }{
		{"CONSUMER_BATCH_ROWS", "0", "CONSUMER_BATCH_ROWS"},
		{"CONSUMER_FLUSH_INTERVAL", "0s", "CONSUMER_FLUSH_INTERVAL"},
		{"CONSUMER_DURABLE", "a.b", "CONSUMER_DURABLE"},
		{"CONSUMER_BATCH_ROWS", "lots", "CONSUMER_BATCH_ROWS"},
	} {
		_, err := config.LoadFrom[Config](map[string]string{tc.key: tc.value})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%s: error %v, want one naming %s", tc.key, tc.value, err, tc.want)
		}
	}
}
