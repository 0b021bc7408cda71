// Package proxy is the gateway's reverse proxy: it forwards any path and method to an engine,
// streams responses chunk by chunk, and records request.started and request.finished for chat
// and text completions.
//
// Bodies pass unchanged with one exception: for a streaming completion whose client did not ask
// for stream_options.include_usage, the gateway asks the engine for it (to record exact token
// counts) and removes the engine's final usage-only chunk (`"choices":[]` with `usage`) from what
// the client receives, so the client gets the bytes the engine would have sent it without the
// gateway. For recorded routes the gateway also drops Accept-Encoding, because it must read the
// response.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/gateway/record"
)

// Recorded routes.
const (
	RouteChat        = "/v1/chat/completions"
	RouteCompletions = "/v1/completions"
	// RouteOther labels every other proxied path in metrics.
	RouteOther = "other"
)

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
	// MaxBodyBytes bounds request bodies; larger ones get 413.
	MaxBodyBytes int64
	// MaxParseBytes bounds how much of a non-streaming response is kept to read usage and errors
	// from (default 8 MiB); a larger body is forwarded whole but recorded without them.
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
	detached  sync.WaitGroup // exchanges reading an engine's tail after answering
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
	h.detached.Wait()
	h.closeOnce.Do(func() { close(h.events) })
	h.recorded.Wait()
}

// NewTransport returns the transport to the engines: dialTimeout bounds connecting,
// headerTimeout bounds the wait for response headers (for a non-streaming completion that is the
// whole generation, so keep it long). Compression is left to the client and engine.
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
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
	}
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// routeOf maps a path to its metrics label.
func routeOf(path string) string {
	switch path {
	case RouteChat, RouteCompletions:
		return path
	}
	return RouteOther
}

// exchange is one proxied request's state.
type exchange struct {
	h        *Handler
	w        http.ResponseWriter
	r        *http.Request
	arrival  time.Time
	rid      string
	trace    string
	traceID  string
	route    string
	up       *upstream
	recorded bool

	req        record.Request
	body       []byte // buffered body of a recorded request
	stripUsage bool

	status     int
	errLayer   string
	errCode    string
	errMsg     string
	firstTok   time.Time
	lastTok    time.Time
	end        time.Time
	obs        *record.Observer
	observed   bool // the response body was read by the observer
	answered   bool // the client was sent "data: [DONE]": its answer is complete
	headerSent bool

	strip         bool        // the engine's usage chunk is removed from the client's stream
	stopFollowing func() bool // stops the client's cancellation from reaching the engine request
	detached      bool        // the handler returned before the engine's stream ended
}

// detachTimeout bounds reading the engine's tail after the client got its answer.
const detachTimeout = 30 * time.Second

