package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/services/consumer/app"
	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/sim"
	"github.com/servescope/servescope/sim/vllmsim/simtrace"
	simlog "github.com/servescope/servescope/sim/vllmsim/vllmlog"
)

// simRig is a vllmsim (served by httptest, its log in a file, its spans exported to the
// collector) and a collector publishing to the test's JetStream stream.
type simRig struct {
	sim     *sim.Sim
	api     *httptest.Server
	js      jetstream.JetStream
	topo    bus.Topology
	ncfg    config.NATS
	engErr  chan error
	stop    func()
	logPath string

	scrapes *testenv.ScrapeWatch
}

func startSimRig(t *testing.T, ecfg engine.Config, timeScale float64) *simRig {
	t.Helper()
	js, topo, ncfg := testenv.JetStream(t)
	pub, err := publish.New(testenv.NATS(t), ncfg.SubjectPrefix, publish.Config{SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "vllm.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}

	// The collector starts first so that its OTLP listener exists for the simulator's exporter;
	// its scrape target is filled in once the simulator serves.
	var apiURL string
	rig := &simRig{js: js, topo: topo, ncfg: ncfg, engErr: make(chan error, 1), logPath: logPath, scrapes: &testenv.ScrapeWatch{}}
	proxy := httptest.NewServer(rig.scrapes.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get(apiURL + "/metrics")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})))
	cfg := loadConfig(t, map[string]string{
		"COLLECTOR_TARGETS":         "sim=" + proxy.URL + "/metrics",
		"COLLECTOR_SCRAPE_INTERVAL": "100ms",
		// A scrape stalled by a busy machine would otherwise time out after 1 s and record up = 0,
		// which the window views rightly leave out.
		"COLLECTOR_SCRAPE_TIMEOUT":    "5s",
		"COLLECTOR_OTLP_GRPC_ADDR":    "127.0.0.1:0",
		"COLLECTOR_OTLP_HTTP_ADDR":    Off,
		"COLLECTOR_METRICS_ADDR":      Off,
		"COLLECTOR_LOG_FILES":         logPath,
		"COLLECTOR_LOG_POLL_INTERVAL": "20ms",
		"COLLECTOR_STATE_DIR":         filepath.Join(dir, "state"),
	})
	c, err := New(cfg, pub, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	clock := engine.NewClock(timeScale)
	exp, err := simtrace.New(ctx, c.OTLPGRPCAddr(), "grpc", clock)
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(sim.Options{Clock: clock, Engine: ecfg, LogWriter: logFile, Observers: []engine.Observer{exp}})
	api := httptest.NewServer(s.Handler)
	apiURL = api.URL
	rig.sim, rig.api = s, api
	go func() { rig.engErr <- s.Engine.Run(ctx) }()
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	var once sync.Once
	rig.stop = func() {
		once.Do(func() {
			// Each shutdown has its own generous bound (each returns as soon as it is done): a
			// shared few seconds spent by the first would spool what the last had to send.
			sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
			defer scancel()
			_ = exp.Shutdown(sctx)
			api.Close()
			proxy.Close()
			cancel()
			if err := <-ran; err != nil {
				t.Errorf("collector: %v", err)
			}
			pctx, pcancel := context.WithTimeout(context.Background(), time.Minute)
			defer pcancel()
			_ = pub.Close(pctx)
			logFile.Close()
		})
	}
	t.Cleanup(rig.stop)
	return rig
}

