// Package apptrace turns the OpenTelemetry spans applications already emit into servescope
// app.record events: spans shaped by the OpenTelemetry GenAI semantic conventions, by
// OpenInference (LlamaIndex, LangChain, ... instrumentations) or by OpenLLMetry, exported to the
// collector's OTLP receiver next to vLLM's own spans. One trace is one application request and
// becomes one app.record.
//
// What a trace's record holds, and from which attribute, is in docs/otel-app-spans.md; the
// attribute names are in attrs.go with the specification version they were checked against.
//
// # Combining a trace's spans
//
// The spans of one trace arrive in one or several exports. The Assembler keeps, per trace, only
// the facts each span contributes (never the span), and publishes the trace's record:
//
//   - at the end of the export that brought the trace's local root: a span without a parent, or
//     whose parent is remote (OTLP's span flags), such as the server span of the request;
//   - else MaxWait after the trace's first span arrived (a root that never comes: a trace whose
//     root is exported by another collector, or an application that crashed);
//   - else earlier, oldest trace first, when the buffer is full (more than MaxTraces traces or
//     MaxBytes of facts): a trace flushed early publishes what it has;
//   - and at shutdown, everything buffered.
//
// A span that arrives after its trace's record was published starts a new record of the same
// trace id: the app_requests and app_traces views combine the records of one request or trace,
// each field from the latest record that set it.
//
// # Bounds
//
// Memory is bounded whatever the load: at most MaxTraces traces and MaxBytes of facts (the
// estimate counts every string and document kept), at most MaxSpansPerTrace spans and
// MaxTraceBytes of facts per trace (more are dropped and counted), at most 1,000 documents per
// list attribute. A JSON-encoded document list over 4 MiB is not decoded.
//
// # Metrics
//
//	servescope_collector_app_spans_total{result}          used (its facts kept), dropped (its trace was at its span or byte limit)
//	servescope_collector_app_trace_flushes_total{reason}  root, timeout, evicted (flushed early: buffer full), shutdown
//	servescope_collector_app_traces_total{result}         published, empty (nothing an app.record holds: counted, not stored), rejected (the record failed validation or publishing)
//	servescope_collector_app_traces_buffered              traces waiting
//	servescope_collector_app_buffered_bytes               their facts' estimated size
//
// Spans that are neither vLLM's request spans nor recognised by a convention here, and are no
// GenAI trace's root or failure, are counted by the receiver as ignored.
package apptrace

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/servescope/servescope/schema"
)

// Publisher takes events for delivery; schema/publish's Publisher is one. Publish must not
// block.
type Publisher interface {
	Publish(schema.Event) error
}

// MaxTraceBytes bounds the facts kept for one trace: an app.record is at most 1 MiB (the
// schema's and NATS's default limit), and no trace needs more to fill one.
const MaxTraceBytes = 1 << 20

// Config bounds the Assembler. Zero values take the defaults.
type Config struct {
	// MaxTraces is the most traces waiting at once (default 10,000).
	MaxTraces int
	// MaxSpansPerTrace is the most spans kept per trace (default 512).
	MaxSpansPerTrace int
	// MaxBytes bounds the facts of all waiting traces (default 64 MiB, at least 2 MiB).
	MaxBytes int64
	// MaxWait is how long a trace waits for its root after its first span arrived (default 30 s).
	MaxWait time.Duration
}

// Defaults of Config.
const (
	DefaultMaxTraces        = 10_000
	DefaultMaxSpansPerTrace = 512
	DefaultMaxBytes         = 64 << 20
	DefaultMaxWait          = 30 * time.Second
	minMaxBytes             = 2 * MaxTraceBytes
)

