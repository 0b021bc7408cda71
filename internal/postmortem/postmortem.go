// Package postmortem reads an engine's death from its own log (docs/measurements.md, The crash, is
// the worked example): the stats timeline before the death (running, waiting, KV cache usage, of the engine that died), the last
// words (the exception, the bytes requested, the GPU's capacity and free memory), the innermost
// frames, and one multiplication — bytes requested against running × the tensor's columns × its
// element size, for the tensor the innermost frame's statement allocates (its shape and dtype as
// vLLM's sampler and penalty code give them, see [Allocation]) — concluding "activation-sized
// temporary (type one limit)", "KV cache exhausted" or "unexplained", with the reasoning shown and
// the fix that follows.
//
// The analysis works on a time-ordered []schema.EngineLog and does not care where the lines came
// from: the engine_logs table ([Load]) or a vLLM log file ([ReadLog], which uses the collector's
// vLLM log parser).
package postmortem

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/servescope/servescope/internal/vllmlog"
	"github.com/servescope/servescope/schema"
)

// Verdicts.
const (
	VerdictTypeOne     = "activation-sized temporary (type one limit)"
	VerdictKVExhausted = "KV cache exhausted"
	VerdictUnexplained = "unexplained"
	// VerdictCannotTell is the verdict when the numbers the arithmetic needs are not the dead
	// engine's own: no running count of it in the log or its /metrics (a data-parallel server
	// whose stats lines aggregate several engines, or a log without stats lines). The report says
	// which it lacks; it never multiplies another engine's count or a sum of several.
	VerdictCannotTell = "cannot tell"
)

// Tolerances of the arithmetic check.
const (
	// KVFullShare is the KV cache usage at which the KV cache counts as exhausted.
	KVFullShare = 0.95
	// RunningSlackShare and RunningSlackMin widen the running counts read from the stats lines
	// before they are compared with the count implied by the bytes: the stats line is up to one
	// logging interval (5–10 s) older than the allocation, and requests keep arriving and leaving.
	RunningSlackShare = 0.05
	RunningSlackMin   = 2
	// burstGap separates crashes: fatal lines closer than this belong to one death (the engine
	// core's error and the API server's reaction to it).
	burstGap = 30 * time.Second
	// timelineLen is how many stats lines before the death the report shows.
	timelineLen = 8
)

// Options steer the analysis.
type Options struct {
	// At picks the death at or before At (plus a minute of slack for clock skew); zero: the last
	// death in the lines.
	At time.Time
	// VocabSize overrides the vocabulary size (the logits' width); 0 uses Model's entry in the
	// known table, or DefaultVocabSize.
	VocabSize int
	// Model names the served model when the log does not (e.g. from engine_samples).
	Model string
	// Samples are the engines' /metrics samples around the death by engine index (vLLM's
	// `engine` label; "" for V0), from [LoadSamples]: the running count and KV usage of the engine
	// that died when its log has none of its own (a data-parallel server logging with
	// --aggregate-engine-logging writes only the engines' sum).
	Samples map[string][]SamplePoint
}

// SamplePoint is one /metrics sample of one engine: vllm:num_requests_running and
// vllm:kv_cache_usage_perc (a fraction).
type SamplePoint struct {
	TS               time.Time `json:"ts"`
	Running          *float64  `json:"running,omitempty"`
	KVCacheUsagePerc *float64  `json:"kv_cache_usage_perc,omitempty"`
}

// StatsPoint is one periodic stats line.
type StatsPoint struct {
	TS time.Time `json:"ts"`
	// Running and Waiting are request counts; KVCacheUsagePerc is a fraction 0..1.
	Running          *uint32  `json:"running,omitempty"`
	Waiting          *uint32  `json:"waiting,omitempty"`
	KVCacheUsagePerc *float64 `json:"kv_cache_usage_perc,omitempty"`
	// Dump is true for the scheduler state vLLM dumped at the failing step (not a periodic line).
	Dump bool `json:"scheduler_dump,omitempty"`
	// Engines is N for a line that aggregates N data-parallel engines ("N Engines Aggregated:",
	// --aggregate-engine-logging): its Running and Waiting are sums over them and its KV usage
	// their mean, never one engine's. Such lines are in the timeline as context only. 0 for a
	// line about one engine.
	Engines int `json:"aggregated_engines,omitempty"`
	// Metrics is true for a point from the engine's /metrics samples rather than its log.
	Metrics bool `json:"from_metrics,omitempty"`
}

// LastWords is the fatal line.
type LastWords struct {
	TS        time.Time `json:"ts"`
	Process   string    `json:"process,omitempty"`
	Exception string    `json:"exception,omitempty"`
	Message   string    `json:"message"`
	// BytesRequested, CapacityBytes and FreeBytes are the CUDA out-of-memory sizes, in bytes.
	BytesRequested *uint64 `json:"bytes_requested,omitempty"`
	CapacityBytes  *uint64 `json:"capacity_bytes,omitempty"`
	FreeBytes      *uint64 `json:"free_bytes,omitempty"`
}

