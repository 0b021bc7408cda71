// Package vllmlog reads vLLM's log lines: the prefix every line carries, the periodic stats line
// (throughput, running, waiting, KV cache usage, prefix cache hit rate), the scheduler state vLLM
// dumps when a model step fails, and error lines (exception type, CUDA out-of-memory sizes, the
// innermost frames of the traceback that ended in them).
//
// Formats understood, as vLLM's logger (vllm/logger.py, vllm/logging_utils/formatter.py) writes
// them under each logging option:
//
//	INFO 09-11 15:53:12 [loggers.py:123] Engine 000: Avg prompt throughput: ...   (V1, 0.8+)
//	(APIServer pid=1) INFO 09-11 15:53:12 [loggers.py:123] ...                     (0.10+ process prefix)
//	INFO 05-08 10:02:01 metrics.py:351] Avg prompt throughput: ... Pending: ...    (V0 before 0.7)
//	DEBUG 09-11 15:53:12 [v1/engine/core.py:200] ...                               (VLLM_LOGGING_LEVEL=DEBUG: path)
//	myhost INFO 09-11 15:53:12 [loggers.py:123] ...                                (VLLM_LOGGING_PREFIX="myhost ")
//	INFO:vllm.v1.metrics.loggers:Engine 000: ...                                   (VLLM_CONFIGURE_LOGGING=0 + basicConfig)
//	{"asctime": ..., "levelname": "INFO", "message": "Engine 000: ...", ...}      (JSON formatter, VLLM_LOGGING_CONFIG_PATH)
//
// plus ANSI colours (vLLM's ColoredFormatter and its cyan process prefix), a leading RFC 3339
// timestamp (`docker logs -t`), a trailing "\r" (vLLM's NewLineFormatter joins the lines of a
// multi-line record with "\r\n" and repeats the prefix on each), and lines without any prefix (a
// traceback Python prints to stderr itself). A line in none of these shapes is still a record:
// its text is the message, nothing is parsed out of it, and nothing is dropped.
//
// The stats line (vllm/v1/metrics/loggers.py, V0's vllm/engine/metrics.py) is read as
// "Key: value" pairs separated by ", ", so fields added by later releases (main's "Preemptions: N",
// "External prefix cache hit rate", "MM cache hit rate") do not break it. Percentages become
// fractions: the printed "GPU KV cache usage: 15.9%" is 0.159, the same unit as the
// vllm:kv_cache_usage_perc gauge.
package vllmlog

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Stats is what a periodic stats line (or the scheduler state dumped at a failed step) says; a
// nil field was not on the line.
type Stats struct {
	// EngineIndex is the engine the line is about, as vLLM's `engine` metric label spells it
	// ("0" for V1's "Engine 000:"); empty on V0 lines and on lines that aggregate several engines.
	EngineIndex string
	// AggregatedEngines is N for main's "N Engines Aggregated:" lines (--aggregate-engine-logging):
	// Running and Waiting are then sums over N engines and the KV usage their mean.
	AggregatedEngines int
	// FromSchedulerDump is true for vLLM's "Dumping scheduler stats: SchedulerStats(...)" line,
	// printed when a model step raised: the scheduler's state at the failing step.
	FromSchedulerDump bool
	// PromptThroughputTPS and GenerationThroughputTPS are "Avg prompt/generation throughput",
	// tokens per second over the logging interval.
	PromptThroughputTPS     *float64
	GenerationThroughputTPS *float64
	// Running is "Running: N reqs"; Waiting is "Waiting: N reqs" (V0: "Pending: N reqs").
	Running *uint32
	Waiting *uint32
	// Swapped is V0's "Swapped: N reqs".
	Swapped *uint32
	// Preemptions is main's "Preemptions: N", printed only when the interval had any.
	Preemptions *uint32
	// KVCacheUsagePerc is "GPU KV cache usage" as a fraction 0..1.
	KVCacheUsagePerc *float64
	// PrefixCacheHitRate is "Prefix cache hit rate" (V0: its GPU value) as a fraction 0..1.
	PrefixCacheHitRate *float64
}

