// Package logship ships an engine's log so it outlives the engine: it follows log files
// (surviving rotation and truncation, remembering offsets across restarts) or reads a stream
// (`docker logs -f vllm | collector logs -`), and publishes every line as an engine.log event,
// with vLLM's stats and error lines parsed by package vllmlog. Every raw line is published, in
// order; a traceback's frames are attached to the exception line that ends it.
//
// Lines are never lost to a NATS outage: the publisher (schema/publish) spools to disk what
// JetStream has not acknowledged, and a file's offset moves past a line only after the line was
// handed to the publisher.
package logship

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/internal/vllmlog"
	"github.com/servescope/servescope/schema"
)

// Publisher takes events for delivery; schema/publish's Publisher is one.
type Publisher interface {
	Publish(schema.Event) error
}

// maxLineField is the schema's limit for engine.log's line and message.
const maxLineField = 16 << 10

// Shipper turns the lines of one log into engine.log events.
type Shipper struct {
	pub    Publisher
	engine string
	source string
	parser *vllmlog.Parser
	now    func() time.Time
	lines  prometheus.Counter
	log    *slog.Logger
}

// Metrics are the log shipping counters shared by the shippers of one collector.
type Metrics struct {
	lines *prometheus.CounterVec
}

// NewMetrics registers servescope_collector_log_lines_total{source} with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{lines: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "servescope_collector_log_lines_total",
		Help: "Engine log lines published as engine.log, by source file (\"-\" for standard input).",
	}, []string{"source"})}
	if reg != nil {
		if err := reg.Register(m.lines); err != nil {
			return nil, fmt.Errorf("register log metrics: %w", err)
		}
	}
	return m, nil
}

// NewShipper returns a shipper for the log named source ("-" for standard input) of engine.
// loc is the time zone of vLLM's year-less timestamps (nil: UTC); now is the clock (nil: time.Now).
func NewShipper(pub Publisher, engine, source string, loc *time.Location, now func() time.Time, m *Metrics, log *slog.Logger) *Shipper {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	if m == nil {
		m, _ = NewMetrics(nil)
	}
	return &Shipper{
		pub: pub, engine: engine, source: source, now: now, log: log,
		parser: vllmlog.NewParser(loc, now),
		lines:  m.lines.WithLabelValues(source),
	}
}

// Line builds and publishes the event of one line at offset. An event the publisher refuses
// (it cannot be, after the clean-up here) is an error that stops the log's reader, so the offset
// does not move past it.
func (s *Shipper) Line(raw []byte, offset int64) error {
	ev := s.Event(raw, offset)
	if err := s.pub.Publish(ev); err != nil {
		return fmt.Errorf("publish line at %s:%d: %w", s.source, offset, err)
	}
	s.lines.Inc()
	return nil
}

// Event builds the engine.log event of one line.
func (s *Shipper) Event(raw []byte, offset int64) *schema.EngineLog {
	line := string(raw)
	if !utf8.ValidString(line) {
		line = strings.ToValidUTF8(line, "\uFFFD")
	}
	line = strings.TrimRight(line, "\r")
	rec := s.parser.Parse(line)
	now := s.now()
	ts := rec.Time
	// The line's own stamp is kept unless it is unusable: absent, or ahead of the collector's
	// clock (a log in another time zone than configured) by more than the schema allows.
	if ts.IsZero() || ts.After(now.Add(time.Minute)) || ts.Year() < 2000 {
		ts = now
	}
	ev := schema.NewEngineLog(s.engine, schema.Truncate(line, maxLineField), ts)
	ev.Source = schema.Truncate(s.source, 1024)
	if offset >= 0 {
		o := uint64(offset)
		ev.Offset = &o
	}
	ev.Level = rec.Level
	ev.Process = schema.Truncate(rec.Process, 256)
	ev.Logger = schema.Truncate(rec.Logger, 256)
	ev.EngineIndex = schema.Truncate(rec.EngineIndex, 16)
	ev.Message = schema.Truncate(rec.Message, maxLineField)
	if st := rec.Stats; st != nil {
		ev.PromptThroughputTPS = st.PromptThroughputTPS
		ev.GenerationThroughputTPS = st.GenerationThroughputTPS
		ev.Running = st.Running
		ev.Waiting = st.Waiting
		ev.KVCacheUsagePerc = st.KVCacheUsagePerc
		ev.PrefixCacheHitRate = st.PrefixCacheHitRate
		ev.Preemptions = st.Preemptions
		ev.Engines = st.Engines()
	}
	ev.ExceptionType = schema.Truncate(rec.ExceptionType, 256)
	if o := rec.OOM; o != nil {
		ev.OOMBytesRequested = o.BytesRequested
		ev.OOMTotalCapacityBytes = o.TotalCapacityBytes
		ev.OOMFreeBytes = o.FreeBytes
	}
	for _, f := range rec.Frames {
		ev.Frames = append(ev.Frames, schema.Truncate(f, 1024))
	}
	return ev
}

// Stream ships every line of a stream (standard input) until EOF or ctx's end.
func (s *Shipper) Stream(ctx context.Context, r interface{ Read([]byte) (int, error) }) error {
	return ReadStream(ctx, r, s.Line)
}

// Follow ships a file with fl until ctx ends, saving offsets every second and at the end.
func (s *Shipper) Follow(ctx context.Context, fl *Follower) error {
	if fl.OnRotate == nil {
		fl.OnRotate = func(what string) { s.log.Info("log file "+what, "path", fl.Path) }
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := fl.State.Save(); err != nil {
					s.log.Warn("save log offsets", "err", err)
				}
			}
		}
	}()
	err := fl.Run(ctx, s.Line)
	if serr := fl.State.Save(); serr != nil && err == nil {
		err = serr
	}
	return err
}