// Arithmetic is the check of bytes requested against running × columns × element size of the
// tensor the failing statement allocates.
type Arithmetic struct {
	Vocab       int    `json:"vocab_size"`
	VocabSource string `json:"vocab_source"`
	// Running is the count multiplied: the scheduler state vLLM dumped at the failing step when
	// the log has it, else the last stats line's, else the last /metrics sample's of the engine
	// that died; RunningSource says which. LastStatsTS is that
	// line's time and StatsAgeSeconds how long before the death it was printed.
	Running         uint32    `json:"running"`
	RunningSource   string    `json:"running_source"`
	LastStatsTS     time.Time `json:"last_stats_ts"`
	StatsAgeSeconds float64   `json:"stats_age_s"`
	// Tensor is the allocation checked (the first that matches, else the first candidate);
	// Columns is vocab_size or vocab_size + 1 as its shape says.
	Tensor  Allocation `json:"tensor"`
	Columns int        `json:"columns"`
	// ProductBytes = Running × Columns × Tensor.ElementBytes; TorchPrints is how PyTorch would
	// report that allocation.
	ProductBytes int64  `json:"product_bytes"`
	TorchPrints  string `json:"torch_prints"`
	// ImpliedMin..ImpliedMax are the running counts whose tensor of that shape and dtype PyTorch
	// would report as the bytes requested (see TensorRange).
	ImpliedMin int `json:"implied_running_min"`
	ImpliedMax int `json:"implied_running_max"`
	// ExpectedMin..ExpectedMax are the running counts plausible at the moment of death: from the
	// last stats line to its trend extrapolated to the death, widened by the slack.
	ExpectedMin int `json:"expected_running_min"`
	ExpectedMax int `json:"expected_running_max"`
	// Match is true when the two ranges overlap.
	Match bool `json:"match"`
	// Others are the other tensors the statement allocates (or the other dtypes the logits may
	// have), each with the running counts it implies.
	Others []Candidate `json:"others,omitempty"`
}

// Candidate is another tensor the failing statement may have been allocating.
type Candidate struct {
	Tensor     Allocation `json:"tensor"`
	ImpliedMin int        `json:"implied_running_min"`
	ImpliedMax int        `json:"implied_running_max"`
	Match      bool       `json:"match"`
}

// Report is the reading of one death.
type Report struct {
	Engine string `json:"engine,omitempty"`
	Source string `json:"source"`
	// Crashed is false when the lines hold no fatal error; the rest is then mostly empty.
	Crashed bool `json:"crashed"`
	Lines   int  `json:"lines"`
	// Model, GPUMemoryUtilization, MaxNumSeqs and DType are what the log's start-up lines said.
	Model                string `json:"model,omitempty"`
	DType                string `json:"dtype,omitempty"`
	GPUMemoryUtilization string `json:"gpu_memory_utilization,omitempty"`
	MaxNumSeqs           string `json:"max_num_seqs,omitempty"`
	// EngineIndex is the data-parallel engine that died ("" when the log does not tell); the
	// timeline then holds that engine's stats lines only, and lines aggregating several engines
	// as context. Engines is how many engines the log's stats lines describe (1 without data
	// parallelism).
	EngineIndex string       `json:"engine_index,omitempty"`
	Engines     int          `json:"engines,omitempty"`
	Timeline    []StatsPoint `json:"timeline"`
	LastWords   *LastWords   `json:"last_words,omitempty"`
	// Frames are the innermost project frames, innermost last; CodeLine is the innermost frame's
	// source line when the log kept it.
	Frames     []string    `json:"frames,omitempty"`
	CodeLine   string      `json:"code_line,omitempty"`
	Arithmetic *Arithmetic `json:"arithmetic,omitempty"`
	// Verdict is one of the Verdict constants; Reasoning the steps that led to it, in order.
	Verdict     string   `json:"verdict,omitempty"`
	Reasoning   []string `json:"reasoning,omitempty"`
	NotRuledOut string   `json:"not_ruled_out,omitempty"`
	Fix         []string `json:"fix,omitempty"`
}