// Engines is how many engines the line's numbers describe: AggregatedEngines for an "N Engines
// Aggregated:" line (Running and Waiting summed over them, the KV usage their mean), 1 for a line
// about one engine ("Engine 001:", a scheduler dump), nil for a line that names no engine (V0).
func (s *Stats) Engines() *uint16 {
	var n uint16
	switch {
	case s.AggregatedEngines > 0:
		n = uint16(min(s.AggregatedEngines, 1<<16-1))
	case s.EngineIndex != "" || s.FromSchedulerDump:
		n = 1
	default:
		return nil
	}
	return &n
}

// OOM holds the sizes of a CUDA out-of-memory message, in bytes.
type OOM struct {
	// BytesRequested is "Tried to allocate 112.00 MiB".
	BytesRequested *uint64
	// TotalCapacityBytes is "a total capacity of 11.63 GiB" (older PyTorch: "11.17 GiB total capacity").
	TotalCapacityBytes *uint64
	// FreeBytes is "of which 84.88 MiB is free" (older PyTorch: "1.81 MiB free").
	FreeBytes *uint64
}

// Record is one parsed line.
type Record struct {
	// Time is the line's own timestamp (UTC); zero when the line has none.
	Time time.Time
	// Level is DEBUG, INFO, WARNING, ERROR or CRITICAL; empty without a prefix.
	Level string
	// Process is the process prefix without parentheses, e.g. "EngineCore_DP0 pid=233".
	Process string
	// Prefix is VLLM_LOGGING_PREFIX's text before the level, if the line has one.
	Prefix string
	// Logger is the "file:line" of the prefix, e.g. "loggers.py:123" or "v1/engine/core.py:700"
	// (with VLLM_LOGGING_CONFIG_PATH or basicConfig: the logger name, e.g. "vllm.v1.metrics.loggers").
	Logger string
	// EngineIndex is the engine the line is about, as the `engine` metric label spells it: the
	// stats line's "Engine 001:", else the engine-core process's data-parallel rank
	// ("EngineCore_DP1 pid=..." is 1; a lone "EngineCore" is 0); empty when neither tells.
	EngineIndex string
	// Message is the line after its prefix, colours and trailing "\r" removed.
	Message string
	// Stats is set for a stats line.
	Stats *Stats
	// ExceptionType is set for a line naming an exception, e.g. "torch.OutOfMemoryError".
	ExceptionType string
	// OOM is set when the line carries any CUDA out-of-memory size.
	OOM *OOM
	// Frames are the innermost frames of the traceback this exception line ends, innermost last
	// ("vllm/model_executor/layers/utils.py:apply_penalties"); set only on exception lines.
	Frames []string
	// CodeLine is the source line Python printed under the innermost frame, when the record
	// carried its traceback itself (a JSON record's exc_info).
	CodeLine string
	// Frame is set when the line itself is a traceback frame ("  File ..., line N, in f").
	Frame string
}

var (
	ansiRE     = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)
	dockerTSRE = regexp.MustCompile(`^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})) `)
	processRE  = regexp.MustCompile(`^\(([^()]{1,200})\)\s+`)
	uvicornRE  = regexp.MustCompile(`^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+`)
	// prefixRE is vllm/logger.py's "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] "; it may
	// follow VLLM_LOGGING_PREFIX's text, so it is searched within the line's first bytes.
	prefixRE = regexp.MustCompile(`(?:^|\s)(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(\d{2})-(\d{2})\s+(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?\s+\[?([^\s\]]+:\d+)\]\s?`)
	// basicRE is Python's logging.basicConfig format "%(levelname)s:%(name)s:%(message)s", what a
	// vLLM started with VLLM_CONFIGURE_LOGGING=0 inside an application that calls basicConfig prints.
	basicRE      = regexp.MustCompile(`^(DEBUG|INFO|WARNING|ERROR|CRITICAL):([A-Za-z_][\w.]*):`)
	engineCoreRE = regexp.MustCompile(`^EngineCore(?:_(?:DP)?(\d+))?(?:\s|$)`)
	dumpRE       = map[string]*regexp.Regexp{
		"running": regexp.MustCompile(`\bnum_running_reqs=(\d+)`),
		"waiting": regexp.MustCompile(`\bnum_waiting_reqs=(\d+)`),
		"kv":      regexp.MustCompile(`\b(?:kv_cache_usage|gpu_cache_usage)=([0-9.eE+-]+)`),
	}
	frameRE  = regexp.MustCompile(`^\s*File "([^"]+)", line (\d+), in (\S+)`)
	excRE    = regexp.MustCompile(`^((?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*(?:Error|Exception|Exit|Interrupt|Fault))(?::\s|:$|$)`)
	engineRE = regexp.MustCompile(`^Engine (\d+): `)
	aggRE    = regexp.MustCompile(`^(\d+) Engines Aggregated: `)
	numberRE = regexp.MustCompile(`[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?`)
	sizeREs  = map[string]*regexp.Regexp{
		"requested": regexp.MustCompile(`Tried to allocate (\d+(?:\.\d+)?) ?(bytes|[KMGTP]i?B|B)`),
		"total":     regexp.MustCompile(`total capacity of (\d+(?:\.\d+)?) ?(bytes|[KMGTP]i?B|B)|(\d+(?:\.\d+)?) ?(bytes|[KMGTP]i?B|B) total capacity`),
		"free":      regexp.MustCompile(`of which (\d+(?:\.\d+)?) ?(bytes|[KMGTP]i?B|B) is free|(\d+(?:\.\d+)?) ?(bytes|[KMGTP]i?B|B) free`),
	}
)

