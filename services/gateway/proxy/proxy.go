// Package proxy is the gateway's reverse proxy: it forwards any path and method to an engine,
// streams responses as they arrive, and records request.started and request.finished for chat
// completions, text completions, the Responses API and embeddings.
//
// What a client receives is exactly what the engine sent, with these documented exceptions:
//
//   - Asking for usage: for a streamed chat or text completion that would get no usage, the
//     gateway asks the engine for its final usage-only chunk (record.AskUsage says when that
//     changes nothing else) and removes that one chunk from the client's stream (Options.AskUsage).
//   - Recorded routes lose Accept-Encoding upstream, because the gateway must read the response
//     (vLLM compresses nothing by default, so its bytes do not change).
//   - X-Request-Id: the gateway sends the client's, or a KSUID of its own, to the engine (vLLM
//     names the answer after it: "chatcmpl-<id>") and returns it in the response headers.
//   - traceparent: an absent or invalid one is replaced by a new sampled one (with tracestate
//     dropped, as W3C Trace Context says).
//   - The gateway's own failures (body too large, engine unreachable or timing out) are answered
//     in vLLM's error shape with the gateway's status.
//   - When the engine breaks off mid-answer, the client's connection is broken off too
//     (http.ErrAbortHandler), after the bytes the engine sent, as a bare proxy would.
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/gateway/record"
)

// RouteOther labels every proxied path but the recorded endpoints in metrics.
const RouteOther = "other"

// StatusClientClosed is the status recorded when the client went away first (nginx's 499).
const StatusClientClosed = 499

// Publisher takes recorded events; *publish.Publisher implements it. Publish must not block.
type Publisher interface {
	Publish(e schema.Event) error
}

// Options configures a Handler.
type Options struct {
	// Upstreams are the engines' base URLs (see ParseUpstreams).
	Upstreams []*url.URL
	// Policy is PolicyLeastInFlight (default) or PolicyRoundRobin.
	Policy string
	// Transport sends requests to the engines (see NewTransport).
	Transport http.RoundTripper
	// Publisher receives request.started and request.finished.
	Publisher Publisher
	// Script checks generated text; nil turns the output check off.
	Script *record.ScriptCheck
	// Capture, when set, stores prompt and output text (redacted, truncated) in request.finished.
	Capture *record.Capture
	// AskUsage asks the engine for the final usage chunk of streams whose client did not, and
	// removes that chunk from the client's stream, so token counts are exact. Turn it off for
	// engines started with --enable-force-include-usage: they send that chunk to every client,
	// and removing it would change the answer.
	AskUsage bool
	// PromptTokensDetails says every engine runs with --enable-prompt-tokens-details. vLLM then
	// leaves usage.prompt_tokens_details out (null) exactly when no prompt token came from the
	// prefix cache, so a usage without it records cached_tokens 0; otherwise it stays unknown.
	PromptTokensDetails bool
	// MaxBodyBytes bounds request bodies; larger ones get 413.
	MaxBodyBytes int64
	// MaxParseBytes bounds what is kept of a non-streaming response's members to read them
	// (default 8 MiB); a larger member is forwarded but not read (the usage after it still is).
	MaxParseBytes int
	// Gateway names this instance in records (e.g. the host name).
	Gateway string
	// Metrics receives the request metrics; nil records none.
	Metrics *Metrics
	// Logger receives the handler's logs.
	Logger *slog.Logger
	// RecordLinger is how long the recording goroutine waits after a record for more to encode
	// along with it (0: at once).
	RecordLinger time.Duration
}

// Handler is the recording reverse proxy.
type Handler struct {
	opt Options
	bal *balancer
	log *slog.Logger

	// events carries records to the goroutine that encodes and publishes them, so encoding is not
	// on the path between the engine's last byte and the client's. FIFO keeps each request's
	// started before its finished.
	events    chan schema.Event
	closeOnce sync.Once
	recorded  sync.WaitGroup
}

