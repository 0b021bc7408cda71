// Package enginestats reads a vLLM server's /metrics (Prometheus text format, parsed with
// prometheus/common/expfmt) into the figures of docs/measurements.md's Four workloads table:
// per-request averages from the difference of histogram sums and counts between two scrapes, and
// maxima of the instantaneous gauges sampled during a run. Series of the same metric (several
// engines or models behind one endpoint) are summed.
package enginestats

import (
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// vLLM V1 metric names read by this package.
const (
	QueueTime        = "vllm:request_queue_time_seconds"
	PrefillTime      = "vllm:request_prefill_time_seconds"
	TTFT             = "vllm:time_to_first_token_seconds"
	InterTokenLat    = "vllm:inter_token_latency_seconds"
	DecodeTime       = "vllm:request_decode_time_seconds"
	E2ELatency       = "vllm:e2e_request_latency_seconds"
	PromptTokens     = "vllm:request_prompt_tokens"
	GenerationTokens = "vllm:request_generation_tokens"
	Running          = "vllm:num_requests_running"
	Waiting          = "vllm:num_requests_waiting"
	KVCacheUsage     = "vllm:kv_cache_usage_perc"
	// InterTokenLatV0 is the name older vLLM releases use for inter-token latency.
	InterTokenLatV0 = "vllm:time_per_output_token_seconds"
)

// Histogram is the cumulative sum and count of one histogram.
type Histogram struct {
	Sum   float64
	Count float64
}

// Snapshot is one scrape: histogram sums and counts, and gauge values, by metric name.
type Snapshot struct {
	Histograms map[string]Histogram
	Gauges     map[string]float64
}

// Parse reads Prometheus text exposition.
func Parse(r io.Reader) (Snapshot, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Snapshot{}, fmt.Errorf("parse metrics text: %w", err)
	}
	s := Snapshot{Histograms: map[string]Histogram{}, Gauges: map[string]float64{}}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				h := s.Histograms[name]
				h.Sum += m.GetHistogram().GetSampleSum()
				h.Count += float64(m.GetHistogram().GetSampleCount())
				s.Histograms[name] = h
			case dto.MetricType_GAUGE:
				s.Gauges[name] += m.GetGauge().GetValue()
			case dto.MetricType_COUNTER:
				s.Gauges[name] += m.GetCounter().GetValue()
			case dto.MetricType_UNTYPED:
				s.Gauges[name] += m.GetUntyped().GetValue()
			}
		}
	}
	return s, nil
}

// Scrape GETs url and parses it.
func Scrape(ctx context.Context, c *http.Client, url string) (Snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Snapshot{}, fmt.Errorf("build metrics request for %s: %w", url, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := c.Do(req)
	if err != nil {
		return Snapshot{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return Snapshot{}, fmt.Errorf("scrape %s: HTTP %d", url, resp.StatusCode)
	}
	s, err := Parse(resp.Body)
	if err != nil {
		return Snapshot{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	return s, nil
}

// Mean is the average per observation of histogram name between two snapshots (sum delta over
// count delta), and the count delta; ok is false when nothing was observed in between.
func Mean(before, after Snapshot, name string) (mean, count float64, ok bool) {
	a, aok := after.Histograms[name]
	if !aok {
		return 0, 0, false
	}
	b := before.Histograms[name]
	n := a.Count - b.Count
	if n <= 0 {
		return 0, 0, false
	}
	return (a.Sum - b.Sum) / n, n, true
}

// Maxima tracks the largest value of each gauge over a series of snapshots.
type Maxima map[string]float64

// Observe folds a snapshot's gauges into the maxima.
func (m Maxima) Observe(s Snapshot) {
	for _, name := range []string{Running, Waiting, KVCacheUsage} {
		if v, ok := s.Gauges[name]; ok {
			if cur, seen := m[name]; !seen || v > cur {
				m[name] = v
			}
		}
	}
}
