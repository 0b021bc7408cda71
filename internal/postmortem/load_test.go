package postmortem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/postmortem"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/sim/vllmsim/engine"
	simlog "github.com/servescope/servescope/sim/vllmsim/vllmlog"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// insertLogs writes lines into engine_logs the way the consumer stores engine.log events.
func insertLogs(t *testing.T, ctx context.Context, conn driver.Conn, lines []schema.EngineLog) {
	t.Helper()
	b, err := conn.PrepareBatch(ctx, `INSERT INTO engine_logs (event_id, ts, engine, source, offset, line, level, process, logger,
		engine_index, engines, message, prompt_throughput_tps, generation_throughput_tps, running, waiting, kv_cache_usage_perc,
		prefix_cache_hit_rate, preemptions, exception_type, oom_bytes_requested, oom_total_capacity_bytes, oom_free_bytes, frames)`)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range lines {
		frames := l.Frames
		if frames == nil {
			frames = []string{}
		}
		if err := b.Append(fmt.Sprintf("%s-%d-%d", l.Engine, l.TS.UnixNano(), i), l.TS, l.Engine, l.Source, l.Offset, l.Line,
			l.Level, l.Process, l.Logger, l.EngineIndex, l.Engines, l.Message, l.PromptThroughputTPS, l.GenerationThroughputTPS, l.Running, l.Waiting,
			l.KVCacheUsagePerc, l.PrefixCacheHitRate, l.Preemptions, l.ExceptionType, l.OOMBytesRequested, l.OOMTotalCapacityBytes,
			l.OOMFreeBytes, frames); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatalf("insert %d engine_logs rows: %v", len(lines), err)
	}
}

// shift moves a log's lines to start at start, keeping their spacing, and names the engine.
func shift(lines []schema.EngineLog, start time.Time, eng string) []schema.EngineLog {
	out := make([]schema.EngineLog, len(lines))
	d := start.Sub(lines[0].TS)
	for i, l := range lines {
		l.TS = l.TS.Add(d)
		l.Engine = eng
		out[i] = l
	}
	return out
}

// TestLoadFromClickHouse stores two engines' logs in engine_logs — one that died as in
// docs/measurements.md, The crash, one that died unexplained an hour earlier — and reads each
// death back.
func TestLoadFromClickHouse(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if _, _, err := postmortem.Load(ctx, conn, "", time.Time{}); !errors.Is(err, postmortem.ErrNoData) || !strings.Contains(err.Error(), "engine_logs is empty") {
		t.Fatalf("empty table: %v", err)
	}
	start := time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Second)
	insertLogs(t, ctx, conn, shift(readLog(t, "v1_unexplained.log"), start, "vllm-b"))
	insertLogs(t, ctx, conn, shift(readLog(t, "v0_10_type_one.log"), start.Add(time.Hour), "vllm-a"))
	insertLogs(t, ctx, conn, shift(readLog(t, "v1_no_crash.log"), start.Add(2*time.Hour), "vllm-c"))

	for _, tc := range []struct {
		name, engine string
		at           time.Time
		wantEngine   string
		verdict      string
	}{
		{"latest death of any engine", "", time.Time{}, "vllm-a", postmortem.VerdictTypeOne},
		{"named engine", "vllm-b", time.Time{}, "vllm-b", postmortem.VerdictUnexplained},
		{"at a time before the latest death", "", start.Add(30 * time.Minute), "vllm-b", postmortem.VerdictUnexplained},
		{"engine that did not die", "vllm-c", time.Time{}, "vllm-c", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, model, err := postmortem.Load(ctx, conn, tc.engine, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			if model != "" {
				t.Errorf("model = %q with no engine samples", model)
			}
			rep := postmortem.Analyze(lines, postmortem.Options{At: tc.at, Model: model})
			if rep.Engine != tc.wantEngine || rep.Verdict != tc.verdict {
				t.Fatalf("engine %q verdict %q, want %q %q", rep.Engine, rep.Verdict, tc.wantEngine, tc.verdict)
			}
			if tc.verdict == postmortem.VerdictTypeOne {
				if a := rep.Arithmetic; a.Running != 193 || a.ProductBytes != 117393408 || !a.Match {
					t.Errorf("arithmetic = %+v", a)
				}
				// The frames survived the round trip through the table's Array(String).
				if inner := rep.Frames[len(rep.Frames)-1]; inner != "vllm/model_executor/layers/utils.py:apply_penalties" {
					t.Errorf("innermost frame = %q", inner)
				}
			}
		})
	}
	if _, _, err := postmortem.Load(ctx, conn, "no-such-engine", time.Time{}); !errors.Is(err, postmortem.ErrNoData) {
		t.Errorf("unknown engine: %v", err)
	}
}

