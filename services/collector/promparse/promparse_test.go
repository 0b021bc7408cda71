package promparse

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

const (
	textType = "text/plain; version=0.0.4; charset=utf-8"
	omType   = "application/openmetrics-text; version=1.0.0; charset=utf-8"
)

func ptr(v float64) *float64 { return &v }

func parseFile(t *testing.T, name, contentType string) []EngineMetrics {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	ems, err := Parse(bytes.NewReader(b), contentType)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	return ems
}

// goldenExpositions are vLLM /metrics responses rendered by prometheus_client from the metric
// definitions of each vLLM release (see testdata/README.md), in both text formats.
var goldenExpositions = []string{
	"vllm_v0_8_v0engine", "vllm_v0_8", "vllm_v0_10", "vllm_main", "vllm_main_hidden_0_11", "vllm_main_dp2",
}

// TestGolden compares the whole conversion of each exposition with its reviewed golden JSON, and
// checks that the OpenMetrics rendering of the same registry converts to exactly the same values
// as the Prometheus text rendering.
func TestGolden(t *testing.T) {
	for _, name := range append(goldenExpositions, "vllm_v0_10_multiproc") {
		t.Run(name, func(t *testing.T) {
			text := parseFile(t, name+".prom", textType)
			got, err := json.MarshalIndent(text, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".golden.json")
			if *update {
				if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("read golden (run with -update to create): %v", err)
			}
			if string(bytes.TrimSpace(want)) != string(got) {
				t.Errorf("conversion of %s differs from %s:\n%s", name, golden, got)
			}
			if _, err := os.Stat(filepath.Join("testdata", name+".om")); err != nil {
				return
			}
			om, err := json.MarshalIndent(parseFile(t, name+".om", omType), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if string(om) != string(got) {
				t.Errorf("OpenMetrics conversion of %s differs from the text one:\n%s", name, om)
			}
		})
	}
}

// TestMapping checks the facts the golden files encode, so a wrong golden file cannot pass.
func TestMapping(t *testing.T) {
	const qwen = "Qwen/Qwen2.5-7B-Instruct-AWQ"
	tests := []struct {
		name, file           string
		engines              int
		idx                  int
		engineIndex, model   string
		running, waiting, kv *float64
		gauges, counters     map[string]float64
		histCount            map[string]float64
		absent               []string
	}{
		{
			name: "V0 engine (vLLM 0.8 with VLLM_USE_V1=0): no engine label, old names mapped", file: "vllm_v0_8_v0engine.prom",
			engines: 1, model: qwen, running: ptr(193), waiting: ptr(7), kv: ptr(0.994),
			gauges:    map[string]float64{"num_requests_swapped": 3, "cpu_cache_usage_perc": 0.025, "gpu_prefix_cache_hit_rate": 0.1234, "cpu_prefix_cache_hit_rate": -1},
			counters:  map[string]float64{"num_preemptions_total": 12, `request_success_total{finished_reason="length"}`: 30, `request_success_total{finished_reason="stop"}`: 10},
			histCount: map[string]float64{"inter_token_latency_seconds": 400, "e2e_request_latency_seconds": 40, "time_to_first_token_seconds": 40},
			absent:    []string{"gpu_cache_usage_perc", "time_per_output_token_seconds"},
		},
		{
			name: "V1 0.8: gpu_cache_usage_perc is the KV gauge; prefix-cache counters in blocks keep their name", file: "vllm_v0_8.prom",
			engines: 1, engineIndex: "0", model: qwen, running: ptr(256), waiting: ptr(44), kv: ptr(0.28),
			counters: map[string]float64{
				"gpu_prefix_cache_queries_total": 120, "gpu_prefix_cache_hits_total": 110, "num_preemptions_total": 0,
				"prompt_tokens_total": 1760, `request_success_total{finished_reason="abort"}`: 0,
			},
			histCount: map[string]float64{"inter_token_latency_seconds": 400, "request_queue_time_seconds": 40},
			absent:    []string{"prefix_cache_queries_total", "prefix_cache_hits_total", "time_per_output_token_seconds", "cache_config_info", "request_time_per_output_token_seconds"},
		},
		{
			name: "V1 0.10: both KV names and both prefix-cache names (tokens), the new ones kept", file: "vllm_v0_10.prom",
			engines: 1, engineIndex: "0", model: qwen, running: ptr(256), waiting: ptr(44), kv: ptr(0.28),
			counters:  map[string]float64{"prefix_cache_queries_total": 1760, "prefix_cache_hits_total": 1408},
			histCount: map[string]float64{"inter_token_latency_seconds": 400},
			absent:    []string{"gpu_cache_usage_perc", "gpu_prefix_cache_queries_total", "gpu_prefix_cache_hits_total", "time_per_output_token_seconds"},
		},
		{
			name: "main: inter-token and per-request TPOT histograms, unknown families kept", file: "vllm_main.prom",
			engines: 1, engineIndex: "0", model: qwen, running: ptr(256), waiting: ptr(44), kv: ptr(0.28),
			gauges:    map[string]float64{`engine_sleep_state{sleep_state="awake"}`: 1, `engine_sleep_state{sleep_state="discard_all"}`: 0},
			counters:  map[string]float64{"external_prefix_cache_queries_total": 0, "mm_cache_hits_total": 0, `request_success_total{finished_reason="length"}`: 30},
			histCount: map[string]float64{"inter_token_latency_seconds": 400, "request_time_per_output_token_seconds": 40, "iteration_tokens_total": 4},
			absent:    []string{"time_per_output_token_seconds", "prompt_tokens_created", "cache_config_info"},
		},
		{
			name: "main with --show-hidden-metrics-for-version=0.11: the hidden duplicate is dropped", file: "vllm_main_hidden_0_11.prom",
			engines: 1, engineIndex: "0", model: qwen, running: ptr(256), waiting: ptr(44), kv: ptr(0.28),
			histCount: map[string]float64{"inter_token_latency_seconds": 400},
			absent:    []string{"time_per_output_token_seconds"},
		},
		{
			name: "main, data parallel: one entry per engine label", file: "vllm_main_dp2.prom",
			engines: 2, idx: 1, engineIndex: "1", model: qwen, running: ptr(9), waiting: ptr(2), kv: ptr(0.02),
			counters: map[string]float64{`request_success_total{finished_reason="stop"}`: 10},
		},
		{
			name: "0.10 behind several API server processes: pid folded, counters summed by prometheus_client", file: "vllm_v0_10_multiproc.prom",
			engines: 1, engineIndex: "0", model: qwen, running: ptr(256), kv: ptr(0.28),
			counters: map[string]float64{"prompt_tokens_total": 1760},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ems := parseFile(t, tc.file, textType)
			if len(ems) != tc.engines {
				t.Fatalf("got %d engines, want %d", len(ems), tc.engines)
			}
			em := ems[tc.idx]
			if em.Model != tc.model || em.EngineIndex != tc.engineIndex {
				t.Errorf("model %q engine %q, want %q %q", em.Model, em.EngineIndex, tc.model, tc.engineIndex)
			}
			for _, f := range []struct {
				name      string
				got, want *float64
			}{{"running", em.Running, tc.running}, {"waiting", em.Waiting, tc.waiting}, {"kv", em.KVCacheUsagePerc, tc.kv}} {
				switch {
				case (f.got == nil) != (f.want == nil):
					t.Errorf("%s: got %v, want %v", f.name, f.got, f.want)
				case f.got != nil && *f.got != *f.want:
					t.Errorf("%s: got %g, want %g", f.name, *f.got, *f.want)
				}
			}
			for k, v := range tc.gauges {
				if got, ok := em.Gauges[k]; !ok || got != v {
					t.Errorf("gauge %s = %g (present %v), want %g", k, got, ok, v)
				}
			}
			for k, v := range tc.counters {
				if got, ok := em.Counters[k]; !ok || got != v {
					t.Errorf("counter %s = %g (present %v), want %g", k, got, ok, v)
				}
			}
			for k, v := range tc.histCount {
				h, ok := em.Histograms[k]
				if !ok || h.Count != v {
					t.Errorf("histogram %s count = %g (present %v), want %g", k, h.Count, ok, v)
					continue
				}
				last := h.Buckets[len(h.Buckets)-1]
				if !math.IsInf(float64(last.LE), 1) || last.Count != h.Count {
					t.Errorf("histogram %s: last bucket %v, want +Inf with the count %g", k, last, h.Count)
				}
				for i := 1; i < len(h.Buckets); i++ {
					if h.Buckets[i].LE <= h.Buckets[i-1].LE || h.Buckets[i].Count < h.Buckets[i-1].Count {
						t.Errorf("histogram %s: buckets not cumulative ascending: %v", k, h.Buckets)
					}
				}
			}
			for _, k := range tc.absent {
				if hasKey(&em, k) {
					t.Errorf("%s should not be kept", k)
				}
			}
			for k := range em.Gauges {
				if strings.Contains(k, "pid=") {
					t.Errorf("gauge key %q keeps the multiprocess pid label", k)
				}
			}
		})
	}
}

