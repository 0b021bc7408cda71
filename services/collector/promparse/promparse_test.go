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

// TestGolden compares the whole conversion of each exposition with its reviewed golden JSON.
func TestGolden(t *testing.T) {
	for _, tc := range []struct{ file, contentType string }{
		{"vllm_v1_0_11.prom", textType},
		{"vllm_v0_0_6.prom", textType},
		{"vllm_v1_dp2.prom", textType},
		{"vllm_0_1_aioprometheus.prom", ""},
		{"vllm_v1_openmetrics.om", omType},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got, err := json.MarshalIndent(parseFile(t, tc.file, tc.contentType), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", strings.TrimSuffix(tc.file, filepath.Ext(tc.file))+".golden.json")
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
				t.Errorf("conversion of %s differs from %s:\n%s", tc.file, golden, got)
			}
		})
	}
}

// TestMapping checks the facts the golden files encode, so a wrong golden file cannot pass.
func TestMapping(t *testing.T) {
	tests := []struct {
		name, file, contentType string
		engines                 int
		idx                     int
		model                   string
		running, waiting, kv    *float64
		gauges, counters        map[string]float64
		histSum                 map[string]float64
		absent                  []string
	}{
		{
			name: "V1 0.11 keeps the new names over deprecated ones", file: "vllm_v1_0_11.prom", contentType: textType,
			engines: 1, model: "Qwen/Qwen2.5-7B-Instruct-AWQ",
			running: ptr(256), waiting: ptr(44), kv: ptr(0.28),
			gauges: map[string]float64{"process_resident_memory_bytes": 2.1474836e+09, "process_start_time_seconds": 1.76483e+09},
			counters: map[string]float64{
				`request_success_total{finished_reason="length"}`: 1024,
				`request_success_total{finished_reason="abort"}`:  2,
				"prompt_tokens_total":                             45120,
				"prefix_cache_hits_total":                         30080,
			},
			histSum: map[string]float64{
				"inter_token_latency_seconds":           19116.762,
				"request_time_per_output_token_seconds": 150.822,
				"time_to_first_token_seconds":           875.178,
				"request_queue_time_seconds":            484.272,
			},
			absent: []string{"gpu_cache_usage_perc", "time_per_output_token_seconds", "cache_config_info", "python_gc_objects_collected_total{generation=\"0\"}"},
		},
		{
			name: "V0 0.6 old names mapped", file: "vllm_v0_0_6.prom", contentType: textType,
			engines: 1, model: "meta-llama/Llama-2-7b-hf",
			running: ptr(193), waiting: ptr(7), kv: ptr(0.159),
			gauges:   map[string]float64{"num_requests_swapped": 3, "cpu_cache_usage_perc": 0, "gpu_prefix_cache_hit_rate": -1, "avg_generation_throughput_toks_per_s": 1650.5},
			counters: map[string]float64{"num_preemptions_total": 12, `request_success_total{finished_reason="length"}`: 193},
			histSum:  map[string]float64{"inter_token_latency_seconds": 392.176, "e2e_request_latency_seconds": 399.51},
			absent:   []string{"gpu_cache_usage_perc", "time_per_output_token_seconds"},
		},
		{
			name: "data parallel: one entry per engine label", file: "vllm_v1_dp2.prom", contentType: textType,
			engines: 2, idx: 1, model: "m", running: ptr(9), waiting: ptr(2), kv: ptr(0.02),
			counters: map[string]float64{`request_success_total{finished_reason="stop"}`: 7},
		},
		{
			name: "pre-0.3 aioprometheus names", file: "vllm_0_1_aioprometheus.prom",
			engines: 1, running: ptr(4), waiting: ptr(0), kv: ptr(0.041),
			counters: map[string]float64{"prompt_tokens_total": 1234},
		},
		{
			name: "OpenMetrics counter without _total, _created dropped", file: "vllm_v1_openmetrics.om", contentType: omType,
			engines: 1, model: "m", running: ptr(3), kv: ptr(0.005),
			counters: map[string]float64{"generation_tokens_total": 384},
			histSum:  map[string]float64{"request_queue_time_seconds": 0},
			absent:   []string{"generation_tokens_created", "request_queue_time_seconds_created"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ems := parseFile(t, tc.file, tc.contentType)
			if len(ems) != tc.engines {
				t.Fatalf("got %d engines, want %d", len(ems), tc.engines)
			}
			em := ems[tc.idx]
			if em.Model != tc.model {
				t.Errorf("model %q, want %q", em.Model, tc.model)
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
			for k, v := range tc.histSum {
				h, ok := em.Histograms[k]
				if !ok || h.Sum != v {
					t.Errorf("histogram %s sum = %g (present %v), want %g", k, h.Sum, ok, v)
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
		})
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
	body, err := os.ReadFile(filepath.Join("testdata", "vllm_v1_0_11.prom"))
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
