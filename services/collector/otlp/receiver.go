package otlp

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	// OTLP exporters may compress with gzip; registering the codec lets the server accept it.
	_ "google.golang.org/grpc/encoding/gzip"

	"github.com/servescope/servescope/schema"
)

// Publisher takes events for delivery; schema/publish's Publisher is one.
type Publisher interface {
	Publish(schema.Event) error
}

// MaxBodyBytes bounds an HTTP export request's body (after decompression).
const MaxBodyBytes = 32 << 20

// AppSpans takes the spans of an export that are not vLLM's request spans: applications'
// spans (package apptrace's Assembler turns them into app.records).
type AppSpans interface {
	// Consume reads the spans of td for which skip is false and returns how many it used. It
	// never fails an export.
	Consume(td ptrace.Traces, skip func(ptrace.Span) bool) (used int)
}

// Option configures a Receiver.
type Option func(*Receiver)

// WithAppSpans hands the spans that are not vLLM's request spans to apps.
func WithAppSpans(apps AppSpans) Option { return func(r *Receiver) { r.apps = apps } }

// Receiver turns OTLP trace exports into engine.span events, and hands applications' spans to
// its AppSpans.
type Receiver struct {
	ptraceotlp.UnimplementedGRPCServer
	pub    Publisher
	naming Naming
	apps   AppSpans
	log    *slog.Logger
	spans  *prometheus.CounterVec
	skews  prometheus.Counter
	now    func() time.Time

	// overridden holds the service.names already reported as overridden by configuration, so
	// the notice is logged once per name (bounded by maxNotices).
	mu         sync.Mutex
	overridden map[string]bool
}

// maxNotices bounds the service.names remembered for the once-per-name override notice.
const maxNotices = 64

// MaxClockAhead is how far in the future a span may end before the receiver treats the engine's
// clock as wrong: the span is then moved to end at its arrival, durations unchanged (they are
// what the span is for, and the schema refuses events from the future).
const MaxClockAhead = time.Minute

// NewReceiver returns a receiver publishing to pub; naming chooses each span's engine name (see
// Naming). reg, when not nil, gets servescope_collector_spans_total{result} (published,
// rejected, app, ignored).
func NewReceiver(pub Publisher, naming Naming, log *slog.Logger, reg prometheus.Registerer, opts ...Option) (*Receiver, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &Receiver{
		pub: pub, naming: naming, log: log, overridden: map[string]bool{},
		spans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_collector_spans_total",
			Help: "OTLP spans received, by result: published (an engine.span), rejected (a vLLM request span that could not be converted or published), app (an application span used for an app.record), ignored (neither; logged at debug).",
		}, []string{"result"}),
		skews: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "servescope_collector_span_clock_corrections_total",
			Help: "Spans that ended more than a minute in the future by the collector's clock and were moved to end at their arrival.",
		}),
		now: time.Now,
	}
	for _, o := range opts {
		o(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{r.spans, r.skews} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register span metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Consume publishes an engine.span for every vLLM request span in td and hands the other spans
// to the receiver's AppSpans. It returns how many vLLM request spans were rejected, with the
// first reason: an application span never fails an export. Every span is counted in
// servescope_collector_spans_total: spans neither vLLM's request spans nor used by the
// application path (vLLM main's start-up and worker spans, other services' spans sent to the
// same endpoint) are ignored and logged at debug level.
func (r *Receiver) Consume(td ptrace.Traces) (rejected int64, reason string) {
	others := 0
	debug := r.log.Enabled(context.Background(), slog.LevelDebug)
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		r.noticeOverride(rs.Resource())
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			scope := sss.At(j).Scope().Name()
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				s := spans.At(k)
				if !IsRequestSpan(s) {
					others++
					if debug {
						msg := "span ignored: not a vLLM request span"
						if r.apps != nil {
							msg = "not a vLLM request span: offered to the application path"
						}
						r.log.Debug(msg, "name", s.Name(), "scope", scope,
							"span_id", s.SpanID().String(), "trace_id", s.TraceID().String())
					}
					continue
				}
				ev, err := Convert(rs.Resource(), s, r.naming)
				if err == nil {
					r.correctClock(ev)
					err = r.pub.Publish(ev)
				}
				if err != nil {
					r.spans.WithLabelValues("rejected").Inc()
					r.log.Warn("span rejected", "span_id", s.SpanID().String(), "trace_id", s.TraceID().String(), "err", err)
					if rejected == 0 {
						reason = err.Error()
					}
					rejected++
					continue
				}
				r.spans.WithLabelValues("published").Inc()
			}
		}
	}
	if others > 0 {
		used := 0
		if r.apps != nil {
			used = r.apps.Consume(td, IsRequestSpan)
		}
		r.spans.WithLabelValues("app").Add(float64(used))
		r.spans.WithLabelValues("ignored").Add(float64(others - used))
	}
	return rejected, reason
}

