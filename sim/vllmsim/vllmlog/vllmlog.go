// Package vllmlog writes vllmsim's log in the shape of one vLLM release's own log (see package
// vllmversion), so that log parsers built for vLLM (servescope's collector among them) read the
// simulator unchanged, release by release:
//
//	(APIServer pid=4242) INFO 09-11 15:53:12 [loggers.py:236] Engine 000: Avg prompt throughput: 88.0 tokens/s, ...   (0.10, main)
//	INFO 09-11 15:53:12 [loggers.py:111] Engine 000: Avg prompt throughput: 88.0 tokens/s, ...                          (0.8)
//	INFO 09-11 15:53:12 [metrics.py:486] Avg prompt throughput: ..., Running: 3 reqs, Swapped: 0 reqs, Pending: 0 reqs, ... (0.8, V0 engine)
//
// and, when the simulated engine dies, what that release prints: the scheduler state dumped at the
// failing step (0.10, main), the engine core's traceback through the sampler's penalty step
// (vllm/v1/sample/sampler.py → vllm/v1/sample/ops/penalties.py →
// vllm/model_executor/layers/utils.py apply_penalties; V0: vllm/model_executor/layers/sampler.py)
// ending in torch's out-of-memory message, and the API server's reaction. The allocation is the
// product frequency_penalties × output_bin_counts: running × vocabulary elements of float32 in V1
// (the sampler casts the logits first) and of the model's float16 in V0.
//
// With JSON set, every record is one JSON object as python-json-logger writes it through
// VLLM_LOGGING_CONFIG_PATH (LogRecord attributes as keys, the traceback in exc_info).
//
// Timestamps are the engine clock's simulated times (start + simulated seconds), formatted as vLLM
// does ("%m-%d %H:%M:%S", local time), so stats lines are 10 s apart in the log even under
// --time-scale.
package vllmlog

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// Version is the vLLM version the simulator reports on /version (vLLM's main branch).
var Version = vllmversion.Main.Release()

// GPU describes the simulated device in the out-of-memory message (an RTX 3060 12 GB by
// default, as in docs/measurements.md, The crash).
type GPU struct {
	TotalGiB float64 // torch's "total capacity"
	FreeMiB  float64 // torch's "of which ... is free"
}

// DefaultGPU is the RTX 3060 of docs/measurements.md at gpu_memory_utilization 0.9, as its crash
// message reads.
func DefaultGPU() GPU { return GPU{TotalGiB: 11.63, FreeMiB: 84.88} }

// Options choose the log's format.
type Options struct {
	// Release is the vLLM release whose lines are written (default main).
	Release vllmversion.Version
	// JSON writes each record as one JSON object (python-json-logger through
	// VLLM_LOGGING_CONFIG_PATH); uvicorn's own lines stay plain text, as uvicorn logs them itself.
	JSON bool
	// GPU is the simulated device of the out-of-memory message (default DefaultGPU).
	GPU GPU
	// Engines is the number of engine cores (--data-parallel-size; default 1): each writes its
	// own stats line "Engine 00N:" and its engine core process is EngineCore_DPN.
	Engines int
	// Aggregate writes one "N Engines Aggregated:" stats line for all engines instead of one per
	// engine (--aggregate-engine-logging, vLLM main: vllm/v1/metrics/loggers.py
	// AggregatedLoggingStatLogger): throughput and preemptions summed over the engines, Running and
	// Waiting summed, KV cache usage their mean, the prefix cache hit rate over all of them.
	Aggregate bool
}

// Logger writes vLLM-shaped lines to W for a server of one or more engine cores: it is engine
// 0's engine.Observer, and Engine(i) is engine i's. It is safe for concurrent use.
type Logger struct {
	mu      sync.Mutex
	w       io.Writer
	clock   *engine.Clock
	opts    Options
	apiPID  int
	engines []*EngineLog
	agg     *aggregate // with Options.Aggregate and several engines
}

// EngineLog is one engine core's side of the log: its stats lines and its death.
type EngineLog struct {
	l           *Logger
	idx, pid    int
	queries     int
	hits        int
	preemptions int
	lastActive  bool
}