// TestKVGaugeIsAFraction: every release exposes KV cache usage as a fraction (1 = 100 %), the
// same unit whichever name carried it; none of the golden expositions may yield a value above 1.
func TestKVGaugeIsAFraction(t *testing.T) {
	for _, name := range goldenExpositions {
		for _, em := range parseFile(t, name+".prom", textType) {
			if em.KVCacheUsagePerc == nil || *em.KVCacheUsagePerc < 0 || *em.KVCacheUsagePerc > 1 {
				t.Errorf("%s engine %q: kv_cache_usage_perc %v, want a fraction 0..1", name, em.EngineIndex, em.KVCacheUsagePerc)
			}
		}
	}
}

// TestPre03Prefix: vLLM before 0.3 named its families vllm_* (aioprometheus); they map the same way.
func TestPre03Prefix(t *testing.T) {
	text := "# TYPE vllm_num_requests_running gauge\nvllm_num_requests_running{model_name=\"m\"} 4\n" +
		"# TYPE vllm_gpu_cache_usage_perc gauge\nvllm_gpu_cache_usage_perc{model_name=\"m\"} 0.041\n"
	ems, err := Parse(strings.NewReader(text), textType)
	if err != nil {
		t.Fatal(err)
	}
	if len(ems) != 1 || *ems[0].Running != 4 || *ems[0].KVCacheUsagePerc != 0.041 || ems[0].Model != "m" {
		t.Errorf("got %+v", ems)
	}
}

