package demo

import (
	"io"
	"net/http"
	"time"
)

// drainingTransport reads what is left of a response body (at most 64 KiB) before closing it.
// loadgen stops reading a stream at `data: [DONE]` and closes the body; the gateway may not have
// read the engine's end of stream yet, sees its client gone and records the finished request as
// 499 client_closed. Draining makes the demo's client behave like the OpenAI SDKs, which consume
// the stream to its end, and keeps connections reusable.
type drainingTransport struct{ base http.RoundTripper }

func (t drainingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err == nil && resp.Body != nil {
		resp.Body = drainingBody{resp.Body}
	}
	return resp, err
}

type drainingBody struct{ io.ReadCloser }

func (b drainingBody) Close() error {
	_, _ = io.Copy(io.Discard, io.LimitReader(b.ReadCloser, 64<<10))
	return b.ReadCloser.Close()
}

// LoadClient is the HTTP client the demo's loads use: many idle connections per host (the
// overload keeps hundreds of streams open) and draining bodies.
func LoadClient() *http.Client {
	return &http.Client{Transport: drainingTransport{&http.Transport{
		MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 30 * time.Second,
	}}}
}