// Analyze reads the death in lines (time-ordered, as the engine wrote them) and explains it.
func Analyze(lines []schema.EngineLog, opts Options) Report {
	rep := Report{Lines: len(lines), Timeline: []StatsPoint{}}
	for i := range lines {
		if rep.Engine == "" {
			rep.Engine = lines[i].Engine
		}
		if set := engineSettings(msgOf(&lines[i])); set != (settings{}) {
			rep.Model = firstNonEmpty(set.model, rep.Model)
			rep.GPUMemoryUtilization = firstNonEmpty(set.gpuUtil, rep.GPUMemoryUtilization)
			rep.MaxNumSeqs = firstNonEmpty(set.maxSeqs, rep.MaxNumSeqs)
			rep.DType = firstNonEmpty(set.dtype, rep.DType)
		}
	}
	if rep.Model == "" {
		rep.Model = opts.Model
	}
	death := findDeath(lines, opts.At)
	if death < 0 {
		rep.Timeline = timeline(lines, len(lines), "", false)
		return rep
	}
	rep.Crashed = true
	d := &lines[death]
	rep.LastWords = &LastWords{TS: d.TS, Process: d.Process, Exception: d.ExceptionType, Message: msgOf(d),
		BytesRequested: d.OOMBytesRequested, CapacityBytes: d.OOMTotalCapacityBytes, FreeBytes: d.OOMFreeBytes}
	rep.EngineIndex = lineEngine(d)
	rep.Engines = enginesIn(lines, death)
	rep.Timeline = timeline(lines, death, rep.EngineIndex, rep.Engines > 1)
	if rep.Engines > 1 || len(opts.Samples) > 1 {
		rep.Timeline = rep.withSamples(opts.Samples[rep.EngineIndex])
	} else if len(opts.Samples) == 1 {
		for _, pts := range opts.Samples {
			rep.Timeline = rep.withSamples(pts)
		}
	}
	rep.Frames = d.Frames
	if len(rep.Frames) == 0 {
		rep.Frames = framesBefore(lines, death)
	}
	rep.CodeLine = codeLine(lines, death, rep.Frames)
	rep.explain(opts)
	return rep
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func msgOf(l *schema.EngineLog) string {
	if l.Message != "" {
		return l.Message
	}
	return l.Line
}

// isOOM: the caching allocator's "CUDA out of memory. Tried to allocate ..." (torch.OutOfMemoryError,
// older torch.cuda.OutOfMemoryError), and a kernel's "RuntimeError: CUDA error: out of memory",
// which gives no size.
func isOOM(l *schema.EngineLog) bool {
	if l.OOMBytesRequested != nil || strings.Contains(l.ExceptionType, "OutOfMemory") {
		return true
	}
	return l.ExceptionType != "" && strings.Contains(msgOf(l), "CUDA error: out of memory")
}

func isFatal(l *schema.EngineLog) bool {
	if isOOM(l) {
		return true
	}
	if l.ExceptionType == "" {
		return false
	}
	switch l.Level {
	case "", "ERROR", "CRITICAL":
		return true
	}
	return false
}

// findDeath returns the index of the root-cause line of the last death at or before at (zero:
// any): the death is the last burst of fatal lines, and its root cause is the burst's
// out-of-memory line, else its first exception (later ones, like EngineDeadError, are the other
// processes' reactions). -1 when there is none.
func findDeath(lines []schema.EngineLog, at time.Time) int {
	last := -1
	for i := range lines {
		if !at.IsZero() && lines[i].TS.After(at.Add(time.Minute)) {
			break
		}
		if isFatal(&lines[i]) {
			last = i
		}
	}
	if last < 0 {
		return -1
	}
	first := last
	for i := last - 1; i >= 0; i-- {
		if lines[first].TS.Sub(lines[i].TS) > burstGap {
			break
		}
		if isFatal(&lines[i]) {
			first = i
		}
	}
	// Prefer the out-of-memory line that ends a traceback (it carries the frames), then one that
	// names the exception, then any: V0 prints the message once before the traceback and once after.
	best, bestRank := first, 0
	for i := first; i <= last; i++ {
		l := &lines[i]
		rank := 0
		switch {
		case isOOM(l) && len(l.Frames) > 0:
			rank = 3
		case isOOM(l) && l.ExceptionType != "":
			rank = 2
		case isOOM(l):
			rank = 1
		}
		if rank > bestRank {
			best, bestRank = i, rank
		}
	}
	return best
}

// timeline returns the last timelineLen stats lines before index end (the scheduler dump at the
// failing step included). In a log of one engine that is every stats line. In a log of several
// data-parallel engines (multi), a line is the dead engine's own when it names that engine (its
// "Engine 00N:" line, its engine core's scheduler dump); lines aggregating several engines are
// kept as context (StatsPoint.Engines), other engines' lines left out. When the death does not
// say which engine died, only the scheduler dump printed just before it (by the dying engine
// core, in the same burst) is its own.
func timeline(lines []schema.EngineLog, end int, engine string, multi bool) []StatsPoint {
	var own, agg []StatsPoint
	ownRunning := false
	for i := end - 1; i >= 0 && len(own) < timelineLen; i-- {
		l := &lines[i]
		if !isStats(l) {
			continue
		}
		p := StatsPoint{TS: l.TS, Running: l.Running, Waiting: l.Waiting, KVCacheUsagePerc: l.KVCacheUsagePerc,
			Dump: strings.HasPrefix(msgOf(l), "Dumping scheduler stats"), Engines: aggregatedEngines(l)}
		if p.Engines > 0 {
			if len(agg) < timelineLen {
				agg = append(agg, p)
			}
			continue
		}
		if multi {
			mine := engine != "" && lineEngine(l) == engine
			if engine == "" {
				mine = p.Dump && lines[end].TS.Sub(l.TS) <= burstGap && l.Process == lines[end].Process
			}
			if !mine {
				continue
			}
		}
		own = append(own, p)
		ownRunning = ownRunning || p.Running != nil
	}
	// Collected newest first: back to file order before merging, so lines of one second keep it.
	slices.Reverse(own)
	slices.Reverse(agg)
	out := own
	if !ownRunning {
		// Without a count of its own, the aggregated lines are the context the reasoning bounds
		// the dead engine's numbers with.
		out = append(own, agg...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].TS.Before(out[j].TS) })
	if len(out) > timelineLen {
		out = out[len(out)-timelineLen:]
	}
	if out == nil {
		out = []StatsPoint{}
	}
	return out
}

