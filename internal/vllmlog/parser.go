package vllmlog

import (
	"strings"
	"time"
)

// MaxFrames is how many frames an exception line keeps: the innermost ones.
const MaxFrames = 8

// Parser parses the lines of one log in order and attaches each traceback's frames to the
// exception line that ends it. Tracebacks of different processes may interleave in one log
// (vLLM's API server and engine core write to the same stream), so each process prefix has its
// own traceback. A Parser is not safe for concurrent use; use one per log.
type Parser struct {
	loc    *time.Location
	now    func() time.Time
	frames map[string][]string // process → frames of the open traceback
	open   map[string]bool
	// last is the latest line timestamp, given to lines without one.
	last time.Time
}

// NewParser returns a parser placing year-less timestamps in time zone loc (nil: UTC), with now
// as its clock (nil: time.Now).
func NewParser(loc *time.Location, now func() time.Time) *Parser {
	if loc == nil {
		loc = time.UTC
	}
	if now == nil {
		now = time.Now
	}
	return &Parser{loc: loc, now: now, frames: map[string][]string{}, open: map[string]bool{}}
}

// Parse parses the next line. A line without its own timestamp (a traceback Python printed
// itself) gets the latest timestamp seen, so it sorts beside the lines around it; Time stays zero
// until the log has shown one.
func (p *Parser) Parse(raw string) Record {
	r := ParseLine(raw, p.now(), p.loc)
	if r.Time.IsZero() {
		r.Time = p.last
	} else {
		p.last = r.Time
	}
	msg := strings.TrimSpace(r.Message)
	switch {
	case strings.HasSuffix(msg, "Traceback (most recent call last):"):
		// vLLM 0.8.0–0.8.4 logged "EngineCore hit an exception: Traceback (most recent call
		// last):" as one record's first line; later releases log the traceback on its own line.
		p.open[r.Process] = true
		p.frames[r.Process] = p.frames[r.Process][:0]
	case r.Frame != "":
		if p.open[r.Process] {
			p.frames[r.Process] = append(p.frames[r.Process], r.Frame)
			if n := len(p.frames[r.Process]); n > 256 {
				// Recursion: keep the innermost part, which the exception line will want.
				p.frames[r.Process] = append(p.frames[r.Process][:0], p.frames[r.Process][n-MaxFrames:]...)
			}
		}
	case r.ExceptionType != "":
		if p.open[r.Process] {
			r.Frames = Innermost(p.frames[r.Process], MaxFrames)
			delete(p.open, r.Process)
			delete(p.frames, r.Process)
		}
	}
	return r
}

// Innermost returns up to n of the innermost project frames (vLLM's own code), innermost last;
// when the traceback has no project frame, the innermost frames of any code.
func Innermost(frames []string, n int) []string {
	var project []string
	for _, f := range frames {
		if IsProjectFrame(f) {
			project = append(project, f)
		}
	}
	pick := project
	if len(pick) == 0 {
		pick = frames
	}
	if len(pick) > n {
		pick = pick[len(pick)-n:]
	}
	if len(pick) == 0 {
		return nil
	}
	return append([]string(nil), pick...)
}