// TestLegacyOrder checks that the V1 value wins whichever of the two names comes first.
func TestLegacyOrder(t *testing.T) {
	for _, text := range []string{
		"# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.9\n# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.2\n",
		"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.2\n# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.9\n",
	} {
		ems, err := Parse(strings.NewReader(text), textType)
		if err != nil {
			t.Fatal(err)
		}
		if len(ems) != 1 || ems[0].KVCacheUsagePerc == nil || *ems[0].KVCacheUsagePerc != 0.2 {
			t.Errorf("kv = %+v, want 0.2 from the V1 name", ems)
		}
	}
}

func TestDropsNonFinite(t *testing.T) {
	text := "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running NaN\n# TYPE vllm:x gauge\nvllm:x +Inf\n# TYPE vllm:y gauge\nvllm:y 1\n"
	ems, err := Parse(strings.NewReader(text), textType)
	if err != nil {
		t.Fatal(err)
	}
	if len(ems) != 1 || ems[0].Running != nil || len(ems[0].Gauges) != 1 || ems[0].Gauges["y"] != 1 {
		t.Errorf("got %+v, want only y=1", ems)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct{ name, body, contentType, want string }{
		{"broken text", "# TYPE vllm:a gauge\nvllm:a{x=\"1\" 3\n", textType, "decode metrics"},
		{"html error page", "<html><body>502 Bad Gateway</body></html>", "text/html", "unsupported content type"},
		{"duplicate family", "# TYPE vllm:a gauge\nvllm:a 1\n# TYPE vllm:a gauge\nvllm:a 2\n", textType, "decode metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.body), tc.contentType)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	entries, err := os.ReadDir("testdata")
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".prom") || strings.HasSuffix(e.Name(), ".om") {
			b, err := os.ReadFile(filepath.Join("testdata", e.Name()))
			if err != nil {
				f.Fatal(err)
			}
			ct := textType
			if strings.HasSuffix(e.Name(), ".om") {
				ct = omType
			}
			f.Add(b, ct)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		ems, err := Parse(bytes.NewReader(body), contentType)
		if err != nil {
			return
		}
		for _, em := range ems {
			n := len(em.Gauges) + len(em.Counters) + len(em.Histograms)
			if n > maxSeries {
				t.Fatalf("%d series kept, over %d", n, maxSeries)
			}
			for k, v := range em.Gauges {
				if len(k) > MaxKeyBytes || math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("bad gauge %q=%g", k, v)
				}
			}
			for k, v := range em.Counters {
				if len(k) > MaxKeyBytes || math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("bad counter %q=%g", k, v)
				}
			}
			for k, h := range em.Histograms {
				if len(h.Buckets) == 0 || len(h.Buckets) > 200 || !math.IsInf(float64(h.Buckets[len(h.Buckets)-1].LE), 1) {
					t.Fatalf("histogram %q: bad buckets %v", k, h.Buckets)
				}
			}
		}
	})
}

// BenchmarkParse measures one scrape's parse of a V1 exposition (the collector does this once
// per target per interval).
func BenchmarkParse(b *testing.B) {
	body, err := os.ReadFile(filepath.Join("testdata", "vllm_main.prom"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(bytes.NewReader(body), textType); err != nil {
			b.Fatal(err)
		}
	}
}
