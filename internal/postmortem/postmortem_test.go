package postmortem_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/internal/postmortem"
	"github.com/servescope/servescope/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// readNow is the clock the golden logs are read with: the day after they were written.
var readNow = time.Date(2026, 9, 12, 9, 0, 0, 0, time.UTC)

func readLog(t *testing.T, name string) []schema.EngineLog {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines, err := postmortem.ReadLog(f, "vllm-0", name, readNow, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

func analyzeFile(t *testing.T, name string, opts postmortem.Options) postmortem.Report {
	t.Helper()
	rep := postmortem.Analyze(readLog(t, name), opts)
	rep.Source = name
	return rep
}

// checkGolden compares the report's text with testdata/<name>.golden (rewritten with -update).
func checkGolden(t *testing.T, name string, rep postmortem.Report) {
	t.Helper()
	var out bytes.Buffer
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", strings.TrimSuffix(name, ".log")+".golden")
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("read golden (run with -update to create it): %v", err)
	}
	if !bytes.Equal(want, out.Bytes()) {
		t.Errorf("report of %s differs from %s:\n%s", name, golden, out.String())
	}
}

// TestMeasuredCrash reproduces the reading of docs/measurements.md, The crash, from logs in the
// shapes of vLLM 0.8 and 0.10 (V1 engine): 193 running, KV 15.9%, 112 MiB requested = 193 × 152,064 × 4 bytes, the float32
// product frequency_penalties × output_bin_counts in vllm/model_executor/layers/utils.py
// apply_penalties → type one limit.
func TestMeasuredCrash(t *testing.T) {
	for _, tc := range []struct {
		name    string
		running []uint32
		dump    bool
	}{
		{"v0_10_type_one.log", []uint32{3, 46, 144, 193, 193}, true},
		{"v0_8_type_one.log", []uint32{144, 193}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := analyzeFile(t, tc.name, postmortem.Options{})
			checkGolden(t, tc.name, rep)
			if !rep.Crashed || rep.Verdict != postmortem.VerdictTypeOne {
				t.Fatalf("verdict = %q (crashed %v), want %q", rep.Verdict, rep.Crashed, postmortem.VerdictTypeOne)
			}
			last := rep.Timeline[len(rep.Timeline)-1]
			if *last.Running != 193 || last.Dump != tc.dump {
				t.Errorf("last timeline point = running %d dump %v, want 193, %v", *last.Running, last.Dump, tc.dump)
			}
			var running []uint32
			for _, p := range rep.Timeline {
				running = append(running, *p.Running)
			}
			if !slices.Equal(running, tc.running) {
				t.Errorf("timeline running = %v, want %v", running, tc.running)
			}
			lw := rep.LastWords
			if lw.Exception != "torch.OutOfMemoryError" || *lw.BytesRequested != 112<<20 || *lw.FreeBytes != 89003131 /* 84.88 MiB */ {
				t.Errorf("last words = %+v", lw)
			}
			a := rep.Arithmetic
			if a.Running != 193 || a.Vocab != 152064 || a.Columns != 152064 || a.Tensor.ElementBytes != 4 || a.Tensor.DType != "float32" ||
				a.ProductBytes != 117393408 || a.TorchPrints != "112.00 MiB" {
				t.Errorf("arithmetic = %+v, want 193 × 152,064 × 4 (float32) = 117,393,408 B printed as 112.00 MiB", a)
			}
			if a.Tensor.Tensor != "frequency_penalties.unsqueeze(dim=1) * output_bin_counts" {
				t.Errorf("tensor = %+v", a.Tensor)
			}
			if a.ImpliedMin != 190 || a.ImpliedMax != 193 || !a.Match {
				t.Errorf("implied running %d–%d match %v, want 190–193 and a match", a.ImpliedMin, a.ImpliedMax, a.Match)
			}
			if inner := rep.Frames[len(rep.Frames)-1]; inner != "vllm/model_executor/layers/utils.py:apply_penalties" {
				t.Errorf("innermost frame = %q, want the penalty step in vllm/model_executor/layers/utils.py", inner)
			}
			if !strings.Contains(rep.CodeLine, "frequency_penalties.unsqueeze") {
				t.Errorf("code line = %q", rep.CodeLine)
			}
			text := strings.Join(rep.Reasoning, "\n")
			for _, want := range []string{"only 15.9% in use", "193 running × 152,064 vocabulary", "× 4 bytes (float32) = 117,393,408 B = 111.955 MiB", "rounds that block to 112.00 MiB", "the sampler"} {
				if !strings.Contains(text, want) {
					t.Errorf("reasoning lacks %q:\n%s", want, text)
				}
			}
			fix := strings.Join(rep.Fix, "\n")
			if !strings.Contains(fix, "cap --max-num-seqs") || !strings.Contains(fix, "594.00 KiB per running sequence") {
				t.Errorf("fix = %q", fix)
			}
			if rep.Model != "Qwen/Qwen2.5-7B-Instruct-AWQ" || rep.DType != "float16" {
				t.Errorf("model = %q dtype %q", rep.Model, rep.DType)
			}
		})
	}
}