// aggregate is AggregatedLoggingStatLogger's state: each engine's last scheduler state and the
// tokens, prefix lookups and preemptions of every engine since the last line.
type aggregate struct {
	last                []engine.IntervalStats
	prompt, generation  int
	queries, hits       int // cumulative, as vLLM's CachingMetrics keeps them
	preemptions         int
	lastAt              float64
	lastActive, started bool
}

// New makes a Logger writing vLLM main's text format; apiPID is the "(APIServer pid=N)" process
// id, and the engine core process gets apiPID+1 as vLLM's forked EngineCore_DP0 would get a
// nearby id.
func New(w io.Writer, clock *engine.Clock, apiPID int, gpu GPU) *Logger {
	return NewWith(w, clock, apiPID, Options{GPU: gpu})
}

// NewWith makes a Logger writing the format opts choose. Engine core i gets the process id
// apiPID + 1 + i, as vLLM's forked EngineCore_DPi would get a nearby one.
func NewWith(w io.Writer, clock *engine.Clock, apiPID int, opts Options) *Logger {
	if opts.GPU == (GPU{}) {
		opts.GPU = DefaultGPU()
	}
	opts.Engines = max(opts.Engines, 1)
	l := &Logger{w: w, clock: clock, apiPID: apiPID, opts: opts}
	for i := range opts.Engines {
		l.engines = append(l.engines, &EngineLog{l: l, idx: i, pid: apiPID + 1 + i})
	}
	if opts.Aggregate && opts.Engines > 1 {
		l.agg = &aggregate{last: make([]engine.IntervalStats, opts.Engines), lastAt: clock.Now()}
	}
	return l
}

// Engine returns engine core i's observer (0 ≤ i < Options.Engines).
func (l *Logger) Engine(i int) *EngineLog { return l.engines[i] }

// Stats, Crashed, StepDone, RequestFinished and PrefixCache make Logger engine 0's observer.
func (l *Logger) Stats(s engine.IntervalStats)       { l.engines[0].Stats(s) }
func (l *Logger) Crashed(c engine.CrashInfo)         { l.engines[0].Crashed(c) }
func (l *Logger) StepDone(s engine.StepStats)        { l.engines[0].StepDone(s) }
func (l *Logger) RequestFinished(f *engine.Finished) { l.engines[0].RequestFinished(f) }
func (l *Logger) PrefixCache(queries, hits int)      { l.engines[0].PrefixCache(queries, hits) }

func stamp(t time.Time) string { return t.Format("01-02 15:04:05") }

// proc is a process of the server, as the log names it.
type proc struct {
	name string
	pid  int
}

func (l *Logger) api() proc     { return proc{"APIServer", l.apiPID} }
func (e *EngineLog) core() proc { return proc{fmt.Sprintf("EngineCore_DP%d", e.idx), e.pid} }

// prefixed is whether the release prefixes every line with "(process pid=N) " (vllm/utils
// decorate_logs, 0.10 on).
func (l *Logger) prefixed() bool {
	return l.opts.Release == vllmversion.V0_10 || l.opts.Release == vllmversion.Main
}

// record writes one log record of logger name (file:line in src); msg's lines after the first
// are the record's traceback (logger.exception), written as vLLM's NewLineFormatter does: each on
// its own line with the prefix repeated.
func (l *Logger) record(p proc, level string, at time.Time, src, name, msg string, exc []string) {
	if l.opts.JSON {
		file, line, _ := strings.Cut(src, ":")
		rec := map[string]any{
			"asctime": at.Format("2006-01-02 15:04:05,000"), "levelname": level, "name": name,
			"filename": file, "lineno": json.Number(line), "processName": p.name, "process": p.pid, "message": msg,
		}
		if len(exc) > 0 {
			rec["exc_info"] = strings.Join(exc, "\n")
		}
		b, _ := json.Marshal(rec)
		l.raw(p, string(b))
		return
	}
	for _, m := range append([]string{msg}, exc...) {
		l.raw(p, fmt.Sprintf("%s %s [%s] %s", level, stamp(at), src, m))
	}
}

// raw writes one line as the process's stdout wrapper does.
func (l *Logger) raw(p proc, line string) {
	if l.prefixed() {
		fmt.Fprintf(l.w, "(%s pid=%d) %s\n", p.name, p.pid, line)
		return
	}
	fmt.Fprintln(l.w, line)
}

