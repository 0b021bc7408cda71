// Command bench-collector measures the collector's application-span path: OTLP/HTTP exports of
// applications' spans into the OTLP receiver, whose apptrace.Assembler (default bounds) combines
// each trace into one app.record published with schema/publish to the real JetStream named by
// SERVESCOPE_NATS_URL (own subject prefix and streams, deleted at the end). Receiver, assembler,
// publisher and the load generator run in this one process, so the memory figures include the
// load generator's (an upper bound for the collector's).
//
// The spans are the shapes dev/appspans emits with the OpenTelemetry Go SDK — OpenInference's
// LlamaIndex instrumentation (11 spans a trace, with a reranker), the GenAI conventions (6 spans)
// and OpenLLMetry (4 spans) — captured once as OTLP protobuf; each export repeats them with fresh
// trace ids (the 16 id bytes are replaced in the encoded body, so generating load costs little).
//
// Three phases:
//
//   - paced: -rate spans/s offered for -for, in exports of about -spans-per-export spans from
//     -concurrency clients. Reported: the spans/s the receiver accepted (acknowledged exports over
//     the phase's wall time) and whether every trace became a published app.record.
//   - saturate: the same exports, unpaced, for -saturate-for: the most spans/s the path takes here.
//   - flood: the same spans without their root spans, unpaced, for -flood-for: no trace ever
//     completes, so every one waits until the buffer's bounds evict it. Reported: the peak of
//     traces and bytes buffered against the bounds (MaxTraces, MaxBytes).
//
// Memory is sampled every 50 ms across all phases: the Go heap in use (runtime/metrics
// /memory/classes/heap/objects:bytes), the live heap after the last GC (/gc/heap/live:bytes) and
// the process's peak resident set (VmHWM of /proc/self/status).
//
// The last line is one JSON object. Targets: the paced phase accepts at least 99% of -rate with
// no failed export and every trace published; the flood stays within the assembler's bounds; the
// heap in use stays under -target-heap-mib. It exits 1 when a target is missed.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/servescope/servescope/internal/service"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/servescope/servescope/dev/appspans"
	"github.com/servescope/servescope/dev/benchkit"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/services/collector/apptrace"
	"github.com/servescope/servescope/services/collector/otlp"
)

type settings struct {
	rate           float64
	paceFor        time.Duration
	saturateFor    time.Duration
	floodFor       time.Duration
	spansPerExport int
	concurrency    int
	targetHeapMiB  float64
	cpuProfile     string
}

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("bench-collector", "Usage: bench-collector [flags]\n\nThe engine of scripts/bench collector: OTLP application spans through the receiver and apptrace into JetStream.")
	var s settings
	c.Flags.Float64Var(&s.rate, "rate", 10_000, "spans per second offered in the paced phase (the target rate)")
	c.Flags.DurationVar(&s.paceFor, "for", 20*time.Second, "length of the paced phase")
	c.Flags.DurationVar(&s.saturateFor, "saturate-for", 10*time.Second, "length of the unpaced phase")
	c.Flags.DurationVar(&s.floodFor, "flood-for", 10*time.Second, "length of the root-less flood")
	c.Flags.IntVar(&s.spansPerExport, "spans-per-export", 200, "spans per OTLP export, about (whole traces)")
	c.Flags.IntVar(&s.concurrency, "concurrency", 4, "concurrent exporting clients")
	c.Flags.Float64Var(&s.targetHeapMiB, "target-heap-mib", 256, "most Go heap in use allowed, MiB, over the whole run")
	c.Flags.StringVar(&s.cpuProfile, "cpuprofile", "", "write a CPU profile of the saturate phase to this file")
	c.Run = func(_ context.Context, log *slog.Logger, _ []string) error {
		return benchkit.Verdict(run(s, log))
	}
	return c
}