// TestVLLMSimCrashLog reads the log vllmsim writes when its simulated engine dies the measured
// death (docs/measurements.md, The crash), in each vLLM release's format and in JSON, through the same reader as any vLLM log: the
// V1 releases' float32 penalty product reads 112 MiB for 193 running, V0's float16 one 56 MiB.
func TestVLLMSimCrashLog(t *testing.T) {
	for _, tc := range []struct {
		rel  vllmversion.Version
		json bool
	}{{vllmversion.V0_8V0, false}, {vllmversion.V0_8, false}, {vllmversion.V0_10, false}, {vllmversion.Main, false}, {vllmversion.Main, true}} {
		t.Run(fmt.Sprintf("%s json=%v", tc.rel, tc.json), func(t *testing.T) {
			clock := engine.NewClock(1)
			var buf bytes.Buffer
			lg := simlog.NewWith(&buf, clock, 4242, simlog.Options{Release: tc.rel, JSON: tc.json})
			lg.Startup("Qwen/Qwen2.5-7B-Instruct-AWQ", 4096, "127.0.0.1:8000")
			for _, s := range []struct {
				at      float64
				running int
				kv      float64
			}{{10, 3, 0.005}, {20, 46, 0.036}, {30, 144, 0.114}, {35, 193, 0.159}} {
				lg.Stats(engine.IntervalStats{At: s.at, IntervalSeconds: 10, PromptTokens: 880, GenerationTokens: 2560, Running: s.running, KVCacheUsage: s.kv})
			}
			lg.Crashed(engine.CrashInfo{At: 35, Running: 193, KVCacheUsage: 0.159, VocabSize: 152064, RequestedBytes: 193 * 152064 * 4})
			lg.Shutdown()

			lines, err := postmortem.ReadLog(&buf, "vllmsim", "vllmsim.log", time.Now().Add(time.Hour), time.Local)
			if err != nil {
				t.Fatal(err)
			}
			rep := postmortem.Analyze(lines, postmortem.Options{})
			if rep.Verdict != postmortem.VerdictTypeOne {
				var out bytes.Buffer
				_ = rep.WriteText(&out)
				t.Fatalf("verdict = %q\n%s", rep.Verdict, out.String())
			}
			a := rep.Arithmetic
			prints, size := "112.00 MiB", 4
			if !tc.rel.V1Engine() {
				prints, size = "56.00 MiB", 2
			}
			if a.Running != 193 || a.Vocab != 152064 || a.Tensor.ElementBytes != size || a.TorchPrints != prints || simlog.FormatSize(int64(*rep.LastWords.BytesRequested)) != prints {
				t.Errorf("arithmetic = %+v, requested %d", a, *rep.LastWords.BytesRequested)
			}
			if a.Tensor.Tensor != "frequency_penalties.unsqueeze(dim=1) * output_bin_counts" || rep.Frames[len(rep.Frames)-1] != "vllm/model_executor/layers/utils.py:apply_penalties" {
				t.Errorf("tensor %+v frames %q", a.Tensor, rep.Frames)
			}
			if last := rep.Timeline[len(rep.Timeline)-1]; *last.KVCacheUsagePerc != 0.159 {
				t.Errorf("last KV = %v", *last.KVCacheUsagePerc)
			}
		})
	}
}

