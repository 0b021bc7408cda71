package server_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/enginetest"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/gateway/server"
)

// tWriter sends log lines to the test log.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// startEngine starts the test engine on a loopback port.
func startEngine(t testing.TB, firstToken, perToken time.Duration) (*enginetest.Engine, string) {
	t.Helper()
	e := enginetest.New(enginetest.DefaultWords, firstToken, perToken)
	s := httptest.NewServer(e)
	t.Cleanup(s.Close)
	return e, s.URL
}

// startGateway runs a gateway in front of upstream, publishing with natsCfg. env adds or
// overrides settings; the heartbeat is off unless env sets GATEWAY_HEARTBEAT_INTERVAL, so that
// tests counting a gateway's events or spooled events count its request records. The gateway is
// shut down (drained, publisher flushed) when the test ends.
func startGateway(t testing.TB, upstream string, natsCfg config.NATS, env map[string]string) (*server.Server, string) {
	t.Helper()
	vars := map[string]string{
		"GATEWAY_LISTEN_ADDR":        "127.0.0.1:0",
		"GATEWAY_UPSTREAM_URL":       upstream,
		"GATEWAY_SPOOL_DIR":          t.TempDir(),
		"GATEWAY_NAME":               "gw-test",
		"GATEWAY_HEARTBEAT_INTERVAL": "0",
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.LoadFrom[server.Config](vars)
	if err != nil {
		t.Fatalf("gateway config: %v", err)
	}
	cfg.NATS = natsCfg
	srv, err := server.New(cfg, testLogger(t))
	if err != nil {
		t.Fatalf("start gateway: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway run: %v", err)
		}
	})
	return srv, "http://" + srv.Addr()
}

// events reads every request record on the topology's stream: every event but the heartbeats.
func events(t testing.TB, js jetstream.JetStream, topo bus.Topology) []schema.Event {
	t.Helper()
	var out []schema.Event
	for _, e := range streamEvents(t, js, topo) {
		if e.Kind() != schema.KindGatewayHeartbeat {
			out = append(out, e)
		}
	}
	return out
}

// streamEvents reads every event on the topology's stream.
func streamEvents(t testing.TB, js jetstream.JetStream, topo bus.Topology) []schema.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, topo.Stream())
	if err != nil {
		t.Fatalf("stream %s: %v", topo.Stream(), err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	total := int(info.State.Msgs)
	if total == 0 {
		return nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	var out []schema.Event
	for len(out) < total {
		batch, err := cons.Fetch(min(total-len(out), 1000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			e, err := schema.Decode(m.Subject(), m.Data())
			if err != nil {
				t.Fatalf("decode %s: %v\n%s", m.Subject(), err, m.Data())
			}
			if id := m.Headers().Get(jetstream.MsgIDHeader); id != e.Head().EventID {
				t.Fatalf("Nats-Msg-Id %q != event_id %q", id, e.Head().EventID)
			}
			out = append(out, e)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			t.Fatalf("fetch batch: %v", err)
		}
		if n == 0 {
			t.Fatalf("stream said %d messages, read %d", total, len(out))
		}
	}
	return out
}

// recordsOf waits until request requestID has both its events on the stream and returns them.
func recordsOf(t testing.TB, js jetstream.JetStream, topo bus.Topology, requestID string) (*schema.RequestStarted, *schema.RequestFinished) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // returns as soon as both are there
	for {
		var st *schema.RequestStarted
		var fin *schema.RequestFinished
		for _, e := range events(t, js, topo) {
			if e.Head().RequestID != requestID {
				continue
			}
			switch v := e.(type) {
			case *schema.RequestStarted:
				st = v
			case *schema.RequestFinished:
				fin = v
			}
		}
		if st != nil && fin != nil {
			return st, fin
		}
		if time.Now().After(deadline) {
			t.Fatalf("request %s: started=%v finished=%v on the stream after 15 s", requestID, st != nil, fin != nil)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// post sends a JSON body and returns the status, the whole body and the response headers.
func post(t testing.TB, url, requestID, body string, hdr map[string]string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if requestID != "" {
		req.Header.Set("X-Request-Id", requestID)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, []byte(b.String()), resp.Header
}

var idMu sync.Mutex

// newID returns a unique request id for one test request.
func newID(prefix string) string {
	idMu.Lock()
	defer idMu.Unlock()
	return prefix + "-" + schema.NewRequestID()
}
