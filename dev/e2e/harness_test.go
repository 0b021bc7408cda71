package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/services/collector/collector"
	"github.com/servescope/servescope/services/consumer/app"
	"github.com/servescope/servescope/services/gateway/server"
	"github.com/servescope/servescope/sim/loadgen/load"
	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/sim"
	"github.com/servescope/servescope/sim/vllmsim/simtrace"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// engineName is the simulator's name in engine_samples (the collector's target name) and in
// engine_spans (the service.name vLLM's OTLP exporter sends).
const engineName = "vllm"

// store is the back half of the pipeline: the test's JetStream prefix, its ClickHouse database
// and a consumer moving events from one to the other.
type store struct {
	Conn driver.Conn
	CH   config.ClickHouse
	// NATS is what the setup step is given; the services get it too unless
	// pipelineOptions.ServiceNATS changes their copy.
	NATS config.NATS
	// SetUp runs the setup step (the streams and the consumer's durable consumer) with NATS, as
	// `servescope migrate up` does; startStore runs it unless told to leave it to the test.
	SetUp func() []bus.Applied
}

// pipeline is the whole path: vllmsim ← gateway, collector ← vllmsim's /metrics and spans,
// consumer → ClickHouse.
type pipeline struct {
	store
	Sim        *sim.Sim
	SimURL     string // the engine's base URL (OpenAI API, /tokenize, /metrics)
	GatewayURL string // the gateway's base URL in front of it
	OTLPAddr   string // the collector's OTLP/gRPC listener (host:port), for applications' spans
	TimeScale  float64
	scrapes    *testenv.ScrapeWatch
}