// TestV0PenaltiesInModelDType: V0's sampler (vllm/model_executor/layers/sampler.py) applies the
// penalties before its float32 cast, so the product has the model's dtype. With float16 logits
// the same 193 × 152,064 tensor is 56 MiB, not 112: a reading that assumed 4 bytes would have
// implied 94–96 running and missed the match.
func TestV0PenaltiesInModelDType(t *testing.T) {
	lines := readLog(t, "v0_type_one.log")
	rep := postmortem.Analyze(lines, postmortem.Options{})
	checkGolden(t, "v0_type_one.log", withSource(rep, "v0_type_one.log"))
	a := rep.Arithmetic
	if rep.Verdict != postmortem.VerdictTypeOne || a.Tensor.DType != "float16" || a.Tensor.ElementBytes != 2 || a.TorchPrints != "56.00 MiB" || a.ImpliedMin > 193 || a.ImpliedMax < 193 {
		t.Fatalf("verdict %q arithmetic %+v", rep.Verdict, a)
	}
	// Without the engine config line the dtype is unknown: both widths are tried, 2 bytes match.
	var noConfig []schema.EngineLog
	for _, l := range lines {
		if !strings.Contains(l.Message, "dtype=torch") {
			noConfig = append(noConfig, l)
		}
	}
	rep = postmortem.Analyze(noConfig, postmortem.Options{})
	a = rep.Arithmetic
	if rep.Verdict != postmortem.VerdictTypeOne || a.Tensor.ElementBytes != 2 || len(a.Others) != 1 ||
		a.Others[0].Tensor.ElementBytes != 4 || a.Others[0].Match || a.Others[0].ImpliedMin != 94 || a.Others[0].ImpliedMax != 96 {
		t.Errorf("unknown dtype: verdict %q arithmetic %+v", rep.Verdict, a)
	}
}

// TestBinCountsInt64: on main with two data-parallel engines, engine 1 dies allocating the bin
// counts of get_token_bin_counts_and_mask: torch.zeros((num_seqs, vocab_size + 1), dtype=torch.long),
// 190 × 152,065 × 8 bytes = 222 MiB. Only engine 1's lines make its timeline; with 4-byte
// elements the size would have implied about 380 running and no match.
func TestBinCountsInt64(t *testing.T) {
	rep := analyzeFile(t, "main_dp2_bin_counts.log", postmortem.Options{})
	checkGolden(t, "main_dp2_bin_counts.log", rep)
	a := rep.Arithmetic
	if rep.Verdict != postmortem.VerdictTypeOne || rep.EngineIndex != "1" || a == nil {
		t.Fatalf("verdict %q engine %q arithmetic %+v", rep.Verdict, rep.EngineIndex, a)
	}
	if a.Running != 190 || a.RunningSource != "scheduler state at the failing step" || a.Columns != 152065 || a.Tensor.DType != "int64" ||
		a.Tensor.ElementBytes != 8 || a.ProductBytes != 190*152065*8 || a.TorchPrints != "222.00 MiB" || !a.Match {
		t.Errorf("arithmetic %+v", a)
	}
	for _, p := range rep.Timeline {
		if *p.Running == 193 || *p.Running == 390 {
			t.Errorf("timeline has another engine's or the aggregated line: %+v", rep.Timeline)
		}
	}
	if lo, hi, _ := postmortem.ImpliedRunning(222<<20, 152064*4); lo < 370 || hi > 390 {
		t.Errorf("a 4-byte reading implies %d–%d running; the test's premise is wrong", lo, hi)
	}
}

