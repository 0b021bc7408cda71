package proxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/servescope/servescope/schema"
)

// startedOf reports whether pub holds request.started of rid.
func (p *events) startedOf(rid string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.all {
		if _, ok := e.(*schema.RequestStarted); ok && e.Head().RequestID == rid {
			return true
		}
	}
	return false
}

// request.started is read and published once the request is on its way to the engine, not before
// (it would delay the request) and not with the answer (a long generation would be invisible
// until its end): an engine that answers only after it sees request.started gets it.
func TestRequestStartedWhileTheEngineWorks(t *testing.T) {
	var pub *events
	sawStarted := make(chan bool, 1)
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rid := r.Header.Get(HeaderRequestID)
		seen := false
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && !seen; time.Sleep(5 * time.Millisecond) {
			seen = pub.startedOf(rid)
		}
		sawStarted <- seen
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`))
	}))
	defer engine.Close()
	u, _ := url.Parse(engine.URL)
	var h *Handler
	h, pub = newHandler(t, NewTransport(5*time.Second, time.Minute), func(o *Options) { o.Upstreams = []*url.URL{u} })
	rec, _ := call(h, "/v1/chat/completions", "rid-started", `{"model":"m","messages":[{"role":"user","content":"Hello"}],"max_tokens":4}`, nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if !<-sawStarted {
		t.Error("the engine answered without request.started published (waited a minute)")
	}
	settle(h)
	fin := pub.finished(t, "rid-started")
	if fin.Model != "m" || fin.MaxTokens == nil || *fin.MaxTokens != 4 {
		t.Errorf("request.finished lost the request's fields: model %q max_tokens %v", fin.Model, fin.MaxTokens)
	}
}

// A request that never reaches an engine still has its request.started (with the body's fields),
// before its request.finished.
func TestRequestStartedWithoutAnEngine(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: the connection is refused
	u, _ := url.Parse("http://" + addr)
	h, pub := newHandler(t, NewTransport(5*time.Second, time.Minute), func(o *Options) { o.Upstreams = []*url.URL{u} })
	rec, _ := call(h, "/v1/chat/completions", "rid-no-engine", `{"model":"m","messages":[{"role":"user","content":"Hello"}],"stream":true}`, nil)
	if rec.Code != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", rec.Code)
	}
	settle(h)
	fin := pub.finished(t, "rid-no-engine") // one request.started, one request.finished
	pub.mu.Lock()
	defer pub.mu.Unlock()
	var kinds []schema.Kind
	for _, e := range pub.all {
		if e.Head().RequestID == "rid-no-engine" {
			kinds = append(kinds, e.Kind())
		}
	}
	if len(kinds) != 2 || kinds[0] != schema.KindRequestStarted {
		t.Errorf("events in order %v, want request.started first", kinds)
	}
	if fin.Model != "m" || !fin.Stream {
		t.Errorf("request.finished model %q stream %v, want m, true", fin.Model, fin.Stream)
	}
}