// recordQueue bounds the records waiting for the recording goroutine; when it is full, the
// request's own goroutine publishes (the publisher never blocks either way).
const recordQueue = 4096

// New returns a Handler.
func New(opt Options) (*Handler, error) {
	bal, err := newBalancer(opt.Upstreams, opt.Policy)
	if err != nil {
		return nil, err
	}
	if opt.Transport == nil || opt.Publisher == nil {
		return nil, errors.New("proxy: Transport and Publisher are required")
	}
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = 32 << 20
	}
	if opt.MaxParseBytes <= 0 {
		opt.MaxParseBytes = 8 << 20
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	h := &Handler{opt: opt, bal: bal, log: opt.Logger, events: make(chan schema.Event, recordQueue)}
	h.recorded.Add(1)
	go h.record()
	return h, nil
}

func (h *Handler) record() {
	defer h.recorded.Done()
	for e := range h.events {
		if h.opt.RecordLinger > 0 {
			// Gather the records of the next moments and encode them in one go, instead of
			// waking up for each; the publisher sends what it gets in one burst.
			time.Sleep(h.opt.RecordLinger)
		}
		h.publishNow(e)
		for n := len(h.events); n > 0; n-- {
			e, ok := <-h.events
			if !ok {
				return
			}
			h.publishNow(e)
		}
	}
}

// Close hands the remaining records to the publisher. Call it after the HTTP server has drained
// (no request is in flight) and before closing the publisher.
func (h *Handler) Close() {
	h.closeOnce.Do(func() { close(h.events) })
	h.recorded.Wait()
}

// NewTransport returns the transport to the engines: dialTimeout bounds connecting,
// headerTimeout bounds the wait for response headers (for a non-streaming completion that is the
// whole generation, so keep it long). Compression is left to the client and engine.
//
// Each engine connection keeps net/http's default 4 KiB read and write buffers: a connection
// lives as long as its stream, so with thousands of open streams its buffers are most of the
// gateway's memory (32 KiB ones made it 1.7× a bare reverse proxy's per stream, scripts/bench
// streams), and larger ones buy nothing here, because bufio passes reads and writes of a buffer's
// size or more straight through.
func NewTransport(dialTimeout, headerTimeout time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		ResponseHeaderTimeout: headerTimeout,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   4096,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		WriteBufferSize:       4 << 10,
		ReadBufferSize:        4 << 10,
	}
}

// bufPool holds the copy buffers of bodies, which pass in one go; streamBufPool the smaller ones
// of event streams, each held for the whole of a stream that may stay open for minutes while an
// engine sends an event of a few hundred bytes at a time (a read returns what has arrived, so a
// backlog still goes out in few writes).
var (
	bufPool       = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	streamBufPool = sync.Pool{New: func() any { b := make([]byte, streamBufBytes); return &b }}
)

const streamBufBytes = 4 << 10

// routeOf maps a path to its metrics label: the recorded endpoint, or RouteOther.
func routeOf(path string) string {
	if e, ok := record.EndpointOf(path); ok {
		return string(e)
	}
	return RouteOther
}

// phase is how far an exchange has come. It only moves forward.
type phase uint8

const (
	// phaseRequest: reading the client's request; nothing went to the engine yet.
	phaseRequest phase = iota
	// phaseUpstream: the request went to the engine; nothing went to the client yet.
	phaseUpstream
	// phaseResponding: the response headers went to the client; the body is being copied.
	phaseResponding
	// phaseAnswered: the client has the whole answer (the stream's last event, or the whole
	// body). What happens after it (the client hanging up, the engine's connection closing) is
	// no failure.
	phaseAnswered
)

// failure says why a request failed.
type failure struct {
	layer, code, msg string
}