// Startup writes the API server's and the engine's start-up lines.
func (l *Logger) Startup(model string, maxModelLen int, listen string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Time(l.clock.Now())
	v := l.opts.Release.Release()
	l.record(l.api(), "INFO", now, "api_server.py:1896", "vllm.entrypoints.openai.api_server", "vLLM API server version "+v, nil)
	l.record(l.api(), "INFO", now, "utils.py:328", "vllm.entrypoints.utils", fmt.Sprintf("non-default args: {'model': '%s', 'max_model_len': %d}", model, maxModelLen), nil)
	config := fmt.Sprintf("model='%s', speculative_config=None, tokenizer='%s', dtype=torch.float16, max_seq_len=%d, served_model_name=%s, enable_prefix_caching=True", model, model, maxModelLen, model)
	if l.opts.Release.V1Engine() {
		for _, e := range l.engines {
			l.record(e.core(), "INFO", now, "core.py:76", "vllm.v1.engine.core", fmt.Sprintf("Initializing a V1 LLM engine (v%s) with config: %s", v, config), nil)
		}
	} else {
		l.record(l.api(), "INFO", now, "llm_engine.py:243", "vllm.engine.llm_engine", fmt.Sprintf("Initializing an LLM engine (v%s) with config: %s", v, config), nil)
	}
	l.record(l.api(), "INFO", now, "api_server.py:1971", "vllm.entrypoints.openai.api_server", "Starting vLLM API server 0 on http://"+listen, nil)
}

// Stats writes the engine's periodic stats line, or with Options.Aggregate adds its numbers to
// the engines' aggregated line. Like vLLM, an interval with no prompt or generation throughput
// after another idle one is not written (vLLM logs it at debug level).
func (e *EngineLog) Stats(s engine.IntervalStats) {
	l := e.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.agg != nil {
		l.aggregated(e, s)
		return
	}
	e.queries += s.PrefixQueries
	e.hits += s.PrefixHits
	preempted := e.preemptions
	e.preemptions = 0
	active := s.PromptTokens > 0 || s.GenerationTokens > 0
	if !active && !e.lastActive {
		return
	}
	e.lastActive = active
	hitRate := 0.0
	if e.queries > 0 {
		hitRate = 100 * float64(e.hits) / float64(e.queries)
	}
	at := l.clock.Time(s.At)
	prompt, gen := float64(s.PromptTokens)/s.IntervalSeconds, float64(s.GenerationTokens)/s.IntervalSeconds
	if l.opts.Release == vllmversion.V0_8V0 {
		// vllm/engine/metrics.py LoggingStatLogger.
		l.record(l.api(), "INFO", at, "metrics.py:486", "vllm.engine.metrics", fmt.Sprintf(
			"Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: %d reqs, Swapped: %d reqs, Pending: %d reqs, GPU KV cache usage: %.1f%%, CPU KV cache usage: %.1f%%.",
			prompt, gen, s.Running, 0, s.Waiting, 100*s.KVCacheUsage, 0.0), nil)
		l.record(l.api(), "INFO", at, "metrics.py:502", "vllm.engine.metrics", fmt.Sprintf("Prefix cache hit rate: GPU: %.2f%%, CPU: %.2f%%", hitRate, 0.0), nil)
		return
	}
	l.statsLine(at, fmt.Sprintf("Engine %03d: ", e.idx), prompt, gen, s.Running, s.Waiting, preempted, s.KVCacheUsage, hitRate)
}

// statsLine writes V1's stats line (vllm/v1/metrics/loggers.py LoggingStatLogger.log) after
// prefix ("Engine 000: ", "2 Engines Aggregated: ").
func (l *Logger) statsLine(at time.Time, prefix string, prompt, gen float64, running, waiting, preempted int, kv, hitRate float64) {
	src := map[vllmversion.Version]string{vllmversion.V0_8: "loggers.py:111", vllmversion.V0_10: "loggers.py:123", vllmversion.Main: "loggers.py:236"}[l.opts.Release]
	parts := fmt.Sprintf("%sAvg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: %d reqs, Waiting: %d reqs, ", prefix, prompt, gen, running, waiting)
	if l.opts.Release == vllmversion.Main && preempted > 0 {
		// vllm/v1/metrics/loggers.py on main prints the interval's preemptions when there were any.
		parts += fmt.Sprintf("Preemptions: %d, ", preempted)
	}
	parts += fmt.Sprintf("GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%", 100*kv, hitRate)
	l.record(l.api(), "INFO", at, src, "vllm.v1.metrics.loggers", parts, nil)
}

