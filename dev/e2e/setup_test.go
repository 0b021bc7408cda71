package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/sim/loadgen/load"
)

// serviceLogs keeps each service's log lines, in slog's text format.
type serviceLogs struct {
	mu   sync.Mutex
	bufs map[string]*bytes.Buffer
}

func (l *serviceLogs) logger(service string) *slog.Logger {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bufs == nil {
		l.bufs = map[string]*bytes.Buffer{}
	}
	l.bufs[service] = &bytes.Buffer{}
	return slog.New(slog.NewTextHandler(logWriter{l, service}, nil))
}

func (l *serviceLogs) text(service string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bufs[service].String()
}

type logWriter struct {
	l       *serviceLogs
	service string
}

func (w logWriter) Write(p []byte) (int, error) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	return w.l.bufs[w.service].Write(p)
}

// TestServicesUseTheStreamsAsSetUp starts the gateway, the collector and the consumer before the
// setup step ran, each configured with stream limits other than the setup's. They wait, creating
// nothing; requests through the gateway still succeed. Once the setup step has run, every event
// lands, the streams keep the limits the setup gave them, and each service says in one log line
// which of its settings differ, with the stream's value and its own.
func TestServicesUseTheStreamsAsSetUp(t *testing.T) {
	t.Parallel()
	var logs serviceLogs
	p := startPipeline(t, pipelineOptions{
		Log:        logs.logger,
		SetUpLater: true,
		// The setup step gives the streams its defaults (max_age 168h, one replica) and the test's
		// max_bytes of 256 MiB; the services are told otherwise.
		ServiceNATS: func(n *config.NATS) {
			n.StreamMaxAge, n.StreamMaxBytes, n.StreamReplicas = 24*time.Hour, 128<<20, 3
		},
	})
	topo := p.NATS.Topology()

	// Before the setup: each service says what is missing and what to run, and waits.
	waiting := map[string]string{
		"gateway":   "JetStream stream cannot take this publisher's events yet",
		"collector": "JetStream stream cannot take this publisher's events yet",
		"consumer":  "check the JetStream streams and durable consumer e2e failed, retrying",
	}
	for service, line := range waiting {
		waitFor(t, 60*time.Second, service+" to report the streams missing", func(context.Context) (bool, string, error) {
			log := logs.text(service)
			return strings.Contains(log, line) && strings.Contains(log, "stream "+topo.Stream()+" (subjects "+topo.Subjects()+") does not exist") &&
				strings.Contains(log, "run `servescope migrate up`"), "not yet", nil
		})
	}
	// The services serve meanwhile: the gateway's requests succeed and their events are spooled.
	rep, w := p.load(t, load.Config{Scenario: "normal", Requests: 6, Rate: 6, PromptTokens: 20, MaxTokens: 8})
	js, err := jetstream.New(testenv.NATS(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{topo.Stream(), topo.DLQStream()} {
		if _, err := js.Stream(t.Context(), s); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("stream %s before the setup: %v; no service may create it", s, err)
		}
	}

	applied := p.SetUp()
	for _, a := range applied {
		if a.Action != bus.Created {
			t.Errorf("setup: %s, want created", a)
		}
	}
	p.waitIngested(t, w, rep.Sent)

	st, err := js.Stream(t.Context(), topo.Stream())
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxAge != bus.DefaultStreamSettings.MaxAge || c.MaxBytes != 256<<20 || c.Replicas != 1 {
		t.Errorf("events stream after the services started: max_age %s, max_bytes %d, num_replicas %d; want the setup's 168h, 268435456, 1",
			c.MaxAge, c.MaxBytes, c.Replicas)
	}

	// One warning per stream, naming each differing setting with the stream's value and the
	// service's; the publishers' loggers add component=publish between the message and these.
	const differs = `level=WARN msg="JetStream stream differs from this service's settings; using it as it is" `
	eventsAttrs := fmt.Sprintf(`stream=%s max_age.server=168h0m0s max_age.service=24h0m0s max_bytes.server=268435456 max_bytes.service=134217728 `+
		`num_replicas.server=1 num_replicas.service=3 setup="servescope migrate up"`, topo.Stream())
	dlqAttrs := fmt.Sprintf(`stream=%s num_replicas.server=1 num_replicas.service=3 setup="servescope migrate up"`, topo.DLQStream())
	want := map[string][]string{"gateway": {eventsAttrs}, "collector": {eventsAttrs}, "consumer": {eventsAttrs, dlqAttrs}}
	for service, attrs := range want {
		waitFor(t, 30*time.Second, service+" to log the differences", func(context.Context) (bool, string, error) {
			log := logs.text(service)
			for _, a := range attrs {
				if !hasLine(log, differs, a) {
					return false, "no line " + differs + "... " + a + " in:\n" + log, nil
				}
			}
			return true, "", nil
		})
	}
	if n := strings.Count(logs.text("consumer"), "differs from this service's settings"); n != 2 {
		t.Errorf("consumer logged %d difference lines, want 2 (events and dead-letter stream; its durable consumer is as set up)", n)
	}
}

// hasLine reports whether one line of log contains every part, in order.
func hasLine(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		rest, ok := line, true
		for _, p := range parts {
			i := strings.Index(rest, p)
			if i < 0 {
				ok = false
				break
			}
			rest = rest[i+len(p):]
		}
		if ok {
			return true
		}
	}
	return false
}