func run(s settings, log *slog.Logger) (bool, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	streams, err := benchkit.OpenStreams(ctx, "bench-collector", fmt.Sprintf("bench_collector_%d", time.Now().UnixNano()), 1<<30)
	if err != nil {
		return false, err
	}
	defer streams.Close()
	spool, err := streams.Spool("bench-collector")
	if err != nil {
		return false, err
	}
	pub, err := publish.New(streams.Conn, streams.NATS.SubjectPrefix, publish.Config{SpoolDir: spool, Logger: log})
	if err != nil {
		return false, err
	}

	reg := prometheus.NewRegistry()
	asm, err := apptrace.NewAssembler(apptrace.Config{}, pub, log, reg)
	if err != nil {
		return false, err
	}
	rcv, err := otlp.NewReceiver(pub, otlp.Naming{Default: "vllm"}, log, reg, otlp.WithAppSpans(asm))
	if err != nil {
		return false, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return false, err
	}
	srvCtx, stopSrv := context.WithCancel(ctx)
	defer stopSrv()
	served := make(chan error, 1)
	go func() { served <- rcv.ServeHTTPOn(srvCtx, ln) }()
	asmDone := make(chan error, 1)
	go func() { asmDone <- asm.Run(srvCtx) }()
	url := "http://" + ln.Addr().String() + "/v1/traces"

	templates, err := captureTemplates(ctx)
	if err != nil {
		return false, err
	}
	full, err := newExportBuilder(templates, s.spansPerExport, false)
	if err != nil {
		return false, err
	}
	rootless, err := newExportBuilder(templates, s.spansPerExport, true)
	if err != nil {
		return false, err
	}

	mem := startMemSampler(ctx, reg)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: s.concurrency, MaxConnsPerHost: s.concurrency}, Timeout: 30 * time.Second}
	out := map[string]any{
		"benchmark": "collector-app-spans", "rate_offered_spans_per_s": s.rate, "spans_per_export": full.spans,
		"traces_per_export": full.traces, "concurrency": s.concurrency, "gomaxprocs": runtime.GOMAXPROCS(0),
		"bounds": map[string]any{"max_traces": asm.Config().MaxTraces, "max_bytes": asm.Config().MaxBytes,
			"max_spans_per_trace": asm.Config().MaxSpansPerTrace, "max_wait_s": asm.Config().MaxWait.Seconds()},
	}

	publishedBefore := counter(reg, "servescope_collector_app_traces_total", "published")
	paced := load(ctx, client, url, full, s.concurrency, s.rate, s.paceFor)
	// Every trace of the paced phase had its root in the same export: its record is published
	// before the export is acknowledged.
	pacedPublished := counter(reg, "servescope_collector_app_traces_total", "published") - publishedBefore
	fmt.Printf("paced:     offered %.0f spans/s for %s: accepted %.0f spans/s (%d exports, %d failed), %d traces, %d app.records published\n",
		s.rate, s.paceFor, paced.spansPerSecond(), paced.exports, paced.failed, paced.traces, int64(pacedPublished))
	if s.cpuProfile != "" {
		f, err := os.Create(s.cpuProfile)
		if err != nil {
			return false, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return false, err
		}
	}
	saturate := load(ctx, client, url, full, s.concurrency, 0, s.saturateFor)
	pprof.StopCPUProfile()
	fmt.Printf("saturate:  %.0f spans/s (%d exports, %d failed), %.0f spans per CPU second of this process (%.1f CPU s)\n",
		saturate.spansPerSecond(), saturate.exports, saturate.failed, saturate.spansPerCPUSecond(), saturate.cpu.Seconds())
	mem.resetBuffered()
	flood := load(ctx, client, url, rootless, s.concurrency, 0, s.floodFor)
	peakTraces, peakBytes := mem.buffered()
	fmt.Printf("flood:     %.0f root-less spans/s (%d exports, %d failed): at most %d traces and %d bytes buffered (bounds %d, %d)\n",
		flood.spansPerSecond(), flood.exports, flood.failed, peakTraces, peakBytes, asm.Config().MaxTraces, asm.Config().MaxBytes)

	stopSrv()
	<-served
	<-asmDone
	cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
	defer ccancel()
	if err := pub.Close(cctx); err != nil {
		return false, fmt.Errorf("close publisher: %w", err)
	}
	peak := mem.stop()
	stats := pub.Stats()
	fmt.Printf("memory:    heap in use peak %.1f MiB, live heap peak %.1f MiB, process peak RSS %.1f MiB\n",
		mib(peak.heapInUse), mib(peak.heapLive), mib(peak.rss))
	fmt.Printf("publisher: %d app.records acknowledged, %d spooled, %d dropped\n", stats.Published+stats.Replayed, stats.Spooled, stats.Dropped)

	rateMet := paced.spansPerSecond() >= 0.99*s.rate && paced.failed == 0 && int64(pacedPublished) == paced.traces
	boundsMet := peakTraces <= int64(asm.Config().MaxTraces) && peakBytes <= asm.Config().MaxBytes && flood.failed == 0
	heapMet := mib(peak.heapInUse) <= s.targetHeapMiB
	met := rateMet && boundsMet && heapMet
	out["paced"] = paced.json(map[string]any{"app_records_published": int64(pacedPublished)})
	out["saturate"] = saturate.json(nil)
	out["flood"] = flood.json(map[string]any{"peak_traces_buffered": peakTraces, "peak_buffered_bytes": peakBytes})
	out["spans_per_s"] = round(paced.spansPerSecond())
	out["max_spans_per_s"] = round(saturate.spansPerSecond())
	out["spans_per_cpu_s"] = round(saturate.spansPerCPUSecond())
	out["heap_inuse_peak_bytes"] = peak.heapInUse
	out["heap_live_peak_bytes"] = peak.heapLive
	out["rss_peak_bytes"] = peak.rss
	out["publisher"] = map[string]any{"acknowledged": stats.Published + stats.Replayed, "spooled": stats.Spooled, "dropped": stats.Dropped}
	out["targets"] = map[string]any{"spans_per_s": s.rate, "heap_inuse_mib": s.targetHeapMiB, "buffered_within_bounds": true}
	out["rate_target_met"], out["bounds_target_met"], out["heap_target_met"] = rateMet, boundsMet, heapMet
	out["targets_met"] = met
	return met, benchkit.PrintResult(out)
}