// exchange is one proxied request.
type exchange struct {
	h       *Handler
	w       http.ResponseWriter
	r       *http.Request
	arrival time.Time
	end     time.Time
	rid     string
	trace   traceContext
	route   string          // metrics label
	ep      record.Endpoint // "" for a request that is not recorded
	up      *upstream
	phase   phase

	req        record.Request
	body       []byte // the buffered body of a recorded request, as sent to the engine
	sentBody   []byte // the body as the client sent it (body before AskUsage)
	askedUsage bool   // the gateway asked for the usage chunk (and removes it)
	// observed reads req from sentBody and publishes request.started, once: when the request
	// has been written to the engine, or at the latest when the exchange finishes.
	observed sync.Once

	status int
	fail   *failure
	obs    *record.Observer
	stream bool // the answer was an event stream the observer read
	abort  bool // the engine broke off mid-answer: break off the client's connection too
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{h: h, w: w, r: r, arrival: time.Now()}
	x.rid = r.Header.Get(HeaderRequestID)
	if x.rid == "" {
		x.rid = schema.NewRequestID()
	}
	x.trace = traceparent(r.Header.Get(HeaderTraceparent))
	x.route = routeOf(r.URL.Path)
	if e, ok := record.EndpointOf(r.URL.Path); ok && r.Method == http.MethodPost {
		x.ep = e
	}
	x.up = h.bal.pick()
	defer x.up.release()
	if m := h.opt.Metrics; m != nil {
		m.inflight.Inc()
		defer m.inflight.Dec()
	}
	w.Header().Set(HeaderRequestID, x.rid)

	if x.ep != "" && !x.readBody() {
		x.finish()
		return
	}
	x.forward()
	x.finish()
	if x.abort {
		// The engine's answer broke off; the client's connection breaks off the same way instead
		// of ending cleanly, so a truncated answer never looks complete.
		panic(http.ErrAbortHandler)
	}
}

// readBody buffers a recorded request's body; false when the gateway answered an error.
func (x *exchange) readBody() bool {
	limit := x.h.opt.MaxBodyBytes
	var buf bytes.Buffer
	if x.r.ContentLength > 0 && x.r.ContentLength <= limit {
		buf.Grow(int(x.r.ContentLength))
	}
	_, err := buf.ReadFrom(io.LimitReader(x.r.Body, limit+1))
	x.body = buf.Bytes()
	x.sentBody = x.body
	switch {
	case err != nil && x.r.Context().Err() != nil:
		x.failWith(StatusClientClosed, schema.LayerClient, "client_closed", "client went away while sending the request body")
		return false
	case err != nil:
		x.failWith(http.StatusBadRequest, schema.LayerGateway, "body_read_error", "read request body: "+err.Error())
		return false
	case int64(len(x.body)) > limit:
		x.failWith(http.StatusRequestEntityTooLarge, schema.LayerGateway, "body_too_large", fmt.Sprintf("request body exceeds %d bytes", limit))
		return false
	}
	// The only reading of the body before it goes to the engine: whether to ask for usage, which
	// changes what is sent. The recorded fields are read once the request is on its way
	// (observeRequest).
	if x.h.opt.AskUsage && (x.ep == record.Chat || x.ep == record.Completions) {
		x.body, x.askedUsage = record.AskUsage(x.body)
	}
	return true
}

// observeRequest reads the recorded fields of the request and publishes request.started. It runs
// once (x.observed), after the request was written to the engine (forward's WroteRequest trace),
// or when the exchange finishes without that: nothing the recording does delays the request.
func (x *exchange) observeRequest() {
	x.req = record.ParseRequest(x.ep, x.sentBody, x.r.Header, x.h.opt.Capture != nil)
	x.publishStarted()
}