// aggregated records engine e's interval and writes the aggregated line once an interval has
// passed since the last one (vLLM's API server logs every engine's numbers on one timer; an idle
// engine's last scheduler state stands). Called with l.mu held.
func (l *Logger) aggregated(e *EngineLog, s engine.IntervalStats) {
	a := l.agg
	a.last[e.idx] = s
	a.prompt += s.PromptTokens
	a.generation += s.GenerationTokens
	a.queries += s.PrefixQueries
	a.hits += s.PrefixHits
	a.preemptions += e.preemptions
	e.preemptions = 0
	if s.At < a.lastAt+s.IntervalSeconds && a.started {
		return
	}
	interval := s.At - a.lastAt
	if interval <= 0 {
		interval = s.IntervalSeconds
	}
	a.started = true
	active := a.prompt > 0 || a.generation > 0
	defer func() {
		a.lastAt, a.lastActive = s.At, active
		a.prompt, a.generation, a.preemptions = 0, 0, 0
	}()
	if !active && !a.lastActive {
		return
	}
	var running, waiting int
	var kv float64
	for _, st := range a.last {
		running += st.Running
		waiting += st.Waiting
		kv += st.KVCacheUsage
	}
	hitRate := 0.0
	if a.queries > 0 {
		hitRate = 100 * float64(a.hits) / float64(a.queries)
	}
	l.statsLine(l.clock.Time(s.At), fmt.Sprintf("%d Engines Aggregated: ", len(a.last)), float64(a.prompt)/interval, float64(a.generation)/interval,
		running, waiting, a.preemptions, kv/float64(len(a.last)), hitRate)
}

// ElementBytes is the size of one element of the tensor the simulated crash allocates, the
// product frequency_penalties × output_bin_counts: float32 in V1 (the sampler casts the logits
// to float32 before the penalties), the model's float16 in V0 (penalties run before the cast).
func ElementBytes(r vllmversion.Version) int64 {
	if r.V1Engine() {
		return 4
	}
	return 2
}

// RequestedBytes is the size of that tensor for running sequences over a vocabulary.
func RequestedBytes(r vllmversion.Version, running, vocab int) int64 {
	return int64(running) * int64(vocab) * ElementBytes(r)
}

