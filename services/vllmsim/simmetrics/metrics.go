// Package simmetrics exposes vllmsim's engine in Prometheus text format with vLLM V1's metric
// names, labels (model_name, engine) and histogram buckets (vllm/v1/metrics/loggers.py), so
// anything that scrapes a vLLM server scrapes the simulator unchanged. All durations are
// simulated seconds.
package simmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/services/vllmsim/engine"
)

var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
		5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

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

// Metrics is an engine.Observer that records vLLM's metrics in its own registry.
type Metrics struct {
	reg *prometheus.Registry

	ttft, queue, prefill, decode, itl, tpot, e2e, inference *prometheus.HistogramVec
	promptTokensH, genTokensH, maxTokensH, iterTokens       *prometheus.HistogramVec
	prefillKVComputed                                       *prometheus.HistogramVec
	success                                                 *prometheus.CounterVec
	promptTokens, genTokens, preemptions                    *prometheus.CounterVec
	prefixQueries, prefixHits                               *prometheus.CounterVec

	model string
}

// New registers every metric for model and reads the gauges from gauges at scrape time.
func New(model string, maxModelLen int, gauges func() engine.Gauges) *Metrics {
	reg := prometheus.NewRegistry()
	labels := []string{"model_name", "engine"}
	constLabels := prometheus.Labels{"model_name": model, "engine": "0"}
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		reg.MustRegister(h)
		return h
	}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append(append([]string{}, labels...), extra...))
		reg.MustRegister(c)
		return c
	}
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: constLabels}, f))
	}
	m := &Metrics{reg: reg, model: model}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", func() float64 { return float64(gauges().Running) })
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", func() float64 { return float64(gauges().Waiting) })
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", func() float64 { return gauges().KVCacheUsage })
	tokBuckets := buckets125(maxModelLen)
	m.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
	m.queue = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestLatencyBuckets)
	m.prefill = hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", requestLatencyBuckets)
	m.decode = hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", requestLatencyBuckets)
	m.inference = hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", requestLatencyBuckets)
	m.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestLatencyBuckets)
	m.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
	m.tpot = hist("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", itlBuckets)
	m.promptTokensH = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokBuckets)
	m.genTokensH = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", tokBuckets)
	m.maxTokensH = hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokBuckets)
	m.prefillKVComputed = hist("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill (excluding cached tokens).", tokBuckets)
	m.iterTokens = hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
		[]float64{1, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160, 168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256, 272, 288, 304, 320, 336, 352, 368, 384, 400, 416, 432, 448, 464, 480, 496, 512, 1024, 2048, 4096, 8192})
	m.success = counter("vllm:request_success_total", "Count of successfully processed requests.", "finished_reason")
	m.promptTokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
	m.genTokens = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
	m.preemptions = counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.")
	m.prefixQueries = counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.")
	m.prefixHits = counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.")
	// Pre-create the finished_reason series so a scrape before the first request already
	// carries every name.
	for _, r := range []string{"stop", "length", "abort"} {
		m.success.WithLabelValues(model, "0", r)
	}
	m.promptTokens.WithLabelValues(model, "0")
	m.genTokens.WithLabelValues(model, "0")
	m.preemptions.WithLabelValues(model, "0")
	m.prefixQueries.WithLabelValues(model, "0")
	m.prefixHits.WithLabelValues(model, "0")
	for _, h := range []*prometheus.HistogramVec{m.ttft, m.queue, m.prefill, m.decode, m.inference, m.e2e, m.itl, m.tpot,
		m.promptTokensH, m.genTokensH, m.maxTokensH, m.prefillKVComputed, m.iterTokens} {
		h.WithLabelValues(model, "0")
	}
	return m
}

// Registry is the registry to serve on /metrics.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// StepDone records per-step token counts and inter-token latencies.
func (m *Metrics) StepDone(s engine.StepStats) {
	m.iterTokens.WithLabelValues(m.model, "0").Observe(float64(s.ScheduledTokens))
	m.genTokens.WithLabelValues(m.model, "0").Add(float64(s.GenerationTokens))
	m.promptTokens.WithLabelValues(m.model, "0").Add(float64(s.PromptTokens))
	if s.Preemptions > 0 {
		m.preemptions.WithLabelValues(m.model, "0").Add(float64(s.Preemptions))
	}
	itl := m.itl.WithLabelValues(m.model, "0")
	for _, v := range s.InterTokenS {
		itl.Observe(v)
	}
}

// RequestFinished records the per-request histograms of a request that finished (stop or
// length); aborted requests only count in vllm:request_success_total{finished_reason="abort"}.
func (m *Metrics) RequestFinished(f *engine.Finished) {
	m.success.WithLabelValues(m.model, "0", f.FinishReason).Inc()
	if f.FinishReason == "abort" || f.OutputTokens == 0 {
		return
	}
	l := []string{m.model, "0"}
	m.ttft.WithLabelValues(l...).Observe(f.TTFTS())
	m.queue.WithLabelValues(l...).Observe(f.QueueS())
	m.prefill.WithLabelValues(l...).Observe(f.PrefillS())
	m.decode.WithLabelValues(l...).Observe(f.DecodeS())
	m.inference.WithLabelValues(l...).Observe(f.InferenceS())
	m.e2e.WithLabelValues(l...).Observe(f.E2ES())
	if f.OutputTokens > 1 {
		m.tpot.WithLabelValues(l...).Observe(f.DecodeS() / float64(f.OutputTokens-1))
	}
	m.promptTokensH.WithLabelValues(l...).Observe(float64(f.PromptTokens))
	m.genTokensH.WithLabelValues(l...).Observe(float64(f.OutputTokens))
	m.maxTokensH.WithLabelValues(l...).Observe(float64(f.MaxTokens))
	m.prefillKVComputed.WithLabelValues(l...).Observe(float64(f.PromptTokens - f.CachedTokens))
}

// PrefixCache counts prefix-cache lookups, in tokens.
func (m *Metrics) PrefixCache(queries, hits int) {
	m.prefixQueries.WithLabelValues(m.model, "0").Add(float64(queries))
	m.prefixHits.WithLabelValues(m.model, "0").Add(float64(hits))
}

// Stats is part of engine.Observer; interval stats go to the log, not to /metrics.
func (m *Metrics) Stats(engine.IntervalStats) {}

// Crashed is part of engine.Observer.
func (m *Metrics) Crashed(engine.CrashInfo) {}