// captureTemplates runs each instrumentation shape through the Go SDK's OTLP/HTTP exporter into
// a capturing endpoint and returns one OTLP export a trace.
func captureTemplates(ctx context.Context) ([]ptrace.Traces, error) {
	var (
		mu  sync.Mutex
		got []ptrace.Traces
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, req.Traces())
		mu.Unlock()
		out, _ := ptraceotlp.NewExportResponse().MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	defer srv.Close()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Hour)),
		sdktrace.WithResource(appspans.PythonResource("bench-app", attribute.String(apptrace.AttrIndexVersion, "kb-2026-11"))))
	docs := []appspans.Doc{{ID: "kv-cache-01", Score: 0.83}, {ID: "batching-02", Score: 0.71}, {ID: "prefill-03", Score: 0.64}, {ID: "spec-04", Score: 0.52}}
	req := appspans.Request{Question: "Why does queue wait stay at zero?", Docs: docs, Reranked: docs[:2],
		EmbeddingModel: "text-embedding-3-small", Model: "servescope/sim-7b", PromptVersion: "rag-prompt-v3", DataSource: "kb"}
	req.Call = func(context.Context) (appspans.Answer, error) {
		return appspans.Answer{ResponseID: "chatcmpl-bench", Model: req.Model, Text: "an answer [1]", PromptTokens: 180, CompletionTokens: 24, CachedTokens: 96, FinishReason: "stop"}, nil
	}
	for _, emit := range []func() error{
		func() error { return appspans.LlamaIndex(ctx, tp, req) },
		func() error {
			return appspans.GenAI(ctx, tp, req, appspans.GenAIOptions{Latest: true, ServerSpan: true,
				Attrs: []attribute.KeyValue{attribute.Bool(apptrace.AttrCacheHit, false)}})
		},
		func() error { return appspans.OpenLLMetry(ctx, tp, req) },
	} {
		if err := emit(); err != nil {
			return nil, err
		}
		if err := tp.ForceFlush(ctx); err != nil {
			return nil, fmt.Errorf("capture the instrumentations' spans: %w", err)
		}
	}
	if err := tp.Shutdown(ctx); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		return nil, fmt.Errorf("captured %d exports of the instrumentations' spans, want 3", len(got))
	}
	return got, nil
}

