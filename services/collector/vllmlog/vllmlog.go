// Package vllmlog reads vLLM's log lines: the prefix every line carries, the periodic stats line
// (throughput, running, waiting, KV cache usage, prefix cache hit rate) and error lines (exception
// type, CUDA out-of-memory sizes, the innermost frames of the traceback that ended in them).
//
// Formats understood, as vLLM's logger (vllm/logger.py) writes them:
//
//	INFO 09-11 15:53:12 [loggers.py:123] Engine 000: Avg prompt throughput: ...   (V1, 0.8+)
//	(APIServer pid=1) INFO 09-11 15:53:12 [loggers.py:123] ...                     (0.10+ process prefix)
//	INFO 05-08 10:02:01 metrics.py:351] Avg prompt throughput: ... Pending: ...    (V0, 0.4–0.7)
//
// plus ANSI colours (vLLM's ColoredFormatter), a leading RFC 3339 timestamp (`docker logs -t`),
// a trailing "\r" (vLLM's NewLineFormatter joins multi-line messages with "\r\n" and the prefix),
// and lines without any prefix (a traceback Python prints to stderr itself).
//
// The stats line (vllm/v1/metrics/loggers.py, V0's vllm/engine/metrics.py) is read as
// "Key: value" pairs separated by ", ", so fields added by later releases do not break it.
// Percentages become fractions: the printed "GPU KV cache usage: 15.9%" is 0.159, the same unit
// as the vllm:kv_cache_usage_perc gauge.
package vllmlog

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Stats is what a periodic stats line says; a nil field was not on the line.
type Stats struct {
	// EngineIndex is the "Engine 000" index of V1 lines; empty on V0 lines.
	EngineIndex string
	// PromptThroughputTPS and GenerationThroughputTPS are "Avg prompt/generation throughput",
	// tokens per second over the logging interval.
	PromptThroughputTPS     *float64
	GenerationThroughputTPS *float64
	// Running is "Running: N reqs"; Waiting is "Waiting: N reqs" (V0: "Pending: N reqs").
	Running *uint32
	Waiting *uint32
	// Swapped is V0's "Swapped: N reqs".
	Swapped *uint32
	// KVCacheUsagePerc is "GPU KV cache usage" as a fraction 0..1.
	KVCacheUsagePerc *float64
	// PrefixCacheHitRate is "Prefix cache hit rate" (V0: its GPU value) as a fraction 0..1.
	PrefixCacheHitRate *float64
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
	// Logger is the "file:line" of the prefix, e.g. "loggers.py:123" or "v1/engine/core.py:700".
	Logger string
	// Message is the line after its prefix, colours and trailing "\r" removed.
	Message string
	// Stats is set for a stats line.
	Stats *Stats
	// ExceptionType is set for a line naming an exception, e.g. "torch.OutOfMemoryError".
	ExceptionType string
	// OOM is set when the line carries any CUDA out-of-memory size.
	OOM *OOM
	// Frames are the innermost frames of the traceback this exception line ends, innermost last
	// ("vllm/v1/sample/sampler.py:apply_penalties"); set only on exception lines.
	Frames []string
	// Frame is set when the line itself is a traceback frame ("  File ..., line N, in f").
	Frame string
}

var (
	ansiRE     = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)
	dockerTSRE = regexp.MustCompile(`^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})) `)
	processRE  = regexp.MustCompile(`^\(([^()]{1,200})\)\s+`)
	uvicornRE  = regexp.MustCompile(`^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+`)
	prefixRE   = regexp.MustCompile(`^(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(\d{2})-(\d{2})\s+(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?\s+\[?([^\s\]]+:\d+)\]\s?`)
	frameRE    = regexp.MustCompile(`^\s*File "([^"]+)", line (\d+), in (\S+)`)
	excRE      = regexp.MustCompile(`^((?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*(?:Error|Exception|Exit|Interrupt|Fault))(?::\s|:$|$)`)
	engineRE   = regexp.MustCompile(`^Engine (\d+): `)
	numberRE   = regexp.MustCompile(`[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?`)
	sizeREs    = map[string]*regexp.Regexp{
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
	if m := processRE.FindStringSubmatch(s); m != nil && strings.Contains(m[1], "pid=") {
		r.Process = m[1]
		s = s[len(m[0]):]
	}
	if m := prefixRE.FindStringSubmatch(s); m != nil {
		r.Level = m[1]
		if r.Level == "WARN" {
			r.Level = "WARNING"
		}
		if t, ok := stamp(m[2:8], m[7], now, loc); ok && r.Time.IsZero() {
			r.Time = t
		}
		r.Logger = m[8]
		s = s[len(m[0]):]
	} else if m := uvicornRE.FindStringSubmatch(s); m != nil {
		// uvicorn's access and server lines ("INFO:     127.0.0.1:51234 - ...").
		r.Level = m[1]
		s = s[len(m[0]):]
	}
	r.Message = s
	if m := frameRE.FindStringSubmatch(s); m != nil {
		r.Frame = frameName(m[1], m[3])
		return r
	}
	if st := parseStats(s); st != nil {
		r.Stats = st
	}
	if m := excRE.FindStringSubmatch(strings.TrimSpace(s)); m != nil {
		r.ExceptionType = m[1]
	}
	r.OOM = parseOOM(s)
	return r
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
	if !strings.Contains(msg, "throughput: ") && !strings.Contains(msg, "Running: ") && !strings.HasPrefix(msg, "Prefix cache hit rate: ") {
		return nil
	}
	st := &Stats{}
	if m := engineRE.FindStringSubmatch(msg); m != nil {
		st.EngineIndex = m[1]
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