// pipelineOptions configure startPipeline.
type pipelineOptions struct {
	Engine    engine.Config // zero value: engine.DefaultConfig()
	TimeScale float64       // simulated seconds per wall second; 0 = 20
	// WrapEngine, when set, wraps the simulator's HTTP handler (to see what the engine sent).
	WrapEngine func(http.Handler) http.Handler
	// Log, when set, gives each service's logger ("gateway", "collector", "consumer"); the
	// default discards the logs.
	Log func(service string) *slog.Logger
	// ServiceNATS, when set, changes the NATS settings the services get (not the setup step's):
	// their own stream limits, which they compare with the streams'.
	ServiceNATS func(*config.NATS)
	// SetUpLater leaves the setup step to the test (store.SetUp), after the services started.
	SetUpLater bool
	// Version is the vLLM release the simulator imitates (default main).
	Version vllmversion.Version
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (o pipelineOptions) log(service string) *slog.Logger {
	if o.Log == nil {
		return discardLog()
	}
	return o.Log(service)
}

// serviceNATS is the NATS configuration the services get.
func (o pipelineOptions) serviceNATS(setup config.NATS) config.NATS {
	if o.ServiceNATS != nil {
		o.ServiceNATS(&setup)
	}
	return setup
}

// startStore gives the test its own JetStream prefix and ClickHouse database, sets them up
// (unless o.SetUpLater) and runs the consumer between them until the test ends (it stops last,
// after every publisher flushed).
func startStore(t *testing.T, o pipelineOptions) store {
	t.Helper()
	conn, ch := testenv.ClickHouse(t)
	js, _, ncfg := testenv.NATSPrefix(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ccfg := app.Config{Consumer: config.Consumer{Durable: "e2e", BatchRows: 5000, FlushInterval: 200 * time.Millisecond},
		MetricsAddr: ln.Addr().String(), NATS: o.serviceNATS(ncfg), ClickHouse: ch}
	setUp := func() []bus.Applied { return testenv.Provision(t, js, ncfg, ccfg.DurableConsumer()) }
	if !o.SetUpLater {
		setUp()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	clog := o.log("consumer")
	go func() { done <- app.Run(ctx, ccfg, clog, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
		// Every event the services published was valid: nothing went to ingest_errors.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var bad uint64
		var sample string
		if err := conn.QueryRow(ctx, "SELECT count(), any(reason) FROM ingest_errors").Scan(&bad, &sample); err != nil {
			t.Errorf("read ingest_errors: %v", err)
		} else if bad != 0 {
			t.Errorf("%d events landed in ingest_errors, e.g. %q", bad, sample)
		}
	})
	return store{Conn: conn, CH: ch, NATS: ncfg, SetUp: setUp}
}

// startPipeline starts every service of the path in-process on loopback ports chosen by the
// kernel, and stops them in order when the test ends: the gateway (drained, its publisher
// flushed), the simulator and its span exporter, the collector, then the consumer.
func startPipeline(t *testing.T, o pipelineOptions) *pipeline {
	t.Helper()
	if o.TimeScale == 0 {
		o.TimeScale = 20
	}
	if o.Engine.MaxNumSeqs == 0 {
		o.Engine = engine.DefaultConfig()
	}
	st := startStore(t, o)
	snats := o.serviceNATS(st.NATS)

	// The simulator's listener exists before the collector so the collector can be told its
	// /metrics URL, and the collector exists before the simulator so the simulator's span
	// exporter can be pointed at the collector's OTLP/gRPC port.
	api := httptest.NewUnstartedServer(nil)
	simURL := "http://" + api.Listener.Addr().String()
	dir := t.TempDir()
	ccfg, err := config.LoadFrom[collector.Config](map[string]string{
		"COLLECTOR_TARGETS":         engineName + "=" + simURL + "/metrics",
		"COLLECTOR_SCRAPE_INTERVAL": "100ms",
		// A scrape stalled by a busy CI machine would otherwise time out after 1 s and record
		// up = 0, which diagnose rightly reads as the engine going away.
		"COLLECTOR_SCRAPE_TIMEOUT": "5s",
		"COLLECTOR_OTLP_GRPC_ADDR": "127.0.0.1:0",
		"COLLECTOR_OTLP_HTTP_ADDR": collector.Off,
		"COLLECTOR_METRICS_ADDR":   collector.Off,
		"COLLECTOR_STATE_DIR":      filepath.Join(dir, "collector-state"),
		"COLLECTOR_SPOOL_DIR":      filepath.Join(dir, "collector-spool"),
	})
	if err != nil {
		t.Fatalf("collector config: %v", err)
	}
	ccfg.NATS = snats
	clog := o.log("collector")
	cpub, err := publish.New(testenv.NATS(t), ccfg.NATS.SubjectPrefix, ccfg.PublisherConfig(clog.With("component", "publish"), nil))
	if err != nil {
		t.Fatalf("collector publisher: %v", err)
	}
	col, err := collector.New(ccfg, cpub, clog, prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("collector: %v", err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	collected := make(chan error, 1)
	go func() { collected <- col.Run(cctx) }()

	clock := engine.NewClock(o.TimeScale)
	sctx, scancel := context.WithCancel(context.Background())
	exp, err := simtrace.New(sctx, col.OTLPGRPCAddr(), "grpc", clock, simtrace.WithVersion(o.Version))
	if err != nil {
		t.Fatalf("span exporter: %v", err)
	}
	s := sim.New(sim.Options{Clock: clock, Engine: o.Engine, Version: o.Version, Observers: []engine.Observer{exp}})
	scrapes := &testenv.ScrapeWatch{}
	api.Config.Handler = scrapes.Wrap(s.Handler)
	if o.WrapEngine != nil {
		api.Config.Handler = scrapes.Wrap(o.WrapEngine(s.Handler))
	}
	api.Start()
	ran := make(chan error, 1)
	go func() { ran <- s.Engine.Run(sctx) }()

	gcfg, err := config.LoadFrom[server.Config](map[string]string{
		"GATEWAY_LISTEN_ADDR":  "127.0.0.1:0",
		"GATEWAY_UPSTREAM_URL": simURL,
		"GATEWAY_SPOOL_DIR":    filepath.Join(dir, "gateway-spool"),
		"GATEWAY_NAME":         "gw-e2e",
	})
	if err != nil {
		t.Fatalf("gateway config: %v", err)
	}
	gcfg.NATS = snats
	gw, err := server.New(gcfg, o.log("gateway"))
	if err != nil {
		t.Fatalf("gateway: %v", err)
	}
	gctx, gcancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- gw.Run(gctx) }()

	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			gcancel()
			if err := <-served; err != nil {
				t.Errorf("gateway: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := exp.Shutdown(ctx); err != nil {
				t.Errorf("span exporter shutdown: %v", err)
			}
			api.Close()
			scancel()
			if err := <-ran; !errors.Is(err, context.Canceled) {
				t.Errorf("engine: %v", err)
			}
			ccancel()
			if err := <-collected; err != nil {
				t.Errorf("collector: %v", err)
			}
			if err := cpub.Close(ctx); err != nil {
				t.Errorf("collector publisher: %v", err)
			}
		})
	})
	return &pipeline{store: st, Sim: s, SimURL: simURL, GatewayURL: "http://" + gw.Addr(), OTLPAddr: col.OTLPGRPCAddr(), TimeScale: o.TimeScale, scrapes: scrapes}
}

// load runs loadgen through the gateway (reading the engine's /metrics directly, as an operator
// points it at vLLM) and returns its report with the wall-clock window the run took: from just
// before the first request to after the collector scraped the drained engine.
func (p *pipeline) load(t *testing.T, cfg load.Config) (*load.Report, window) {
	t.Helper()
	cfg.Target = p.GatewayURL
	cfg.MetricsURL = p.SimURL + "/metrics"
	cfg.TimeScale = p.TimeScale
	if cfg.Seed == 0 {
		cfg.Seed = 7
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = time.Minute
	}
	// A scrape of the idle engine at or before the window's start gives the window its starting
	// histogram values (engine_window_histograms reads the last sample at or before `from`).
	p.scrapes.WaitAfter(t, time.Time{})
	from := time.Now().UTC()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := load.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("loadgen: %v", err)
	}
	// A scrape after the last answer puts the drained engine's final values in the window. Both
	// scrapes are waited for: sleeping for a few scrape intervals is not enough when the scraper
	// is starved on a loaded machine.
	p.scrapes.WaitAfter(t, time.Now())
	w := window{From: from, To: time.Now().UTC()}
	if rep.Failed > 0 || rep.Succeeded == 0 {
		t.Fatalf("loadgen: %d sent, %d answered, %d failed %v %q", rep.Sent, rep.Succeeded, rep.Failed, rep.Errors, rep.ErrorSamples)
	}
	return rep, w
}