// forward sends the request to the engine and copies the response back.
func (x *exchange) forward() {
	r := x.r
	target := *x.up.url
	target.Path = x.up.url.Path + r.URL.Path
	target.RawPath = ""
	if x.up.url.RawPath != "" || r.URL.RawPath != "" {
		target.RawPath = x.up.url.EscapedPath() + r.URL.EscapedPath()
	}
	target.RawQuery = r.URL.RawQuery

	var body io.Reader
	contentLength := r.ContentLength
	if x.ep != "" {
		body = bytes.NewReader(x.body)
		contentLength = int64(len(x.body))
	} else if r.ContentLength != 0 {
		body = http.MaxBytesReader(x.w, r.Body, x.h.opt.MaxBodyBytes)
	}
	// A client that goes away cancels the engine request, as it would without the gateway.
	ctx := r.Context()
	if x.ep != "" {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
			x.observed.Do(x.observeRequest)
		}})
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, target.String(), body)
	if err != nil {
		x.failWith(http.StatusBadGateway, schema.LayerGateway, "bad_upstream_request", "build upstream request: "+err.Error())
		return
	}
	out.ContentLength = contentLength
	if contentLength == 0 && x.ep == "" && r.ContentLength == 0 {
		out.Body = nil
	}
	copyHeaders(out.Header, r.Header)
	out.Header.Del("Content-Length")
	if x.ep != "" {
		out.Header.Del("Accept-Encoding")
	}
	out.Header.Set(HeaderRequestID, x.rid)
	out.Header.Set(HeaderTraceparent, x.trace.header)
	if x.trace.replaced {
		out.Header.Del(HeaderTracestate)
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := r.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		out.Header.Set("X-Forwarded-For", ip)
	}

	x.phase = phaseUpstream
	sent := time.Now()
	resp, err := x.h.opt.Transport.RoundTrip(out)
	if err != nil {
		x.upstreamFailed(err)
		return
	}
	defer resp.Body.Close()
	if m := x.h.opt.Metrics; m != nil {
		upstream := time.Since(sent).Seconds()
		defer m.upstreamLatency.WithLabelValues(x.route).Observe(upstream) // after the answer
	}
	if _, traced := x.h.opt.Transport.(*http.Transport); x.ep != "" && !traced {
		// A transport that traces no write records here, before the answer is copied. An
		// *http.Transport has recorded, or is recording, on its write: the first chunk is not
		// held for it (finish waits for it instead).
		x.observed.Do(x.observeRequest)
	}

	hdr := x.w.Header()
	copyHeaders(hdr, resp.Header)
	hdr.Set(HeaderRequestID, x.rid)
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	encoded := resp.Header.Get("Content-Encoding") != ""
	strip := x.askedUsage && sse && resp.StatusCode == http.StatusOK && !encoded
	if strip {
		hdr.Del("Content-Length")
	}
	x.status = resp.StatusCode
	x.w.WriteHeader(resp.StatusCode)
	x.phase = phaseResponding

	switch {
	case x.ep == "" || encoded:
		x.copyPlain(resp.Body, sse)
	case sse:
		x.stream = true
		x.obs = x.observer(strip)
		x.copyStream(resp.Body)
	default:
		x.obs = x.observer(false)
		x.copyBody(resp.Body)
	}
	if resp.StatusCode >= 400 && x.fail == nil {
		f := &failure{layer: schema.LayerUpstream, code: "http_" + statusLabel(resp.StatusCode), msg: http.StatusText(resp.StatusCode)}
		if e := x.obsError(); e != nil {
			f.msg = e.Message
			if e.Type != "" {
				f.code = e.Type
			}
		}
		x.fail = f
	}
}

func (x *exchange) observer(strip bool) *record.Observer {
	opt := record.ObserverOptions{Endpoint: x.ep, Script: x.h.opt.Script, StripUsage: strip, MaxBodyBytes: x.h.opt.MaxParseBytes}
	if c := x.h.opt.Capture; c != nil {
		// Collect a little more than is stored, so a redaction pattern at the limit still matches.
		opt.Capture, opt.CaptureMax = true, c.MaxBytes()+1024
	}
	return record.NewObserver(opt)
}

func (x *exchange) obsError() *record.EngineError {
	if x.obs == nil {
		return nil
	}
	return x.obs.Error
}