// TestDataParallelOwnNumbers: a data-parallel server (main, --data-parallel-size 2) logging with
// --aggregate-engine-logging writes only "2 Engines Aggregated:" stats lines, whose Running is the
// sum over both engines (vllm/v1/metrics/loggers.py AggregatedLoggingStatLogger); engine 1 dies
// allocating its bin counts, 222.00 MiB = 190 sequences × 152,065 × 8 bytes. The dead engine's
// own numbers explain it; the sum never does (390 running would be "unexplained"), and without
// them the report says which it lacks.
func TestDataParallelOwnNumbers(t *testing.T) {
	hasReason := func(rep postmortem.Report, s string) bool {
		return strings.Contains(strings.Join(rep.Reasoning, "\n"), s)
	}
	t.Run("with the engine core's scheduler dump", func(t *testing.T) {
		// vLLM prints it at the failing step (vllm/v1/engine/core.py log_error_detail →
		// vllm/logging_utils/dump_input.py), from the dying engine core's process.
		rep := analyzeFile(t, "main_dp2_aggregated_dump.log", postmortem.Options{})
		checkGolden(t, "main_dp2_aggregated_dump.log", rep)
		if a := rep.Arithmetic; rep.Verdict != postmortem.VerdictTypeOne || rep.EngineIndex != "1" || rep.Engines != 2 || a == nil ||
			a.Running != 190 || a.RunningSource != "scheduler state at the failing step" || !a.Match {
			t.Fatalf("verdict %q engine %q of %d, arithmetic %+v", rep.Verdict, rep.EngineIndex, rep.Engines, rep.Arithmetic)
		}
		for _, p := range rep.Timeline {
			if p.Engines > 0 {
				t.Errorf("the timeline holds an aggregated line beside the engine's own numbers: %+v", p)
			}
		}
	})
	t.Run("only the aggregated lines", func(t *testing.T) {
		// The same log without the dump: the log has no running count of engine 1.
		rep := analyzeFile(t, "main_dp2_aggregated.log", postmortem.Options{})
		checkGolden(t, "main_dp2_aggregated.log", rep)
		if rep.Verdict != postmortem.VerdictCannotTell || rep.Arithmetic != nil || rep.EngineIndex != "1" || rep.Engines != 2 {
			t.Fatalf("verdict %q, arithmetic %+v, engine %q of %d; want cannot tell, no multiplication", rep.Verdict, rep.Arithmetic, rep.EngineIndex, rep.Engines)
		}
		for _, want := range []string{
			"Running 390 at 09:01:10 is their sum",
			"190–191 running sequences on one engine: within the 390 the engines ran together, so not excluded",
			"bounds engine 1's usage at 47.2%: not full",
		} {
			if !hasReason(rep, want) {
				t.Errorf("reasoning lacks %q:\n%s", want, strings.Join(rep.Reasoning, "\n"))
			}
		}
		if !strings.Contains(strings.Join(rep.Fix, " "), "--aggregate-engine-logging") {
			t.Errorf("fix %q does not say how to get the engine's own numbers", rep.Fix)
		}
	})
	t.Run("only the aggregated lines, and the engines' /metrics", func(t *testing.T) {
		// The collector scraped /metrics every 15 s: engine 1's vllm:num_requests_running (its
		// engine="1" series) is its own count, engine 0's is not.
		at := func(s int) time.Time { return time.Date(2026, 12, 1, 9, 0, s, 0, time.UTC).AddDate(-1, 0, 0) }
		pt := func(s int, running, kv float64) postmortem.SamplePoint {
			return postmortem.SamplePoint{TS: at(s), Running: &running, KVCacheUsagePerc: &kv}
		}
		samples := map[string][]postmortem.SamplePoint{
			"0": {pt(50, 196, 0.159), pt(65, 197, 0.16), pt(80, 200, 0.16)},
			"1": {pt(50, 171, 0.28), pt(65, 184, 0.30), pt(80, 189, 0.312), pt(95, 189, 0.312)}, // the last after the death: frozen values
		}
		rep := analyzeFile(t, "main_dp2_aggregated.log", postmortem.Options{Samples: samples})
		checkGolden(t, "main_dp2_aggregated_metrics.log", rep)
		if a := rep.Arithmetic; rep.Verdict != postmortem.VerdictTypeOne || a == nil || a.Running != 189 ||
			a.RunningSource != "engine's /metrics sample" || !a.Match {
			t.Fatalf("verdict %q, arithmetic %+v", rep.Verdict, rep.Arithmetic)
		}
		if !hasReason(rep, "only 31.2% in use at its last /metrics sample") {
			t.Errorf("KV read from engine 1's own gauge: %q", rep.Reasoning)
		}
	})
}