// overload sends n concurrent chat completions of maxTokens tokens and returns their ids.
func (r *simRig) overload(t *testing.T, n, maxTokens int) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range n {
		id := schema.NewRequestID()
		ids[id] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, err := r.chat(id, maxTokens)
			if err != nil || code != 200 {
				mu.Lock()
				t.Errorf("request %d: %d %v", i, code, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ids
}

// chat sends one non-streaming chat completion with the given X-Request-Id.
func (r *simRig) chat(id string, maxTokens int) (int, error) {
	body := fmt.Sprintf(`{"model":"servescope/sim-7b","messages":[{"role":"user","content":"Explain KV caches briefly."}],"max_tokens":%d,"ignore_eos":true}`, maxTokens)
	req, _ := http.NewRequest(http.MethodPost, r.api.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestSimOverload drives more concurrent requests than the simulator has slots and checks the
// samples (running capped at max_num_seqs, waiting > 0) and the spans (one per request, the
// request id equal to the X-Request-Id the gateway would send).
func TestSimOverload(t *testing.T) {
	t.Parallel()
	ecfg := engine.DefaultConfig()
	ecfg.MaxNumSeqs = 16
	// Real time: each wave of 16 requests lasts ~2.5 s, so the 100 ms scrapes see the slots full
	// and requests waiting even when a loaded machine delays them; at 4× speed a busy machine
	// took 4 samples in the whole overload and missed it.
	r := startSimRig(t, ecfg, 1)
	const n, maxTokens = 48, 150
	ids := r.overload(t, n, maxTokens)
	time.Sleep(300 * time.Millisecond)
	r.stop()

	got := byKind(events(t, r.js, r.topo, 30*time.Second, func(evs []schema.Event) bool {
		return len(byKind(evs)[schema.KindEngineSpan]) >= n
	}))
	maxRunning, maxWaiting := 0.0, 0.0
	for _, e := range got[schema.KindEngineSample] {
		s := e.(*schema.EngineSample)
		if !s.Up {
			continue
		}
		if s.NumRequestsRunning != nil && *s.NumRequestsRunning > maxRunning {
			maxRunning = *s.NumRequestsRunning
		}
		if s.NumRequestsWaiting != nil && *s.NumRequestsWaiting > maxWaiting {
			maxWaiting = *s.NumRequestsWaiting
		}
	}
	if maxRunning != 16 || maxWaiting == 0 {
		t.Errorf("over %d samples: max running %g (want the 16 slots), max waiting %g (want > 0)", len(got[schema.KindEngineSample]), maxRunning, maxWaiting)
	}
	t.Logf("%d samples: max running %g, max waiting %g", len(got[schema.KindEngineSample]), maxRunning, maxWaiting)
	spans := got[schema.KindEngineSpan]
	if len(spans) != n {
		t.Fatalf("%d spans, want %d", len(spans), n)
	}
	queued := 0
	for _, e := range spans {
		sp := e.(*schema.EngineSpan)
		if !ids[sp.RequestID] {
			t.Errorf("span request id %q (engine id %q) is none of the X-Request-Ids sent", sp.RequestID, sp.EngineRequestID)
		}
		delete(ids, sp.RequestID)
		if sp.QueueSeconds != nil && *sp.QueueSeconds > 0 {
			queued++
		}
		if sp.CompletionTokens == nil || *sp.CompletionTokens != maxTokens || sp.E2ESeconds == nil || sp.DecodeSeconds == nil {
			t.Errorf("span %+v", sp)
		}
	}
	t.Logf("%d spans, %d with queue time > 0", len(spans), queued)
	if queued < n-16 {
		t.Errorf("%d spans waited in the queue, want at least %d (the requests beyond the slots)", queued, n-16)
	}
}

// TestSimCrash runs the simulator in crash mode and checks that the stream holds the stats lines
// from before the crash and the OOM line with the bytes requested, after the engine is gone.
func TestSimCrash(t *testing.T) {
	t.Parallel()
	ecfg := engine.DefaultConfig()
	ecfg.CrashAtRunning = 10
	// 5×: the long requests hold their slots for 13 s of wall time, so the short ones meet
	// them however slowly a loaded machine sends them.
	r := startSimRig(t, ecfg, 5)
	var wg sync.WaitGroup
	send := func(k, tokens int) {
		for range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = r.chat(schema.NewRequestID(), tokens)
			}()
		}
	}
	// A few long requests first, so stats lines (every 10 simulated seconds) are written.
	send(5, 4000)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		raw, _ := os.ReadFile(r.logPath)
		if r.sim.Engine.Gauges().Running == 5 && strings.Contains(string(raw), "Running: 5 reqs") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the long requests are not running with a stats line logged after 2 minutes: %+v", r.sim.Engine.Gauges())
		}
		time.Sleep(50 * time.Millisecond)
	}
	send(10, 200)
	var crash *engine.CrashError
	select {
	case err := <-r.engErr:
		if !errors.As(err, &crash) {
			t.Fatalf("engine stopped with %v, want a crash", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the engine did not crash")
	}
	wg.Wait()
	// The collector ships what the engine wrote up to its death before it is stopped (a stopped
	// follower leaves the rest of the current file for its next start).
	raw, err := os.ReadFile(r.logPath)
	if err != nil {
		t.Fatal(err)
	}
	events(t, r.js, r.topo, 2*time.Minute, func(evs []schema.Event) bool {
		return len(byKind(evs)[schema.KindEngineLog]) >= strings.Count(string(raw), "\n")
	})
	r.stop()

	raw, err = os.ReadFile(r.logPath)
	if err != nil {
		t.Fatal(err)
	}
	nLines := strings.Count(string(raw), "\n")
	logs := byKind(events(t, r.js, r.topo, 30*time.Second, func(evs []schema.Event) bool {
		return len(byKind(evs)[schema.KindEngineLog]) >= nLines
	}))[schema.KindEngineLog]
	if len(logs) != nLines {
		t.Fatalf("%d engine.log events, want every one of the %d lines", len(logs), nLines)
	}
	var stats, oom *schema.EngineLog
	for _, e := range logs {
		l := e.(*schema.EngineLog)
		if l.Running != nil {
			stats = l
		}
		if l.OOMBytesRequested != nil {
			oom = l
		}
	}
	if stats == nil || *stats.Running == 0 || stats.KVCacheUsagePerc == nil {
		t.Errorf("last stats line: %+v", stats)
	}
	if oom == nil {
		t.Fatal("no OOM line")
	}
	t.Logf("%d log lines; last stats line %q; OOM line %q, bytes requested %d, frames %q", len(logs), stats.Line, oom.Line[:120], *oom.OOMBytesRequested, oom.Frames)
	// torch prints the caching allocator's block size for running × vocabulary × 4 bytes.
	if want := uint64(simlog.AllocationSize(crash.Info.RequestedBytes)); *oom.OOMBytesRequested != want {
		t.Errorf("OOM bytes requested %d, want %d (%d running × vocabulary × 4 = %d, as allocated)", *oom.OOMBytesRequested, want, crash.Info.Running, crash.Info.RequestedBytes)
	}
	if oom.ExceptionType != "torch.OutOfMemoryError" || len(oom.Frames) == 0 || oom.Frames[len(oom.Frames)-1] != "vllm/model_executor/layers/utils.py:apply_penalties" || oom.EngineIndex != "0" {
		t.Errorf("OOM line: type %q frames %q", oom.ExceptionType, oom.Frames)
	}
}

// TestSimWindowAveragesInClickHouse runs the overload through the real consumer into ClickHouse
// and checks the views: the timeline shows the slot limit and the queue, and the per-window
// averages read from the cumulative histograms agree within 10% with the means of the engine's
// own per-request spans.
func TestSimWindowAveragesInClickHouse(t *testing.T) {
	t.Parallel()
	conn, chcfg := testenv.ClickHouse(t)
	ecfg := engine.DefaultConfig()
	ecfg.MaxNumSeqs = 16
	r := startSimRig(t, ecfg, 4)
	r.scrapes.WaitAfter(t, time.Time{}) // an idle sample: the window's starting values
	from := time.Now().UTC()
	const n = 48
	r.overload(t, n, 200)
	r.scrapes.WaitAfter(t, time.Now()) // a sample after the last request finished
	to := time.Now().UTC()
	r.stop()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ccfg := app.Config{Consumer: config.Consumer{Durable: "collector-test", BatchRows: 1000, FlushInterval: 200 * time.Millisecond},
		MetricsAddr: ln.Addr().String(), NATS: r.ncfg, ClickHouse: chcfg}
	testenv.Provision(t, r.js, r.ncfg, ccfg.DurableConsumer())
	cctx, ccancel := context.WithCancel(context.Background())
	consumed := make(chan error, 1)
	go func() {
		consumed <- app.Run(cctx, ccfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ln)
	}()
	defer func() {
		ccancel()
		if err := <-consumed; err != nil {
			t.Errorf("consumer: %v", err)
		}
	}()

	spans := byKind(events(t, r.js, r.topo, 30*time.Second, func(evs []schema.Event) bool {
		return len(byKind(evs)[schema.KindEngineSpan]) >= n
	}))[schema.KindEngineSpan]
	mean := map[string]float64{}
	for _, e := range spans {
		sp := e.(*schema.EngineSpan)
		for name, v := range map[string]*float64{"queue_s": sp.QueueSeconds, "prefill_s": sp.PrefillSeconds, "ttft_s": sp.TTFTSeconds, "decode_s": sp.DecodeSeconds, "e2e_s": sp.E2ESeconds} {
			mean[name] += *v / n
		}
		mean["prompt_tokens"] += float64(*sp.PromptTokens) / n
		mean["generation_tokens"] += float64(*sp.CompletionTokens) / n
	}

	ctx := clickhouse.Context(context.Background(), clickhouse.WithParameters(clickhouse.Parameters{
		"from": from.Format("2006-01-02 15:04:05.000000"), "to": to.Format("2006-01-02 15:04:05.000000"),
	}))
	var row struct {
		Requests       *float64 `ch:"requests"`
		QueueSeconds   *float64 `ch:"queue_s"`
		PrefillSeconds *float64 `ch:"prefill_s"`
		TTFTSeconds    *float64 `ch:"ttft_s"`
		DecodeSeconds  *float64 `ch:"decode_s"`
		E2ESeconds     *float64 `ch:"e2e_s"`
		Prompt         *float64 `ch:"prompt_tokens"`
		Generation     *float64 `ch:"generation_tokens"`
		MaxRunning     *float64 `ch:"max_running"`
		MaxWaiting     *float64 `ch:"max_waiting"`
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := conn.QueryRow(ctx, "SELECT requests, queue_s, prefill_s, ttft_s, decode_s, e2e_s, prompt_tokens, generation_tokens, max_running, max_waiting "+
			"FROM engine_window_averages(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')}) WHERE engine = 'sim'").ScanStruct(&row)
		if err == nil && row.Requests != nil && *row.Requests == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine_window_averages: %v, requests %v, want %d", err, deref(row.Requests), n)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if *row.MaxRunning != 16 || *row.MaxWaiting == 0 {
		t.Errorf("max running %g (want the 16 slots), max waiting %g (want > 0)", *row.MaxRunning, *row.MaxWaiting)
	}
	for name, got := range map[string]*float64{"queue_s": row.QueueSeconds, "prefill_s": row.PrefillSeconds, "ttft_s": row.TTFTSeconds, "decode_s": row.DecodeSeconds,
		"e2e_s": row.E2ESeconds, "prompt_tokens": row.Prompt, "generation_tokens": row.Generation} {
		want := mean[name]
		if got == nil || math.Abs(*got-want) > 0.1*want {
			t.Errorf("%s: window average %v, span mean %g (want within 10%%)", name, deref(got), want)
			continue
		}
		t.Logf("%s: window average %.4g, span mean %.4g", name, *got, want)
	}
}
