package vllmlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenLogs are vLLM logs in each release's and each logging option's format (testdata/README.md).
var goldenLogs = []string{"v0_8_crash.log", "v0_10_crash.log", "main_dp2_colour.log", "logging_options.log", "v0_0_6.log", "docker_colour.log"}

// now is the clock of the golden files: logs are read the day after they were written.
var goldenNow = time.Date(2025, 9, 12, 0, 0, 0, 0, time.UTC)

func parseFile(t *testing.T, name string) []Record {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := NewParser(time.UTC, func() time.Time { return goldenNow })
	var out []Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, p.Parse(sc.Text()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGolden(t *testing.T) {
	for _, name := range goldenLogs {
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(parseFile(t, name), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", strings.TrimSuffix(name, ".log")+".golden.json")
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
				t.Errorf("parse of %s differs from %s:\n%s", name, golden, got)
			}
		})
	}
}

func u32(v uint32) *uint32   { return &v }
func u64(v uint64) *uint64   { return &v }
func f64(v float64) *float64 { return &v }

// TestCrashLog checks the facts a crash diagnosis reads (docs/measurements.md, The crash) from a
// vLLM 0.10 log in the shape vLLM's engine core prints it: the scheduler state dumped at the
// failing step, the logged traceback, the API server's reaction, and the traceback
// multiprocessing prints again.
func TestCrashLog(t *testing.T) {
	recs := parseFile(t, "v0_10_crash.log")
	var stats []*Stats
	var dump *Stats
	var ooms []*Record
	var dead *Record
	for i := range recs {
		r := &recs[i]
		if r.Stats != nil && !r.Stats.FromSchedulerDump {
			stats = append(stats, r.Stats)
		}
		if r.Stats != nil && r.Stats.FromSchedulerDump {
			dump = r.Stats
		}
		if r.ExceptionType == "torch.OutOfMemoryError" {
			ooms = append(ooms, r)
		}
		if strings.HasSuffix(r.ExceptionType, "EngineDeadError") {
			dead = r
		}
	}
	if len(stats) != 4 {
		t.Fatalf("%d stats lines, want 4", len(stats))
	}
	want := &Stats{
		EngineIndex: "0", PromptThroughputTPS: f64(1232), GenerationThroughputTPS: f64(2470.4),
		Running: u32(193), Waiting: u32(0), KVCacheUsagePerc: f64(0.159), PrefixCacheHitRate: f64(0.483),
	}
	if !reflect.DeepEqual(stats[3], want) {
		t.Errorf("last stats line:\n got %s\nwant %s", js(stats[3]), js(want))
	}
	wantDump := &Stats{FromSchedulerDump: true, Running: u32(193), Waiting: u32(0), KVCacheUsagePerc: f64(0.15912408759124087)}
	if !reflect.DeepEqual(dump, wantDump) {
		t.Errorf("scheduler dump:\n got %s\nwant %s", js(dump), js(wantDump))
	}
	// The logged traceback and the one multiprocessing prints again both end in the OOM line.
	if len(ooms) != 2 {
		t.Fatalf("%d OOM lines, want 2", len(ooms))
	}
	wantOOM := &OOM{BytesRequested: u64(112 << 20), TotalCapacityBytes: u64(12487617413), FreeBytes: u64(89003131)}
	wantFrames := []string{
		"vllm/v1/worker/gpu_worker.py:execute_model",
		"vllm/v1/worker/gpu_model_runner.py:execute_model",
		"vllm/v1/sample/sampler.py:forward",
		"vllm/v1/sample/sampler.py:apply_penalties",
		"vllm/v1/sample/ops/penalties.py:apply_all_penalties",
		"vllm/model_executor/layers/utils.py:apply_penalties",
	}
	for i, oom := range ooms {
		if !reflect.DeepEqual(oom.OOM, wantOOM) {
			t.Errorf("OOM %d sizes %s, want %s", i, js(oom.OOM), js(wantOOM))
		}
		if got := oom.Frames[len(oom.Frames)-len(wantFrames):]; !reflect.DeepEqual(got, wantFrames) {
			t.Errorf("OOM %d frames %q, want them to end in %q", i, oom.Frames, wantFrames)
		}
		if oom.Process != "EngineCore_DP0 pid=233" || oom.EngineIndex != "0" {
			t.Errorf("OOM %d process %q engine %q", i, oom.Process, oom.EngineIndex)
		}
		if want := time.Date(2025, 9, 11, 15, 53, 37, 0, time.UTC); !oom.Time.Equal(want) {
			t.Errorf("OOM %d time %s, want %s", i, oom.Time, want)
		}
	}
	if ooms[0].Level != "ERROR" || ooms[0].Logger != "core.py:710" || ooms[1].Level != "" {
		t.Errorf("logged OOM: level %q logger %q; printed one: level %q", ooms[0].Level, ooms[0].Logger, ooms[1].Level)
	}
	// The API server's traceback must not take the engine's frames.
	if dead == nil || !reflect.DeepEqual(dead.Frames, []string{"vllm/v1/engine/async_llm.py:output_handler", "vllm/v1/engine/core_client.py:get_output_async"}) || dead.EngineIndex != "" {
		t.Errorf("EngineDeadError: %+v", dead)
	}
}