// ParseLine parses one line on its own, without traceback context (see [Parser] for that).
// now and loc place vLLM's year-less "MM-DD hh:mm:ss" stamp: in the year that puts it closest
// before now (plus a day of slack for clock skew), in time zone loc (vLLM writes local time; in
// its container that is UTC).
func ParseLine(raw string, now time.Time, loc *time.Location) Record {
	s := strings.TrimRight(raw, "\r\n")
	if strings.IndexByte(s, 0x1b) >= 0 {
		s = ansiRE.ReplaceAllString(s, "")
	}
	var r Record
	if m := dockerTSRE.FindStringSubmatch(s); m != nil {
		if t, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
			r.Time = t.UTC()
		}
		s = s[len(m[0]):]
	}
	// A worker's output passes through its engine core's stream too, so prefixes nest:
	// "(EngineCore_0 pid=675221) (VllmWorker TP0 pid=675227) INFO ...". The writer is the
	// innermost; the engine it belongs to is the engine-core one.
	outer := ""
	for {
		m := processRE.FindStringSubmatch(s)
		if m == nil || !strings.Contains(m[1], "pid=") {
			break
		}
		if outer == "" || EngineIndexOfProcess(outer) == "" {
			outer = m[1]
		}
		r.Process = m[1]
		s = s[len(m[0]):]
	}
	if strings.HasPrefix(s, "{") && parseJSONRecord(s, &r, now, loc) {
		r.EngineIndex = engineIndexOf(&r, outer)
		return r
	}
	if m := prefixRE.FindStringSubmatchIndex(s); m != nil && m[2] <= maxLoggingPrefix {
		g := func(i int) string { return s[m[2*i]:m[2*i+1]] }
		r.Prefix = strings.TrimSpace(s[:m[2]])
		r.Level = g(1)
		if r.Level == "WARN" {
			r.Level = "WARNING"
		}
		frac := ""
		if m[14] >= 0 {
			frac = g(7)
		}
		if t, ok := stamp([]string{g(2), g(3), g(4), g(5), g(6)}, frac, now, loc); ok && r.Time.IsZero() {
			r.Time = t
		}
		r.Logger = g(8)
		s = s[m[1]:]
	} else if m := basicRE.FindStringSubmatch(s); m != nil {
		r.Level, r.Logger = m[1], m[2]
		s = s[len(m[0]):]
	} else if m := uvicornRE.FindStringSubmatch(s); m != nil {
		// uvicorn's access and server lines ("INFO:     127.0.0.1:51234 - ...").
		r.Level = m[1]
		s = s[len(m[0]):]
	}
	r.Message = s
	parseMessage(&r)
	r.EngineIndex = engineIndexOf(&r, outer)
	return r
}

// maxLoggingPrefix bounds the VLLM_LOGGING_PREFIX text searched past before the level.
const maxLoggingPrefix = 256