// TestDataParallelCrashFromClickHouse: a data-parallel server's log with only aggregated stats
// lines in engine_logs, and its /metrics in engine_samples as the collector writes them (one
// sample per engine core, '<engine>#<index>', engine_index the label): the postmortem reads engine
// 1's own running count from its samples, never engine 0's or the aggregated sum.
func TestDataParallelCrashFromClickHouse(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Second)
	lines := shift(readLog(t, "main_dp2_aggregated.log"), start, "vllm-dp")
	insertLogs(t, ctx, conn, lines)
	death := lines[len(lines)-1].TS
	b, err := conn.PrepareBatch(ctx, `INSERT INTO engine_samples (event_id, ts, engine, model, engine_index, engines, up,
		num_requests_running, kv_cache_usage_perc)`)
	if err != nil {
		t.Fatal(err)
	}
	two := uint16(2)
	for k := range 5 {
		ts := death.Add(time.Duration(k-4) * 15 * time.Second) // the last at the death
		for idx, running := range map[string]float64{"0": 200, "1": 186 + float64(k)} {
			if err := b.Append(fmt.Sprintf("s-%s-%d", idx, k), ts, "vllm-dp#"+idx, "Qwen/Qwen2.5-7B-Instruct-AWQ", idx, &two, true,
				running, 0.3); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	loaded, model, err := postmortem.Load(ctx, conn, "vllm-dp", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	samples, err := postmortem.LoadSamples(ctx, conn, "vllm-dp", loaded)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples["0"]) != 5 || len(samples["1"]) != 5 {
		t.Fatalf("samples by engine: %d of engine 0, %d of engine 1, want 5 each", len(samples["0"]), len(samples["1"]))
	}
	rep := postmortem.Analyze(loaded, postmortem.Options{Model: model, Samples: samples})
	if a := rep.Arithmetic; rep.Verdict != postmortem.VerdictTypeOne || a == nil || a.Running != 190 || a.RunningSource != "engine's /metrics sample" {
		t.Fatalf("verdict %q arithmetic %+v, want type one from engine 1's 190", rep.Verdict, rep.Arithmetic)
	}
	// Without the samples the same log says what it lacks.
	if rep := postmortem.Analyze(loaded, postmortem.Options{Model: model}); rep.Verdict != postmortem.VerdictCannotTell {
		t.Errorf("without samples: verdict %q, want %q", rep.Verdict, postmortem.VerdictCannotTell)
	}
}

// TestVLLMSimDataParallelCrashLog: vllmsim's log of a data-parallel server (main,
// --data-parallel-size 2 --aggregate-engine-logging) whose engine 1 dies at 193 running while
// engine 0 runs 180: the aggregated lines say 373, engine 1's scheduler dump 193, and the
// postmortem multiplies engine 1's own count.
func TestVLLMSimDataParallelCrashLog(t *testing.T) {
	clock := engine.NewClock(1)
	var buf bytes.Buffer
	lg := simlog.NewWith(&buf, clock, 4242, simlog.Options{Release: vllmversion.Main, Engines: 2, Aggregate: true})
	lg.Startup("Qwen/Qwen2.5-7B-Instruct-AWQ", 4096, "127.0.0.1:8000")
	for _, at := range []float64{10, 20, 30} {
		lg.Engine(0).Stats(engine.IntervalStats{At: at, IntervalSeconds: 10, PromptTokens: 880, GenerationTokens: 2560, Running: 180, KVCacheUsage: 0.15})
		lg.Engine(1).Stats(engine.IntervalStats{At: at, IntervalSeconds: 10, PromptTokens: 880, GenerationTokens: 2560, Running: 193, KVCacheUsage: 0.159})
	}
	lg.Engine(1).Crashed(engine.CrashInfo{At: 35, Running: 193, KVCacheUsage: 0.159, VocabSize: 152064, RequestedBytes: 193 * 152064 * 4})
	lg.Shutdown()
	if !strings.Contains(buf.String(), "2 Engines Aggregated: ") || !strings.Contains(buf.String(), "Running: 373 reqs") {
		t.Fatalf("no aggregated stats line with the engines' sum:\n%s", buf.String())
	}
	lines, err := postmortem.ReadLog(&buf, "vllmsim", "vllmsim.log", time.Now().Add(time.Hour), time.Local)
	if err != nil {
		t.Fatal(err)
	}
	rep := postmortem.Analyze(lines, postmortem.Options{})
	if a := rep.Arithmetic; rep.Verdict != postmortem.VerdictTypeOne || rep.EngineIndex != "1" || rep.Engines != 2 || a == nil || a.Running != 193 ||
		a.RunningSource != "scheduler state at the failing step" {
		var out bytes.Buffer
		_ = rep.WriteText(&out)
		t.Fatalf("verdict %q engine %q of %d arithmetic %+v\n%s", rep.Verdict, rep.EngineIndex, rep.Engines, rep.Arithmetic, out.String())
	}
}