// exportBuilder makes OTLP/HTTP protobuf bodies of whole traces with fresh trace ids.
type exportBuilder struct {
	body   []byte
	ids    [][16]byte // the template trace ids in body
	spans  int
	traces int
}

func newExportBuilder(templates []ptrace.Traces, spansPerExport int, dropRoots bool) (*exportBuilder, error) {
	td := ptrace.NewTraces()
	b := &exportBuilder{}
	for b.spans < spansPerExport {
		t := templates[b.traces%len(templates)]
		var id [16]byte
		for i := range id {
			id[i] = byte(rand.IntN(256))
		}
		rss := t.ResourceSpans()
		for i := 0; i < rss.Len(); i++ {
			rs := td.ResourceSpans().AppendEmpty()
			rss.At(i).CopyTo(rs)
			rs.ScopeSpans().RemoveIf(func(ss ptrace.ScopeSpans) bool {
				ss.Spans().RemoveIf(func(s ptrace.Span) bool { return dropRoots && s.ParentSpanID().IsEmpty() })
				for j := 0; j < ss.Spans().Len(); j++ {
					ss.Spans().At(j).SetTraceID(pcommon.TraceID(id))
					b.spans++
				}
				return ss.Spans().Len() == 0
			})
		}
		b.ids = append(b.ids, id)
		b.traces++
	}
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		return nil, err
	}
	for _, id := range b.ids {
		if n := bytes.Count(body, id[:]); n == 0 {
			return nil, errors.New("a template trace id is not in the encoded export")
		}
	}
	b.body = body
	return b, nil
}

// next returns a copy of the body with fresh trace ids.
func (b *exportBuilder) next(r *rand.Rand) []byte {
	out := bytes.Clone(b.body)
	for _, id := range b.ids {
		var fresh [16]byte
		for i := 0; i < 16; i += 8 {
			v := r.Uint64()
			for j := 0; j < 8; j++ {
				fresh[i+j] = byte(v >> (8 * j))
			}
		}
		replaceAll(out, id[:], fresh[:])
	}
	return out
}

// replaceAll replaces, in place, every occurrence of old in b by repl (of the same length).
func replaceAll(b, old, repl []byte) {
	for i := 0; ; {
		j := bytes.Index(b[i:], old)
		if j < 0 {
			return
		}
		copy(b[i+j:], repl)
		i += j + len(old)
	}
}

// phase is one load phase's outcome.
type phase struct {
	exports, failed, traces, spans int64
	elapsed                        time.Duration
	// cpu is this process's CPU time (user + system) over the phase: receiver, assembler,
	// publisher and load generator together.
	cpu      time.Duration
	firstErr string
}

// spansPerCPUSecond is the accepted spans per second of this process's CPU: what one core of its
// own would take, whatever share of the shared machine the phase got.
func (p phase) spansPerCPUSecond() float64 {
	if p.cpu <= 0 {
		return 0
	}
	return float64(p.spans) / p.cpu.Seconds()
}

// cpuTime is this process's CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (p phase) spansPerSecond() float64 {
	if p.elapsed <= 0 {
		return 0
	}
	return float64(p.spans) / p.elapsed.Seconds()
}