// TestV08CrashLog: vLLM 0.8.0–0.8.4 logged the traceback inside the "EngineCore hit an exception:"
// record, and had no process prefixes.
func TestV08CrashLog(t *testing.T) {
	recs := parseFile(t, "v0_8_crash.log")
	var oom *Record
	var last *Stats
	for i := range recs {
		if recs[i].ExceptionType == "torch.OutOfMemoryError" {
			oom = &recs[i]
		}
		if recs[i].Stats != nil {
			last = recs[i].Stats
		}
	}
	if oom == nil || len(oom.Frames) == 0 || oom.Frames[len(oom.Frames)-1] != "vllm/model_executor/layers/utils.py:apply_penalties" || *oom.OOM.BytesRequested != 112<<20 {
		t.Fatalf("OOM record: %s", js(oom))
	}
	if last == nil || *last.Running != 193 || last.EngineIndex != "0" {
		t.Errorf("last stats: %s", js(last))
	}
	if fatal := recs[len(recs)-2]; fatal.Level != "CRITICAL" || fatal.Logger != "core_client.py:359" {
		t.Errorf("client's fatal line: %s", js(fatal))
	}
}

// TestMainDataParallelColour: main's coloured output, nested worker prefixes, DEBUG-level paths,
// per-engine and aggregated stats lines, and a death on engine 1.
func TestMainDataParallelColour(t *testing.T) {
	recs := parseFile(t, "main_dp2_colour.log")
	if r := recs[1]; r.Level != "DEBUG" || r.Logger != "v1/engine/core.py:915" || r.EngineIndex != "0" {
		t.Errorf("DEBUG line: %s", js(r))
	}
	if r := recs[2]; r.Process != "Worker_TP0 pid=140" || r.EngineIndex != "1" || r.Logger != "model_executor/.../quantization/utils/marlin_utils.py:222" || r.Message != "Using Marlin kernels" {
		t.Errorf("nested prefixes: %s", js(r))
	}
	want0 := &Stats{EngineIndex: "0", PromptThroughputTPS: f64(1232), GenerationThroughputTPS: f64(2470.4), Running: u32(193), Waiting: u32(0), Preemptions: u32(3), KVCacheUsagePerc: f64(0.159), PrefixCacheHitRate: f64(0.483)}
	if !reflect.DeepEqual(recs[3].Stats, want0) {
		t.Errorf("engine 0 stats:\n got %s\nwant %s", js(recs[3].Stats), js(want0))
	}
	if st := recs[4].Stats; st == nil || st.EngineIndex != "1" || *st.Running != 190 || *st.PrefixCacheHitRate != 0.125 || recs[4].EngineIndex != "1" {
		t.Errorf("engine 1 stats: %s", js(recs[4]))
	}
	if st := recs[5].Stats; st == nil || st.EngineIndex != "" || st.AggregatedEngines != 2 || *st.Running != 390 || recs[5].EngineIndex != "" {
		t.Errorf("aggregated stats: %s", js(recs[5]))
	}
	var oom *Record
	for i := range recs {
		if recs[i].OOM != nil {
			oom = &recs[i]
		}
	}
	if oom == nil || oom.EngineIndex != "1" || *oom.OOM.BytesRequested != 222<<20 || oom.Frames[len(oom.Frames)-1] != "vllm/model_executor/layers/utils.py:get_token_bin_counts_and_mask" {
		t.Errorf("engine 1's OOM: %s", js(oom))
	}
}

