// Package vllmlog writes vllmsim's log in the shape of vLLM V1's own log, so that log parsers
// built for vLLM (servescope's collector among them) read the simulator unchanged:
//
//	(APIServer pid=4242) INFO 09-11 15:53:12 [loggers.py:123] Engine 000: Avg prompt throughput: 88.0 tokens/s, Avg generation throughput: 256.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.5%, Prefix cache hit rate: 0.0%
//
// and, when the simulated engine dies, the EngineCore traceback that ends in the sampler's
// penalty step with torch's out-of-memory message. Timestamps are the engine clock's simulated
// times (start + simulated seconds), formatted as vLLM does ("%m-%d %H:%M:%S", local time), so
// stats lines are 10 s apart in the log even under --time-scale.
package vllmlog

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/servescope/servescope/services/vllmsim/engine"
)

// Version is the vLLM version the simulator reports in its log and on /version.
const Version = "0.10.2"

// GPU describes the simulated device in the out-of-memory message (an RTX 3060 12 GB by
// default, as in the reference's crash).
type GPU struct {
	TotalGiB float64 // torch's "total capacity"
	FreeMiB  float64 // torch's "of which ... is free"
}

// DefaultGPU is the reference's RTX 3060 at gpu_memory_utilization 0.9.
func DefaultGPU() GPU { return GPU{TotalGiB: 11.63, FreeMiB: 84.88} }

// Logger is an engine.Observer that writes vLLM-shaped lines to W. It is safe for concurrent use.
type Logger struct {
	mu         sync.Mutex
	w          io.Writer
	clock      *engine.Clock
	apiPID     int
	enginePID  int
	gpu        GPU
	queries    int
	hits       int
	lastActive bool
}

// New makes a Logger; apiPID is the "(APIServer pid=N)" process id, and the engine core process
// gets apiPID+1 as vLLM's forked EngineCore_DP0 would get a nearby id.
func New(w io.Writer, clock *engine.Clock, apiPID int, gpu GPU) *Logger {
	return &Logger{w: w, clock: clock, apiPID: apiPID, enginePID: apiPID + 1, gpu: gpu}
}

func stamp(t time.Time) string { return t.Format("01-02 15:04:05") }

func (l *Logger) line(proc string, pid int, level string, at time.Time, src, msg string) {
	fmt.Fprintf(l.w, "(%s pid=%d) %s %s [%s] %s\n", proc, pid, level, stamp(at), src, msg)
}

// Startup writes the API server's start-up lines.
func (l *Logger) Startup(model string, maxModelLen int, listen string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Time(l.clock.Now())
	l.line("APIServer", l.apiPID, "INFO", now, "api_server.py:1839", "vLLM API server version "+Version)
	l.line("APIServer", l.apiPID, "INFO", now, "utils.py:233", fmt.Sprintf("non-default args: {'model': '%s', 'max_model_len': %d}", model, maxModelLen))
	l.line("EngineCore_DP0", l.enginePID, "INFO", now, "core.py:654", "Waiting for init message from front-end.")
	l.line("APIServer", l.apiPID, "INFO", now, "api_server.py:1880", "Starting vLLM API server 0 on http://"+listen)
}

// Stats writes the periodic "Engine 000:" line. Like vLLM, an interval with no prompt or
// generation throughput after another idle one is not written (vLLM logs it at debug level).
func (l *Logger) Stats(s engine.IntervalStats) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queries += s.PrefixQueries
	l.hits += s.PrefixHits
	active := s.PromptTokens > 0 || s.GenerationTokens > 0
	if !active && !l.lastActive {
		return
	}
	l.lastActive = active
	hitRate := 0.0
	if l.queries > 0 {
		hitRate = 100 * float64(l.hits) / float64(l.queries)
	}
	msg := fmt.Sprintf("Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%",
		float64(s.PromptTokens)/s.IntervalS, float64(s.GenerationTokens)/s.IntervalS, s.Running, s.Waiting, 100*s.KVCacheUsage, hitRate)
	l.line("APIServer", l.apiPID, "INFO", l.clock.Time(s.At), "loggers.py:123", msg)
}

// Crashed writes the EngineCore's fatal-error traceback and the API server's reaction.
func (l *Logger) Crashed(c engine.CrashInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at := l.clock.Time(c.At)
	for _, m := range strings.Split(Traceback(c.RequestedBytes, l.gpu), "\n") {
		l.line("EngineCore_DP0", l.enginePID, "ERROR", at, "core.py:710", m)
	}
	for _, m := range []string{
		"AsyncLLM output_handler failed.",
		"Traceback (most recent call last):",
		`  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/async_llm.py", line 439, in output_handler`,
		"    outputs = await engine_core.get_output_async()",
		`  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core_client.py", line 846, in get_output_async`,
		"    raise self._format_exception(outputs) from None",
		"vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
	} {
		l.line("APIServer", l.apiPID, "ERROR", at, "async_llm.py:480", m)
	}
}

