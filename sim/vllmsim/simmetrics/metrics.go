// Package simmetrics exposes vllmsim's engine on /metrics with the metric names, HELP texts,
// types, labels, units and histogram buckets of one vLLM release (vllm/v1/metrics/loggers.py for
// the V1 engine, vllm/engine/metrics.py for V0; see package release), so anything that scrapes a
// vLLM server scrapes the simulator unchanged, release by release. All durations are simulated
// seconds.
//
// Like vLLM's prometheus_client, the handler answers OpenMetrics 1.0 (with _created lines)
// whenever the request's Accept header names application/openmetrics-text, whatever its q-value,
// and the Prometheus text format otherwise.
package simmetrics

import (
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
		5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	iterationBuckets = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
)

// cudagraphBuckets is 0.8's build_cudagraph_buckets: the default CUDA graph capture sizes
// 1, 2, 4 and the multiples of 8 up to 512.
func cudagraphBuckets() []float64 {
	out := []float64{1, 2, 4}
	for v := 8; v <= 512; v += 8 {
		out = append(out, float64(v))
	}
	return out
}

// buckets125 is vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to max.
func buckets125(max int) []float64 {
	var out []float64
	for exp := 1; ; exp *= 10 {
		for _, m := range []int{1, 2, 5} {
			v := m * exp
			if v > max {
				return out
			}
			out = append(out, float64(v))
		}
	}
}

// blockSize converts 0.8's prefix-cache counters, which counted KV blocks, from tokens.
const blockSize = 16

// Metrics records one vLLM release's metrics in its own registry, for one engine or for the N
// engine cores of a data-parallel server (--data-parallel-size N), whose series vLLM tells apart
// by the `engine` label (vllm/v1/metrics/loggers.py make_per_engine). It is the engine.Observer
// of engine 0; Engine(i) is engine i's.
type Metrics struct {
	reg     *prometheus.Registry
	rel     vllmversion.Version
	labels  []string  // label values of engine 0's series: model (and engine "0" on V1)
	engines []*Engine // one per engine core

	ttft, queue, prefill, decode, inference, e2e *prometheus.HistogramVec
	itl, tpotPerToken, tpotPerRequest            *prometheus.HistogramVec
	promptTokensH, genTokensH, maxTokensH        *prometheus.HistogramVec
	iterTokens                                   *prometheus.HistogramVec
	success                                      *prometheus.CounterVec
	promptTokens, genTokens, preemptions         *prometheus.CounterVec
	prefixQueries, prefixHits                    []*prometheus.CounterVec
	// mu guards prefixQ and prefixH, written on the engine goroutine and read at scrape time.
	mu               sync.Mutex
	prefixQ, prefixH float64 // cumulative, for V0's hit-rate gauge
}

// New registers the metrics of vLLM's main branch for model; see [NewRelease].
func New(model string, maxModelLen int, gauges func() engine.Gauges) *Metrics {
	return NewRelease(model, maxModelLen, gauges, vllmversion.Main)
}

// NewRelease registers every metric rel (default main) exposes for model and reads the gauges
// from gauges at scrape time.
func NewRelease(model string, maxModelLen int, gauges func() engine.Gauges, rel vllmversion.Version) *Metrics {
	return NewDataParallel(model, maxModelLen, []func() engine.Gauges{gauges}, rel)
}