var aggregatedRE = regexp.MustCompile(`^(\d+) Engines Aggregated: `)

// aggregatedEngines is N for a stats line aggregating N engines (its engines column, or for rows
// stored before it, the message), 0 for a line about one engine.
func aggregatedEngines(l *schema.EngineLog) int {
	if l.Engines != nil {
		if *l.Engines > 1 {
			return int(*l.Engines)
		}
		return 0
	}
	if m := aggregatedRE.FindStringSubmatch(msgOf(l)); m != nil {
		n, _ := strconv.Atoi(m[1])
		if n > 1 {
			return n
		}
	}
	return 0
}

// enginesIn is how many engines the stats lines before index end describe: the most any
// aggregated line names, or the distinct engines the lines name; 1 when they name none.
func enginesIn(lines []schema.EngineLog, end int) int {
	n := 1
	seen := map[string]bool{}
	for i := 0; i < end; i++ {
		l := &lines[i]
		if !isStats(l) {
			continue
		}
		if a := aggregatedEngines(l); a > 0 {
			n = max(n, a)
			continue
		}
		if e := lineEngine(l); e != "" {
			seen[e] = true
		}
	}
	return max(n, len(seen))
}

// withSamples adds the dead engine's /metrics samples before the death to a timeline that has
// no running count of that engine's own: they are its own numbers, where an aggregated line's
// are not.
func (r *Report) withSamples(pts []SamplePoint) []StatsPoint {
	for _, p := range r.Timeline {
		if p.Engines == 0 && p.Running != nil {
			return r.Timeline
		}
	}
	var add []StatsPoint
	for _, p := range pts {
		if p.TS.After(r.LastWords.TS) || p.Running == nil || *p.Running < 0 {
			continue
		}
		n := uint32(math.Round(*p.Running))
		add = append(add, StatsPoint{TS: p.TS, Running: &n, KVCacheUsagePerc: p.KVCacheUsagePerc, Metrics: true})
	}
	if len(add) > timelineLen {
		add = add[len(add)-timelineLen:]
	}
	out := append(append([]StatsPoint{}, r.Timeline...), add...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].TS.Before(out[j].TS) })
	return out
}

func isStats(l *schema.EngineLog) bool { return l.Running != nil || l.KVCacheUsagePerc != nil }

var statsEngineRE = regexp.MustCompile(`^Engine (\d+): `)

// lineEngine is the engine a line is about: its engine_index, else (rows stored before that
// column) the stats line's "Engine NNN:" or the engine-core process prefix.
func lineEngine(l *schema.EngineLog) string {
	if l.EngineIndex != "" {
		return l.EngineIndex
	}
	if m := statsEngineRE.FindStringSubmatch(msgOf(l)); m != nil {
		n, _ := strconv.Atoi(m[1])
		return strconv.Itoa(n)
	}
	return vllmlog.EngineIndexOfProcess(l.Process)
}

var frameRE = regexp.MustCompile(`^\s*File "([^"]+)", line \d+, in (\S+)`)

// framesBefore rebuilds the innermost vLLM frames from the traceback lines just before the fatal
// line, for lines stored without parsed frames.
func framesBefore(lines []schema.EngineLog, death int) []string {
	var frames []string
	proc := lines[death].Process
	for i := death - 1; i >= 0 && death-i < 400; i-- {
		l := &lines[i]
		if l.Process != proc {
			continue
		}
		msg := strings.TrimSpace(msgOf(l))
		if strings.HasSuffix(msg, "Traceback (most recent call last):") {
			break
		}
		if m := frameRE.FindStringSubmatch(msgOf(l)); m != nil {
			path := m[1]
			if k := strings.LastIndex(path, "/vllm/"); k >= 0 {
				path = path[k+1:]
			} else if !strings.HasPrefix(path, "vllm/") {
				continue
			}
			frames = append([]string{path + ":" + m[2]}, frames...)
		}
	}
	if len(frames) > 8 {
		frames = frames[len(frames)-8:]
	}
	return frames
}

// codeLine finds the source line printed under the innermost frame's "File" line: in the
// traceback lines before the fatal line, or in the fatal line's own record (a JSON formatter's
// exc_info carries the whole traceback).
func codeLine(lines []schema.EngineLog, death int, frames []string) string {
	if len(frames) == 0 {
		return ""
	}
	if c := codeLineBefore(lines, death, frames); c != "" {
		return c
	}
	if raw := lines[death].Line; strings.Contains(raw, "exc_info") {
		return vllmlog.ParseLine(raw, lines[death].TS, time.UTC).CodeLine
	}
	return ""
}

func codeLineBefore(lines []schema.EngineLog, death int, frames []string) string {
	inner := frames[len(frames)-1]
	fn := inner[strings.LastIndex(inner, ":")+1:]
	proc := lines[death].Process
	for i := death - 1; i >= 0 && death-i < 400; i-- {
		if lines[i].Process != proc {
			continue
		}
		m := frameRE.FindStringSubmatch(msgOf(&lines[i]))
		if m == nil || m[2] != fn {
			continue
		}
		for j := i + 1; j < death; j++ {
			if lines[j].Process != proc {
				continue
			}
			code := strings.TrimSpace(msgOf(&lines[j]))
			if code == "" || strings.Trim(code, "^~ ") == "" {
				continue
			}
			if frameRE.MatchString(msgOf(&lines[j])) {
				return ""
			}
			return code
		}
		return ""
	}
	return ""
}