// done is the end of an OpenAI stream.
var done = []byte("data: [DONE]\n\n")

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{h: h, w: w, r: r, arrival: time.Now()}
	x.rid = r.Header.Get(HeaderRequestID)
	if x.rid == "" {
		x.rid = schema.NewRequestID()
	}
	x.trace, x.traceID = traceparent(r.Header.Get(HeaderTraceparent))
	x.route = routeOf(r.URL.Path)
	x.recorded = r.Method == http.MethodPost && x.route != RouteOther
	x.up = h.bal.pick()
	if m := h.opt.Metrics; m != nil {
		m.inflight.Inc()
		defer m.inflight.Dec()
	}
	w.Header().Set(HeaderRequestID, x.rid)

	if x.recorded {
		if !x.readBody() {
			x.up.release()
			x.finish()
			return
		}
		x.publishStarted()
	}
	x.forward()
	if x.detached {
		// The client has its whole answer; a goroutine reads the engine's tail (the usage chunk)
		// and records the request.
		x.count()
		return
	}
	x.up.release()
	x.finish()
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
	capture := x.h.opt.Capture != nil
	x.req = record.ParseRequest(x.body, x.r.Header, capture)
	switch {
	case err != nil:
		x.publishStarted()
		if x.r.Context().Err() != nil {
			x.fail(StatusClientClosed, schema.LayerClient, "client_closed", "client went away while sending the request body")
			return false
		}
		x.fail(http.StatusBadRequest, schema.LayerGateway, "body_read_error", "read request body: "+err.Error())
		return false
	case int64(len(x.body)) > limit:
		x.publishStarted()
		x.fail(http.StatusRequestEntityTooLarge, schema.LayerGateway, "body_too_large",
			fmt.Sprintf("request body exceeds %d bytes", limit))
		return false
	}
	if x.req.Stream && !x.req.IncludeUsage && !x.req.ContinuousUsage {
		if b, err := record.InjectIncludeUsage(x.body); err == nil {
			x.body = b
			x.stripUsage = true
		}
	}
	return true
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
	if x.recorded {
		body = bytes.NewReader(x.body)
		contentLength = int64(len(x.body))
	} else if r.ContentLength != 0 {
		body = http.MaxBytesReader(x.w, r.Body, x.h.opt.MaxBodyBytes)
	}
	// The engine request follows the client's (a departed client cancels it) until the exchange
	// detaches to read the engine's tail after the client has its answer.
	upCtx, cancelUp := context.WithCancel(context.WithoutCancel(r.Context()))
	x.stopFollowing = context.AfterFunc(r.Context(), cancelUp)
	defer func() {
		if !x.detached {
			x.stopFollowing()
			cancelUp()
		}
	}()
	out, err := http.NewRequestWithContext(upCtx, r.Method, target.String(), body)
	if err != nil {
		x.fail(http.StatusBadGateway, schema.LayerGateway, "bad_upstream_request", "build upstream request: "+err.Error())
		return
	}
	out.ContentLength = contentLength
	if contentLength == 0 && !x.recorded && r.ContentLength == 0 {
		out.Body = nil
	}
	copyHeaders(out.Header, r.Header)
	out.Header.Del("Content-Length")
	if x.recorded {
		out.Header.Del("Accept-Encoding")
	}
	out.Header.Set(HeaderRequestID, x.rid)
	out.Header.Set(HeaderTraceparent, x.trace)
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := r.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		out.Header.Set("X-Forwarded-For", ip)
	}

	sent := time.Now()
	resp, err := x.h.opt.Transport.RoundTrip(out)
	if err != nil {
		x.upstreamFailed(err)
		return
	}
	defer func() {
		if !x.detached {
			resp.Body.Close()
		}
	}()
	if m := x.h.opt.Metrics; m != nil {
		m.upstreamLatency.WithLabelValues(x.route).Observe(time.Since(sent).Seconds())
	}

	hdr := x.w.Header()
	copyHeaders(hdr, resp.Header)
	hdr.Set(HeaderRequestID, x.rid)
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	strip := x.stripUsage && sse && resp.StatusCode == http.StatusOK && resp.Header.Get("Content-Encoding") == ""
	if strip {
		hdr.Del("Content-Length")
	}
	x.status = resp.StatusCode
	x.w.WriteHeader(resp.StatusCode)
	x.headerSent = true

	if !x.recorded {
		x.copyPlain(resp.Body, sse)
		return
	}
	x.obs = record.NewObserver(x.h.opt.Script, strip, x.h.opt.Capture != nil, x.captureMax())
	if resp.Header.Get("Content-Encoding") != "" {
		x.copyPlain(resp.Body, sse)
	} else if sse {
		x.strip = strip
		x.copyStream(resp.Body, cancelUp)
	} else {
		x.copyBody(resp.Body)
	}
	if resp.StatusCode >= 400 && x.errLayer == "" {
		x.errLayer = schema.LayerUpstream
		if e := x.obs.Error; e != nil {
			x.errCode, x.errMsg = e.Type, e.Message
		} else {
			x.errCode, x.errMsg = "http_"+statusLabel(resp.StatusCode), http.StatusText(resp.StatusCode)
		}
	}
}