// Crashed writes what the release prints when the engine core dies of the out-of-memory error:
// the engine core's lines carry its own process prefix (EngineCore_DPn), the API server's reaction
// its own.
func (e *EngineLog) Crashed(c engine.CrashInfo) {
	l := e.l
	l.mu.Lock()
	defer l.mu.Unlock()
	at := l.clock.Time(c.At)
	oom := OOMMessage(RequestedBytes(l.opts.Release, c.Running, c.VocabSize), l.opts.GPU)
	ec := e.core()
	switch l.opts.Release {
	case vllmversion.V0_8V0:
		// vllm/engine/multiprocessing/engine.py: logger.exception(repr(e)) in the engine process.
		tb := append([]string{"Traceback (most recent call last):"}, v0Frames()...)
		l.record(l.api(), "ERROR", at, "engine.py:160", "vllm.engine.multiprocessing.engine", "OutOfMemoryError('"+strings.TrimPrefix(oom, "torch.OutOfMemoryError: ")+"')", append(tb, oom))
	case vllmversion.V0_8:
		// vllm/v1/engine/core.py 0.8.0–0.8.4: the traceback inside one record, then the client.
		tb := append(v1Frames(l.opts.Release), oom, "")
		l.record(ec, "ERROR", at, "core.py:387", "vllm.v1.engine.core", "EngineCore hit an exception: Traceback (most recent call last):", tb)
		l.record(l.api(), "CRITICAL", at, "core_client.py:359", "vllm.v1.engine.core_client", "Got fatal signal from worker processes, shutting down. See stack trace above for root cause issue.", nil)
	default:
		// vllm/logging_utils/dump_input.py, then vllm/v1/engine/core.py run_engine_core.
		v := l.opts.Release.Release()
		l.record(ec, "ERROR", at, "dump_input.py:69", "vllm.logging_utils.dump_input", fmt.Sprintf("Dumping input data for V1 LLM engine (v%s) with config: dtype=torch.float16, enable_prefix_caching=True, ", v), nil)
		l.record(ec, "ERROR", at, "dump_input.py:76", "vllm.logging_utils.dump_input", fmt.Sprintf("Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs=[],num_scheduled_tokens={},total_num_scheduled_tokens=%d,finished_req_ids=[])", c.Running), nil)
		l.record(ec, "ERROR", at, "dump_input.py:79", "vllm.logging_utils.dump_input", fmt.Sprintf("Dumping scheduler stats: SchedulerStats(num_running_reqs=%d, num_waiting_reqs=%d, step_counter=0, current_wave=0, kv_cache_usage=%v, prefix_cache_stats=PrefixCacheStats(reset=False, requests=0, queries=0, hits=0), spec_decoding_stats=None, num_corrupted_reqs=0)", c.Running, c.Waiting, c.KVCacheUsage), nil)
		tb := append([]string{"Traceback (most recent call last):"}, v1Frames(l.opts.Release)...)
		l.record(ec, "ERROR", at, "core.py:710", "vllm.v1.engine.core", "EngineCore encountered a fatal error.", append(tb, oom))
		l.record(l.api(), "ERROR", at, "async_llm.py:480", "vllm.v1.engine.async_llm", "AsyncLLM output_handler failed.", []string{
			"Traceback (most recent call last):",
			`  File "` + pkg + `vllm/v1/engine/async_llm.py", line 439, in output_handler`,
			"    outputs = await engine_core.get_output_async()",
			"              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
			`  File "` + pkg + `vllm/v1/engine/core_client.py", line 846, in get_output_async`,
			"    raise self._format_exception(outputs) from None",
			"vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
		})
		// multiprocessing prints the exception that ended the engine core once more, on stderr,
		// without the logger's prefix.
		raw := []string{"Process " + ec.name + ":", "Traceback (most recent call last):",
			`  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap`, "    self.run()",
			`  File "/usr/lib/python3.12/multiprocessing/process.py", line 108, in run`, "    self._target(*self._args, **self._kwargs)",
			`  File "` + pkg + `vllm/v1/engine/core.py", line 712, in run_engine_core`, "    raise e"}
		for _, m := range append(append(raw, v1Frames(l.opts.Release)...), oom) {
			l.raw(ec, m)
		}
	}
}

// Shutdown writes uvicorn's last lines after the engine died.
func (l *Logger) Shutdown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.raw(l.api(), "INFO:     Shutting down")
	l.raw(l.api(), fmt.Sprintf("INFO:     Finished server process [%d]", l.apiPID))
}

// StepDone counts the preemptions main's stats line reports.
func (e *EngineLog) StepDone(s engine.StepStats) {
	if s.Preemptions == 0 {
		return
	}
	e.l.mu.Lock()
	e.preemptions += s.Preemptions
	e.l.mu.Unlock()
}

// RequestFinished is part of engine.Observer; vLLM logs no per-request line at INFO.
func (e *EngineLog) RequestFinished(*engine.Finished) {}

// PrefixCache is part of engine.Observer; hit rates are taken from the interval stats.
func (e *EngineLog) PrefixCache(int, int) {}

const pkg = "/usr/local/lib/python3.12/dist-packages/"

// frame is one traceback frame: the file under site-packages, line, function, source line and
// the carets Python 3.11+ prints under it ("" for none).
type frame struct {
	file       string
	line       int
	fn, code   string
	underlined string
}

func render(fs []frame) []string {
	var out []string
	for _, f := range fs {
		out = append(out, fmt.Sprintf(`  File "%s%s", line %d, in %s`, pkg, f.file, f.line, f.fn), "    "+f.code)
		if f.underlined != "" {
			out = append(out, f.underlined)
		}
	}
	return out
}