// explain reads the death as docs/measurements.md, The crash, does: KV usage, the multiplication,
// the stack.
func (r *Report) explain(opts Options) {
	lw := r.LastWords
	// The dead engine's own points: its stats lines, its scheduler dump, its /metrics samples;
	// never a line aggregating several engines.
	var lastKV *float64
	var last, prev *StatsPoint
	var agg *StatsPoint
	kvFrom := "the last stats line"
	for i := len(r.Timeline) - 1; i >= 0; i-- {
		p := &r.Timeline[i]
		if p.Engines > 0 {
			if agg == nil {
				agg = p
			}
			continue
		}
		if lastKV == nil && p.KVCacheUsagePerc != nil {
			lastKV = p.KVCacheUsagePerc
			if p.Metrics {
				kvFrom = "its last /metrics sample"
			}
		}
		if p.Running != nil {
			if last == nil {
				last = p
			} else if prev == nil {
				prev = p
			}
		}
	}
	who := "the engine"
	if r.Engines > 1 {
		who = "engine " + orUnknownEngine(r.EngineIndex)
	}
	kvFull := lastKV != nil && *lastKV >= KVFullShare
	switch {
	case lastKV == nil && agg != nil && agg.KVCacheUsagePerc != nil:
		// The aggregated line's usage is the engines' mean: the dead engine's is at most N times it.
		bound := math.Min(1, float64(agg.Engines)**agg.KVCacheUsagePerc)
		if bound < KVFullShare {
			r.Reasoning = append(r.Reasoning, fmt.Sprintf("KV cache: the log gives only the mean of %d engines (%s at %s, --aggregate-engine-logging), which bounds %s's usage at %s: not full, so the KV cache is not the suspect",
				agg.Engines, pct(*agg.KVCacheUsagePerc), agg.TS.Format(time.TimeOnly), who, pct(bound)))
		} else {
			r.Reasoning = append(r.Reasoning, fmt.Sprintf("KV cache: the log gives only the mean of %d engines (%s at %s, --aggregate-engine-logging); %s's own usage could be up to %s, so the KV cache cannot be removed from the suspects",
				agg.Engines, pct(*agg.KVCacheUsagePerc), agg.TS.Format(time.TimeOnly), who, pct(bound)))
		}
	case lastKV == nil:
		r.Reasoning = append(r.Reasoning, fmt.Sprintf("KV cache: no stats line before the death gives %s's usage, so it cannot be removed from the suspects", who))
	case kvFull:
		r.Reasoning = append(r.Reasoning, fmt.Sprintf("KV cache: %s in use at %s: the KV cache was full", pct(*lastKV), kvFrom))
	default:
		r.Reasoning = append(r.Reasoning, fmt.Sprintf("KV cache: only %s in use at %s: that alone removes the KV cache from the suspects", pct(*lastKV), kvFrom))
	}
	if !isOOM(&schema.EngineLog{OOMBytesRequested: lw.BytesRequested, ExceptionType: lw.Exception, Message: lw.Message}) {
		r.Verdict = VerdictUnexplained
		r.Reasoning = append(r.Reasoning, fmt.Sprintf("the engine died with %s, not a CUDA out-of-memory error: the memory arithmetic does not apply", orUnknown(lw.Exception)))
		r.stackReasoning()
		r.NotRuledOut = "a memory problem reported under another exception"
		r.Fix = []string{"no fix follows from the numbers: read the exception and the innermost frames, and reproduce with the same load"}
		return
	}
	if lw.BytesRequested == nil {
		r.Verdict = VerdictUnexplained
		r.Reasoning = append(r.Reasoning, "the out-of-memory line gives no size (\"Tried to allocate ...\"), so the multiplication cannot be checked")
		r.stackReasoning()
		r.NotRuledOut = "a logits-sized temporary: without the size it can be neither confirmed nor excluded"
		r.Fix = []string{"keep the full error line in the log (the size is the best clue); meanwhile lowering --gpu-memory-utilization leaves more room for temporaries"}
		return
	}
	req := int64(*lw.BytesRequested)
	r.Reasoning = append(r.Reasoning, r.capacityText())
	if last == nil {
		r.cannotTell(opts, req, agg, who)
		return
	}
	a := r.arithmetic(opts, req, last, prev)
	r.Arithmetic = a
	t := a.Tensor
	r.Reasoning = append(r.Reasoning, fmt.Sprintf("tensor: %s, shape %s, %s (%d bytes per element): %s", t.Tensor, t.Shape, t.DType, t.ElementBytes, t.Why))
	cols := fmt.Sprintf("%s vocabulary (%s)", group(int64(a.Vocab)), a.VocabSource)
	if t.VocabPlusOne {
		cols = fmt.Sprintf("%s (vocabulary %s + 1, %s)", group(int64(a.Columns)), group(int64(a.Vocab)), a.VocabSource)
	}
	product := fmt.Sprintf("%s running × %s × %d bytes (%s) = %s B = %s",
		group(int64(a.Running)), cols, t.ElementBytes, t.DType, group(a.ProductBytes), mibText(a.ProductBytes))
	if a.TorchPrints == FormatSize(req) {
		product += fmt.Sprintf("; PyTorch's allocator rounds that block to %s, exactly the size requested", a.TorchPrints)
	} else {
		product += fmt.Sprintf("; PyTorch would report it as %s, against %s requested", a.TorchPrints, FormatSize(req))
	}
	r.Reasoning = append(r.Reasoning, product)
	said := fmt.Sprintf("last line %.0f s earlier said %d", a.StatsAgeSeconds, a.Running)
	switch {
	case last.Dump:
		said = fmt.Sprintf("the scheduler state vLLM dumped at the failing step said %d", a.Running)
	case last.Metrics:
		said = fmt.Sprintf("%s's vllm:num_requests_running %.0f s earlier said %d", who, a.StatsAgeSeconds, a.Running)
	}
	allows := "the log allows"
	if last.Metrics {
		allows = "its /metrics allow"
	}
	r.Reasoning = append(r.Reasoning, fmt.Sprintf("solved the other way: %s is that tensor for %d–%d running sequences; %s %d–%d at the moment of death (%s, widened by max(%d, %.0f%%) for the requests that came and went)",
		FormatSize(req), a.ImpliedMin, a.ImpliedMax, allows, a.ExpectedMin, a.ExpectedMax, said, RunningSlackMin, 100*RunningSlackShare))
	for _, o := range a.Others {
		verb := "does not match"
		if o.Match {
			verb = "matches too"
		}
		r.Reasoning = append(r.Reasoning, fmt.Sprintf("the same statement's %s (%s, %s) would be %d–%d running: %s", o.Tensor.Tensor, o.Tensor.Shape, o.Tensor.DType, o.ImpliedMin, o.ImpliedMax, verb))
	}
	if a.Match {
		r.Reasoning = append(r.Reasoning, fmt.Sprintf("→ the bytes requested match running × %s × %d: a temporary %s of this batch", shapeCols(t), t.ElementBytes, t.Shape))
	} else {
		r.Reasoning = append(r.Reasoning, fmt.Sprintf("→ the bytes requested do not match running × %s × %d: not this tensor of this batch", shapeCols(t), t.ElementBytes))
	}
	sampler := r.stackReasoning()
	switch {
	case a.Match:
		r.Verdict = VerdictTypeOne
		switch {
		case kvFull:
			r.NotRuledOut = fmt.Sprintf("KV cache pressure: it was also %s full, so fewer slots would have helped twice", pct(*lastKV))
		case !sampler:
			r.NotRuledOut = "a coincidence of sizes: the stack does not point at a logits-sized step, and the byte count alone cannot name the tensor"
		default:
			r.NotRuledOut = "another temporary of the same size elsewhere in the step: the size and the stack agree, but only the stack names the tensor"
		}
		r.Fix = r.typeOneFix(req)
	case kvFull:
		r.Verdict = VerdictKVExhausted
		r.NotRuledOut = fmt.Sprintf("a temporary of another shape (%s is not that tensor of this batch) made large by the full cache", FormatSize(req))
		r.Fix = []string{
			fmt.Sprintf("the KV cache was %s full: cap --max-num-seqs or --max-model-len so fewer tokens are held at once", pct(*lastKV)),
			"or give the KV cache more memory: more GPUs (tensor parallelism); raise --gpu-memory-utilization only if the temporaries still fit",
		}
	default:
		r.Verdict = VerdictUnexplained
		r.NotRuledOut = "a tensor of another shape or dtype than the statement's (several rows per sequence, a prompt-logprobs batch): compare the implied count with the running count"
		r.Fix = []string{"no fix follows from the arithmetic: read the innermost frames; re-run the load with a smaller --max-num-seqs and see whether the size follows the batch"}
	}
}