// parseMessage fills what the message itself says: a traceback frame, stats, an exception, sizes.
func parseMessage(r *Record) {
	s := r.Message
	if m := frameRE.FindStringSubmatch(s); m != nil {
		r.Frame = frameName(m[1], m[3])
		return
	}
	if st := parseStats(s); st != nil {
		r.Stats = st
	}
	if m := excRE.FindStringSubmatch(strings.TrimSpace(s)); m != nil {
		r.ExceptionType = m[1]
	}
	r.OOM = parseOOM(s)
}

// engineIndexOf is the stats line's engine, else the data-parallel rank of the engine-core
// process among the line's prefixes (outer is the outermost one that names an engine core).
func engineIndexOf(r *Record, outer string) string {
	if r.Stats != nil && !r.Stats.FromSchedulerDump {
		// A stats line names its engine ("Engine 001:") or covers several ("2 Engines
		// Aggregated:", none). The scheduler dump names none: the engine core that printed it
		// is the one whose state it is.
		return r.Stats.EngineIndex
	}
	if i := EngineIndexOfProcess(outer); i != "" {
		return i
	}
	return EngineIndexOfProcess(r.Process)
}

// EngineIndexOfProcess returns the engine index (the `engine` metric label) of an engine-core
// process prefix: "EngineCore_DP1 pid=9" (0.10.2+) and "EngineCore_1 pid=9" (0.10.0–0.10.1) are
// engine 1, a lone "EngineCore pid=9" is engine 0; "" for any other process.
func EngineIndexOfProcess(process string) string {
	m := engineCoreRE.FindStringSubmatch(process)
	if m == nil {
		return ""
	}
	if m[1] == "" {
		return "0"
	}
	return normalIndex(m[1])
}

// normalIndex turns a printed index ("000") into the label form ("0").
func normalIndex(s string) string {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return s
	}
	return strconv.Itoa(n)
}

// parseJSONRecord reads a record written by a JSON formatter (python-json-logger's JsonFormatter
// through VLLM_LOGGING_CONFIG_PATH, or vLLM's own JSON formatter): the standard LogRecord
// attributes it names (message, levelname, asctime, filename and lineno or name, processName or
// vllm_process_name and process) and the formatted traceback in exc_info. It reports false when
// the line is not a JSON object with a message or a level, which is then read as plain text.
func parseJSONRecord(s string, r *Record, now time.Time, loc *time.Location) bool {
	var obj map[string]any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil || dec.More() {
		return false
	}
	str := func(keys ...string) string {
		for _, k := range keys {
			switch v := obj[k].(type) {
			case string:
				return v
			case json.Number:
				return v.String()
			}
		}
		return ""
	}
	msg, level := str("message", "msg"), strings.ToUpper(str("levelname", "level", "severity"))
	if msg == "" && level == "" {
		return false
	}
	if level == "WARN" {
		level = "WARNING"
	}
	r.Level, r.Message = level, msg
	if r.Time.IsZero() {
		r.Time = jsonTime(str("asctime", "timestamp", "time", "ts"), now, loc)
	}
	if file, line := str("filename"), str("lineno"); file != "" && line != "" {
		r.Logger = file + ":" + line
	} else {
		r.Logger = str("name", "logger")
	}
	if r.Process == "" {
		if name, pid := str("vllm_process_name", "processName"), str("process"); name != "" && pid != "" {
			r.Process = name + " pid=" + pid
		}
	}
	parseMessage(r)
	if r.Frame != "" {
		return true
	}
	if exc := str("exc_info", "exc_text"); exc != "" {
		frames, code, last := readTraceback(exc)
		r.Frames = Innermost(frames, MaxFrames)
		if len(r.Frames) > 0 {
			r.CodeLine = code[r.Frames[len(r.Frames)-1]]
		}
		if m := excRE.FindStringSubmatch(last); m != nil {
			r.ExceptionType = m[1]
			if o := parseOOM(last); o != nil {
				r.OOM = o
			}
		}
	}
	return true
}

// jsonTime reads a JSON record's time: Python's default asctime ("2025-09-11 15:53:12,345"),
// vLLM's datefmt ("09-11 15:53:12"), or RFC 3339.
func jsonTime(v string, now time.Time, loc *time.Location) time.Time {
	if v == "" {
		return time.Time{}
	}
	if loc == nil {
		loc = time.UTC
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC()
	}
	for _, layout := range []string{"2006-01-02 15:04:05,000", "2006-01-02 15:04:05.000000", "2006-01-02 15:04:05.000", "2006-01-02 15:04:05"} {
		if t, err := time.ParseInLocation(layout, v, loc); err == nil {
			return t.UTC()
		}
	}
	if m := stampRE.FindStringSubmatch(v); m != nil {
		if t, ok := stamp(m[1:6], m[6], now, loc); ok {
			return t
		}
	}
	return time.Time{}
}