func (c Config) withDefaults() Config {
	if c.MaxTraces <= 0 {
		c.MaxTraces = DefaultMaxTraces
	}
	if c.MaxSpansPerTrace <= 0 {
		c.MaxSpansPerTrace = DefaultMaxSpansPerTrace
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	c.MaxBytes = max(c.MaxBytes, minMaxBytes)
	if c.MaxWait <= 0 {
		c.MaxWait = DefaultMaxWait
	}
	return c
}

// Assembler combines applications' spans into app.records. It is safe for concurrent use; Run
// publishes the traces whose wait is over.
type Assembler struct {
	cfg Config
	pub Publisher
	log *slog.Logger
	now func() time.Time

	spans   *prometheus.CounterVec
	flushes *prometheus.CounterVec
	records *prometheus.CounterVec
	waiting prometheus.Gauge
	held    prometheus.Gauge

	mu     sync.Mutex
	traces map[pcommon.TraceID]*entry
	// oldest and newest end the list of waiting traces in the order their first span arrived.
	oldest, newest *entry
	bytes          int64
}

// entry is one waiting trace.
type entry struct {
	id         pcommon.TraceID
	first      time.Time
	spans      []spanFacts
	bytes      int64
	complete   bool
	prev, next *entry
}

// Flush reasons (servescope_collector_app_trace_flushes_total).
const (
	reasonRoot     = "root"
	reasonTimeout  = "timeout"
	reasonEvicted  = "evicted"
	reasonShutdown = "shutdown"
)

// NewAssembler returns an Assembler publishing to pub. reg, when not nil, gets its metrics.
func NewAssembler(cfg Config, pub Publisher, log *slog.Logger, reg prometheus.Registerer) (*Assembler, error) {
	if log == nil {
		log = slog.Default()
	}
	a := &Assembler{
		cfg: cfg.withDefaults(), pub: pub, log: log, now: time.Now,
		traces: map[pcommon.TraceID]*entry{},
		spans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_collector_app_spans_total",
			Help: "Application spans read for app.records, by result: used (facts kept for its trace's record), dropped (its trace was at its span or byte limit).",
		}, []string{"result"}),
		flushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_collector_app_trace_flushes_total",
			Help: "Application traces ended, by reason: root (its root span arrived), timeout (no root within the wait), evicted (flushed early: the buffer was full), shutdown.",
		}, []string{"reason"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_collector_app_traces_total",
			Help: "Application traces turned into app.records, by result: published, empty (nothing an app.record holds: counted, not stored), rejected (the record failed validation or publishing).",
		}, []string{"result"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "servescope_collector_app_traces_buffered",
			Help: "Application traces waiting for their root.",
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "servescope_collector_app_buffered_bytes",
			Help: "Estimated bytes of the facts kept for the waiting application traces.",
		}),
	}
	for _, v := range []string{"used", "dropped"} {
		a.spans.WithLabelValues(v)
	}
	for _, v := range []string{reasonRoot, reasonTimeout, reasonEvicted, reasonShutdown} {
		a.flushes.WithLabelValues(v)
	}
	for _, v := range []string{"published", "empty", "rejected"} {
		a.records.WithLabelValues(v)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{a.spans, a.flushes, a.records, a.waiting, a.held} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register application span metrics: %w", err)
			}
		}
	}
	return a, nil
}

// Config returns the bounds in effect (the defaults filled in).
func (a *Assembler) Config() Config { return a.cfg }

// read is one span's facts, of trace id.
type read struct {
	id pcommon.TraceID
	f  spanFacts
}

// flushed is a trace leaving the buffer, and why.
type flushed struct {
	e      *entry
	reason string
}

// Consume reads every span of td for which skip is false (the receiver skips vLLM's request
// spans) and returns how many it used. Spans of a convention this package knows are kept for
// their trace; any other span counts only as the root or a failure of a trace already waiting.
// The traces whose root arrived are published before Consume returns. Consume never fails.
func (a *Assembler) Consume(td ptrace.Traces, skip func(ptrace.Span) bool) (used int) {
	var known, other []read
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		var res *resourceFacts
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				s := spans.At(k)
				if s.TraceID().IsEmpty() || (skip != nil && skip(s)) {
					continue
				}
				if res == nil {
					res = readResource(rs.Resource())
				}
				f := extract(res, s)
				switch {
				case f.genAI:
					known = append(known, read{s.TraceID(), f})
				case f.root || f.failed:
					other = append(other, read{s.TraceID(), f})
				}
			}
		}
	}
	if len(known) == 0 && len(other) == 0 {
		return 0
	}
	now := a.now()
	var out []flushed
	var dropped int
	a.mu.Lock()
	// Known spans first, so that a root or failure of another kind in the same export finds
	// its trace.
	for _, r := range known {
		e := a.traces[r.id]
		if e == nil {
			e = a.open(r.id, now, &out)
		}
		kept, lost := a.add(e, r.f, &out)
		if kept {
			used++
		}
		dropped += lost
	}
	for _, r := range other {
		e := a.traces[r.id]
		if e == nil {
			continue
		}
		kept, lost := a.add(e, r.f, &out)
		if kept {
			used++
		}
		dropped += lost
	}
	for _, r := range append(known, other...) {
		if e := a.traces[r.id]; e != nil && e.complete {
			a.detach(e)
			out = append(out, flushed{e, reasonRoot})
		}
	}
	a.gauges()
	a.mu.Unlock()
	a.spans.WithLabelValues("used").Add(float64(used))
	a.spans.WithLabelValues("dropped").Add(float64(dropped))
	a.publish(out, now)
	return used
}