func withSource(r postmortem.Report, src string) postmortem.Report {
	r.Source = src
	return r
}

// TestOtherVerdicts: a full KV cache with an allocation that is not logits-sized, and a death
// neither the KV cache nor the logits explain; and a log without a crash.
func TestOtherVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		verdict string
		reason  string
	}{
		{"v1_kv_exhausted.log", postmortem.VerdictKVExhausted, "99.8% in use at the last stats line: the KV cache was full"},
		{"v1_unexplained.log", postmortem.VerdictUnexplained, "do not match running × vocabulary × 4"},
		{"v1_no_crash.log", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := analyzeFile(t, tc.name, postmortem.Options{})
			checkGolden(t, tc.name, rep)
			if rep.Verdict != tc.verdict || rep.Crashed != (tc.verdict != "") {
				t.Fatalf("verdict = %q crashed %v, want %q", rep.Verdict, rep.Crashed, tc.verdict)
			}
			if tc.verdict == "" {
				return
			}
			if a := rep.Arithmetic; a == nil || a.Match {
				t.Errorf("arithmetic = %+v, want a computed mismatch", a)
			}
			if !strings.Contains(strings.Join(rep.Reasoning, "\n"), tc.reason) {
				t.Errorf("reasoning lacks %q: %q", tc.reason, rep.Reasoning)
			}
			if rep.NotRuledOut == "" || len(rep.Fix) == 0 {
				t.Errorf("no not-ruled-out or fix: %+v", rep)
			}
		})
	}
}

