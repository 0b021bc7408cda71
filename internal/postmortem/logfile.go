package postmortem

import (
	"bufio"
	"fmt"
	"io"
	"time"

	"github.com/servescope/servescope/internal/vllmlog"
	"github.com/servescope/servescope/schema"
)

// maxLineBytes bounds one log line; vLLM's longest lines (start-up config dumps) are a few KiB.
const maxLineBytes = 1 << 20

// ReadLog parses a vLLM log (any release the collector's parser reads: V1 with process prefixes,
// V0, docker's timestamps and colours) into engine.log records in file order, the same shape the
// collector ships to engine_logs. engine and source label the records; now and loc place vLLM's
// year-less timestamps (the log is assumed written within the year before now, in loc; nil: UTC).
func ReadLog(r io.Reader, engine, source string, now time.Time, loc *time.Location) ([]schema.EngineLog, error) {
	p := vllmlog.NewParser(loc, func() time.Time { return now })
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLineBytes)
	var out []schema.EngineLog
	var offset uint64
	for sc.Scan() {
		raw := sc.Text()
		rec := p.Parse(raw)
		off := offset
		offset += uint64(len(raw)) + 1
		out = append(out, fromRecord(rec, raw, engine, source, off))
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("read log %s after %d lines: %w", source, len(out), err)
	}
	return out, nil
}

// fromRecord maps one parsed line to the engine.log event's fields.
func fromRecord(rec vllmlog.Record, raw, engine, source string, offset uint64) schema.EngineLog {
	l := schema.EngineLog{
		Header: schema.Header{TS: rec.Time}, Engine: engine, Source: source, Offset: &offset, Line: raw,
		Level: rec.Level, Process: rec.Process, Logger: rec.Logger, EngineIndex: rec.EngineIndex, Message: rec.Message,
		ExceptionType: rec.ExceptionType, Frames: rec.Frames,
	}
	if s := rec.Stats; s != nil {
		l.PromptThroughputTPS, l.GenerationThroughputTPS = s.PromptThroughputTPS, s.GenerationThroughputTPS
		l.Running, l.Waiting, l.KVCacheUsagePerc, l.PrefixCacheHitRate = s.Running, s.Waiting, s.KVCacheUsagePerc, s.PrefixCacheHitRate
		l.Preemptions, l.Engines = s.Preemptions, s.Engines()
	}
	if o := rec.OOM; o != nil {
		l.OOMBytesRequested, l.OOMTotalCapacityBytes, l.OOMFreeBytes = o.BytesRequested, o.TotalCapacityBytes, o.FreeBytes
	}
	return l
}
