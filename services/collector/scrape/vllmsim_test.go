package scrape

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/simmetrics"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// TestScrapeVLLMSimEveryRelease scrapes vllmsim's /metrics in each vLLM release's format, the way
// the collector does, and checks that every release lands on the same keys: the KV gauge as a
// fraction whatever its name, the inter-token histogram under its main name, and the
// prefix-cache counters of 0.8 kept apart because they count blocks.
func TestScrapeVLLMSimEveryRelease(t *testing.T) {
	for _, rel := range vllmversion.All {
		t.Run(rel.String(), func(t *testing.T) {
			g := engine.Gauges{Running: 193, Waiting: 7, KVCacheUsage: 0.159}
			m := simmetrics.NewRelease("Qwen/Qwen2.5-7B-Instruct-AWQ", 4096, func() engine.Gauges { return g }, rel)
			m.PrefixCache(160, 64)
			m.StepDone(engine.StepStats{ScheduledTokens: 193, GenerationTokens: 193, InterTokenSeconds: []float64{0.02, 0.03}})
			srv := httptest.NewServer(m.Handler())
			defer srv.Close()
			s, err := New(nil, &collected{}, Config{})
			if err != nil {
				t.Fatal(err)
			}
			evs := s.Scrape(context.Background(), Target{URL: srv.URL, Engine: "sim"})
			if len(evs) != 1 || !evs[0].Up {
				t.Fatalf("samples %+v", evs)
			}
			e := evs[0]
			if *e.NumRequestsRunning != 193 || *e.NumRequestsWaiting != 7 || *e.KVCacheUsagePerc != 0.159 || e.Model != "Qwen/Qwen2.5-7B-Instruct-AWQ" {
				t.Errorf("gauges: running %v waiting %v kv %v model %q", e.NumRequestsRunning, e.NumRequestsWaiting, e.KVCacheUsagePerc, e.Model)
			}
			if h := e.Histograms["inter_token_latency_seconds"]; h.Count != 2 {
				t.Errorf("inter-token histogram %+v", h)
			}
			if e.Counters["generation_tokens_total"] != 193 {
				t.Errorf("counters %v", e.Counters)
			}
			switch rel {
			case vllmversion.V0_8V0:
				if e.Gauges["num_requests_swapped"] != 0 || e.Gauges["gpu_prefix_cache_hit_rate"] != 0.4 {
					t.Errorf("V0 gauges %v", e.Gauges)
				}
			case vllmversion.V0_8:
				if e.Counters["gpu_prefix_cache_queries_total"] != 10 || e.Counters["gpu_prefix_cache_hits_total"] != 4 {
					t.Errorf("0.8 prefix-cache blocks %v", e.Counters)
				}
				if _, ok := e.Counters["prefix_cache_queries_total"]; ok {
					t.Error("0.8's block counts were mapped onto the token counter")
				}
			default:
				if e.Counters["prefix_cache_queries_total"] != 160 || e.Counters["prefix_cache_hits_total"] != 64 {
					t.Errorf("prefix-cache tokens %v", e.Counters)
				}
			}
			if rel == vllmversion.Main {
				if _, ok := e.Histograms["request_time_per_output_token_seconds"]; !ok {
					t.Error("main lacks the per-request TPOT histogram")
				}
			}
		})
	}
}