// v1Frames is the V1 engine core's call chain from its busy loop to the penalty product
// (vllm/v1/engine/core.py → executor → gpu_worker → gpu_model_runner → vllm/v1/sample/sampler.py →
// vllm/v1/sample/ops/penalties.py → vllm/model_executor/layers/utils.py).
func v1Frames(r vllmversion.Version) []string {
	fs := []frame{
		{"vllm/v1/engine/core.py", 701, "run_engine_core", "engine_core.run_busy_loop()", ""},
		{"vllm/v1/engine/core.py", 728, "run_busy_loop", "self._process_engine_step()", ""},
		{"vllm/v1/engine/core.py", 754, "_process_engine_step", "outputs, model_executed = self.step_fn()", "                              ^^^^^^^^^^^^^^"},
		{"vllm/v1/engine/core.py", 284, "step", "model_output = self.execute_model_with_error_logging(", "                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
		{"vllm/v1/engine/core.py", 270, "execute_model_with_error_logging", "raise err", ""},
		{"vllm/v1/engine/core.py", 261, "execute_model_with_error_logging", "return model_fn(scheduler_output)", "           ^^^^^^^^^^^^^^^^^^^^^^^^^^"},
		{"vllm/v1/executor/abstract.py", 103, "execute_model", `output = self.collective_rpc("execute_model",`, "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
		{"vllm/executor/uniproc_executor.py", 83, "collective_rpc", "return [run_method(self.driver_worker, method, args, kwargs)]", "            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
		{"vllm/utils/__init__.py", 3122, "run_method", "return func(*args, **kwargs)", "           ^^^^^^^^^^^^^^^^^^^^^"},
		{"torch/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)", "           ^^^^^^^^^^^^^^^^^^^^^"},
		{"vllm/v1/worker/gpu_worker.py", 447, "execute_model", "output = self.model_runner.execute_model(scheduler_output,", "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
		{"torch/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)", "           ^^^^^^^^^^^^^^^^^^^^^"},
		{"vllm/v1/worker/gpu_model_runner.py", 2064, "execute_model", "sampler_output = self.sampler(", "                     ^^^^^^^^^^^^^"},
		{"torch/nn/modules/module.py", 1773, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)", "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
		{"torch/nn/modules/module.py", 1784, "_call_impl", "return forward_call(*args, **kwargs)", "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
	}
	if r == vllmversion.V0_8 {
		// 0.8's busy loop ran step_fn() directly, without the error-logging wrapper.
		fs = append([]frame{fs[0],
			{"vllm/v1/engine/core.py", 327, "run_busy_loop", "outputs = step_fn()", ""},
			{"vllm/v1/engine/core.py", 198, "step", "output = self.model_executor.execute_model(scheduler_output)", ""},
		}, fs[6:]...)
	}
	if r == vllmversion.Main {
		fs = append(fs,
			frame{"vllm/v1/sample/sampler.py", 121, "forward", "logits = self.apply_logits_processors(", "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
			frame{"vllm/v1/sample/sampler.py", 309, "apply_logits_processors", "logits = self.apply_penalties(logits, sampling_metadata, output_token_ids)", "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
			frame{"vllm/v1/sample/sampler.py", 320, "apply_penalties", "return apply_all_penalties(", "           ^^^^^^^^^^^^^^^^^^^^"},
			frame{"vllm/v1/sample/ops/penalties.py", 33, "apply_all_penalties", "return apply_penalties(", "           ^^^^^^^^^^^^^^^^"},
		)
	} else {
		fs = append(fs,
			frame{"vllm/v1/sample/sampler.py", 83, "forward", "logits = self.apply_penalties(logits, sampling_metadata)", "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
			frame{"vllm/v1/sample/sampler.py", 262, "apply_penalties", "logits = apply_all_penalties(", "             ^^^^^^^^^^^^^^^^^^^^"},
			frame{"vllm/v1/sample/ops/penalties.py", 30, "apply_all_penalties", "return apply_penalties(logits, prompt_token_ids, output_tokens_t,", "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
		)
	}
	fs = append(fs, frame{"vllm/model_executor/layers/utils.py", 94, "apply_penalties", "logits -= frequency_penalties.unsqueeze(dim=1) * output_bin_counts", "              ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~^~~~~~~~~~~~~~~~~~~"})
	return render(fs)
}

// v0Frames is the V0 engine's chain from its engine loop to the penalty product in the model's
// dtype (vllm/model_executor/layers/sampler.py applies the penalties before its float cast).
func v0Frames() []string {
	return render([]frame{
		{"vllm/engine/multiprocessing/engine.py", 158, "start", "self.run_engine_loop()", ""},
		{"vllm/engine/multiprocessing/engine.py", 221, "run_engine_loop", "request_outputs = self.engine_step()", "                      ^^^^^^^^^^^^^^^^^^"},
		{"vllm/engine/multiprocessing/engine.py", 247, "engine_step", "raise e", ""},
		{"vllm/engine/multiprocessing/engine.py", 230, "engine_step", "return self.engine.step()", "           ^^^^^^^^^^^^^^^^^^"},
		{"vllm/engine/llm_engine.py", 1431, "step", "outputs = self.model_executor.execute_model(", "              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
		{"vllm/worker/worker_base.py", 420, "execute_model", "output = self.model_runner.execute_model(", "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
		{"vllm/worker/model_runner.py", 1797, "execute_model", "output: SamplerOutput = self.model.sample(", "                            ^^^^^^^^^^^^^^^^^^"},
		{"vllm/model_executor/models/qwen2.py", 501, "sample", "next_tokens = self.sampler(logits, sampling_metadata)", "                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
		{"torch/nn/modules/module.py", 1751, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)", "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
		{"torch/nn/modules/module.py", 1762, "_call_impl", "return forward_call(*args, **kwargs)", "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
		{"vllm/model_executor/layers/sampler.py", 271, "forward", "logits = apply_penalties(logits, sampling_tensors.prompt_tokens,", "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"},
		{"vllm/model_executor/layers/utils.py", 61, "apply_penalties", "logits -= frequency_penalties.unsqueeze(dim=1) * output_bin_counts", "              ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~^~~~~~~~~~~~~~~~~~~"},
	})
}

// OOMMessage is torch's CUDA out-of-memory error line for an allocation of requestedBytes.
func OOMMessage(requestedBytes int64, gpu GPU) string {
	inUse := gpu.TotalGiB - gpu.FreeMiB/1024
	return fmt.Sprintf("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %s. GPU 0 has a total capacity of %.2f GiB of which %.2f MiB is free. "+
		"Including non-PyTorch memory, this process has %.2f GiB memory in use. Of the allocated memory %.2f GiB is allocated by PyTorch, and %.2f MiB is reserved by PyTorch but unallocated. "+
		"If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "+
		"See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
		FormatSize(AllocationSize(requestedBytes)), gpu.TotalGiB, gpu.FreeMiB, inUse, inUse-0.33, 171.25)
}

// AllocationSize is the block size torch's CUDA caching allocator requests for a tensor of n
// bytes (c10/cuda/CUDACachingAllocator.cpp): sizes are first rounded up to 512 bytes; up to
// 1 MiB they come from a 2 MiB buffer, below 10 MiB from a 20 MiB buffer, and larger sizes are
// rounded up to a multiple of 2 MiB. This rounded size is what "Tried to allocate" prints, which
// is why 193 × 152,064 × 4 = 111.95 MiB reads "112.00 MiB".
func AllocationSize(n int64) int64 {
	const (
		kMinBlockSize  = 512
		kSmallSize     = 1 << 20
		kSmallBuffer   = 2 << 20
		kMinLargeAlloc = 10 << 20
		kLargeBuffer   = 20 << 20
		kRoundLarge    = 2 << 20
	)
	if n < kMinBlockSize {
		n = kMinBlockSize
	} else {
		n = (n + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize
	}
	switch {
	case n <= kSmallSize:
		return kSmallBuffer
	case n < kMinLargeAlloc:
		return kLargeBuffer
	default:
		return (n + kRoundLarge - 1) / kRoundLarge * kRoundLarge
	}
}

// FormatSize prints a byte count as torch's format_size does ("112.00 MiB").
func FormatSize(n int64) string {
	switch {
	case n <= 1024:
		return fmt.Sprintf("%d bytes", n)
	case n <= 1048576:
		return fmt.Sprintf("%.2f KiB", float64(n)/1024)
	case n <= 1073741824:
		return fmt.Sprintf("%.2f MiB", float64(n)/1048576)
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/1073741824)
}