// cannotTell explains a death whose engine's own running count is missing: no stats line, no
// scheduler dump and no /metrics sample of the engine that died. An aggregated line's count is
// the sum over the engines: the bytes are checked against it only as an upper bound.
func (r *Report) cannotTell(opts Options, req int64, agg *StatsPoint, who string) {
	r.Verdict = VerdictCannotTell
	switch {
	case agg != nil && agg.Running != nil:
		r.Reasoning = append(r.Reasoning, fmt.Sprintf("it died asking for %s, but the log has no running count of %s's own: its stats lines aggregate %d engines (--aggregate-engine-logging), Running %d at %s is their sum, and there is no scheduler dump of %s nor a /metrics sample of it",
			FormatSize(req), who, agg.Engines, *agg.Running, agg.TS.Format(time.TimeOnly), who))
		vocab, _ := VocabSize(opts.VocabSize, r.Model)
		if t := r.allocations()[0]; t.ElementBytes > 0 {
			cols := int64(vocab)
			if t.VocabPlusOne {
				cols++
			}
			if lo, hi, ok := ImpliedRunning(req, cols*int64(t.ElementBytes)); ok {
				verb := fmt.Sprintf("within the %d the engines ran together, so not excluded", *agg.Running)
				if lo > int(*agg.Running)+RunningSlackMin {
					verb = fmt.Sprintf("more than the %d all the engines ran together: not this tensor", *agg.Running)
				}
				r.Reasoning = append(r.Reasoning, fmt.Sprintf("%s would be %s (%s) for %d–%d running sequences on one engine: %s", FormatSize(req), t.Tensor, t.DType, lo, hi, verb))
			}
		}
		r.NotRuledOut = fmt.Sprintf("an activation-sized temporary of %s's batch: confirming it needs that engine's own running count", who)
		r.Fix = []string{
			"log each engine's stats lines (drop --aggregate-engine-logging), or let the collector scrape /metrics, whose engine label gives each engine's running count; the engine core's scheduler dump at the failing step gives it too",
		}
	case r.Engines > 1 && r.EngineIndex == "":
		r.Reasoning = append(r.Reasoning, fmt.Sprintf("it died asking for %s, but the log holds the stats lines of %d engines and the death does not say which engine died, so no running count is its own", FormatSize(req), r.Engines))
		r.NotRuledOut = "an activation-sized temporary of the dead engine's batch"
		r.Fix = []string{"keep vLLM's process prefix on the log lines ((EngineCore_DPn pid=...), the default from 0.10), which names the engine that died"}
	default:
		r.Reasoning = append(r.Reasoning, fmt.Sprintf("it died asking for %s, but no stats line before the death gives %s's running count to multiply", FormatSize(req), who))
		r.NotRuledOut = "a logits-sized temporary: the running count is unknown"
		r.Fix = []string{"keep the engine's periodic stats lines in the log (they give running, waiting, KV), or scrape its /metrics"}
	}
	r.stackReasoning()
}