var stampRE = regexp.MustCompile(`^(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?$`)

// readTraceback reads a formatted traceback: its frames outermost first, the source line printed
// under each frame (by frame name), and its last line (the exception).
func readTraceback(text string) (frames []string, code map[string]string, last string) {
	code = map[string]string{}
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	for i, l := range lines {
		if m := frameRE.FindStringSubmatch(l); m != nil {
			f := frameName(m[1], m[3])
			frames = append(frames, f)
			if i+1 < len(lines) && !frameRE.MatchString(lines[i+1]) {
				if c := strings.TrimSpace(lines[i+1]); c != "" && strings.Trim(c, "^~ ") != "" {
					code[f] = c
				}
			}
			continue
		}
		if t := strings.TrimSpace(l); t != "" {
			last = t
		}
	}
	return frames, code, last
}

// stamp builds the time of a "MM-DD hh:mm:ss[.frac]" prefix.
func stamp(f []string, frac string, now time.Time, loc *time.Location) (time.Time, bool) {
	n := make([]int, 5)
	for i := range 5 {
		v, err := strconv.Atoi(f[i])
		if err != nil {
			return time.Time{}, false
		}
		n[i] = v
	}
	month, day, hh, mm, ss := n[0], n[1], n[2], n[3], n[4]
	if month < 1 || month > 12 || day < 1 || day > 31 || hh > 23 || mm > 59 || ss > 60 {
		return time.Time{}, false
	}
	nanos := 0
	if frac != "" {
		v, _ := strconv.Atoi((frac + "000000000")[:9])
		nanos = v
	}
	if loc == nil {
		loc = time.UTC
	}
	localNow := now.In(loc)
	year := localNow.Year()
	t := time.Date(year, time.Month(month), day, hh, mm, ss, nanos, loc)
	if t.Month() != time.Month(month) {
		// 02-29 in a year without it: the line is from a leap year before.
		year--
		t = time.Date(year, time.Month(month), day, hh, mm, ss, nanos, loc)
	}
	if t.After(now.Add(24 * time.Hour)) {
		// A December line read in January.
		t = time.Date(year-1, time.Month(month), day, hh, mm, ss, nanos, loc)
	}
	return t.UTC(), true
}

