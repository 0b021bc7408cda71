package server_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/benchkit"
	"github.com/servescope/servescope/dev/enginetest"
	"github.com/servescope/servescope/dev/testenv"
)

// BenchmarkGateway measures one request through the whole gateway (HTTP server, proxy, recorder,
// publisher, NATS JetStream) and, beside it, through a bare net/http/httputil reverse proxy, over
// loopback TCP in front of an engine that answers at once (enginetest.Fixed): the request and
// answers of scripts/bench gateway, sent one at a time. Client, engine and proxies run in this
// process, so each figure covers all three and the gateway's own cost is its figure minus
// bare's. Besides allocs/op and B/op it reports the process's write(2) and read(2) calls per
// request (every flush to a connection, NATS's included), goroutines started and events the
// publisher got acknowledged by JetStream (published/op); these do not depend on the machine's
// load, unlike ns/op and cpu-ns/op. It needs the NATS server of the integration tests.
func BenchmarkGateway(b *testing.B) {
	engine := httptest.NewServer(enginetest.NewFixed(16))
	b.Cleanup(engine.Close)
	target, err := url.Parse(engine.URL)
	if err != nil {
		b.Fatal(err)
	}
	bareProxy := httputil.NewSingleHostReverseProxy(target)
	bareProxy.Transport = &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}
	bare := httptest.NewServer(bareProxy)
	b.Cleanup(bare.Close)
	_, _, natsCfg := testenv.JetStream(b)
	gw, gwURL := startGateway(b, engine.URL, natsCfg, nil)

	for _, mode := range []struct{ name, body string }{
		{"non_streaming", `{"model":"m","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":16}`},
		{"streaming", `{"model":"m","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":16,"stream":true}`},
	} {
		for _, path := range []struct{ name, url string }{{"bare", bare.URL}, {"gateway", gwURL}} {
			b.Run(mode.name+"/"+path.name, func(b *testing.B) {
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
				defer client.CloseIdleConnections()
				body, buf := []byte(mode.body), make([]byte, 16<<10)
				published := func() uint64 { return gw.Publisher().Stats().Published }
				settled := func(want uint64) {
					for deadline := time.Now().Add(10 * time.Second); published() < want; time.Sleep(time.Millisecond) {
						if time.Now().After(deadline) {
							b.Fatalf("JetStream acknowledged %d events, want %d (publisher: %+v)", published(), want, gw.Publisher().Stats())
						}
					}
				}
				failed := 0
				send := func() {
					if err := benchRequest(client, path.url, body, buf); err != nil {
						// net/http's reverse proxy now and then loses a streamed answer on
						// loopback ("use of closed network connection"); the gateway may not.
						if failed++; path.name == "gateway" {
							b.Fatalf("%s: %v", path.name, err)
						}
					}
				}
				pub0 := published()
				for range 20 {
					send()
				}
				if path.name == "gateway" {
					// Let the warm-up's events go out, so their publishing is not counted.
					settled(pub0 + 40)
					time.Sleep(20 * time.Millisecond)
					pub0 = published()
				}
				c0, err := benchkit.ReadCounters()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					send()
				}
				if path.name == "gateway" {
					settled(pub0 + 2*uint64(b.N))
				}
				b.StopTimer()
				c1, err := benchkit.ReadCounters()
				if err != nil {
					b.Fatal(err)
				}
				c1.ReportPerOp(b, c0, b.N)
				if failed > b.N/100 {
					b.Fatalf("%d of %d requests failed", failed, b.N)
				}
				if path.name == "gateway" {
					b.ReportMetric(float64(published()-pub0)/float64(b.N), "published/op")
				}
			})
		}
	}
}

// benchRequest sends one chat completion and reads the whole answer.
func benchRequest(client *http.Client, base string, body, buf []byte) error {
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.CopyBuffer(io.Discard, resp.Body, buf); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
