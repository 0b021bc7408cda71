package vllmlog

import (
	"bytes"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestAllocationSizeAndFormat(t *testing.T) {
	tests := []struct {
		bytes int64
		want  string
	}{
		{193 * 152064 * 4, "112.00 MiB"}, // docs/measurements.md's crash: 111.95 MiB rounded up to 2 MiB
		{256 * 152064 * 4, "150.00 MiB"},
		{100, "2.00 MiB"},       // small allocations come from a 2 MiB buffer
		{3 << 20, "20.00 MiB"},  // mid-size from a 20 MiB buffer
		{20 << 30, "20.00 GiB"}, // large, already a multiple of 2 MiB
		{(10 << 20) + 1, "12.00 MiB"},
	}
	for _, tc := range tests {
		if got := FormatSize(AllocationSize(tc.bytes)); got != tc.want {
			t.Errorf("%d bytes: %s, want %s", tc.bytes, got, tc.want)
		}
	}
	if got := FormatSize(1000); got != "1000 bytes" {
		t.Errorf("FormatSize(1000) = %s", got)
	}
}

// TestGoldenLog pins the exact shape of the stats lines and the crash each release's log holds,
// in text and JSON, which log parsers (servescope's collector) read.
func TestGoldenLog(t *testing.T) {
	for _, tc := range []struct {
		rel  vllmversion.Version
		json bool
	}{{vllmversion.V0_8V0, false}, {vllmversion.V0_8, false}, {vllmversion.V0_10, false}, {vllmversion.Main, false}, {vllmversion.Main, true}} {
		name := "log_" + strings.ReplaceAll(tc.rel.String(), ".", "_")
		if tc.json {
			name += "_json"
		}
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			clock := engine.NewClock(1)
			l := NewWith(&buf, clock, 4242, Options{Release: tc.rel, JSON: tc.json})
			l.Startup("Qwen/Qwen2.5-7B-Instruct-AWQ", 4096, "127.0.0.1:8000")
			l.StepDone(engine.StepStats{Preemptions: 2})
			l.Stats(engine.IntervalStats{At: 10, IntervalSeconds: 10, PromptTokens: 880, GenerationTokens: 2560, Running: 3, Waiting: 0, KVCacheUsage: 0.005, PrefixQueries: 100, PrefixHits: 25})
			l.Stats(engine.IntervalStats{At: 20, IntervalSeconds: 10, Running: 0})
			l.Stats(engine.IntervalStats{At: 30, IntervalSeconds: 10, Running: 0}) // idle after idle: not logged
			l.Crashed(engine.CrashInfo{At: 25, Running: 193, KVCacheUsage: 0.159, VocabSize: 152064, RequestedBytes: 193 * 152064 * 4})
			l.Shutdown()
			// Timestamps depend on the wall clock; normalize them.
			got := regexp.MustCompile(`\d\d-\d\d \d\d:\d\d:\d\d(,\d{3})?`).ReplaceAllString(buf.String(), "MM-DD hh:mm:ss")
			got = regexp.MustCompile(`"asctime":"[^"]*"`).ReplaceAllString(got, `"asctime":"YYYY-MM-DD hh:mm:ss,mmm"`)
			path := "testdata/" + name + ".golden"
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("log differs from %s:\n%s", path, got)
			}
			wantMiB := "112.00 MiB"
			if !tc.rel.V1Engine() {
				wantMiB = "56.00 MiB" // float16 logits in V0's penalty step
			}
			if !strings.Contains(got, "Tried to allocate "+wantMiB) {
				t.Errorf("OOM line does not request %s", wantMiB)
			}
			if tc.rel == vllmversion.Main && !tc.json && !strings.Contains(got, "Running: 3 reqs, Waiting: 0 reqs, Preemptions: 2, GPU KV cache usage: 0.5%") {
				t.Errorf("main's stats line lacks the preemptions field")
			}
		})
	}
}

func TestStatsTimestampsFollowSimulatedClock(t *testing.T) {
	var buf bytes.Buffer
	clock := engine.NewClock(100)
	l := New(&buf, clock, 1, DefaultGPU())
	l.Stats(engine.IntervalStats{At: 10, IntervalSeconds: 10, GenerationTokens: 1})
	l.Stats(engine.IntervalStats{At: 20, IntervalSeconds: 10, GenerationTokens: 1})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines: %q", lines)
	}
	want0 := clock.Time(10).Format("01-02 15:04:05")
	want1 := clock.Time(20).Format("01-02 15:04:05")
	if !strings.Contains(lines[0], want0) || !strings.Contains(lines[1], want1) {
		t.Fatalf("stats lines %q, want stamps %s and %s", lines, want0, want1)
	}
}