// open starts a waiting trace, first making room by flushing the oldest one when the buffer
// holds MaxTraces. Called with a.mu held.
func (a *Assembler) open(id pcommon.TraceID, now time.Time, out *[]flushed) *entry {
	for len(a.traces) >= a.cfg.MaxTraces && a.oldest != nil {
		old := a.oldest
		a.detach(old)
		*out = append(*out, flushed{old, reasonEvicted})
	}
	e := &entry{id: id, first: now, prev: a.newest}
	if a.newest != nil {
		a.newest.next = e
	} else {
		a.oldest = e
	}
	a.newest = e
	a.traces[id] = e
	return e
}

// add keeps f for e unless e is at its limits, and says how many spans' facts were lost (f's,
// or the one a root replaced). A root completes e either way. Past MaxBytes, the oldest other
// traces are flushed early. Called with a.mu held.
func (a *Assembler) add(e *entry, f spanFacts, out *[]flushed) (kept bool, lost int) {
	if f.root {
		e.complete = true
	}
	size := f.size()
	if len(e.spans) >= a.cfg.MaxSpansPerTrace || e.bytes+size > MaxTraceBytes {
		if !f.root || len(e.spans) == 0 {
			return false, 1
		}
		// The root's resource names the application and its end the record's time: it takes
		// the last span's place.
		last := &e.spans[len(e.spans)-1]
		delta := size - last.size()
		*last = f
		e.bytes += delta
		a.bytes += delta
		return true, 1
	}
	e.spans = append(e.spans, f)
	e.bytes += size
	a.bytes += size
	for a.bytes > a.cfg.MaxBytes && a.oldest != nil {
		old := a.oldest
		if old == e {
			if old.next == nil {
				break
			}
			old = old.next
		}
		a.detach(old)
		*out = append(*out, flushed{old, reasonEvicted})
	}
	return true, 0
}

// detach removes e from the buffer. Called with a.mu held.
func (a *Assembler) detach(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		a.oldest = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		a.newest = e.prev
	}
	e.prev, e.next = nil, nil
	delete(a.traces, e.id)
	a.bytes -= e.bytes
}

func (a *Assembler) gauges() {
	a.waiting.Set(float64(len(a.traces)))
	a.held.Set(float64(a.bytes))
}

// publish builds and publishes the records of the flushed traces.
func (a *Assembler) publish(out []flushed, now time.Time) {
	for _, fl := range out {
		a.flushes.WithLabelValues(fl.reason).Inc()
		rec, useful := build(fl.e.id, fl.e.spans, now)
		if !useful {
			a.records.WithLabelValues("empty").Inc()
			a.log.Debug("application trace holds nothing for an app.record", "trace_id", fl.e.id.String(), "spans", len(fl.e.spans))
			continue
		}
		if err := a.pub.Publish(rec); err != nil {
			a.records.WithLabelValues("rejected").Inc()
			a.log.Warn("app.record from an application trace rejected", "trace_id", fl.e.id.String(), "err", err)
			continue
		}
		a.records.WithLabelValues("published").Inc()
	}
}

// expire flushes the traces whose first span arrived MaxWait or more before now.
func (a *Assembler) expire(now time.Time) {
	var out []flushed
	a.mu.Lock()
	for e := a.oldest; e != nil && now.Sub(e.first) >= a.cfg.MaxWait; e = a.oldest {
		a.detach(e)
		out = append(out, flushed{e, reasonTimeout})
	}
	a.gauges()
	a.mu.Unlock()
	a.publish(out, now)
}

// Close publishes every waiting trace (their flush reason is shutdown). The Assembler stays
// usable: a later span starts a new trace.
func (a *Assembler) Close() {
	var out []flushed
	a.mu.Lock()
	for e := a.oldest; e != nil; e = a.oldest {
		a.detach(e)
		out = append(out, flushed{e, reasonShutdown})
	}
	a.gauges()
	a.mu.Unlock()
	a.publish(out, a.now())
}

// Run publishes the traces whose wait is over, checking every MaxWait/10 (50 ms to 1 s), until
// ctx ends; then it publishes every trace still waiting and returns nil.
func (a *Assembler) Run(ctx context.Context) error {
	tick := min(max(a.cfg.MaxWait/10, 50*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			a.Close()
			return nil
		case <-t.C:
			a.expire(a.now())
		}
	}
}