func (p phase) json(extra map[string]any) map[string]any {
	m := map[string]any{"exports": p.exports, "failed_exports": p.failed, "traces": p.traces, "spans": p.spans,
		"elapsed_s": round(p.elapsed.Seconds()), "spans_per_s": round(p.spansPerSecond()),
		"cpu_s": round(p.cpu.Seconds()), "spans_per_cpu_s": round(p.spansPerCPUSecond())}
	if p.firstErr != "" {
		m["first_error"] = p.firstErr
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// load sends exports from concurrency clients for d: at rate spans/s, or as fast as the receiver
// takes them when rate is 0. Only acknowledged exports count as accepted spans.
func load(ctx context.Context, client *http.Client, url string, b *exportBuilder, concurrency int, rate float64, d time.Duration) phase {
	var (
		exports, failed atomic.Int64
		firstErr        atomic.Value
		wg              sync.WaitGroup
	)
	tokens := make(chan struct{}, concurrency)
	cpu0 := cpuTime()
	start := time.Now()
	deadline := start.Add(d)
	pctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	go func() {
		defer close(tokens)
		if rate <= 0 {
			for {
				select {
				case tokens <- struct{}{}:
				case <-pctx.Done():
					return
				}
			}
		}
		// The n-th export is due at start + n × (spans per export / rate); a late client makes
		// the exports due meanwhile wait, so the accepted rate shows a receiver that falls behind.
		every := time.Duration(float64(time.Second) * float64(b.spans) / rate)
		for n := 0; ; n++ {
			due := start.Add(time.Duration(n) * every)
			if !due.Before(deadline) {
				return
			}
			if wait := time.Until(due); wait > 0 {
				select {
				case <-time.After(wait):
				case <-pctx.Done():
					return
				}
			}
			select {
			case tokens <- struct{}{}:
			case <-pctx.Done():
				return
			}
		}
	}()
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
			for range tokens {
				body := b.next(r)
				err := post(ctx, client, url, body)
				exports.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	p := phase{exports: exports.Load(), failed: failed.Load(), elapsed: time.Since(start), cpu: cpuTime() - cpu0}
	ok := p.exports - p.failed
	p.traces, p.spans = ok*int64(b.traces), ok*int64(b.spans)
	if e, _ := firstErr.Load().(string); e != "" {
		p.firstErr = e
	}
	return p
}

func post(ctx context.Context, client *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("export: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	er := ptraceotlp.NewExportResponse()
	if err := er.UnmarshalProto(raw); err == nil && er.PartialSuccess().RejectedSpans() > 0 {
		return fmt.Errorf("export: %d spans rejected: %s", er.PartialSuccess().RejectedSpans(), er.PartialSuccess().ErrorMessage())
	}
	return nil
}

// memPeaks are the highest values sampled.
type memPeaks struct{ heapInUse, heapLive, rss uint64 }

type memSampler struct {
	reg   *prometheus.Registry
	stopc chan struct{}
	done  chan struct{}

	mu                     sync.Mutex
	peak                   memPeaks
	peakTraces, peakBuffer int64
}

func startMemSampler(ctx context.Context, reg *prometheus.Registry) *memSampler {
	m := &memSampler{reg: reg, stopc: make(chan struct{}), done: make(chan struct{})}
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	go func() {
		defer close(m.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(samples)
			traces := int64(gauge(reg, "servescope_collector_app_traces_buffered"))
			held := int64(gauge(reg, "servescope_collector_app_buffered_bytes"))
			m.mu.Lock()
			m.peak.heapInUse = max(m.peak.heapInUse, samples[0].Value.Uint64())
			m.peak.heapLive = max(m.peak.heapLive, samples[1].Value.Uint64())
			m.peakTraces, m.peakBuffer = max(m.peakTraces, traces), max(m.peakBuffer, held)
			m.mu.Unlock()
			select {
			case <-t.C:
			case <-m.stopc:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return m
}

func (m *memSampler) resetBuffered() {
	m.mu.Lock()
	m.peakTraces, m.peakBuffer = 0, 0
	m.mu.Unlock()
}

func (m *memSampler) buffered() (traces, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peakTraces, m.peakBuffer
}

func (m *memSampler) stop() memPeaks {
	close(m.stopc)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.peak
	p.rss = vmHWM()
	return p
}

// vmHWM is the process's peak resident set from /proc/self/status, 0 when unreadable.
func vmHWM() uint64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

func find(reg *prometheus.Registry, name string) []*dto.Metric {
	mfs, err := reg.Gather()
	if err != nil {
		return nil
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

func gauge(reg *prometheus.Registry, name string) float64 {
	for _, m := range find(reg, name) {
		return m.GetGauge().GetValue()
	}
	return 0
}

func counter(reg *prometheus.Registry, name, result string) float64 {
	for _, m := range find(reg, name) {
		for _, l := range m.GetLabel() {
			if l.GetName() == "result" && l.GetValue() == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func round(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
