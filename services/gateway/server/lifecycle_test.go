package server_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/gateway/server"
)

// TestShutdownDrainsStreamsThenFlushesEvents stops the gateway while a stream is in flight: the
// client still gets the whole answer, and the request's events reach the stream.
func TestShutdownDrainsStreamsThenFlushesEvents(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	_, engineURL := startEngine(t, time.Millisecond, time.Millisecond)
	cfg, err := config.LoadFrom[server.Config](map[string]string{
		"GATEWAY_LISTEN_ADDR": "127.0.0.1:0", "GATEWAY_UPSTREAM_URL": engineURL, "GATEWAY_SPOOL_DIR": t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.NATS = natsCfg
	srv, err := server.New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	rid := newID("drain")
	req, _ := http.NewRequest(http.MethodPost, "http://"+srv.Addr()+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"[slow]"}],"stream":true,"max_tokens":8}`))
	req.Header.Set("X-Request-Id", rid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	stopped := false
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if !stopped && strings.Contains(sc.Text(), `"content":"The"`) {
			stop() // shut down with the stream half way
			stopped = true
		}
	}
	if !stopped || len(lines) == 0 || lines[len(lines)-2] != "data: [DONE]" {
		t.Fatalf("stream cut by the shutdown; last lines %q", lines[max(0, len(lines)-3):])
	}
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	_, fin := recordsOf(t, js, topo, rid)
	if fin.StatusCode != 200 || fin.CompletionTokens == nil || *fin.CompletionTokens != 8 {
		t.Fatalf("request.finished after shutdown: %+v", fin)
	}
}

// TestStartsBeforeNATS starts the gateway while its NATS server is down and nothing is set up:
// requests succeed, and once NATS is up and the setup step has made the streams, the gateway's
// stream check passes and it delivers the spooled events. It never creates a stream itself.
func TestStartsBeforeNATS(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t)
	ns.Stop()
	natsCfg := testenv.NATSConfig(t)
	natsCfg.URL = ns.URL()
	natsCfg.SubjectPrefix = testenv.UniqueName("t")
	_, engineURL := startEngine(t, 0, 0)
	srv, gw := startGateway(t, engineURL, natsCfg, nil)
	for i := range 20 {
		status, body, _ := post(t, gw+"/v1/chat/completions", newID("early"), `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`, nil)
		if status != 200 {
			t.Fatalf("request %d with NATS down: %d %s", i, status, body)
		}
	}
	// Events reach the spool shortly after (the recorder and publisher gather them for a few ms).
	waitFor(t, func() bool { return srv.Publisher().Stats().Spooled == 40 }, "40 events in the spool")
	ns.Start()
	js := privateJetStream(t, ns.URL())
	topo := natsCfg.Topology()
	waitFor(t, func() bool { return errors.Is(srv.Publisher().StreamCheck(), bus.ErrNotSetUp) }, "the gateway to find no stream set up")
	if _, err := js.Stream(context.Background(), topo.Stream()); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("stream %s before the setup: %v, want none: the gateway must not create it", topo.Stream(), err)
	}
	testenv.Provision(t, js, natsCfg)
	waitFor(t, func() bool { return srv.Publisher().StreamCheck() == nil }, "the gateway's stream check to pass after the setup")
	waitFor(t, func() bool { return srv.Publisher().Stats().SpoolEvents == 0 }, "the spool to drain after NATS started")
	evs := events(t, js, topo)
	kinds := map[schema.Kind]int{}
	for _, e := range evs {
		kinds[e.Kind()]++
	}
	if kinds[schema.KindRequestStarted] != 20 || kinds[schema.KindRequestFinished] != 20 {
		t.Fatalf("events on the stream by kind: %v, want 20 of each", kinds)
	}
}
