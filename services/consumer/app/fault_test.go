package app

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/consumer/sink"
)

// consumerBinary builds the consumer binary (package main of services/consumer) once per test
// run, without the race detector, as a deployment runs it.
var consumerBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "servescope-consumer-test-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "consumer")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/servescope/servescope/services/consumer")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build consumer: %v\n%s", err, out)
	}
	return bin, nil
})

func buildConsumer(t *testing.T) string {
	t.Helper()
	bin, err := consumerBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// processEnv is the environment of a consumer process on the test's stream and database.
func processEnv(natsCfg config.NATS, chCfg config.ClickHouse) map[string]string {
	return map[string]string{
		"SERVESCOPE_NATS_URL":            natsCfg.URL,
		"SERVESCOPE_SUBJECT_PREFIX":      natsCfg.SubjectPrefix,
		"SERVESCOPE_CLICKHOUSE_ADDR":     strings.Join(chCfg.Addr, ","),
		"SERVESCOPE_CLICKHOUSE_DATABASE": chCfg.Database,
		"SERVESCOPE_STREAM_MAX_BYTES":    strconv.FormatInt(natsCfg.StreamMaxBytes, 10),
		"CONSUMER_METRICS_ADDR":          "127.0.0.1:0",
		"CONSUMER_FLUSH_INTERVAL":        "200ms",
	}
}

// metricsAddr waits for the process to log the address it serves /metrics on.
func (p *consumerProcess) metricsAddr(t *testing.T) string {
	t.Helper()
	var addr string
	waitFor(t, 30*time.Second, func() string {
		b, _ := os.ReadFile(p.log)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "serving /metrics") {
				if _, a, ok := strings.Cut(line, "addr="); ok {
					addr = strings.TrimSpace(a)
					return ""
				}
			}
		}
		return "consumer has not logged its metrics address"
	})
	return addr
}

// consumerProcess is the consumer binary running as a child process (dev/proc).
type consumerProcess struct {
	*proc.Process
	log string
}

// startProcess sets the durable consumer up for env, as `servescope migrate up` given the same
// environment would, and starts the consumer binary with env.
func startProcess(t *testing.T, bin string, env map[string]string) *consumerProcess {
	t.Helper()
	sc, err := config.LoadFrom[setupConfig](env)
	if err != nil {
		t.Fatal(err)
	}
	setUp(t, sc.NATS, sc.Consumer)
	logPath := filepath.Join(t.TempDir(), "consumer.log")
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	// The tests bound a graceful stop themselves; the grace only keeps a hung consumer from
	// hanging the test.
	p, err := proc.New(proc.Spec{Name: "consumer", Path: bin, Env: environ, Log: logPath, StopGrace: time.Minute, DieWithCaller: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Kill(context.Background())
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("consumer log:\n%s", b)
		}
	})
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("start consumer: %v", err)
	}
	return &consumerProcess{Process: p, log: logPath}
}

// signal ends the consumer: SIGKILL as a crash would, else SIGTERM and a graceful stop.
func (p *consumerProcess) signal(sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		_ = p.Kill(context.Background())
		return
	}
	_ = p.Stop(context.Background())
}

// kill -9 of the consumer in the middle of 100,000 events, then a restart: no loss, no duplicate.
func TestKill9ThenRestart(t *testing.T) {
	t.Parallel()
	bin := buildConsumer(t)
	js, topo, natsCfg := testenv.JetStream(t)
	conn, chCfg := testenv.ClickHouse(t)
	const n = 100_000
	want := publishEvents(t, js, topo, schema.Kinds(), 0, n, time.Now().Add(-time.Hour))
	env := processEnv(natsCfg, chCfg)
	env["CONSUMER_BATCH_ROWS"] = "5000"
	total := func() uint64 {
		var sum uint64
		for _, k := range schema.Kinds() {
			table, _ := sink.TableFor(k)
			sum += count(t, conn, "SELECT count() FROM "+table)
		}
		return sum
	}
	first := startProcess(t, bin, env)
	waitFor(t, drainDeadline, func() string {
		if got := total(); got < 20_000 {
			return fmt.Sprintf("%d rows so far, waiting for 20000 before the kill", got)
		}
		return ""
	})
	first.signal(syscall.SIGKILL)
	atKill := total()
	if atKill >= n {
		t.Fatalf("all %d rows landed before the kill; the test needs a consumer killed mid-way", atKill)
	}
	_, held, _ := lag(t, js, topo, "servescope-writer")
	t.Logf("killed with %d rows stored and %d messages delivered but unacknowledged", atKill, held)

	second := startProcess(t, bin, env)
	// Unacknowledged messages of the killed process come back after AckWait (30 s).
	waitFor(t, drainDeadline, func() string {
		if why := drained(t, js, topo); why != "" {
			return why
		}
		return landed(t, conn, want)
	})
	second.signal(syscall.SIGTERM)
	for _, k := range schema.Kinds() {
		table, _ := sink.TableFor(k)
		if u := count(t, conn, "SELECT uniqExact(event_id) FROM "+table); u != uint64(want[k]) {
			t.Errorf("%s: %d distinct events, want %d", table, u, want[k])
		}
	}
	raw := total()
	t.Logf("stored %d rows for %d events before merging: %d copies from the kill, collapsed by FINAL", raw, n, raw-n)
	if second.Running() {
		t.Fatal("consumer still running after SIGTERM")
	}
	if code := second.ExitCode(); code != 0 {
		t.Errorf("consumer exit status after SIGTERM = %d, want 0", code)
	}
}