// frameName renders a frame as "path:function", the path from its last "vllm/" segment for
// vLLM's own code and its last three segments otherwise.
func frameName(path, fn string) string {
	p := strings.ReplaceAll(path, `\`, "/")
	if i := strings.LastIndex(p, "/vllm/"); i >= 0 {
		p = p[i+1:]
	} else if strings.HasPrefix(p, "vllm/") {
		// already relative
	} else {
		parts := strings.Split(p, "/")
		if len(parts) > 3 {
			parts = parts[len(parts)-3:]
		}
		p = strings.Join(parts, "/")
	}
	return p + ":" + fn
}

// IsProjectFrame reports whether a frame rendered by the parser is in vLLM's own code.
func IsProjectFrame(frame string) bool { return strings.HasPrefix(frame, "vllm/") }

func parseStats(msg string) *Stats {
	if strings.HasPrefix(msg, "Dumping scheduler stats: ") {
		return parseSchedulerDump(msg)
	}
	if !strings.Contains(msg, "throughput: ") && !strings.Contains(msg, "Running: ") && !strings.HasPrefix(msg, "Prefix cache hit rate: ") {
		return nil
	}
	st := &Stats{}
	if m := engineRE.FindStringSubmatch(msg); m != nil {
		st.EngineIndex = normalIndex(m[1])
		msg = msg[len(m[0]):]
	} else if m := aggRE.FindStringSubmatch(msg); m != nil {
		st.AggregatedEngines, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	}
	found := false
	for _, seg := range strings.Split(strings.TrimSuffix(msg, "."), ", ") {
		key, val, ok := strings.Cut(seg, ": ")
		if !ok {
			continue
		}
		num := numberRE.FindString(val)
		if num == "" {
			continue
		}
		f, err := strconv.ParseFloat(num, 64)
		if err != nil || f < 0 {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(key)) {
		case "avg prompt throughput":
			st.PromptThroughputTPS = &f
		case "avg generation throughput":
			st.GenerationThroughputTPS = &f
		case "running":
			st.Running = count(f)
		case "waiting", "pending":
			st.Waiting = count(f)
		case "swapped":
			st.Swapped = count(f)
		case "preemptions":
			st.Preemptions = count(f)
		case "gpu kv cache usage", "kv cache usage":
			st.KVCacheUsagePerc = fraction(f)
		case "prefix cache hit rate", "gpu prefix cache hit rate":
			st.PrefixCacheHitRate = fraction(f)
		default:
			continue
		}
		found = true
	}
	if !found {
		return nil
	}
	return st
}

// parseSchedulerDump reads the SchedulerStats repr vLLM logs when a model step raised
// (vllm/logging_utils/dump_input.py): num_running_reqs, num_waiting_reqs and kv_cache_usage
// (0.8's gpu_cache_usage), the latter already a fraction.
func parseSchedulerDump(msg string) *Stats {
	st := &Stats{FromSchedulerDump: true}
	found := false
	if m := dumpRE["running"].FindStringSubmatch(msg); m != nil {
		if f, err := strconv.ParseFloat(m[1], 64); err == nil {
			st.Running, found = count(f), true
		}
	}
	if m := dumpRE["waiting"].FindStringSubmatch(msg); m != nil {
		if f, err := strconv.ParseFloat(m[1], 64); err == nil {
			st.Waiting, found = count(f), true
		}
	}
	if m := dumpRE["kv"].FindStringSubmatch(msg); m != nil {
		if f, err := strconv.ParseFloat(m[1], 64); err == nil && f >= 0 && f <= 1 {
			st.KVCacheUsagePerc, found = &f, true
		}
	}
	if !found {
		return nil
	}
	return st
}

func count(f float64) *uint32 {
	if f > 4e9 {
		return nil
	}
	v := uint32(f)
	return &v
}

// fraction turns a printed percentage into a fraction, rounded to the printed precision so that
// 15.9 is 0.159 and not 0.15900000000000003.
func fraction(pct float64) *float64 {
	v := float64(int64(pct*10000+0.5)) / 1e6
	return &v
}

func parseOOM(msg string) *OOM {
	if !strings.Contains(msg, "allocate") && !strings.Contains(msg, "capacity") && !strings.Contains(msg, " free") {
		return nil
	}
	var o OOM
	any := false
	for name, re := range sizeREs {
		m := re.FindStringSubmatch(msg)
		if m == nil {
			continue
		}
		num, unit := m[1], m[2]
		if num == "" && len(m) > 4 {
			num, unit = m[3], m[4]
		}
		b, ok := Bytes(num, unit)
		if !ok {
			continue
		}
		switch name {
		case "requested":
			o.BytesRequested = &b
		case "total":
			o.TotalCapacityBytes = &b
		case "free":
			o.FreeBytes = &b
		}
		any = true
	}
	if !any {
		return nil
	}
	return &o
}

// Bytes converts a printed size to bytes: KiB/MiB/GiB/TiB/PiB are powers of 1024 (PyTorch's
// format_size prints these), KB/MB/GB/TB/PB powers of 1000, "B" and "bytes" one. It rounds to the
// nearest byte; ok is false for an unknown unit or a number that does not parse.
func Bytes(num, unit string) (uint64, bool) {
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, false
	}
	mult := 1.0
	switch unit {
	case "B", "bytes":
	case "KiB":
		mult = 1 << 10
	case "MiB":
		mult = 1 << 20
	case "GiB":
		mult = 1 << 30
	case "TiB":
		mult = 1 << 40
	case "PiB":
		mult = 1 << 50
	case "KB":
		mult = 1e3
	case "MB":
		mult = 1e6
	case "GB":
		mult = 1e9
	case "TB":
		mult = 1e12
	case "PB":
		mult = 1e15
	default:
		return 0, false
	}
	v := f * mult
	if v >= 1.8e19 {
		return 0, false
	}
	return uint64(v + 0.5), true
}