// TestRunningTolerance: the stats line is printed every 10 s, so the running count at the moment
// of the allocation differs from the last line's. Without the 15:53:37 line the last one says 144
// running (5 s earlier); its trend from 46 at 15:53:22 extrapolates to 193, inside 190–193.
func TestRunningTolerance(t *testing.T) {
	lines := readLog(t, "v0_10_type_one.log")
	drop := func(running uint32) []schema.EngineLog {
		var out []schema.EngineLog
		for _, l := range lines {
			if l.Running != nil && *l.Running >= running {
				continue
			}
			out = append(out, l)
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		lines      []schema.EngineLog
		opts       postmortem.Options
		verdict    string
		expMin     int
		expMax     int
		impliedMin int
	}{
		{"last line at the death", lines, postmortem.Options{}, postmortem.VerdictTypeOne, 183, 203, 190},
		{"last line 5 s before, trend", drop(193), postmortem.Options{}, postmortem.VerdictTypeOne, 134, 203, 190},
		// 15 s before with 46 running: the trend from 3 reaches only 111 — too far from 190.
		{"last line 15 s before", drop(144), postmortem.Options{}, postmortem.VerdictUnexplained, 40, 117, 190},
		// A different vocabulary breaks the match: Llama 3's 128,256 implies 225–228 running.
		{"wrong vocabulary", lines, postmortem.Options{VocabSize: 128256}, postmortem.VerdictUnexplained, 183, 203, 225},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := postmortem.Analyze(tc.lines, tc.opts)
			a := rep.Arithmetic
			if rep.Verdict != tc.verdict || a == nil || a.ExpectedMin != tc.expMin || a.ExpectedMax != tc.expMax || a.ImpliedMin != tc.impliedMin {
				t.Errorf("verdict %q, arithmetic %+v; want %q, expected %d–%d, implied from %d", rep.Verdict, a, tc.verdict, tc.expMin, tc.expMax, tc.impliedMin)
			}
		})
	}
}

// TestAtPicksTheDeath: with two deaths in one log, --at picks the one at or before it.
func TestAtPicksTheDeath(t *testing.T) {
	first := readLog(t, "v1_unexplained.log")
	second := readLog(t, "v0_10_type_one.log")
	for i := range second {
		second[i].TS = second[i].TS.Add(time.Hour)
	}
	lines := append(append([]schema.EngineLog{}, first...), second...)
	if rep := postmortem.Analyze(lines, postmortem.Options{}); rep.Verdict != postmortem.VerdictTypeOne {
		t.Errorf("latest death verdict = %q", rep.Verdict)
	}
	at := first[len(first)-1].TS
	if rep := postmortem.Analyze(lines, postmortem.Options{At: at}); rep.Verdict != postmortem.VerdictUnexplained || !rep.LastWords.TS.Equal(at) {
		t.Errorf("--at %s: verdict %q at %v", at, rep.Verdict, rep.LastWords.TS)
	}
}

func TestJSON(t *testing.T) {
	rep := analyzeFile(t, "v0_10_type_one.log", postmortem.Options{})
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	ar := back["arithmetic"].(map[string]any)
	if back["verdict"] != postmortem.VerdictTypeOne || ar["product_bytes"].(float64) != 117393408 || ar["running"].(float64) != 193 {
		t.Errorf("JSON = %s", js)
	}
}

func TestArithmetic(t *testing.T) {
	for _, tc := range []struct {
		tensor int64
		prints string
	}{
		{193 * 152064 * 4, "112.00 MiB"},
		{256 * 152064 * 4, "150.00 MiB"},
		{100, "2.00 MiB"},
		{5 << 20, "20.00 MiB"},
		{3 << 30, "3.00 GiB"},
	} {
		if got := postmortem.FormatSize(postmortem.AllocationSize(tc.tensor)); got != tc.prints {
			t.Errorf("%d bytes print as %s, want %s", tc.tensor, got, tc.prints)
		}
		// Whatever PyTorch printed must admit the tensor that caused it.
		lo, hi := postmortem.TensorRange(postmortem.AllocationSize(tc.tensor))
		if float64(tc.tensor) < lo || float64(tc.tensor) > hi {
			t.Errorf("tensor %d outside the range %v–%v of its printed size", tc.tensor, lo, hi)
		}
	}
	for _, tc := range []struct {
		model string
		flag  int
		want  int
	}{
		{"Qwen/Qwen2.5-7B-Instruct-AWQ", 0, 152064},
		{"Qwen/Qwen2.5-1.5B-Instruct", 0, 151936},
		{"meta-llama/Llama-3.1-8B-Instruct", 0, 128256},
		{"mistralai/Mistral-7B-Instruct-v0.3", 0, 32768},
		{"unknown/model", 0, postmortem.DefaultVocabSize},
		{"meta-llama/Llama-3.1-8B-Instruct", 1000, 1000},
	} {
		if got, _ := postmortem.VocabSize(tc.flag, tc.model); got != tc.want {
			t.Errorf("VocabSize(%d, %s) = %d, want %d", tc.flag, tc.model, got, tc.want)
		}
	}
}