// Shutdown writes uvicorn's last lines after the engine died.
func (l *Logger) Shutdown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "(APIServer pid=%d) INFO:     Shutting down\n", l.apiPID)
	fmt.Fprintf(l.w, "(APIServer pid=%d) INFO:     Finished server process [%d]\n", l.apiPID, l.apiPID)
}

// StepDone is part of engine.Observer; the log has no per-step lines.
func (l *Logger) StepDone(engine.StepStats) {}

// RequestFinished is part of engine.Observer; vLLM logs no per-request line at INFO.
func (l *Logger) RequestFinished(*engine.Finished) {}

// PrefixCache is part of engine.Observer; hit rates are taken from the interval stats.
func (l *Logger) PrefixCache(int, int) {}

// Traceback is the EngineCore's fatal-error message for an out-of-memory failure of
// requestedBytes in the sampler's frequency-penalty step, as vLLM V1 prints it (without the
// per-line process prefix).
func Traceback(requestedBytes int64, gpu GPU) string {
	const pkg = "/usr/local/lib/python3.12/dist-packages/"
	lines := []string{
		"EngineCore encountered a fatal error.",
		"Traceback (most recent call last):",
		`  File "` + pkg + `vllm/v1/engine/core.py", line 701, in run_engine_core`,
		"    engine_core.run_busy_loop()",
		`  File "` + pkg + `vllm/v1/engine/core.py", line 728, in run_busy_loop`,
		"    self._process_engine_step()",
		`  File "` + pkg + `vllm/v1/engine/core.py", line 754, in _process_engine_step`,
		"    outputs, model_executed = self.step_fn()",
		"                              ^^^^^^^^^^^^^^",
		`  File "` + pkg + `vllm/v1/engine/core.py", line 284, in step`,
		"    model_output = self.execute_model_with_error_logging(",
		"                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
		`  File "` + pkg + `vllm/v1/engine/core.py", line 270, in execute_model_with_error_logging`,
		"    raise err",
		`  File "` + pkg + `vllm/v1/engine/core.py", line 261, in execute_model_with_error_logging`,
		"    return model_fn(scheduler_output)",
		"           ^^^^^^^^^^^^^^^^^^^^^^^^^^",
		`  File "` + pkg + `vllm/v1/executor/abstract.py", line 103, in execute_model`,
		`    output = self.collective_rpc("execute_model",`,
		"             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
		`  File "` + pkg + `vllm/executor/uniproc_executor.py", line 83, in collective_rpc`,
		"    return [run_method(self.driver_worker, method, args, kwargs)]",
		"            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
		`  File "` + pkg + `vllm/utils/__init__.py", line 3122, in run_method`,
		"    return func(*args, **kwargs)",
		"           ^^^^^^^^^^^^^^^^^^^^^",
		`  File "` + pkg + `vllm/v1/worker/gpu_worker.py", line 447, in execute_model`,
		"    output = self.model_runner.execute_model(scheduler_output,",
		"             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
		`  File "` + pkg + `torch/utils/_contextlib.py", line 120, in decorate_context`,
		"    return func(*args, **kwargs)",
		"           ^^^^^^^^^^^^^^^^^^^^^",
		`  File "` + pkg + `vllm/v1/worker/gpu_model_runner.py", line 2064, in execute_model`,
		"    sampler_output = self.sampler(",
		"                     ^^^^^^^^^^^^^",
		`  File "` + pkg + `torch/nn/modules/module.py", line 1773, in _wrapped_call_impl`,
		"    return self._call_impl(*args, **kwargs)",
		"           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
		`  File "` + pkg + `torch/nn/modules/module.py", line 1784, in _call_impl`,
		"    return forward_call(*args, **kwargs)",
		"           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
		`  File "` + pkg + `vllm/v1/sample/sampler.py", line 83, in forward`,
		"    logits = self.apply_penalties(logits, sampling_metadata)",
		"             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
		`  File "` + pkg + `vllm/v1/sample/sampler.py", line 246, in apply_penalties`,
		"    logits -= frequency_penalties.unsqueeze(dim=1) * output_bin_counts",
		"              ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~^~~~~~~~~~~~~~~~~~~",
		OOMMessage(requestedBytes, gpu),
	}
	return strings.Join(lines, "\n")
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