func orUnknownEngine(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "an unnamed error"
	}
	return s
}

// stackReasoning adds what the innermost frame says and reports whether it points at a step that
// makes logits-sized tensors (the sampler, penalties, logits processing).
func (r *Report) stackReasoning() bool {
	if len(r.Frames) == 0 {
		r.Reasoning = append(r.Reasoning, "stack: the log kept no traceback frames for this error")
		return false
	}
	inner := r.Frames[len(r.Frames)-1]
	text := "stack: innermost frame " + inner
	if r.CodeLine != "" {
		text += " (" + r.CodeLine + ")"
	}
	// The sampler is on the stack when any frame is in it (the innermost may be a helper such as
	// get_token_bin_counts_and_mask) and the innermost statement is one the catalogue knows.
	low := strings.ToLower(strings.Join(r.Frames, " ") + " " + r.CodeLine)
	onStack := strings.Contains(low, "sampler") || strings.Contains(low, "penalt") || strings.Contains(low, "logprobs")
	sampler := onStack && allocationsAt(inner, r.CodeLine, float32Logits) != nil
	if sampler {
		text += ": the sampler, where tensors of running × vocabulary are made"
	}
	r.Reasoning = append(r.Reasoning, text)
	return sampler
}

func (r *Report) capacityText() string {
	lw := r.LastWords
	s := "last words: " + orUnknown(lw.Exception) + ", tried to allocate " + FormatSize(int64(*lw.BytesRequested))
	if lw.CapacityBytes != nil {
		s += ", GPU total capacity " + FormatSize(int64(*lw.CapacityBytes))
	}
	if lw.FreeBytes != nil {
		s += ", " + FormatSize(int64(*lw.FreeBytes)) + " free"
		if d := int64(*lw.BytesRequested) - int64(*lw.FreeBytes); d > 0 {
			s += fmt.Sprintf(" (%s short)", FormatSize(d))
		}
	}
	return s
}

func (r *Report) arithmetic(opts Options, req int64, last, prev *StatsPoint) *Arithmetic {
	vocab, src := VocabSize(opts.VocabSize, r.Model)
	a := &Arithmetic{Vocab: vocab, VocabSource: src, Running: *last.Running, LastStatsTS: last.TS,
		StatsAgeSeconds: r.LastWords.TS.Sub(last.TS).Seconds(), RunningSource: "stats line"}
	switch {
	case last.Dump:
		a.RunningSource = "scheduler state at the failing step"
	case last.Metrics:
		a.RunningSource = "engine's /metrics sample"
	}
	lo, hi := float64(a.Running), float64(a.Running)
	if !last.Dump && prev != nil && last.TS.After(prev.TS) && a.StatsAgeSeconds > 0 {
		slope := (float64(*last.Running) - float64(*prev.Running)) / last.TS.Sub(prev.TS).Seconds()
		e := math.Max(0, float64(a.Running)+slope*a.StatsAgeSeconds)
		if n, err := strconv.Atoi(r.MaxNumSeqs); err == nil && e > float64(n) {
			e = float64(n)
		}
		lo, hi = math.Min(lo, e), math.Max(hi, e)
	}
	slack := math.Max(RunningSlackMin, math.Ceil(RunningSlackShare*hi))
	a.ExpectedMin = int(math.Max(0, math.Floor(lo-slack)))
	a.ExpectedMax = int(math.Ceil(hi + slack))
	var cands []Candidate
	chosen := -1
	for _, t := range r.allocations() {
		cols := vocab
		if t.VocabPlusOne {
			cols++
		}
		c := Candidate{Tensor: t}
		var ok bool
		c.ImpliedMin, c.ImpliedMax, ok = ImpliedRunning(req, int64(cols)*int64(t.ElementBytes))
		c.Match = ok && c.ImpliedMin <= a.ExpectedMax && c.ImpliedMax >= a.ExpectedMin
		if c.Match && chosen < 0 {
			chosen = len(cands)
		}
		cands = append(cands, c)
	}
	if chosen < 0 {
		chosen = 0
	}
	c := cands[chosen]
	a.Tensor, a.ImpliedMin, a.ImpliedMax, a.Match = c.Tensor, c.ImpliedMin, c.ImpliedMax, c.Match
	a.Columns = vocab
	if c.Tensor.VocabPlusOne {
		a.Columns++
	}
	a.ProductBytes = int64(a.Running) * int64(a.Columns) * int64(c.Tensor.ElementBytes)
	a.TorchPrints = FormatSize(AllocationSize(a.ProductBytes))
	a.Others = append(append([]Candidate(nil), cands[:chosen]...), cands[chosen+1:]...)
	return a
}

