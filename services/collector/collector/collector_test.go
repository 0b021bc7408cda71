package collector

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/services/collector/logship"
)

// events reads every event on the test's stream until want says it has enough or the deadline.
func events(t *testing.T, js jetstream.JetStream, topo bus.Topology, timeout time.Duration, want func([]schema.Event) bool) []schema.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, topo.Stream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{topo.Subjects()}})
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	var out []schema.Event
	for ctx.Err() == nil && !want(out) {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		for m := range batch.Messages() {
			ev, err := schema.Decode(m.Subject(), m.Data())
			if err != nil {
				t.Fatalf("decode %s: %v", m.Subject(), err)
			}
			out = append(out, ev)
		}
	}
	return out
}

func byKind(evs []schema.Event) map[schema.Kind][]schema.Event {
	m := map[schema.Kind][]schema.Event{}
	for _, e := range evs {
		m[e.Kind()] = append(m[e.Kind()], e)
	}
	return m
}

func loadConfig(t *testing.T, env map[string]string) Config {
	t.Helper()
	cfg, err := config.LoadFrom[Config](env)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCollectorEndToEnd runs the whole collector against a vLLM-shaped /metrics endpoint, OTLP
// exports over gRPC and HTTP and a log file, publishing to real JetStream, and reads the events
// back from the stream.
func TestCollectorEndToEnd(t *testing.T) {
	t.Parallel()
	js, topo, ncfg := testenv.JetStream(t)
	nc := testenv.NATS(t)
	pub, err := publish.New(nc, ncfg.SubjectPrefix, publish.Config{SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(context.Background())

	metrics, err := os.ReadFile("../promparse/testdata/vllm_main.prom")
	if err != nil {
		t.Fatal(err)
	}
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(metrics)
	}))
	defer engine.Close()
	crashLog, err := os.ReadFile("../../../internal/vllmlog/testdata/v0_10_crash.log")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "vllm.log")
	if err := os.WriteFile(logPath, crashLog, 0o644); err != nil {
		t.Fatal(err)
	}
	nLines := strings.Count(string(crashLog), "\n")

	cfg := loadConfig(t, map[string]string{
		"COLLECTOR_TARGETS":           "vllm-a=" + engine.URL + "/metrics",
		"COLLECTOR_SCRAPE_INTERVAL":   "100ms",
		"COLLECTOR_OTLP_GRPC_ADDR":    "127.0.0.1:0",
		"COLLECTOR_OTLP_HTTP_ADDR":    "127.0.0.1:0",
		"COLLECTOR_METRICS_ADDR":      "127.0.0.1:0",
		"COLLECTOR_LOG_FILES":         logPath,
		"COLLECTOR_LOG_POLL_INTERVAL": "20ms",
		"COLLECTOR_STATE_DIR":         filepath.Join(dir, "state"),
	})
	c, err := New(cfg, pub, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()

	otlpJSON, err := os.ReadFile("../otlp/testdata/vllm_llm_request.json")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+c.OTLPHTTPAddr()+"/v1/traces", "application/json", bytes.NewReader(otlpJSON))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("OTLP HTTP status %d", resp.StatusCode)
	}
	req := ptraceotlp.NewExportRequest()
	if err := req.UnmarshalJSON(otlpJSON); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(c.OTLPGRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := ptraceotlp.NewGRPCClient(conn).Export(ctx, req); err != nil {
		t.Fatalf("OTLP gRPC export: %v", err)
	}

	got := byKind(events(t, js, topo, 30*time.Second, func(evs []schema.Event) bool {
		m := byKind(evs)
		return len(m[schema.KindEngineSample]) >= 3 && len(m[schema.KindEngineSpan]) >= 4 && len(m[schema.KindEngineLog]) >= nLines
	}))
	for path, want := range map[string]string{"/healthz": "ok", "/metrics": "servescope_collector_scrapes_total"} {
		r, err := http.Get("http://" + c.MetricsAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d %q, want 200 containing %q", path, r.StatusCode, body, want)
		}
	}

	cancel()
	if err := <-ran; err != nil {
		t.Errorf("run: %v", err)
	}
	if n := len(got[schema.KindEngineSample]); n < 3 {
		t.Fatalf("%d samples", n)
	}
	s := got[schema.KindEngineSample][0].(*schema.EngineSample)
	if !s.Up || s.Engine != "vllm-a" || *s.NumRequestsRunning != 256 || s.Histograms["inter_token_latency_seconds"].Count != 400 {
		t.Errorf("sample: %+v", s)
	}
	spans := got[schema.KindEngineSpan]
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 2 over HTTP and 2 over gRPC", len(spans))
	}
	if sp := spans[0].(*schema.EngineSpan); sp.RequestID != "2Z1xq8TnUe3RvI6hHbWzX9yA0kQ" || *sp.QueueSeconds != 0.472 {
		t.Errorf("span: %+v", sp)
	}
	logs := got[schema.KindEngineLog]
	if len(logs) != nLines {
		t.Fatalf("%d log lines, want %d", len(logs), nLines)
	}
	var oom *schema.EngineLog
	for _, e := range logs {
		if l := e.(*schema.EngineLog); l.OOMBytesRequested != nil {
			oom = l
		}
	}
	if oom == nil || *oom.OOMBytesRequested != 112<<20 || oom.Source != logPath || oom.Engine != "vllm-a" {
		t.Errorf("OOM line: %+v", oom)
	}
}