// noticeOverride logs, once per name, that a resource's explicit service.name was overridden by
// the collector's configured engine name (Naming rule 2).
func (r *Receiver) noticeOverride(res pcommon.Resource) {
	engine, overridden := r.naming.Engine(res)
	if !overridden {
		return
	}
	svc := str(res.Attributes(), AttrServiceName)
	r.mu.Lock()
	seen := r.overridden[svc] || len(r.overridden) >= maxNotices
	if !seen {
		r.overridden[svc] = true
	}
	r.mu.Unlock()
	if !seen {
		r.log.Info("spans name their service differently from the configured engine; using the configured name",
			"service_name", svc, "engine", engine)
	}
}

func (r *Receiver) correctClock(ev *schema.EngineSpan) {
	now := r.now()
	if !ev.TS.After(now.Add(MaxClockAhead)) {
		return
	}
	shift := now.Sub(ev.TS)
	ev.TS = now.UTC()
	if !ev.StartTS.IsZero() {
		ev.StartTS = ev.StartTS.Add(shift).UTC()
	}
	r.skews.Inc()
}

// Export implements the OTLP gRPC TraceService.
func (r *Receiver) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	return r.response(req.Traces()), nil
}

func (r *Receiver) response(td ptrace.Traces) ptraceotlp.ExportResponse {
	resp := ptraceotlp.NewExportResponse()
	if n, reason := r.Consume(td); n > 0 {
		resp.PartialSuccess().SetRejectedSpans(n)
		resp.PartialSuccess().SetErrorMessage(reason)
	}
	return resp
}

// ServeHTTP implements OTLP/HTTP's POST /v1/traces with a protobuf or JSON body, optionally
// gzip-compressed; the response has the request's encoding.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "OTLP traces: use POST", http.StatusMethodNotAllowed)
		return
	}
	mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	isJSON := mt == "application/json"
	if !isJSON && mt != "application/x-protobuf" && mt != "application/protobuf" {
		http.Error(w, fmt.Sprintf("OTLP traces: unsupported content type %q (want application/x-protobuf or application/json)", mt), http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, req.Body, MaxBodyBytes)
	switch strings.ToLower(req.Header.Get("Content-Encoding")) {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, "OTLP traces: bad gzip body: "+err.Error(), http.StatusBadRequest)
			return
		}
		defer gz.Close()
		body = io.LimitReader(gz, MaxBodyBytes+1)
	default:
		http.Error(w, "OTLP traces: unsupported content encoding", http.StatusUnsupportedMediaType)
		return
	}
	data, err := io.ReadAll(body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, "OTLP traces: body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "OTLP traces: read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(data) > MaxBodyBytes {
		http.Error(w, "OTLP traces: body too large", http.StatusRequestEntityTooLarge)
		return
	}
	exp := ptraceotlp.NewExportRequest()
	if isJSON {
		err = exp.UnmarshalJSON(data)
	} else {
		err = exp.UnmarshalProto(data)
	}
	if err != nil {
		http.Error(w, "OTLP traces: decode request: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp := r.response(exp.Traces())
	var out []byte
	if isJSON {
		out, err = resp.MarshalJSON()
		w.Header().Set("Content-Type", "application/json")
	} else {
		out, err = resp.MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}
	if err != nil {
		http.Error(w, "OTLP traces: encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(out)
}

// ServeGRPC serves the OTLP gRPC TraceService on lis until ctx ends, then stops gracefully
// (at most 5 s).
func (r *Receiver) ServeGRPC(ctx context.Context, lis net.Listener) error {
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(MaxBodyBytes))
	ptraceotlp.RegisterGRPCServer(srv, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		stopped := make(chan struct{})
		go func() { srv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			srv.Stop()
		}
	}()
	err := srv.Serve(lis)
	<-done
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve OTLP gRPC on %s: %w", lis.Addr(), err)
	}
	return nil
}

// ServeHTTPOn serves POST /v1/traces on lis until ctx ends.
func (r *Receiver) ServeHTTPOn(ctx context.Context, lis net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/v1/traces", r)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve OTLP HTTP on %s: %w", lis.Addr(), err)
	}
	return nil
}
