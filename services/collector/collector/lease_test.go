package collector

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/sim"
)

func TestLeaseKey(t *testing.T) {
	for _, engine := range []string{"sim", "vllm-a", "http://10.0.0.5:8000/metrics", "a:b", "a_b", "ünï"} {
		k := LeaseKey(engine)
		if !strings.HasPrefix(k, "scrape.") || strings.ContainsFunc(k[len("scrape."):], func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=", r))
		}) {
			t.Errorf("LeaseKey(%q) = %q: not a NATS key token after scrape.", engine, k)
		}
	}
	if LeaseKey("a:b") == LeaseKey("a_b") {
		t.Error("two engine names that differ in a replaced character share a key")
	}
	if LeaseKey("vllm-a") != LeaseKey("vllm-a") {
		t.Error("LeaseKey is not stable")
	}
}

// collectorProcess is the collector binary running as a child process (dev/proc).
type collectorProcess struct {
	*proc.Process
	metrics string
}

func startCollectorProcess(t *testing.T, name string, env map[string]string) *collectorProcess {
	t.Helper()
	bin := testenv.Binary(t, "github.com/servescope/servescope/services/collector")
	dir := t.TempDir()
	c := &collectorProcess{}
	logPath := filepath.Join(dir, "collector.log")
	t.Cleanup(func() {
		if c.Process != nil {
			_ = c.Kill(context.Background())
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("collector %s log:\n%s", name, b)
		}
	})
	// On a fresh port again when another process took the one picked before the collector bound it.
	p, ports, err := proc.StartOnFreePorts(t.Context(), 1, func(ports []int) (proc.Spec, error) {
		metrics := "127.0.0.1:" + strconv.Itoa(ports[0])
		environ := []string{"COLLECTOR_METRICS_ADDR=" + metrics, "COLLECTOR_INSTANCE=" + name,
			"COLLECTOR_STATE_DIR=" + filepath.Join(dir, "state"), "COLLECTOR_SPOOL_DIR=" + filepath.Join(dir, "spool")}
		for k, v := range env {
			environ = append(environ, k+"="+v)
		}
		return proc.Spec{Name: "collector " + name, Path: bin, Args: []string{"run"}, Env: environ, Log: logPath,
			DieWithCaller: true, StopGrace: time.Minute, ReadyTimeout: 3 * time.Minute,
			Ready: proc.HTTPReady("http://" + metrics + "/readyz")}, nil
	})
	if err != nil {
		t.Fatalf("start collector %s: %v", name, err)
	}
	c.Process, c.metrics = p, "127.0.0.1:"+strconv.Itoa(ports[0])
	return c
}

// metric is the value of series on c's /metrics, -1 when there is none.
func (c *collectorProcess) metric(series string) float64 {
	return testenv.MetricValue("http://"+c.metrics+"/metrics", series)
}

func (c *collectorProcess) scrapes() float64 {
	return max(c.metric(`servescope_collector_scrapes_total{engine="sim",result="ok"}`), 0)
}

func (c *collectorProcess) holds() bool {
	return c.metric(`servescope_collector_scrape_lease_held{engine="sim"}`) == 1
}

func waitFor3m(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 3 minutes", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Two collectors with COLLECTOR_LEASE and one vllmsim: one of them scrapes the engine, the other
// none at all; SIGKILLed, the first is replaced by the second within about the lease's TTL, and the
// engine's samples go on in the stream. Only counts of scrapes are asserted, never their timing.
func TestTwoCollectorsScrapeAnEngineOnce(t *testing.T) {
	t.Parallel()
	js, topo, nc := testenv.NATSPrefix(t)
	nc.LeaseTTL = 3 * time.Second
	testenv.Provision(t, js, nc)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := sim.New(sim.Options{Clock: engine.NewClock(1), Engine: engine.DefaultConfig()})
	api := httptest.NewServer(s.Handler)
	defer api.Close()
	go func() { _ = s.Engine.Run(ctx) }()

	env := map[string]string{
		"SERVESCOPE_NATS_URL":       nc.URL,
		"SERVESCOPE_SUBJECT_PREFIX": nc.SubjectPrefix,
		"COLLECTOR_TARGETS":         "sim=" + api.URL + "/metrics",
		"COLLECTOR_SCRAPE_INTERVAL": "200ms",
		"COLLECTOR_OTLP_GRPC_ADDR":  Off,
		"COLLECTOR_OTLP_HTTP_ADDR":  Off,
		"COLLECTOR_LEASE":           "true",
	}
	a := startCollectorProcess(t, "a", env)
	waitFor3m(t, "a scraping", func() bool { return a.holds() && a.scrapes() >= 3 })
	b := startCollectorProcess(t, "b", env)
	n := a.scrapes()
	waitFor3m(t, "a scraping on with b running", func() bool { return a.scrapes() >= n+10 })
	if b.holds() || b.scrapes() > 0 {
		t.Fatalf("b scraped %v times (lease held: %v) while a held the engine's lease", b.scrapes(), b.holds())
	}

	killed := time.Now().UTC()
	if err := a.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor3m(t, "b scraping after a's SIGKILL", func() bool { return b.holds() && b.scrapes() >= 5 })
	t.Logf("b took the engine over %s after a's SIGKILL", time.Since(killed).Round(100*time.Millisecond))

	// The stream holds the engine's samples from before the kill (a's) and after it (b's).
	evs := events(t, js, topo, 3*time.Minute, func(evs []schema.Event) bool {
		for _, e := range evs {
			if es, ok := e.(*schema.EngineSample); ok && es.TS.After(killed) {
				return true
			}
		}
		return false
	})
	var before, after int
	for _, e := range evs {
		if es, ok := e.(*schema.EngineSample); ok && es.Engine == "sim" {
			if es.TS.After(killed) {
				after++
			} else {
				before++
			}
		}
	}
	if before == 0 || after == 0 {
		t.Fatalf("engine samples in the stream: %d before a's SIGKILL, %d after; want both", before, after)
	}
	if err := b.Stop(context.Background()); err != nil || b.ExitCode() != 0 {
		t.Errorf("b after SIGTERM: %v, exit status %d", err, b.ExitCode())
	}
}