// FuzzReadLog feeds arbitrary text through the log reader and the analysis: neither may panic,
// and every line read is analysed.
func FuzzReadLog(f *testing.F) {
	for _, name := range []string{"v0_10_type_one.log", "v0_8_type_one.log", "main_dp2_bin_counts.log", "v0_type_one.log", "v1_kv_exhausted.log"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("ERROR 01-01 00:00:00 x.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 0.00 MiB.\n")
	f.Fuzz(func(t *testing.T, text string) {
		lines, err := postmortem.ReadLog(strings.NewReader(text), "e", "fuzz", readNow, time.UTC)
		if err != nil {
			return
		}
		rep := postmortem.Analyze(lines, postmortem.Options{})
		if rep.Lines != len(lines) {
			t.Fatalf("analysed %d of %d lines", rep.Lines, len(lines))
		}
		var out bytes.Buffer
		if err := rep.WriteText(&out); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStackAndKVCaveats: the byte count alone cannot name the tensor (another tensor of the same
// size could match; the stack names it), and a full KV cache next to a logits-sized failure is
// named as not ruled out.
func TestStackAndKVCaveats(t *testing.T) {
	base := readLog(t, "v0_10_type_one.log")
	var noStack []schema.EngineLog
	for _, l := range base {
		if strings.Contains(l.Message, `File "`) {
			continue
		}
		l.Frames = nil
		noStack = append(noStack, l)
	}
	kvFull := slices.Clone(base)
	for i := range kvFull {
		if kvFull[i].Running != nil && *kvFull[i].Running == 193 {
			kv := 0.991
			kvFull[i].KVCacheUsagePerc = &kv
		}
	}
	for _, tc := range []struct {
		name        string
		lines       []schema.EngineLog
		notRuledOut string
	}{
		{"no stack", noStack, "a coincidence of sizes"},
		{"KV also full", kvFull, "KV cache pressure: it was also 99.1% full"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := postmortem.Analyze(tc.lines, postmortem.Options{})
			if rep.Verdict != postmortem.VerdictTypeOne || !strings.Contains(rep.NotRuledOut, tc.notRuledOut) {
				t.Errorf("verdict %q, not ruled out %q; want type one and %q", rep.Verdict, rep.NotRuledOut, tc.notRuledOut)
			}
		})
	}
}

// TestCUDAErrorOutOfMemory: a kernel's "RuntimeError: CUDA error: out of memory" is an
// out-of-memory death without a size, not "another exception".
func TestCUDAErrorOutOfMemory(t *testing.T) {
	text := "(EngineCore_DP0 pid=233) INFO 09-11 15:53:37 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 193 reqs, Waiting: 0 reqs, GPU KV cache usage: 15.9%, Prefix cache hit rate: 0.0%\n" +
		"(EngineCore_DP0 pid=233) ERROR 09-11 15:53:38 [core.py:710] EngineCore encountered a fatal error.\n" +
		"(EngineCore_DP0 pid=233) ERROR 09-11 15:53:38 [core.py:710] RuntimeError: CUDA error: out of memory\n"
	lines, err := postmortem.ReadLog(strings.NewReader(text), "e", "inline", readNow, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	rep := postmortem.Analyze(lines, postmortem.Options{})
	if !rep.Crashed || rep.Verdict != postmortem.VerdictUnexplained || !strings.Contains(strings.Join(rep.Reasoning, "\n"), "gives no size") {
		t.Errorf("verdict %q reasoning %q", rep.Verdict, rep.Reasoning)
	}
}