func (x *exchange) captureMax() int {
	if x.h.opt.Capture == nil {
		return 0
	}
	// Collect a little more than is stored, so a redaction pattern at the limit still matches.
	return x.h.opt.Capture.MaxBytes() + 1024
}

// copyStream forwards an SSE response event by event, flushing after each read.
//
// When the gateway asked for the usage chunk on the client's behalf, the client's stream is over
// once the single choice's finish chunk has passed: what the engine sends next is the usage chunk
// (removed) and "data: [DONE]". The gateway then sends "data: [DONE]" itself and ends the
// client's response, so the extra chunk costs the client no time, and reads the engine's tail in
// the background (the client's bytes stay exactly what the engine would have sent).
func (x *exchange) copyStream(src io.ReadCloser, cancelUp context.CancelFunc) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	flusher, _ := x.w.(http.Flusher)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			x.observed = true
			out, content := x.obs.Feed(buf[:n])
			if len(out) > 0 {
				if _, werr := x.w.Write(out); werr != nil {
					x.clientGone()
					return
				}
				if flusher != nil {
					flusher.Flush()
				}
				if x.obs.Done {
					x.answered = true
				}
			}
			if content {
				now := time.Now()
				if x.firstTok.IsZero() {
					x.firstTok = now
				}
				x.lastTok = now
			}
			if x.strip && x.req.N <= 1 && x.obs.FinishReason != "" && !x.obs.Done && rerr == nil && x.obs.Error == nil {
				if _, werr := x.w.Write(done); werr != nil {
					x.clientGone()
					return
				}
				if flusher != nil {
					flusher.Flush()
				}
				x.answered = true
				x.end = time.Now()
				if x.stopFollowing() {
					x.detached = true
					x.h.detached.Add(1)
					go x.readTail(src, cancelUp)
					return
				}
				// The client left at this very moment; read on here, as for any stream.
			}
		}
		if rerr != nil {
			if rest := x.obs.Rest(); len(rest) > 0 {
				if _, werr := x.w.Write(rest); werr != nil {
					x.clientGone()
					return
				}
			}
			if rerr != io.EOF {
				x.readFailed(rerr)
			}
			return
		}
	}
}

// readTail reads the rest of a stream whose client already has its answer, then records the
// request. It owns src and the engine request.
func (x *exchange) readTail(src io.ReadCloser, cancelUp context.CancelFunc) {
	defer x.h.detached.Done()
	defer x.up.release()
	defer cancelUp()
	defer src.Close()
	t := time.AfterFunc(detachTimeout, cancelUp)
	defer t.Stop()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	unsent := 0
	for {
		n, err := src.Read(buf)
		if n > 0 {
			out, _ := x.obs.Feed(buf[:n])
			unsent += len(out)
		}
		if err != nil {
			unsent += len(x.obs.Rest())
			if err != io.EOF {
				x.errLayer, x.errCode, x.errMsg = schema.LayerUpstream, "stream_interrupted", "read engine response after its finish chunk: "+err.Error()
			}
			break
		}
	}
	if x.obs.Done {
		unsent -= len(done)
	}
	if unsent != 0 {
		x.h.log.Warn("engine sent more after the finish chunk than usage and [DONE]; the client did not get it",
			"request_id", x.rid, "bytes", unsent)
	}
	x.publish(x.finished())
}

// copyBody forwards a non-streaming response, keeping up to MaxParseBytes of it to read.
func (x *exchange) copyBody(src io.Reader) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var keep bytes.Buffer
	over := false
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if !over {
				if keep.Len()+n > x.h.opt.MaxParseBytes {
					over = true
					keep.Reset()
				} else {
					keep.Write(buf[:n])
				}
			}
			if _, werr := x.w.Write(buf[:n]); werr != nil {
				x.clientGone()
				return
			}
		}
		if rerr != nil {
			if rerr != io.EOF {
				x.readFailed(rerr)
				return
			}
			break
		}
	}
	if !over {
		x.observed = true
		x.obs.ObserveBody(keep.Bytes())
	}
}

