package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/dev/benchkit"
	"github.com/servescope/servescope/dev/enginetest"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/gateway/record"
)

// BenchmarkHandler measures the handler alone, per request: ServeHTTP to an in-memory engine
// answering with vLLM-shaped bytes (enginetest.Fixed, the answers scripts/bench gateway uses),
// into a writer that keeps nothing, with the recorder's encoding of the two events included. No
// network, client or engine code runs beside it, so allocs/op and B/op are the handler's own;
// with goroutines/op and events/op they do not depend on the machine's load and show a change
// in what a request costs where scripts/bench's latency ratios cannot (cpu-ns/op and ns/op do
// depend on it). services/gateway/server's BenchmarkGateway measures the whole gateway.
func BenchmarkHandler(b *testing.B) {
	eng := enginetest.NewFixed(16)
	u, _ := url.Parse("http://engine.test:8000")
	script, err := record.NewScriptCheck([]string{"Latin"})
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	pub := &encodingPublisher{}
	h, err := New(Options{Upstreams: []*url.URL{u}, Transport: fixedTransport{eng}, Publisher: pub, Script: script,
		AskUsage: true, Gateway: "bench", Metrics: m})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.Close)
	for _, mode := range []struct{ name, body string }{
		{"non_streaming", `{"model":"m","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":16}`},
		{"streaming", `{"model":"m","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":16,"stream":true}`},
	} {
		b.Run(mode.name, func(b *testing.B) {
			body := []byte(mode.body)
			w := &discardWriter{header: http.Header{}}
			serve := func() {
				req, err := http.NewRequest(http.MethodPost, "http://gateway.test/v1/chat/completions", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				clear(w.header)
				w.status, w.n = 0, 0
				h.ServeHTTP(w, req)
				if w.status != http.StatusOK || w.n == 0 {
					b.Fatalf("status %d, %d bytes", w.status, w.n)
				}
			}
			for range 20 {
				serve()
			}
			pub.wait(b, 0)
			pub0 := pub.n.Load()
			c0, err := benchkit.ReadCounters()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				serve()
			}
			b.StopTimer()
			pub.wait(b, pub0+2*uint64(b.N))
			c1, err := benchkit.ReadCounters()
			if err != nil {
				b.Fatal(err)
			}
			c1.ReportPerOp(b, c0, b.N)
			b.ReportMetric(float64(pub.n.Load()-pub0)/float64(b.N), "events/op")
		})
	}
}

// encodingPublisher encodes each event, as publish.Publisher does before queueing it, and
// counts it.
type encodingPublisher struct{ n atomic.Uint64 }

func (p *encodingPublisher) Publish(e schema.Event) error {
	if _, err := schema.Encode(e); err != nil {
		return err
	}
	p.n.Add(1)
	return nil
}

// wait waits until the recorder has handed over want events (every event so far when want is
// 0, judged by the count standing still), for up to 5 s.
func (p *encodingPublisher) wait(b *testing.B, want uint64) {
	b.Helper()
	last := p.n.Load()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		n := p.n.Load()
		if (want > 0 && n >= want) || (want == 0 && n == last && n%2 == 0) {
			return
		}
		last = n
	}
	b.Fatalf("the recorder handed over %d events, want %d", p.n.Load(), want)
}

// fixedTransport answers with an enginetest.Fixed's bytes without a network; a stream arrives
// one event per read, as from a connection to vLLM.
type fixedTransport struct{ e *enginetest.Fixed }

func (t fixedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	_ = req.Body.Close()
	out, stream := t.e.Answer(body)
	resp := &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: req}
	if stream {
		resp.Header = http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}
		resp.Body = &eventReader{rest: out}
		resp.ContentLength = -1
		return resp, nil
	}
	resp.Header = http.Header{"Content-Type": {"application/json"}}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	return resp, nil
}

// eventReader hands out an event stream one event per Read.
type eventReader struct{ rest []byte }

func (r *eventReader) Read(p []byte) (int, error) {
	if len(r.rest) == 0 {
		return 0, io.EOF
	}
	end := len(r.rest)
	if i := bytes.Index(r.rest, []byte("\n\n")); i >= 0 {
		end = i + 2
	}
	n := copy(p, r.rest[:end])
	r.rest = r.rest[n:]
	return n, nil
}

func (r *eventReader) Close() error { return nil }

// discardWriter is an http.ResponseWriter and http.Flusher that keeps only the status and the
// number of bytes written.
type discardWriter struct {
	header http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header { return w.header }

func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.n += len(p)
	return len(p), nil
}

func (w *discardWriter) Flush() {}

// BenchmarkStreamChunks measures a stream of 0 and of 256 vLLM content chunks through the
// handler and through a bare httputil.ReverseProxy (FlushInterval -1, as for event streams), each
// chunk one read from an in-memory engine and one write and flush to a writer that keeps nothing:
// the proxies' own work, without the sockets both pay alike. The difference between the two
// lengths over 256 is the work per chunk; run under callgrind, its instructions are a comparison
// a loaded machine does not move.
func BenchmarkStreamChunks(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"Tell me a long story."}],"max_tokens":4096,"stream":true}`)
	u, _ := url.Parse("http://engine.test:8000")
	for _, n := range []int{0, 256} {
		stream := chunkStream(n)
		engine := engineFunc(func(*http.Request, []byte) *http.Response {
			return sseResponse(http.StatusOK, &eventReader{rest: stream})
		})
		bare := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) }, Transport: engine, FlushInterval: -1}
		h, _ := newHandler(b, engine, nil)
		b.Cleanup(h.Close)
		for _, p := range []struct {
			name string
			h    http.Handler
		}{{"bare", bare}, {"gateway", h}} {
			b.Run(fmt.Sprintf("%s/chunks=%d", p.name, n), func(b *testing.B) {
				w := &discardWriter{header: http.Header{}}
				b.ReportAllocs()
				for b.Loop() {
					req, _ := http.NewRequest(http.MethodPost, "http://gateway.test/v1/chat/completions", bytes.NewReader(body))
					clear(w.header)
					w.status, w.n = 0, 0
					p.h.ServeHTTP(w, req)
					if w.status != http.StatusOK || w.n == 0 {
						b.Fatalf("status %d, %d bytes", w.status, w.n)
					}
				}
			})
		}
	}
}

// chunkStream is a vLLM chat stream with n content chunks, each with another text, as the
// streams bench's engine sends them.
func chunkStream(n int) []byte {
	const head = `data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1764460000,"model":"m","choices":[`
	s := []byte(head + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	for i := range n {
		s = append(s, head+`{"index":0,"delta":{"content":" t`...)
		s = strconv.AppendInt(s, int64(1764460000000000000+i), 10)
		s = append(s, `"},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	}
	s = append(s, head+`{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}`+"\n\n"...)
	s = append(s, head+`],"usage":{"prompt_tokens":9,"total_tokens":265,"completion_tokens":256}}`+"\n\ndata: [DONE]\n\n"...)
	return s
}