// allocations are the tensors the innermost frame's statement allocates, in the logits' dtype
// there; a float32 logits-sized temporary when the stack does not name a known statement.
func (r *Report) allocations() []Allocation {
	if len(r.Frames) == 0 {
		return genericLogits()
	}
	inner := r.Frames[len(r.Frames)-1]
	var out []Allocation
	seen := map[string]bool{}
	for _, dt := range r.logitsDTypes() {
		for _, t := range allocationsAt(inner, r.CodeLine, dt) {
			if k := t.Tensor + "/" + t.DType; !seen[k] {
				seen[k] = true
				out = append(out, t)
			}
		}
	}
	if len(out) == 0 {
		return genericLogits()
	}
	return out
}

// logitsDTypes is the dtype the logits have where the penalties run. V1's sampler casts them to
// float32 first (vllm/v1/sample/sampler.py forward, since 0.8); V0's sampler (and V1's before 0.8,
// whose sampler had its own _apply_penalties) applies the penalties to the model's logits and
// casts afterwards, so there they have the model's dtype: the engine config's, else float16 or
// bfloat16 (2 bytes, the usual) and float32 both tried.
func (r *Report) logitsDTypes() []dtypeInfo {
	v1, early := false, false
	for _, f := range r.Frames {
		v1 = v1 || strings.HasPrefix(f, "vllm/v1/")
		early = early || f == "vllm/v1/sample/sampler.py:_apply_penalties"
	}
	if v1 && !early {
		return []dtypeInfo{{"float32", bytesFloat32, "float32 because the V1 sampler casts the logits to float32 before the penalties (vllm/v1/sample/sampler.py forward)"}}
	}
	why := "the model's dtype, because this sampler applies the penalties before its float32 cast"
	switch r.DType {
	case "float16", "bfloat16":
		return []dtypeInfo{{r.DType, 2, why + " (" + r.DType + " in the engine config)"}}
	case "float32":
		return []dtypeInfo{{r.DType, bytesFloat32, why + " (float32 in the engine config)"}}
	}
	return []dtypeInfo{
		{"float16/bfloat16", 2, why + " (the log gives no dtype: float16/bfloat16 assumed)"},
		{"float32", bytesFloat32, why + " (the log gives no dtype: float32 tried too)"},
	}
}

// shapeCols names a tensor's columns for the verdict line.
func shapeCols(t Allocation) string {
	if t.VocabPlusOne {
		return "(vocabulary + 1)"
	}
	return "vocabulary"
}

func (r *Report) typeOneFix(req int64) []string {
	a := r.Arithmetic
	row := int64(a.Columns) * int64(a.Tensor.ElementBytes)
	util := "lower --gpu-memory-utilization"
	if r.GPUMemoryUtilization != "" {
		util += " from " + r.GPUMemoryUtilization
	}
	fix := []string{util + " (an RTX 3060 that died this way at 193 running and 0.90 queued the same load at 0.85): the memory outside the engine's budget is where these temporaries live"}
	capText := fmt.Sprintf("or cap --max-num-seqs: the tensor grows by %s per running sequence (%s at %d running)", FormatSize(row), mibText(int64(a.Running)*row), a.Running)
	if free := r.LastWords.FreeBytes; free != nil && int64(*free) >= row {
		capText += fmt.Sprintf("; the %s that was free would have held it for at most %d sequences", FormatSize(int64(*free)), int64(*free)/row)
	}
	maxSeqs := 256
	if n, err := strconv.Atoi(r.MaxNumSeqs); err == nil {
		maxSeqs = n
	}
	capText += fmt.Sprintf("; at the slot limit of %d it would be %s", maxSeqs, mibText(int64(maxSeqs)*row))
	return append(fix, capText)
}

func pct(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }

func mibText(n int64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', 3, 64) + " MiB" }

// group renders n with comma thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