// copyStream forwards an event stream as it arrives, flushing after each read. The observer
// reads each read's events after they went out (Pass, send, Read): only the decision to hold back
// or remove bytes, when a removal is pending, comes between a read and its write.
func (x *exchange) copyStream(src io.Reader) {
	bp := streamBufPool.Get().(*[]byte)
	defer streamBufPool.Put(bp)
	buf := *bp
	flusher, _ := x.w.(http.Flusher)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			out := x.obs.Pass(buf[:n], time.Now())
			sent := len(out) == 0 || x.send(out, flusher)
			x.obs.Read()
			if !sent {
				return
			}
			if x.obs.Terminal {
				x.phase = phaseAnswered
			}
		}
		if rerr != nil {
			if rest := x.obs.End(); len(rest) > 0 && !x.send(rest, flusher) {
				return
			}
			if rerr != io.EOF {
				x.readFailed(rerr)
			}
			return
		}
	}
}

// copyBody forwards a non-streaming body, reading it on the way.
func (x *exchange) copyBody(src io.Reader) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			sent := x.send(buf[:n], nil)
			x.obs.Body(buf[:n]) // after the write: reading never delays the answer
			if !sent {
				return
			}
		}
		if rerr != nil {
			if rerr != io.EOF {
				x.readFailed(rerr)
				return
			}
			x.obs.BodyEnd()
			x.phase = phaseAnswered
			return
		}
	}
}

// copyPlain forwards a response without reading it.
func (x *exchange) copyPlain(src io.Reader, flush bool) {
	pool := &bufPool
	if flush {
		pool = &streamBufPool
	}
	bp := pool.Get().(*[]byte)
	defer pool.Put(bp)
	buf := *bp
	var flusher http.Flusher
	if flush {
		flusher, _ = x.w.(http.Flusher)
	}
	for {
		n, rerr := src.Read(buf)
		if n > 0 && !x.send(buf[:n], flusher) {
			return
		}
		if rerr != nil {
			if rerr != io.EOF {
				x.readFailed(rerr)
				return
			}
			x.phase = phaseAnswered
			return
		}
	}
}

// send writes p to the client (and flushes with a non-nil flusher); false when the client is gone.
func (x *exchange) send(p []byte, flusher http.Flusher) bool {
	if _, err := x.w.Write(p); err != nil {
		x.clientGone()
		return false
	}
	if flusher != nil {
		flusher.Flush()
	}
	return true
}

// clientGone records that the client went away mid-response. A client that hangs up once it has
// the stream's last event (most SDKs close at "data: [DONE]") got its whole answer: no failure.
func (x *exchange) clientGone() {
	if x.phase == phaseAnswered {
		return
	}
	x.status = StatusClientClosed
	x.fail = &failure{schema.LayerClient, "client_closed", "client disconnected before the response ended"}
}

// readFailed records a failed read of the engine's response body.
func (x *exchange) readFailed(err error) {
	switch {
	case x.phase == phaseAnswered:
		// The client has the whole answer; what the engine's connection does after it changes nothing.
	case x.r.Context().Err() != nil:
		x.clientGone()
	default:
		x.fail = &failure{schema.LayerUpstream, "stream_interrupted", "read engine response: " + err.Error()}
		x.abort = true
	}
}

// upstreamFailed answers a failed round trip: the client's departure, a body over the limit, a
// timeout or an unreachable engine.
func (x *exchange) upstreamFailed(err error) {
	if x.r.Context().Err() != nil {
		x.status = StatusClientClosed
		x.fail = &failure{schema.LayerClient, "client_closed", "client disconnected before the engine answered"}
		return
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		x.failWith(http.StatusRequestEntityTooLarge, schema.LayerGateway, "body_too_large", fmt.Sprintf("request body exceeds %d bytes", mbe.Limit))
		return
	}
	code, status := "upstream_unreachable", http.StatusBadGateway
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		code = "connection_refused"
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		code, status = "timeout", http.StatusGatewayTimeout
	}
	x.failWith(status, schema.LayerUpstream, code, fmt.Sprintf("engine %s: %v", x.up.name, err))
}