// copyPlain forwards a response without reading it.
func (x *exchange) copyPlain(src io.Reader, flush bool) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	flusher, _ := x.w.(http.Flusher)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, werr := x.w.Write(buf[:n]); werr != nil {
				x.clientGone()
				return
			}
			if flush && flusher != nil {
				flusher.Flush()
			}
		}
		if rerr != nil {
			if rerr != io.EOF {
				x.readFailed(rerr)
			}
			return
		}
	}
}

// clientGone records that the client went away mid-response. A client that hangs up once it
// has "data: [DONE]" (most SDKs close right away) got its whole answer: that is no failure.
func (x *exchange) clientGone() {
	if x.answered {
		return
	}
	x.status = StatusClientClosed
	x.errLayer, x.errCode, x.errMsg = schema.LayerClient, "client_closed", "client disconnected before the response ended"
}

// readFailed records a failed read of the engine's response body.
func (x *exchange) readFailed(err error) {
	if x.answered {
		return // the client has the whole stream; what the engine does after it changes nothing
	}
	if x.r.Context().Err() != nil {
		x.clientGone()
		return
	}
	x.errLayer, x.errCode, x.errMsg = schema.LayerUpstream, "stream_interrupted", "read engine response: "+err.Error()
}

// upstreamFailed answers a failed round trip: the client's departure, a timeout or an
// unreachable engine.
func (x *exchange) upstreamFailed(err error) {
	if x.r.Context().Err() != nil {
		x.status = StatusClientClosed
		x.errLayer, x.errCode, x.errMsg = schema.LayerClient, "client_closed", "client disconnected before the engine answered"
		return
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		x.fail(http.StatusRequestEntityTooLarge, schema.LayerGateway, "body_too_large", fmt.Sprintf("request body exceeds %d bytes", mbe.Limit))
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
	x.fail(status, schema.LayerUpstream, code, fmt.Sprintf("engine %s: %v", x.up.name, err))
}

// fail answers the client with an error in vLLM's JSON shape and records it.
func (x *exchange) fail(status int, layer, code, msg string) {
	x.status = status
	x.errLayer, x.errCode, x.errMsg = layer, code, msg
	if status == StatusClientClosed || x.headerSent {
		return
	}
	x.h.log.Warn("request failed", "request_id", x.rid, "status", status, "error_layer", layer, "error_code", code, "error", msg)
	writeError(x.w, status, code, msg)
	x.headerSent = true
}

// writeError writes {"error":{"message","type","param","code"}} as vLLM does.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Length")
	w.WriteHeader(status)
	var b bytes.Buffer
	b.WriteString(`{"error":{"message":`)
	writeJSONString(&b, msg)
	b.WriteString(`,"type":`)
	writeJSONString(&b, typ)
	fmt.Fprintf(&b, `,"param":null,"code":%d}}`, status)
	_, _ = w.Write(b.Bytes())
}

