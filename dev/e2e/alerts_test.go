package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/services/collector/collector"
	"github.com/servescope/servescope/services/detector/notify"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/detector/service"
	"github.com/servescope/servescope/services/gateway/server"
)

// consoleURL is the console the alerts of these tests link to.
const consoleURL = "http://console.test"

// builtinRule returns a copy of the built-in rule name with window, hold and interval set and
// params changed: the rule's own SQL and texts at a test's time scale.
func builtinRule(t *testing.T, name string, window, hold, interval time.Duration, params map[string]any) *rules.Definition {
	t.Helper()
	defs, err := service.LoadRules("")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if d.Name != name {
			continue
		}
		c := *d
		c.Window, c.For, c.Interval = rules.Duration(window), rules.Duration(hold), rules.Duration(interval)
		c.Params = maps.Clone(d.Params)
		maps.Copy(c.Params, params)
		return &c
	}
	t.Fatalf("no built-in rule %s", name)
	return nil
}

// webhook is an Alertmanager-format receiver keeping every alert it is sent.
type webhook struct {
	srv    *httptest.Server
	mu     sync.Mutex
	alerts []notify.Alert
}

func startWebhook(t *testing.T) *webhook {
	w := &webhook{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var m notify.Message
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		w.alerts = append(w.alerts, m.Alerts...)
		w.mu.Unlock()
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *webhook) received() []notify.Alert {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]notify.Alert(nil), w.alerts...)
}