// failWith records a failure and, unless the client is gone or has headers already, answers it
// in vLLM's error shape.
func (x *exchange) failWith(status int, layer, code, msg string) {
	x.status = status
	x.fail = &failure{layer, code, msg}
	if status == StatusClientClosed || x.phase >= phaseResponding {
		return
	}
	x.h.log.Warn("request failed", "request_id", x.rid, "status", status, "error_layer", layer, "error_code", code, "error", msg)
	writeError(x.w, status, code, msg)
	x.phase = phaseAnswered
}

// errorResponse is vLLM's ErrorResponse (0.10.2 and later): {"error": {...}}.
type errorResponse struct {
	Error errorInfo `json:"error"`
}

type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// writeError writes an error in vLLM's shape.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	// Encoding a struct of strings and an int cannot fail; invalid UTF-8 becomes U+FFFD.
	_ = enc.Encode(errorResponse{Error: errorInfo{Message: msg, Type: typ, Code: status}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// finish ends the client's part (end time, status, request metric) and publishes
// request.finished for recorded endpoints.
func (x *exchange) finish() {
	x.end = time.Now()
	if x.status == 0 {
		x.status = http.StatusOK
	}
	if m := x.h.opt.Metrics; m != nil {
		m.requests.WithLabelValues(x.route, statusLabel(x.status)).Inc()
	}
	if x.ep != "" {
		// Never written to the engine (or written and still recording): request.started first.
		x.observed.Do(x.observeRequest)
		x.publish(x.finished())
	}
}

func (x *exchange) publishStarted() {
	e := schema.NewRequestStarted(limit(x.rid, schema.MaxIDBytes), x.arrival)
	e.Versions = cleanVersions(x.req.Versions)
	e.Model = limit(x.req.Model, schema.MaxLabelBytes)
	e.Endpoint = string(x.ep)
	e.Stream = x.req.Stream
	e.MaxTokens = x.req.MaxTokens
	e.PromptBytes = x.req.PromptBytes
	e.TraceID = x.trace.id
	e.Gateway = limit(x.h.opt.Gateway, schema.MaxLabelBytes)
	x.publish(e)
}

func (x *exchange) publish(e schema.Event) {
	select {
	case x.h.events <- e:
	default:
		x.h.publishNow(e)
	}
}

func (h *Handler) publishNow(e schema.Event) {
	if err := h.opt.Publisher.Publish(e); err != nil {
		// Only an invalid event gets here: a bug, as every field was bounded above.
		h.log.Error("record not published", "kind", e.Kind(), "request_id", e.Head().RequestID, "error", err)
		if m := h.opt.Metrics; m != nil {
			m.recordErrors.Inc()
		}
	}
}

// finished builds request.finished from the exchange.
func (x *exchange) finished() *schema.RequestFinished {
	e := schema.NewRequestFinished(limit(x.rid, schema.MaxIDBytes), x.arrival, x.end)
	e.Versions = cleanVersions(x.req.Versions)
	e.Endpoint = string(x.ep)
	e.Stream = x.req.Stream
	e.StatusCode = uint16(x.status)
	e.MaxTokens = x.req.MaxTokens
	e.TraceID = x.trace.id
	sampled := x.trace.sampled
	e.TraceSampled = &sampled
	e.Upstream = limit(x.up.name, schema.MaxURLBytes)
	e.Gateway = limit(x.h.opt.Gateway, schema.MaxLabelBytes)
	e2e := x.end.Sub(x.arrival).Seconds()
	e.E2ESeconds = &e2e
	e.Model = limit(x.req.Model, schema.MaxLabelBytes)
	if f := x.fail; f != nil {
		e.ErrorLayer, e.ErrorCode, e.ErrorMessage = f.layer, limit(f.code, schema.MaxLabelBytes), limit(f.msg, schema.MaxMessageBytes)
	}
	o := x.obs
	if o == nil {
		return e
	}
	if o.Model != "" {
		e.Model = limit(o.Model, schema.MaxLabelBytes)
	}
	e.ResponseID = limit(o.ResponseID, schema.MaxLabelBytes)
	if o.Error != nil && e.ErrorLayer == "" {
		// An error event inside a 200 stream (or body): the engine failed after answering.
		e.ErrorLayer = schema.LayerUpstream
		e.ErrorCode = limit(o.Error.Type, schema.MaxLabelBytes)
		e.ErrorMessage = limit(o.Error.Message, schema.MaxMessageBytes)
	}
	e.FinishReason = limit(o.FinishReason(), schema.MaxFinishReasonBytes)
	if rs := o.FinishReasons(); len(rs) > 0 {
		for i := range rs {
			rs[i] = limit(rs[i], schema.MaxFinishReasonBytes)
		}
		e.FinishReasons = rs
	}
	e.QueueSeconds, e.ScheduledToFirstTokenSeconds, e.DecodeSeconds, e.EngineITLSeconds = o.QueueSeconds, o.ScheduledToFirstTokenSeconds, o.DecodeSeconds, o.EngineITLSeconds
	if x.stream && !o.FirstOutput().IsZero() {
		ttft := o.FirstOutput().Sub(x.arrival).Seconds()
		e.TTFTSeconds = &ttft
	}
	e.PromptTokens, e.CompletionTokens, e.CachedTokens = o.PromptTokens, o.CompletionTokens, o.CachedTokens
	if o.Usage && e.CachedTokens == nil && x.h.opt.PromptTokensDetails && (x.ep == record.Chat || x.ep == record.Completions) {
		zero := uint32(0)
		e.CachedTokens = &zero
	}
	// Only chat and text completions come without usage (a stream whose client asked for none);
	// vLLM's Responses and embeddings answers always carry it, except a background response
	// still queued, which has generated nothing yet.
	success := x.status < 400 && o.Error == nil
	if success && !o.Usage && (x.ep == record.Chat || x.ep == record.Completions) {
		x.estimateTokens(e)
	}
	if x.stream && e.CompletionTokens != nil {
		if tpot, ok := o.TPOT(*e.CompletionTokens); ok {
			e.TPOTSeconds = &tpot
		}
	}
	if x.h.opt.Script != nil && o.ContentBytes > 0 {
		n := o.ForeignChars
		v := n > 0
		e.OutputForeignChars, e.OutputScriptViolation = &n, &v
	}
	if c := x.h.opt.Capture; c != nil {
		e.PromptText = c.Apply(x.req.PromptText)
		e.OutputText = c.Apply(o.Output())
	}
	return e
}

// estimateTokens fills the token counts of an answer without usage: one token per token-bearing
// event of a stream, or about four bytes a token of a body's text; prompt tokens from its bytes.
func (x *exchange) estimateTokens(e *schema.RequestFinished) {
	o := x.obs
	if e.CompletionTokens == nil {
		est := uint32(o.TokenEvents())
		if !x.stream {
			est = uint32((o.ContentBytes + 3) / 4)
		}
		e.CompletionTokens = &est
		e.TokensEstimated = true
	}
	if e.PromptTokens == nil && x.req.PromptBytes != nil {
		p := (*x.req.PromptBytes + 3) / 4
		e.PromptTokens = &p
		e.TokensEstimated = true
	}
}

// limit bounds a string from outside (headers, bodies) to the schema's size for its field.
func limit(s string, n int) string { return record.Truncate(s, n) }

func cleanVersions(v schema.Versions) schema.Versions {
	return schema.Versions{
		App: limit(v.App, schema.MaxLabelBytes), PromptVersion: limit(v.PromptVersion, schema.MaxLabelBytes),
		ConfigVersion: limit(v.ConfigVersion, schema.MaxLabelBytes), IndexVersion: limit(v.IndexVersion, schema.MaxLabelBytes),
		EmbeddingModelVersion: limit(v.EmbeddingModelVersion, schema.MaxLabelBytes),
	}
}