func writeJSONString(b *bytes.Buffer, s string) {
	const hexd = "0123456789abcdef"
	b.WriteByte('"')
	for _, c := range []byte(strings.ToValidUTF8(s, "\uFFFD")) {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hexd[c>>4])
			b.WriteByte(hexd[c&0xF])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// finish counts the request and publishes request.finished for recorded routes.
func (x *exchange) finish() {
	x.count()
	if x.recorded {
		x.publish(x.finished())
	}
}

// count ends the client's part: the end time, the status, the request metric.
func (x *exchange) count() {
	if x.end.IsZero() {
		x.end = time.Now()
	}
	if x.status == 0 {
		x.status = http.StatusOK
	}
	if m := x.h.opt.Metrics; m != nil {
		m.requests.WithLabelValues(x.route, statusLabel(x.status)).Inc()
	}
}

func (x *exchange) publishStarted() {
	e := schema.NewRequestStarted(limit(x.rid, 128), x.arrival)
	e.Versions = cleanVersions(x.req.Versions)
	e.Model = limit(x.req.Model, 256)
	e.Endpoint = x.route
	e.Stream = x.req.Stream
	e.MaxTokens = x.req.MaxTokens
	e.PromptBytes = x.req.PromptBytes
	e.TraceID = x.traceID
	e.Gateway = limit(x.h.opt.Gateway, 256)
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
	e := schema.NewRequestFinished(limit(x.rid, 128), x.arrival, x.end)
	e.Versions = cleanVersions(x.req.Versions)
	e.Endpoint = x.route
	e.Stream = x.req.Stream
	e.StatusCode = uint16(x.status)
	e.ErrorLayer = x.errLayer
	e.ErrorCode = limit(x.errCode, 256)
	e.ErrorMessage = limit(x.errMsg, 8192)
	e.MaxTokens = x.req.MaxTokens
	e.TraceID = x.traceID
	e.Upstream = limit(x.up.name, 1024)
	e.Gateway = limit(x.h.opt.Gateway, 256)
	e2e := x.end.Sub(x.arrival).Seconds()
	e.E2ES = &e2e
	e.Model = limit(x.req.Model, 256)
	o := x.obs
	if o == nil {
		return e
	}
	if o.Model != "" {
		e.Model = limit(o.Model, 256)
	}
	if o.Error != nil && e.ErrorLayer == "" {
		// An error event inside a 200 stream (or body): the engine failed after answering.
		e.ErrorLayer = schema.LayerUpstream
		e.ErrorCode = limit(o.Error.Type, 256)
		e.ErrorMessage = limit(o.Error.Message, 8192)
	}
	e.FinishReason = limit(o.FinishReason, 64)
	e.QueueS, e.ScheduledToFirstTokenS, e.DecodeS, e.EngineITLS, e.PrefillS = o.QueueS, o.ScheduledToFirstTokenS, o.DecodeS, o.EngineITLS, o.PrefillS
	if !x.firstTok.IsZero() {
		ttft := x.firstTok.Sub(x.arrival).Seconds()
		e.TTFTS = &ttft
	}
	e.PromptTokens, e.CompletionTokens, e.CachedTokens = o.PromptTokens, o.CompletionTokens, o.CachedTokens
	success := x.status < 400 && o.Error == nil
	if success && x.observed && e.CompletionTokens == nil {
		// No usage: estimate from what passed through (one token per content chunk, or about
		// four bytes per token for a whole body).
		est := uint32(o.ContentChunks)
		if !x.req.Stream {
			est = uint32((o.ContentBytes + 3) / 4)
		}
		e.CompletionTokens = &est
		e.TokensEstimated = true
		if e.PromptTokens == nil && x.req.PromptBytes != nil {
			p := (*x.req.PromptBytes + 3) / 4
			e.PromptTokens = &p
		}
	}
	if e.CompletionTokens != nil && *e.CompletionTokens > 1 && !x.firstTok.IsZero() && x.lastTok.After(x.firstTok) {
		tpot := x.lastTok.Sub(x.firstTok).Seconds() / float64(*e.CompletionTokens-1)
		e.TPOTS = &tpot
	}
	if x.observed && x.h.opt.Script != nil && o.ContentBytes > 0 {
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

// limit bounds a string from outside (headers, bodies) to the schema's size for its field.
func limit(s string, n int) string { return record.Truncate(s, n) }

func cleanVersions(v schema.Versions) schema.Versions {
	return schema.Versions{
		App: limit(v.App, 256), PromptVersion: limit(v.PromptVersion, 256), ConfigVersion: limit(v.ConfigVersion, 256),
		IndexVersion: limit(v.IndexVersion, 256), EmbeddingModelVersion: limit(v.EmbeddingModelVersion, 256),
	}
}