// TestLogLinesSurviveNATSOutage ships the crash log while NATS is down and checks that every
// line reaches the stream, in order, once NATS is back.
func TestLogLinesSurviveNATSOutage(t *testing.T) {
	t.Parallel()
	srv := testenv.StartNATS(t)
	nc, err := nats.Connect(srv.URL(), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	topo := bus.Topology{Prefix: "t_outage"}
	testenv.Provision(t, js, config.NATS{SubjectPrefix: topo.Prefix, StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 30})
	pub, err := publish.New(nc, topo.Prefix, publish.Config{SpoolDir: t.TempDir(), AckTimeout: time.Second, RetryInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(context.Background())

	srv.Stop()
	crashLog, err := os.ReadFile("../../../internal/vllmlog/testdata/v0_10_crash.log")
	if err != nil {
		t.Fatal(err)
	}
	sh := logship.NewShipper(pub, "vllm-a", "-", nil, nil, nil, nil)
	if err := sh.Stream(context.Background(), bytes.NewReader(crashLog)); err != nil {
		t.Fatalf("ship while NATS is down: %v", err)
	}
	srv.Start()
	// Read with a connection of its own: the publisher's is reconnecting without a buffer.
	rc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if js, err = jetstream.New(rc); err != nil {
		t.Fatal(err)
	}

	want := strings.Split(strings.TrimSuffix(string(crashLog), "\n"), "\n")
	evs := events(t, js, topo, 30*time.Second, func(evs []schema.Event) bool { return len(evs) >= len(want) })
	if len(evs) != len(want) {
		t.Fatalf("%d lines in the stream, want %d (stats %+v)", len(evs), len(want), pub.Stats())
	}
	for i, e := range evs {
		if l := e.(*schema.EngineLog); l.Line != want[i] {
			t.Fatalf("line %d is %q, want %q", i, l.Line, want[i])
		}
	}
	if st := pub.Stats(); st.Spooled == 0 {
		t.Errorf("publisher stats %+v: nothing went through the spool, the outage was not exercised", st)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"COLLECTOR_SCRAPE_INTERVAL": "10ms"}, "COLLECTOR_SCRAPE_INTERVAL"},
		{map[string]string{"COLLECTOR_TARGETS": "localhost:8000/metrics"}, "COLLECTOR_TARGETS"},
		{map[string]string{"COLLECTOR_LOG_TIMEZONE": "Mars/Olympus"}, "COLLECTOR_LOG_TIMEZONE"},
		{map[string]string{"COLLECTOR_SPOOL_FSYNC": "sometimes"}, "COLLECTOR_SPOOL_FSYNC"},
		{map[string]string{"COLLECTOR_APP_MAX_TRACES": "0"}, "COLLECTOR_APP_MAX_TRACES"},
		{map[string]string{"COLLECTOR_APP_MAX_SPANS_PER_TRACE": "-1"}, "COLLECTOR_APP_MAX_SPANS_PER_TRACE"},
		{map[string]string{"COLLECTOR_APP_MAX_BYTES": "1048576"}, "COLLECTOR_APP_MAX_BYTES"},
		{map[string]string{"COLLECTOR_APP_TRACE_WAIT": "0s"}, "COLLECTOR_APP_TRACE_WAIT"},
	} {
		_, err := config.LoadFrom[Config](tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("env %v: error %v, want one naming %s", tc.env, err, tc.want)
		}
	}
	cfg := loadConfig(t, map[string]string{"COLLECTOR_TARGETS": "http://a:8000/metrics"})
	if cfg.ScrapeInterval != time.Second || cfg.OTLPGRPCAddr != ":4317" || cfg.OTLPHTTPAddr != ":4318" || cfg.EngineName() != "http://a:8000/metrics" ||
		!cfg.AppSpans || cfg.AppMaxTraces != 10000 || cfg.AppMaxSpansPerTrace != 512 || cfg.AppMaxBytes != 64<<20 || cfg.AppTraceWait != 30*time.Second {
		t.Errorf("defaults: %+v", cfg)
	}
	if _, err := config.LoadFrom[Config](map[string]string{"COLLECTOR_APP_SPANS": "false", "COLLECTOR_APP_MAX_TRACES": "0"}); err != nil {
		t.Errorf("bounds of a disabled application path are not checked: %v", err)
	}
	if got := ParseLogFiles([]string{"/var/log/a.log", "b=/var/log/b.log"}, "x"); len(got) != 2 || got[0].Engine != "x" || got[1] != (LogFile{"b", "/var/log/b.log"}) {
		t.Errorf("log files %+v", got)
	}
	if _, err := New(loadConfig(t, map[string]string{"COLLECTOR_OTLP_GRPC_ADDR": "256.0.0.1:1", "COLLECTOR_OTLP_HTTP_ADDR": Off, "COLLECTOR_METRICS_ADDR": Off}), nil, nil, nil); err == nil || !strings.Contains(err.Error(), "OTLP gRPC") {
		t.Errorf("bad listen address: %v", err)
	}
}

// TestSpanNaming: the engine names the receiver may give spans are the configured ones, with the
// same default as the logs'.
func TestSpanNaming(t *testing.T) {
	for _, tc := range []struct {
		env        map[string]string
		dflt       string
		configured []string
	}{
		{map[string]string{"COLLECTOR_TARGETS": "qwen-a=http://a:8000/metrics"}, "qwen-a", []string{"qwen-a"}},
		{map[string]string{"COLLECTOR_TARGETS": "http://a:8000/metrics", "COLLECTOR_LOG_FILES": "/var/log/a.log"},
			"http://a:8000/metrics", []string{"http://a:8000/metrics"}},
		{map[string]string{"COLLECTOR_TARGETS": "a=http://a:8000/metrics,b=http://b:8000/metrics", "COLLECTOR_LOG_FILES": "b=/var/log/b.log"},
			"vllm", []string{"a", "b"}},
		{map[string]string{"COLLECTOR_ENGINE": "qwen-a"}, "qwen-a", []string{"qwen-a"}},
		{map[string]string{}, "vllm", nil},
	} {
		cfg := loadConfig(t, tc.env)
		n := cfg.SpanNaming()
		if n.Default != tc.dflt || !slices.Equal(n.Configured, tc.configured) {
			t.Errorf("env %v: naming %+v, want default %q configured %v", tc.env, n, tc.dflt, tc.configured)
		}
	}
}