// TestLoggingOptions: VLLM_LOGGING_PREFIX, VLLM_CONFIGURE_LOGGING=0 under basicConfig, a JSON
// formatter with the traceback in exc_info, and lines in no known shape (kept, nothing parsed).
func TestLoggingOptions(t *testing.T) {
	recs := parseFile(t, "logging_options.log")
	if r := recs[0]; r.Prefix != "node-a |" || r.Level != "INFO" || r.Stats == nil || *r.Stats.Running != 3 {
		t.Errorf("VLLM_LOGGING_PREFIX: %s", js(r))
	}
	if r := recs[1]; r.Level != "INFO" || r.Logger != "vllm.v1.metrics.loggers" || r.Stats == nil || *r.Stats.Running != 46 || !r.Time.Equal(recs[0].Time) {
		t.Errorf("basicConfig: %s", js(r))
	}
	if r := recs[2]; r.Level != "INFO" || r.Logger != "loggers.py:123" || r.Stats == nil || *r.Stats.Running != 144 ||
		!r.Time.Equal(time.Date(2025, 9, 11, 15, 53, 32, 118e6, time.UTC)) || r.Process != "MainProcess pid=1" {
		t.Errorf("JSON stats: %s", js(r))
	}
	r := recs[3]
	if r.Level != "ERROR" || r.Message != "EngineCore encountered a fatal error." || r.ExceptionType != "torch.OutOfMemoryError" ||
		r.OOM == nil || *r.OOM.BytesRequested != 112<<20 || r.Frames[len(r.Frames)-1] != "vllm/model_executor/layers/utils.py:apply_penalties" ||
		r.CodeLine != "logits -= frequency_penalties.unsqueeze(dim=1) * output_bin_counts" || r.EngineIndex != "0" {
		t.Errorf("JSON traceback: %s", js(r))
	}
	for _, r := range recs[4:] {
		if r.Level != "" || r.Stats != nil || r.Message == "" {
			t.Errorf("unrecognised line not kept as text: %s", js(r))
		}
	}
}

func TestV0Log(t *testing.T) {
	recs := parseFile(t, "v0_0_6.log")
	st := recs[2].Stats
	want := &Stats{
		PromptThroughputTPS: f64(640.3), GenerationThroughputTPS: f64(1650.5),
		Running: u32(193), Swapped: u32(3), Waiting: u32(7), KVCacheUsagePerc: f64(0.994),
	}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("V0 stats line:\n got %s\nwant %s", js(st), js(want))
	}
	if recs[2].Logger != "metrics.py:351" || recs[2].Level != "INFO" {
		t.Errorf("V0 prefix: logger %q level %q", recs[2].Logger, recs[2].Level)
	}
	if hr := recs[3].Stats; hr == nil || hr.PrefixCacheHitRate == nil || *hr.PrefixCacheHitRate != 0.1234 {
		t.Errorf("V0 prefix cache line: %s", js(hr))
	}
	oom := recs[len(recs)-1]
	wantOOM := &OOM{BytesRequested: u64(20 << 20), TotalCapacityBytes: u64(11993696174), FreeBytes: u64(1897923)}
	if oom.ExceptionType != "torch.cuda.OutOfMemoryError" || !reflect.DeepEqual(oom.OOM, wantOOM) {
		t.Errorf("old PyTorch OOM: type %q sizes %s, want %s", oom.ExceptionType, js(oom.OOM), js(wantOOM))
	}
	if !reflect.DeepEqual(oom.Frames, []string{"vllm/worker/model_runner.py:execute_model", "vllm/model_executor/layers/sampler.py:forward"}) {
		t.Errorf("frames %q", oom.Frames)
	}
	// Lines without a timestamp take the latest one seen.
	if want := time.Date(2025, 5, 8, 10, 2, 6, 0, time.UTC); !oom.Time.Equal(want) {
		t.Errorf("unstamped line time %s, want %s", oom.Time, want)
	}
}