// window is a wall-clock interval [From, To).
type window struct{ From, To time.Time }

// waitIngested waits until ClickHouse holds a request row for each of the n requests that
// arrived in w and an engine span for each of them.
func (s store) waitIngested(t *testing.T, w window, n int) {
	t.Helper()
	waitFor(t, 60*time.Second, fmt.Sprintf("%d requests and their spans in ClickHouse", n), func(ctx context.Context) (bool, string, error) {
		var reqs, spans uint64
		err := s.Conn.QueryRow(ctx, `
			SELECT
			    (SELECT count() FROM requests FINAL
			     WHERE arrival_ts >= fromUnixTimestamp64Micro($1, 'UTC') AND arrival_ts < fromUnixTimestamp64Micro($2, 'UTC')),
			    (SELECT uniqExact(request_id) FROM engine_spans FINAL WHERE request_id IN
			        (SELECT request_id FROM requests FINAL
			         WHERE arrival_ts >= fromUnixTimestamp64Micro($1, 'UTC') AND arrival_ts < fromUnixTimestamp64Micro($2, 'UTC')))`,
			w.From.UnixMicro(), w.To.UnixMicro()).Scan(&reqs, &spans)
		return int(reqs) >= n && int(spans) >= n, fmt.Sprintf("%d requests, %d spans", reqs, spans), err
	})
}

// waitFor polls cond every 250 ms until it holds, failing the test after timeout with what
// cond last reported.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok, state, err := cond(ctx)
		cancel()
		if ok && err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s: last %s, error %v", timeout, what, state, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