// waitAlert waits up to timeout for an alert that ok accepts and returns it.
func (w *webhook) waitAlert(t *testing.T, timeout time.Duration, what string, ok func(notify.Alert) bool) notify.Alert {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, a := range w.received() {
			if ok(a) {
				return a
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s arrived within %s; received %s", what, timeout, describeAlerts(w.received()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func describeAlerts(as []notify.Alert) string {
	var b strings.Builder
	for _, a := range as {
		fmt.Fprintf(&b, "\n  %s %s %v value=%s %q", a.Labels["alertname"], a.Status, a.Labels, a.Annotations["value"], a.Annotations["summary"])
	}
	return b.String()
}

// runDetector runs a detector with defs on st, every interval and delay behind the clock, sending
// to recv, until the test ends.
func runDetector(t *testing.T, st store, defs []*rules.Definition, interval, delay time.Duration, recv string) *service.Detector {
	t.Helper()
	cfg := service.Config{ClickHouse: st.CH, Interval: interval, EvalDelay: delay, RepeatInterval: 4 * time.Hour,
		WebhookURLs: []string{recv}, ConsoleURL: consoleURL, RuleConcurrency: 1}
	d, err := service.New(cfg, st.Conn, defs, prometheus.NewRegistry(), discardLog())
	if err != nil {
		t.Fatalf("detector: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return d
}

// hangingEngine is an OpenAI-compatible engine whose streams hang: each answers its headers and
// one chunk, then holds until released (or its client goes away).
type hangingEngine struct {
	mu      sync.Mutex
	release map[string]chan struct{}
}

func (e *hangingEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ch := make(chan struct{})
	id := r.Header.Get("X-Request-Id")
	e.mu.Lock()
	e.release[id] = ch
	e.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	chunk := func(delta, finish string) {
		fmt.Fprintf(w, `data: {"id":"chatcmpl-%s","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":%q},"finish_reason":%s}]}`+"\n\n", id, delta, finish)
		w.(http.Flusher).Flush()
	}
	chunk("Hel", "null")
	select {
	case <-ch:
	case <-r.Context().Done():
		return
	}
	chunk("lo", `"stop"`)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// end releases the streams of ids.
func (e *hangingEngine) end(ids ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		if ch, ok := e.release[id]; ok {
			close(ch)
			delete(e.release, id)
		}
	}
}

// openStream starts a streamed chat completion with id through the gateway and reads its first
// chunk; the returned function reads the rest (the stream's end) and closes it.
func openStream(t *testing.T, gateway, id string) func() {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, gateway+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	req.Header.Set("X-Request-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.Contains(sc.Text(), "Hel") {
		t.Fatalf("stream %s: first line %q, %v", id, sc.Text(), sc.Err())
	}
	return func() {
		for sc.Scan() {
		}
		resp.Body.Close()
	}
}

// TestHungStreamsAlertUntilTheyEnd: a real gateway in front of an engine whose streams hang,
// real NATS and ClickHouse, and the detector running requests_hung every second (timeout 4 s
// instead of 10 minutes). One hung stream fires the alert, naming the request, its model and
// gateway, with a link to its console page; six hung streams keep one alert firing for as long
// as they hang — however old they get — and resolve it once when they end, the resolution saying
// that 6 were open.
func TestHungStreamsAlertUntilTheyEnd(t *testing.T) {
	t.Parallel()
	st := startStore(t, pipelineOptions{})
	engine := &hangingEngine{release: map[string]chan struct{}{}}
	up := httptest.NewServer(engine)
	t.Cleanup(up.Close)
	gcfg, err := config.LoadFrom[server.Config](map[string]string{
		"GATEWAY_LISTEN_ADDR": "127.0.0.1:0", "GATEWAY_UPSTREAM_URL": up.URL, "GATEWAY_SPOOL_DIR": filepath.Join(t.TempDir(), "spool"),
		"GATEWAY_NAME": "gw-hung", "GATEWAY_HEARTBEAT_INTERVAL": "1s", "GATEWAY_HEARTBEAT_LIST_AFTER": "1s",
	})
	if err != nil {
		t.Fatal(err)
	}
	gcfg.NATS = st.NATS
	gw, err := server.New(gcfg, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	gctx, gcancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- gw.Run(gctx) }()
	t.Cleanup(func() {
		gcancel()
		if err := <-served; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	gateway := "http://" + gw.Addr()

	// A gateway silent for 60 heartbeats is gone: a loaded machine's pipeline lag must not look
	// like the gateway's death here (the rules test covers that path).
	rule := builtinRule(t, "requests_hung", time.Minute, 0, time.Second, map[string]any{"timeout_s": 4, "stale_intervals": 60})
	recv := startWebhook(t)
	runDetector(t, st, []*rules.Definition{rule}, time.Second, 2*time.Second, recv.srv.URL)
	hung := func(a notify.Alert) bool { return a.Labels["alertname"] == "requests_hung" }

	// One hung stream is enough.
	end := openStream(t, gateway, "hung-one")
	one := recv.waitAlert(t, 3*time.Minute, "firing alert for the hung stream", func(a notify.Alert) bool {
		return hung(a) && a.Status == "firing" && a.Annotations["request_id"] == "hung-one"
	})
	if one.Labels["model"] != "m" || one.Labels["gateway"] != "gw-hung" || one.Labels["app"] != "none" || one.Labels["engine"] != "all" ||
		one.Labels["severity"] != "critical" || one.Annotations["request_url"] != consoleURL+"/request/hung-one" ||
		one.Annotations["value"] != "1" || one.Annotations["upstream"] != up.URL || one.Annotations["phase"] != "responding" ||
		!strings.HasPrefix(one.GeneratorURL, consoleURL+"/alerts?") || one.Annotations["runbook_url"] != consoleURL+"/runbooks/requests_hung" {
		t.Errorf("the hung stream's alert: labels %v, annotations %v, generatorURL %s", one.Labels, one.Annotations, one.GeneratorURL)
	}
	t.Logf("one hung stream: %s", one.Annotations["summary"])
	engine.end("hung-one")
	end()
	recv.waitAlert(t, 2*time.Minute, "the one stream's resolution", func(a notify.Alert) bool {
		return hung(a) && a.Status == "resolved" && a.StartsAt.Equal(one.StartsAt)
	})

	// Six hang for as long as it takes: the alert stays firing throughout.
	var ids []string
	var ends []func()
	for i := range 6 {
		id := fmt.Sprintf("hung-six-%d", i)
		ids = append(ids, id)
		ends = append(ends, openStream(t, gateway, id))
	}
	six := recv.waitAlert(t, 3*time.Minute, "firing alert for the six", func(a notify.Alert) bool {
		return hung(a) && a.Status == "firing" && !a.StartsAt.Equal(one.StartsAt)
	})
	held := time.Now()
	// Hold them well past the timeout, many evaluations: by then they are several times older
	// than the rule's timeout, and the alert must not have resolved.
	time.Sleep(20 * time.Second)
	for _, a := range recv.received() {
		if hung(a) && a.StartsAt.Equal(six.StartsAt) && a.Status == "resolved" {
			t.Fatalf("the six's alert resolved while they hung (%s after the firing): %s", time.Since(held), describeAlerts(recv.received()))
		}
	}
	engine.end(ids...)
	for _, e := range ends {
		e()
	}
	res := recv.waitAlert(t, 2*time.Minute, "the six's resolution", func(a notify.Alert) bool {
		return hung(a) && a.Status == "resolved" && a.StartsAt.Equal(six.StartsAt)
	})
	if res.Annotations["fired_value"] != "6" || !strings.Contains(res.Annotations["summary"], "6 were when the alert last fired") {
		t.Errorf("the resolution: %v, want it to say 6 were open", res.Annotations)
	}
	// A few more evaluations: one resolution, one firing, nothing else for the six.
	time.Sleep(5 * time.Second)
	firings, resolutions := 0, 0
	for _, a := range recv.received() {
		if !hung(a) || a.Labels["gateway"] != "gw-hung" {
			continue
		}
		switch {
		case a.Status == "resolved" && a.StartsAt.Equal(six.StartsAt):
			resolutions++
		case a.Status == "firing" && !a.StartsAt.Equal(one.StartsAt):
			firings++
		}
	}
	if firings != 1 || resolutions != 1 {
		t.Errorf("the six: %d firings, %d resolutions, want one of each: %s", firings, resolutions, describeAlerts(recv.received()))
	}
	t.Logf("six hung streams: fired %q, resolved %q", six.Annotations["summary"], res.Annotations["summary"])
}

// startCollector runs a real collector scraping metricsURL as engine "vllm" every 200 ms and
// receiving OTLP spans on a loopback port, publishing into st, until the test ends; it returns
// the OTLP/gRPC address.
func startCollector(t *testing.T, st store, metricsURL string) string {
	t.Helper()
	dir := t.TempDir()
	ccfg, err := config.LoadFrom[collector.Config](map[string]string{
		"COLLECTOR_TARGETS": engineName + "=" + metricsURL, "COLLECTOR_SCRAPE_INTERVAL": "200ms", "COLLECTOR_SCRAPE_TIMEOUT": "5s",
		"COLLECTOR_OTLP_GRPC_ADDR": "127.0.0.1:0", "COLLECTOR_OTLP_HTTP_ADDR": collector.Off, "COLLECTOR_METRICS_ADDR": collector.Off,
		"COLLECTOR_STATE_DIR": filepath.Join(dir, "state"), "COLLECTOR_SPOOL_DIR": filepath.Join(dir, "spool"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ccfg.NATS = st.NATS
	log := discardLog()
	pub, err := publish.New(testenv.NATS(t), ccfg.NATS.SubjectPrefix, ccfg.PublisherConfig(log, nil))
	if err != nil {
		t.Fatal(err)
	}
	col, err := collector.New(ccfg, pub, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- col.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("collector: %v", err)
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = pub.Close(cctx)
	})
	return col.OTLPGRPCAddr()
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// replayFiring evaluates d's rules as of at (with the ticks their holds need) and returns the
// firing alerts of rule.
func replayFiring(t *testing.T, d *service.Detector, at time.Time, rule string) []service.ReplayLine {
	t.Helper()
	var out strings.Builder
	if err := d.Replay(t.Context(), at, &out); err != nil {
		t.Fatalf("replay: %v", err)
	}
	var firing []service.ReplayLine
	dec := json.NewDecoder(strings.NewReader(out.String()))
	for dec.More() {
		var l service.ReplayLine
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		if l.Rule == rule && l.State == "firing" {
			firing = append(firing, l)
		}
	}
	return firing
}

// ruleDetector is a detector of defs on st that sends nothing (for Replay).
func ruleDetector(t *testing.T, st store, defs ...*rules.Definition) *service.Detector {
	t.Helper()
	d, err := service.New(service.Config{ClickHouse: st.CH, Interval: time.Second, RepeatInterval: time.Hour},
		st.Conn, defs, prometheus.NewRegistry(), discardLog())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestEngineKilledWithoutTrafficIsNotScraped: vllmsim (a real process) scraped by a real collector,
// no request ever sent. While it serves, engine_not_scraped is quiet; once it is killed (SIGKILL)
// the collector's failed scrapes fire the alert for that engine, with its model and the scrape
// error, with no traffic at all.
func TestEngineKilledWithoutTrafficIsNotScraped(t *testing.T) {
	t.Parallel()
	st := startStore(t, pipelineOptions{})
	sim, addr := startProc(t.Context(), t, "vllmsim", testenv.Binary(t, "github.com/servescope/servescope/sim/vllmsim"), t.TempDir(),
		func(addr string) (string, []string, []string) {
			return "http://" + addr + "/health", nil, []string{"--listen", addr, "--model", "servescope/sim-7b"}
		})
	startCollector(t, st, "http://"+addr+"/metrics")
	rule := builtinRule(t, "engine_not_scraped", 5*time.Second, 2*time.Second, time.Second, nil)
	d := ruleDetector(t, st, rule)

	// Scrapes land while the engine serves: nothing fires.
	waitFor(t, time.Minute, "ten successful scrapes in ClickHouse", func(ctx context.Context) (bool, string, error) {
		var n uint64
		err := st.Conn.QueryRow(ctx, "SELECT count() FROM engine_samples WHERE up AND engine = 'vllm'").Scan(&n)
		return n >= 10, fmt.Sprint(n), err
	})
	if f := replayFiring(t, d, time.Now().Add(-time.Second), "engine_not_scraped"); len(f) != 0 {
		t.Fatalf("engine_not_scraped fires while the engine serves: %+v", f)
	}
	killed := time.Now()
	if err := sim.Kill(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The window after the kill fills with failed scrapes.
	var fired []service.ReplayLine
	waitFor(t, 2*time.Minute, "engine_not_scraped firing after the kill", func(ctx context.Context) (bool, string, error) {
		var n uint64
		if err := st.Conn.QueryRow(ctx, "SELECT count() FROM engine_samples WHERE NOT up AND engine = 'vllm'").Scan(&n); err != nil {
			return false, "", err
		}
		if time.Since(killed) < 8*time.Second {
			return false, fmt.Sprintf("%d failed scrapes", n), nil
		}
		fired = replayFiring(t, d, time.Now().Add(-time.Second), "engine_not_scraped")
		return len(fired) == 1, fmt.Sprintf("%d failed scrapes, firing %+v", n, fired), nil
	})
	f := fired[0]
	if f.Labels["engine"] != "vllm" || f.Labels["model"] != "servescope/sim-7b" || !strings.Contains(f.Summary, "connection refused") {
		t.Errorf("engine_not_scraped: labels %v, summary %q", f.Labels, f.Summary)
	}
	var requests uint64
	if err := st.Conn.QueryRow(t.Context(), "SELECT count() FROM requests").Scan(&requests); err != nil || requests != 0 {
		t.Errorf("requests recorded: %d, %v; the test sends none", requests, err)
	}
	t.Logf("fired %s after the kill: %s", time.Since(killed).Round(time.Second), f.Summary)
}

// TestTracingToADeadPortMissesSpans: vllmsim (a real process) with its OTLP exporter pointed at a
// port nothing listens on, behind a real gateway and scraped by a real collector. It had traced
// the day before (its spans in the baseline). Requests flow and are served; engine_spans_missing
// fires for the engine. The same traffic with tracing pointed at the collector fires nothing.
func TestTracingToADeadPortMissesSpans(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		dead  bool
		fires bool
	}{{"tracing to a dead port", true, true}, {"tracing to the collector", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := startStore(t, pipelineOptions{})
			// The collector is told the engine's address before the engine runs: a free port.
			simAddr := deadAddr(t)
			otlp := startCollector(t, st, "http://"+simAddr+"/metrics")
			if tc.dead {
				otlp = deadAddr(t)
			}
			bin := testenv.Binary(t, "github.com/servescope/servescope/sim/vllmsim")
			startProc(t.Context(), t, "vllmsim", bin, t.TempDir(), func(string) (string, []string, []string) {
				return "http://" + simAddr + "/health", []string{"OTEL_SERVICE_NAME=" + engineName},
					[]string{"--listen", simAddr, "--model", "servescope/sim-7b", "--otlp-endpoint", otlp}
			})
			gcfg, err := config.LoadFrom[server.Config](map[string]string{
				"GATEWAY_LISTEN_ADDR": "127.0.0.1:0", "GATEWAY_UPSTREAM_URL": "http://" + simAddr,
				"GATEWAY_SPOOL_DIR": filepath.Join(t.TempDir(), "spool"), "GATEWAY_NAME": "gw-spans",
			})
			if err != nil {
				t.Fatal(err)
			}
			gcfg.NATS = st.NATS
			gw, err := server.New(gcfg, discardLog())
			if err != nil {
				t.Fatal(err)
			}
			gctx, gcancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- gw.Run(gctx) }()
			t.Cleanup(func() { gcancel(); <-served })

			// Yesterday the engine traced: its spans are in the baseline (24 h ending an hour ago).
			now := time.Now()
			for i := range 50 {
				if err := st.Conn.Exec(t.Context(), "INSERT INTO engine_spans (event_id, request_id, ts, engine, model) VALUES (?, ?, fromUnixTimestamp64Micro(?, 'UTC'), ?, 'servescope/sim-7b')",
					fmt.Sprint("yesterday-", i), fmt.Sprint("y-", i), now.Add(-20*time.Hour+time.Duration(i)*time.Minute).UnixMicro(), engineName); err != nil {
					t.Fatal(err)
				}
			}
			from := time.Now()
			for i := range 30 {
				status, body, _ := postChat(t, "http://"+gw.Addr(), fmt.Sprintf("spans-%d", i))
				if status != http.StatusOK {
					t.Fatalf("request %d: %d %s", i, status, body)
				}
			}
			waitFor(t, 2*time.Minute, "the 30 requests and the engine's samples in ClickHouse", func(ctx context.Context) (bool, string, error) {
				var reqs, samples uint64
				err := st.Conn.QueryRow(ctx, `SELECT (SELECT count() FROM requests WHERE arrival_ts >= fromUnixTimestamp64Micro($1, 'UTC')),
					(SELECT count() FROM engine_samples WHERE up AND engine = $2 AND ts > now64() - INTERVAL 5 SECOND)`, from.UnixMicro(), engineName).Scan(&reqs, &samples)
				return reqs >= 30 && samples > 0, fmt.Sprintf("%d requests, %d recent samples", reqs, samples), err
			})
			if !tc.dead {
				waitFor(t, 2*time.Minute, "the engine's spans in ClickHouse", func(ctx context.Context) (bool, string, error) {
					var n uint64
					err := st.Conn.QueryRow(ctx, "SELECT count() FROM engine_spans WHERE ts >= fromUnixTimestamp64Micro($1, 'UTC')", from.UnixMicro()).Scan(&n)
					return n >= 30, fmt.Sprint(n, " spans"), err
				})
			}
			window := time.Since(from) + 5*time.Second
			rule := builtinRule(t, "engine_spans_missing", window, 0, time.Second, map[string]any{"min_requests": 20, "min_baseline_spans": 20})
			fired := replayFiring(t, ruleDetector(t, st, rule), time.Now(), "engine_spans_missing")
			if !tc.fires {
				if len(fired) != 0 {
					t.Fatalf("engine_spans_missing fires with tracing to the collector: %+v", fired)
				}
				return
			}
			if len(fired) != 1 || fired[0].Labels["engine"] != engineName || fired[0].Labels["model"] != "servescope/sim-7b" {
				t.Fatalf("engine_spans_missing: %+v, want one alert for engine %s", fired, engineName)
			}
			var spans uint64
			if err := st.Conn.QueryRow(t.Context(), "SELECT count() FROM engine_spans WHERE ts >= fromUnixTimestamp64Micro($1, 'UTC')", from.UnixMicro()).Scan(&spans); err != nil || spans != 0 {
				t.Errorf("%d spans arrived (%v) from an engine exporting to a dead port", spans, err)
			}
			t.Logf("fired: %s", fired[0].Summary)
		})
	}
}

// postChat sends one non-streaming chat completion with id and returns the status and body.
func postChat(t *testing.T, gateway, id string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, gateway+"/v1/chat/completions",
		strings.NewReader(`{"model":"servescope/sim-7b","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":8}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text())
	}
	return resp.StatusCode, b.String(), resp.Header
}