// NewDataParallel registers the metrics of a server with one engine core per element of gauges
// (their scheduler state at scrape time): every V1 series once per engine, labelled engine="i",
// as vLLM's PrometheusStatLogger exposes a data-parallel server's engines in one exposition. The
// V0 engine has no engine label and one engine.
func NewDataParallel(model string, maxModelLen int, gauges []func() engine.Gauges, rel vllmversion.Version) *Metrics {
	reg := prometheus.NewRegistry()
	labelNames := []string{"model_name", "engine"}
	m := &Metrics{reg: reg, rel: rel, labels: []string{model, "0"}}
	if !rel.V1Engine() {
		labelNames = []string{"model_name"}
		m.labels = []string{model}
		gauges = gauges[:1]
	}
	for i := range gauges {
		labels := []string{model}
		if rel.V1Engine() {
			labels = append(labels, strconv.Itoa(i))
		}
		m.engines = append(m.engines, &Engine{m: m, labels: labels})
	}
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labelNames)
		reg.MustRegister(h)
		for _, e := range m.engines {
			h.WithLabelValues(e.labels...)
		}
		return h
	}
	counter := func(name, help string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labelNames)
		reg.MustRegister(c)
		for _, e := range m.engines {
			c.WithLabelValues(e.labels...)
		}
		return c
	}
	// gauge registers one gauge per engine, each reading that engine's scheduler state.
	gauge := func(name, help string, f func(engine.Gauges) float64) {
		for i, e := range m.engines {
			constLabels := prometheus.Labels{}
			for k, n := range labelNames {
				constLabels[n] = e.labels[k]
			}
			g := gauges[i]
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: constLabels}, func() float64 { return f(g()) }))
		}
	}
	running := func(g engine.Gauges) float64 { return float64(g.Running) }
	waiting := func(g engine.Gauges) float64 { return float64(g.Waiting) }
	kv := func(g engine.Gauges) float64 { return g.KVCacheUsage }
	constant := func(v float64) func(engine.Gauges) float64 { return func(engine.Gauges) float64 { return v } }
	tokBuckets := buckets125(maxModelLen)

	switch rel {
	case vllmversion.V0_8V0:
		gauge("vllm:num_requests_running", "Number of requests currently running on GPU.", running)
		gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
		gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU. DEPRECATED: KV cache offloading is not used in V1", constant(0))
		gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", kv)
		gauge("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: KV cache offloading is not used in V1", constant(0))
		gauge("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate. DEPRECATED: KV cache offloading is not used in V1", constant(-1))
		gauge("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", func(engine.Gauges) float64 { return m.v0HitRate() })
		m.preemptions = counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.")
		m.promptTokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
		m.genTokens = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
		m.iterTokens = hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", iterationBuckets[:12])
		m.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
		m.tpotPerToken = hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", itlBuckets)
		m.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", requestLatencyBuckets)
		m.queue = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestLatencyBuckets)
		m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Count of successfully processed requests."}, append(labelNames, "finished_reason"))
		reg.MustRegister(m.success)
		return m
	case vllmversion.V0_8:
		gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
		gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
		gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", kv)
		m.prefixQueries = []*prometheus.CounterVec{counter("vllm:gpu_prefix_cache_queries_total", "GPU prefix cache queries, in terms of number of queried blocks.")}
		m.prefixHits = []*prometheus.CounterVec{counter("vllm:gpu_prefix_cache_hits_total", "GPU prefix cache hits, in terms of number of cached blocks.")}
	case vllmversion.V0_10:
		gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
		gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
		gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.", kv)
		m.prefixQueries = []*prometheus.CounterVec{counter("vllm:gpu_prefix_cache_queries_total", "GPU prefix cache queries, in terms of number of queriedtokens. DEPRECATED: Use vllm:prefix_cache_queries instead.")}
		m.prefixHits = []*prometheus.CounterVec{counter("vllm:gpu_prefix_cache_hits_total", "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.")}
		gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv)
		m.prefixQueries = append(m.prefixQueries, counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."))
		m.prefixHits = append(m.prefixHits, counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."))
	default:
		gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
		gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
		sleep := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:engine_sleep_state",
			Help: "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."},
			append(labelNames, "sleep_state"))
		reg.MustRegister(sleep)
		for _, e := range m.engines {
			sleep.WithLabelValues(e.with("awake")...).Set(1)
			sleep.WithLabelValues(e.with("weights_offloaded")...).Set(0)
			sleep.WithLabelValues(e.with("discard_all")...).Set(0)
		}
		gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv)
		m.prefixQueries = []*prometheus.CounterVec{counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.")}
		m.prefixHits = []*prometheus.CounterVec{counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.")}
		counter("vllm:external_prefix_cache_queries_total", "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.")
		counter("vllm:external_prefix_cache_hits_total", "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.")
		counter("vllm:mm_cache_queries_total", "Multi-modal cache queries, in terms of number of queried items.")
		counter("vllm:mm_cache_hits_total", "Multi-modal cache hits, in terms of number of cached items.")
	}
	// The V1 engine's common families (vllm/v1/metrics/loggers.py).
	m.preemptions = counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.")
	m.promptTokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
	m.genTokens = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Count of successfully processed requests."}, append(labelNames, "finished_reason"))
	reg.MustRegister(m.success)
	for _, e := range m.engines {
		for _, r := range []string{"stop", "length", "abort"} {
			m.success.WithLabelValues(e.with(r)...)
		}
	}
	m.promptTokensH = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokBuckets)
	m.genTokensH = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", tokBuckets)
	if rel == vllmversion.V0_8 {
		m.iterTokens = hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", cudagraphBuckets())
	} else {
		m.iterTokens = hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", iterationBuckets)
	}
	m.maxTokensH = hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokBuckets)
	m.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
	if rel == vllmversion.Main {
		m.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
		m.tpotPerRequest = hist("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", itlBuckets)
	} else {
		m.tpotPerToken = hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", itlBuckets)
	}
	m.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestLatencyBuckets)
	m.queue = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestLatencyBuckets)
	m.inference = hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", requestLatencyBuckets)
	m.prefill = hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", requestLatencyBuckets)
	m.decode = hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", requestLatencyBuckets)
	return m
}

// Registry is the registry behind the handler.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves /metrics as vLLM's prometheus_client does: OpenMetrics when the Accept header
// names application/openmetrics-text at all (prometheus_client ignores q-values), else the
// Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fams, err := m.reg.Gather()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		format := expfmt.NewFormat(expfmt.TypeTextPlain)
		var opts []expfmt.EncoderOption
		if strings.Contains(r.Header.Get("Accept"), "application/openmetrics-text") {
			format = expfmt.NewFormat(expfmt.TypeOpenMetrics)
			opts = append(opts, expfmt.WithCreatedLines())
		}
		w.Header().Set("Content-Type", string(format))
		enc := expfmt.NewEncoder(w, format, opts...)
		for _, f := range fams {
			if err := enc.Encode(f); err != nil {
				return
			}
		}
		if c, ok := enc.(expfmt.Closer); ok {
			_ = c.Close()
		}
	})
}