// The ClickHouse server stopped for 30 s during ingest, then started: every row lands once,
// nothing is dead-lettered (an outage is never a refusal), /readyz is false during the outage
// while /healthz stays true, and retries back off instead of spinning.
func TestClickHouseOutage(t *testing.T) {
	t.Parallel()
	srv := testenv.StartClickHouse(t)
	chCfg := testenv.ClickHouseConfig(t)
	chCfg.Addr = []string{srv.Addr()}
	chCfg.Database = "servescope"
	ctx := context.Background()
	if err := chstore.Migrate(ctx, chCfg); err != nil {
		t.Fatal(err)
	}
	conn, err := chstore.Open(ctx, chCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js, topo, natsCfg := testenv.JetStream(t)
	cfg := testConfig(natsCfg, chCfg)
	addr, stop := startConsumer(t, cfg)
	base := time.Now().Add(-time.Hour)

	want := map[schema.Kind]int{}
	var mu sync.Mutex
	add := func(c map[schema.Kind]int) {
		mu.Lock()
		defer mu.Unlock()
		for k, v := range c {
			want[k] += v
		}
	}
	add(publishEvents(t, js, topo, schema.Kinds(), 0, 6_000, base))
	waitFor(t, drainDeadline, func() string { return landed(t, conn, want) })

	// Publish steadily through the outage: 80 rounds of 200 events, 0.5 s apart.
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for r := range 80 {
			add(publishEvents(t, js, topo, schema.Kinds(), 6_000+r*200, 200, base))
			time.Sleep(500 * time.Millisecond)
		}
	}()
	time.Sleep(2 * time.Second)
	srv.Stop()
	stoppedAt := time.Now()
	waitFor(t, time.Minute, func() string {
		if code, _ := httpStatus(t, addr, "/readyz"); code != http.StatusServiceUnavailable {
			return fmt.Sprintf("/readyz = %d during the outage, want 503", code)
		}
		return ""
	})
	if code, body := httpStatus(t, addr, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %q during the outage: the process is alive", code, body)
	}
	_, held, _ := lag(t, js, topo, cfg.Durable)
	time.Sleep(30*time.Second - time.Since(stoppedAt))
	errs := scrape(t, addr, "servescope_consumer_insert_errors_total")
	srv.Start()
	t.Logf("outage: %d messages held unacknowledged 2 s in, %v failed insert attempts in 30 s", held, errs)
	if errs < 2 || errs > 90 {
		t.Errorf("%v failed insert attempts during a 30 s outage: want a few (capped backoff), not a busy loop", errs)
	}
	<-pubDone
	mu.Lock()
	final := maps.Clone(want)
	mu.Unlock()
	waitFor(t, drainDeadline, func() string {
		if why := drained(t, js, topo); why != "" {
			return why
		}
		return landed(t, conn, final)
	})
	waitFor(t, 30*time.Second, func() string {
		if code, body := httpStatus(t, addr, "/readyz"); code != http.StatusOK {
			return "/readyz after recovery: " + strconv.Itoa(code) + " " + body
		}
		return ""
	})
	for _, k := range schema.Kinds() {
		table, _ := sink.TableFor(k)
		if u := count(t, conn, "SELECT uniqExact(event_id) FROM "+table); u != uint64(final[k]) {
			t.Errorf("%s: %d distinct events, want %d", table, u, final[k])
		}
	}
	if n := count(t, conn, "SELECT count() FROM ingest_errors"); n != 0 {
		t.Errorf("ingest_errors has %d rows after an outage, want 0", n)
	}
	if dl := deadLetters(t, js, topo); len(dl) != 0 {
		t.Errorf("%d messages dead-lettered during an outage, first: %q", len(dl), dl[0].Headers().Get(bus.HeaderDLQReason))
	}
	if v := scrape(t, addr, "servescope_consumer_dead_lettered_total"); v != 0 {
		t.Errorf("dead_lettered_total = %v after an outage, want 0", v)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// The NATS server stopped for a few seconds during ingest, then started: the consumer reconnects
// by itself and every event lands exactly once (to FINAL).
func TestNATSOutage(t *testing.T) {
	t.Parallel()
	srv := testenv.StartNATS(t)
	natsCfg := testenv.NATSConfig(t)
	natsCfg.URL = srv.URL()
	natsCfg.SubjectPrefix = testenv.UniqueName("t")
	nc, err := natsCfg.Connect(t.Name(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	topo := natsCfg.Topology()
	conn, chCfg := testenv.ClickHouse(t)
	addr, stop := startConsumer(t, testConfig(natsCfg, chCfg))
	base := time.Now().Add(-time.Hour)
	want := publishEvents(t, js, topo, schema.Kinds(), 0, 6000, base)
	waitFor(t, drainDeadline, func() string { return landed(t, conn, want) })

	srv.Stop()
	waitFor(t, time.Minute, func() string {
		if code, _ := httpStatus(t, addr, "/readyz"); code != http.StatusServiceUnavailable {
			return fmt.Sprintf("/readyz = %d while NATS is down, want 503", code)
		}
		return ""
	})
	time.Sleep(3 * time.Second)
	srv.Start()
	for k, v := range publishEvents(t, js, topo, schema.Kinds(), 6000, 6000, base) {
		want[k] += v
	}
	waitFor(t, drainDeadline, func() string {
		if why := drained(t, js, topo); why != "" {
			return why
		}
		return landed(t, conn, want)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
