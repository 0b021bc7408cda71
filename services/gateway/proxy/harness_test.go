package proxy

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/enginetest"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/gateway/record"
)

// events collects what the handler publishes.
type events struct {
	mu  sync.Mutex
	all []schema.Event
}

func (p *events) Publish(e schema.Event) error {
	if err := e.Validate(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.all = append(p.all, e)
	return nil
}

func (p *events) finished(t testing.TB, rid string) *schema.RequestFinished {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var found *schema.RequestFinished
	started := 0
	for _, e := range p.all {
		if e.Head().RequestID != rid {
			continue
		}
		switch v := e.(type) {
		case *schema.RequestStarted:
			started++
		case *schema.RequestFinished:
			if found != nil {
				t.Fatalf("request %s finished twice", rid)
			}
			found = v
		}
	}
	if found == nil || started != 1 {
		t.Fatalf("request %s: %d request.started, finished %v", rid, started, found != nil)
	}
	return found
}

// pieces is an engine response body that arrives in the given pieces, then ends with err
// (io.EOF: the engine ended the response; anything else: the connection broke).
type pieces struct {
	parts [][]byte
	err   error
}

func (b *pieces) Read(p []byte) (int, error) {
	for len(b.parts) > 0 && len(b.parts[0]) == 0 {
		b.parts = b.parts[1:]
	}
	if len(b.parts) == 0 {
		return 0, b.err
	}
	n := copy(p, b.parts[0])
	b.parts[0] = b.parts[0][n:]
	return n, nil
}

func (b *pieces) Close() error { return nil }

// slowPieces is a body whose pieces each come after a pause (a lower bound on when they arrive).
type slowPieces struct {
	parts [][]byte
	delay time.Duration
}

func (b *slowPieces) Read(p []byte) (int, error) {
	if len(b.parts) == 0 {
		return 0, io.EOF
	}
	time.Sleep(b.delay)
	n := copy(p, b.parts[0])
	b.parts[0] = b.parts[0][n:]
	if len(b.parts[0]) == 0 {
		b.parts = b.parts[1:]
	}
	return n, nil
}

func (b *slowPieces) Close() error { return nil }

// engineFunc is an in-memory engine: it sees the request the gateway sends and returns a response.
type engineFunc func(req *http.Request, body []byte) *http.Response

func (f engineFunc) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
	}
	resp := f(req, body)
	if resp == nil {
		return nil, errors.New("engine unreachable")
	}
	resp.Request = req
	return resp, nil
}

func sseResponse(status int, body io.ReadCloser) *http.Response {
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}, Body: body}
}

func jsonResponse(status int, contentType string, body []byte) *http.Response {
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {contentType}}, Body: io.NopCloser(bytes.NewReader(body))}
}

// newHandler returns a handler in front of an in-memory engine, publishing to the returned events.
func newHandler(t testing.TB, engine http.RoundTripper, tweak func(*Options)) (*Handler, *events) {
	t.Helper()
	u, _ := url.Parse("http://engine.test:8000")
	script, err := record.NewScriptCheck(nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := &events{}
	opt := Options{Upstreams: []*url.URL{u}, Transport: engine, Publisher: pub, Script: script, AskUsage: true,
		Gateway: "gw-test", Logger: slog.New(slog.DiscardHandler)}
	if tweak != nil {
		tweak(&opt)
	}
	h, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	return h, pub
}

// call sends one request through h and returns what the client received; aborted is true when the
// handler broke off the client's connection.
func call(h *Handler, path, rid, body string, hdr map[string]string) (rec *httptest.ResponseRecorder, aborted bool) {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if rid != "" {
		req.Header.Set(HeaderRequestID, rid)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec = httptest.NewRecorder()
	func() {
		defer func() {
			if r := recover(); r != nil {
				if r != http.ErrAbortHandler {
					panic(r)
				}
				aborted = true
			}
		}()
		h.ServeHTTP(rec, req)
	}()
	return rec, aborted
}

// settle closes h, so every record is published.
func settle(h *Handler) { h.Close() }

// replay is an in-memory engine answering with a VLLMStream's writes.
func replay(ws []enginetest.Write, cut func(data []byte) [][]byte, err error) engineFunc {
	return func(*http.Request, []byte) *http.Response {
		data := enginetest.Bytes(ws)
		parts := [][]byte{data}
		if cut != nil {
			parts = cut(data)
		}
		return sseResponse(http.StatusOK, &pieces{parts: parts, err: err})
	}
}

// What an in-memory engine body ends with: a clean end, or a broken connection.
var (
	errEOF        = io.EOF
	errEngineGone = io.ErrUnexpectedEOF
)