func (m *Metrics) v0HitRate() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.prefixQ == 0 {
		return 0
	}
	return m.prefixH / m.prefixQ
}

// Engine records one engine core's series (its label values); an engine.Observer.
type Engine struct {
	m      *Metrics
	labels []string
}

// Engine returns engine i's observer (0 ≤ i < the engines NewDataParallel was given).
func (m *Metrics) Engine(i int) *Engine { return m.engines[i] }

func (e *Engine) with(extra ...string) []string {
	return append(append([]string{}, e.labels...), extra...)
}

// StepDone records per-step token counts and inter-token latencies.
func (e *Engine) StepDone(s engine.StepStats) {
	m, l := e.m, e.labels
	m.iterTokens.WithLabelValues(l...).Observe(float64(s.ScheduledTokens))
	m.genTokens.WithLabelValues(l...).Add(float64(s.GenerationTokens))
	m.promptTokens.WithLabelValues(l...).Add(float64(s.PromptTokens))
	if s.Preemptions > 0 {
		m.preemptions.WithLabelValues(l...).Add(float64(s.Preemptions))
	}
	for _, v := range s.InterTokenSeconds {
		// vLLM observes one inter-token interval per decode step and request: main names the
		// histogram inter_token_latency_seconds, earlier releases time_per_output_token_seconds.
		if m.itl != nil {
			m.itl.WithLabelValues(l...).Observe(v)
		}
		if m.tpotPerToken != nil {
			m.tpotPerToken.WithLabelValues(l...).Observe(v)
		}
	}
}

// RequestFinished records the per-request histograms of a request that finished (stop or
// length); aborted requests only count in vllm:request_success_total{finished_reason="abort"}.
func (e *Engine) RequestFinished(f *engine.Finished) {
	m, l := e.m, e.labels
	m.success.WithLabelValues(e.with(f.FinishReason)...).Inc()
	if f.FinishReason == "abort" || f.OutputTokens == 0 {
		return
	}
	m.ttft.WithLabelValues(l...).Observe(f.TTFTSeconds())
	m.queue.WithLabelValues(l...).Observe(f.QueueSeconds())
	m.e2e.WithLabelValues(l...).Observe(f.E2ESeconds())
	if !m.rel.V1Engine() {
		return
	}
	m.prefill.WithLabelValues(l...).Observe(f.PrefillSeconds())
	m.decode.WithLabelValues(l...).Observe(f.DecodeSeconds())
	m.inference.WithLabelValues(l...).Observe(f.InferenceSeconds())
	if m.tpotPerRequest != nil {
		// vllm/v1/metrics/stats.py: mean_time_per_output_token is decode ÷ (tokens − 1), and 0
		// for a request of one token, which is observed all the same.
		tpot := 0.0
		if f.OutputTokens > 1 {
			tpot = f.DecodeSeconds() / float64(f.OutputTokens-1)
		}
		m.tpotPerRequest.WithLabelValues(l...).Observe(tpot)
	}
	m.promptTokensH.WithLabelValues(l...).Observe(float64(f.PromptTokens))
	m.genTokensH.WithLabelValues(l...).Observe(float64(f.OutputTokens))
	m.maxTokensH.WithLabelValues(l...).Observe(float64(f.MaxTokens))
}

// PrefixCache counts prefix-cache lookups (given in tokens): V1 counters in tokens (0.8: in KV
// blocks), V0's cumulative hit-rate gauge.
func (e *Engine) PrefixCache(queries, hits int) {
	m := e.m
	m.mu.Lock()
	m.prefixQ += float64(queries)
	m.prefixH += float64(hits)
	m.mu.Unlock()
	q, h := float64(queries), float64(hits)
	if m.rel == vllmversion.V0_8 {
		q, h = float64(queries/blockSize), float64(hits/blockSize)
	}
	for _, c := range m.prefixQueries {
		c.WithLabelValues(e.labels...).Add(q)
	}
	for _, c := range m.prefixHits {
		c.WithLabelValues(e.labels...).Add(h)
	}
}

// Stats is part of engine.Observer; interval stats go to the log, not to /metrics.
func (e *Engine) Stats(engine.IntervalStats) {}

// Crashed is part of engine.Observer.
func (e *Engine) Crashed(engine.CrashInfo) {}

// StepDone, RequestFinished, PrefixCache, Stats and Crashed make Metrics engine 0's observer.
func (m *Metrics) StepDone(s engine.StepStats)        { m.engines[0].StepDone(s) }
func (m *Metrics) RequestFinished(f *engine.Finished) { m.engines[0].RequestFinished(f) }
func (m *Metrics) PrefixCache(queries, hits int)      { m.engines[0].PrefixCache(queries, hits) }
func (m *Metrics) Stats(s engine.IntervalStats)       { m.engines[0].Stats(s) }
func (m *Metrics) Crashed(c engine.CrashInfo)         { m.engines[0].Crashed(c) }