func TestParseLine(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	tests := []struct {
		name, line string
		want       Record
	}{
		{
			name: "docker timestamp and colours win over the year-less stamp",
			line: "2025-09-11T15:53:12.5Z \x1b[31mERROR\x1b[0m 09-11 15:53:12 [x.py:1] boom\r",
			want: Record{Time: time.Date(2025, 9, 11, 15, 53, 12, 5e8, time.UTC), Level: "ERROR", Logger: "x.py:1", Message: "boom"},
		},
		{
			name: "December line read in January is last year",
			line: "DEBUG 12-31 23:59:59.123 [v1/engine/core.py:200] idle",
			want: Record{Time: time.Date(2025, 12, 31, 23, 59, 59, 123e6, time.UTC), Level: "DEBUG", Logger: "v1/engine/core.py:200", Message: "idle"},
		},
		{
			name: "uvicorn access line",
			line: `(APIServer pid=1) INFO:     127.0.0.1:5 - "GET /metrics HTTP/1.1" 200 OK`,
			want: Record{Level: "INFO", Process: "APIServer pid=1", Message: `127.0.0.1:5 - "GET /metrics HTTP/1.1" 200 OK`},
		},
		{
			name: "bare exception",
			line: "RuntimeError: CUDA error: an illegal memory access was encountered",
			want: Record{Message: "RuntimeError: CUDA error: an illegal memory access was encountered", ExceptionType: "RuntimeError"},
		},
		{
			name: "parenthesised text without pid is VLLM_LOGGING_PREFIX, not a process",
			line: "(note) INFO 01-01 00:00:00 [a.py:1] x",
			want: Record{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Level: "INFO", Prefix: "(note)", Logger: "a.py:1", Message: "x"},
		},
		{
			name: "a level and stamp deep inside a message is not a prefix",
			line: strings.Repeat("x", 300) + " INFO 01-01 00:00:00 [a.py:1] x",
			want: Record{Message: strings.Repeat("x", 300) + " INFO 01-01 00:00:00 [a.py:1] x"},
		},
		{
			name: "frame outside vLLM keeps three segments",
			line: `  File "/usr/lib/python3.12/asyncio/base_events.py", line 691, in run_until_complete`,
			want: Record{Message: `  File "/usr/lib/python3.12/asyncio/base_events.py", line 691, in run_until_complete`, Frame: "python3.12/asyncio/base_events.py:run_until_complete"},
		},
		{
			name: "an ordinary sentence mentioning Error is no exception",
			line: "INFO 01-01 00:00:00 [a.py:1] Error rate is low",
			want: Record{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Level: "INFO", Logger: "a.py:1", Message: "Error rate is low"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseLine(tc.line, now, time.UTC)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("\n got %s\nwant %s", js(got), js(tc.want))
			}
		})
	}
}

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		num, unit string
		want      uint64
		ok        bool
	}{
		{"112.00", "MiB", 117440512, true},
		{"11.63", "GiB", 12487617413, true},
		{"84.88", "MiB", 89003131, true},
		{"512", "bytes", 512, true},
		{"1.5", "KiB", 1536, true},
		{"2", "GB", 2000000000, true},
		{"1", "XB", 0, false},
		{"x", "MiB", 0, false},
	} {
		got, ok := Bytes(tc.num, tc.unit)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Bytes(%s %s) = %d, %v; want %d, %v", tc.num, tc.unit, got, ok, tc.want, tc.ok)
		}
	}
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func FuzzParse(f *testing.F) {
	for _, name := range goldenLogs {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			f.Add(line)
		}
	}
	f.Fuzz(func(t *testing.T, line string) {
		p := NewParser(time.UTC, func() time.Time { return goldenNow })
		r := p.Parse("Traceback (most recent call last):")
		r = p.Parse(line)
		if r.Stats != nil {
			for _, v := range []*float64{r.Stats.KVCacheUsagePerc, r.Stats.PrefixCacheHitRate, r.Stats.PromptThroughputTPS, r.Stats.GenerationThroughputTPS} {
				if v != nil && *v < 0 {
					t.Fatalf("negative stat in %q", line)
				}
			}
		}
		if len(r.Frames) > MaxFrames {
			t.Fatalf("%d frames", len(r.Frames))
		}
		if !r.Time.IsZero() && r.Time.After(goldenNow.Add(24*time.Hour)) {
			t.Fatalf("time %s after now+1d for %q", r.Time, line)
		}
		if len(r.Message) > len(line) {
			t.Fatalf("message longer than the line")
		}
	})
}

// BenchmarkParse measures the parse of the crash log's lines, stats and traceback included.
func BenchmarkParse(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("testdata", "v0_10_crash.log"))
	if err != nil {
		b.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	p := NewParser(time.UTC, func() time.Time { return goldenNow })
	for b.Loop() {
		for _, l := range lines {
			p.Parse(l)
		}
	}
}
