package service_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/dev/testclock"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/notify"
	"github.com/servescope/servescope/services/detector/service"
)

// webhookReceiver is an Alertmanager-style receiver on a fixed loopback address that can be taken
// down (connection refused) and brought back, or made to hang: while blocking it answers no
// request until the client gives up, and keeps no message.
type webhookReceiver struct {
	t      *testing.T
	secret []byte
	addr   string

	mu       sync.Mutex
	srv      *http.Server
	msgs     []notify.Message
	badSigs  int
	blocking bool
	blocked  int
}

func startReceiver(t *testing.T, secret []byte) *webhookReceiver {
	r := &webhookReceiver{t: t, secret: secret}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	t.Cleanup(r.down)
	return r
}

func (r *webhookReceiver) URL() string { return "http://" + r.addr + "/hook?token=abc" }

func (r *webhookReceiver) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var m notify.Message
		r.mu.Lock()
		if r.blocking {
			r.blocked++
			r.mu.Unlock()
			<-req.Context().Done()
			return
		}
		defer r.mu.Unlock()
		if !notify.Verify(r.secret, body, req.Header.Get(notify.SignatureHeader)) {
			r.badSigs++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if err := json.Unmarshal(body, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.msgs = append(r.msgs, m)
	})}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

func (r *webhookReceiver) down() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

func (r *webhookReceiver) up() {
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatalf("receiver back on %s: %v", r.addr, err)
	}
	r.serve(ln)
}

func (r *webhookReceiver) setBlocking(b bool) {
	r.mu.Lock()
	r.blocking = b
	r.mu.Unlock()
}

func (r *webhookReceiver) blockedRequests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.blocked
}

func (r *webhookReceiver) messages() []notify.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]notify.Message(nil), r.msgs...)
}

// waitFor waits until the receiver holds n messages, failing after 2 minutes (a receiver that
// was down is retried with a backoff of up to 30 s).
func (r *webhookReceiver) waitFor(n int) []notify.Message {
	r.t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // returns as soon as it holds
	for time.Now().Before(deadline) {
		if m := r.messages(); len(m) >= n {
			return m
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("receiver got %d messages, want %d", len(r.messages()), n)
	return nil
}

// A webhook receiver gets firing then resolved, signed; a restart re-sends nothing; with the
// receiver down the alert is delivered once it is back; every attempt is recorded.
func TestWebhookLifecycleAcrossRestartsAndOutage(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	at := testclock.EvalTime(t, 3*time.Hour)
	g := synth.New(9)
	errShape := synth.NormalShape()
	errShape.Status5xxProb = 0.3
	tr := g.Requests(at.Add(-26*time.Hour), at.Add(-5*time.Minute), synth.NormalRate, synth.NormalShape())
	tr.Add(g.Requests(at.Add(-5*time.Minute), at, synth.Constant(0.2), errShape))
	tr.Add(g.Requests(at, at.Add(20*time.Minute), synth.Constant(0.2), synth.NormalShape()))
	tr.Add(g.Requests(at.Add(20*time.Minute), at.Add(25*time.Minute), synth.Constant(0.2), errShape))
	insert(t, conn, tr)

	secret := []byte("s3cret")
	recv := startReceiver(t, secret)
	cfg := testConfig(ch)
	cfg.WebhookURLs, cfg.WebhookSecret, cfg.ExternalURL = []string{recv.URL()}, string(secret), "http://detector.test"
	cfg.ConsoleURL = "http://console.test"

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	// start is a detector (re)start: restore state from the alerts table, run the notifier.
	start := func() (*service.Detector, context.CancelFunc) {
		d := newDetector(t, cfg, conn, "server_errors")
		if err := d.Restore(ctx); err != nil {
			t.Fatal(err)
		}
		nctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); d.Notifier().Run(nctx) }()
		return d, func() { stop(); <-done }
	}
	eval := func(d *service.Detector, ts time.Time) {
		t.Helper()
		if err := d.Groups()[0].Eval(ctx, ts); err != nil {
			t.Fatalf("evaluate at %s: %v", ts, err)
		}
	}

	d, stop := start()
	eval(d, at)
	m := recv.waitFor(1)[0]
	if m.Version != "4" || m.Status != "firing" || m.Receiver != "http://"+recv.addr+"/hook" ||
		m.GroupLabels["alertname"] != "server_errors" || m.GroupKey != `{}:{alertname="server_errors"}` ||
		m.ExternalURL != "http://detector.test" || len(m.Alerts) != 1 {
		t.Fatalf("first message: %+v", m)
	}
	a := m.Alerts[0]
	if a.Status != "firing" || a.Labels["class"] != "5xx" || a.Labels["severity"] != "critical" ||
		!a.StartsAt.Equal(at) || !a.EndsAt.IsZero() || a.Fingerprint == "" || a.Annotations["summary"] == "" ||
		!strings.HasPrefix(a.GeneratorURL, "http://console.test/alerts?") || !strings.Contains(a.GeneratorURL, "rule=server_errors") {
		t.Fatalf("firing alert: %+v", a)
	}
	waitRows(ctx, t, conn, "SELECT count() FROM alert_deliveries WHERE ok", 1)
	stop()

	// Restart: the firing alert is remembered and not sent again.
	d, stop = start()
	eval(d, at.Add(30*time.Second))
	eval(d, at.Add(time.Minute))
	// Then the window moves past the errors: resolved, once.
	eval(d, at.Add(10*time.Minute))
	msgs := recv.waitFor(2)
	if r := msgs[1]; r.Status != "resolved" || r.Alerts[0].Fingerprint != a.Fingerprint ||
		!r.Alerts[0].EndsAt.Equal(at.Add(10*time.Minute)) || !r.Alerts[0].StartsAt.Equal(at) {
		t.Fatalf("second message: %+v, want the alert resolved at %s", r, at.Add(10*time.Minute))
	}
	waitRows(ctx, t, conn, "SELECT count() FROM alert_deliveries WHERE ok", 2)
	stop()
	d, stop = start()
	eval(d, at.Add(10*time.Minute+30*time.Second))
	eval(d, at.Add(11*time.Minute))

	// Receiver down when the errors come back: attempts fail, evaluation goes on, and the alert
	// arrives once the receiver is back.
	recv.down()
	eval(d, at.Add(25*time.Minute))
	waitRows(ctx, t, conn, "SELECT count() FROM alert_deliveries WHERE NOT ok AND http_status = 0", 2)
	eval(d, at.Add(25*time.Minute+30*time.Second))
	recv.up()
	msgs = recv.waitFor(3)
	if r := msgs[2]; r.Status != "firing" || r.Alerts[0].Fingerprint != a.Fingerprint || !r.Alerts[0].StartsAt.Equal(at.Add(25*time.Minute)) {
		t.Fatalf("third message: %+v, want the alert firing again since %s", r, at.Add(25*time.Minute))
	}
	// The notifier records an attempt after the receiver answered; wait for it before stopping.
	waitRows(ctx, t, conn, "SELECT count() FROM alert_deliveries WHERE ok AND http_status = 200 AND receiver = '"+
		"http://"+recv.addr+"/hook' AND has(fingerprints, '"+a.Fingerprint+"')", 3)
	stop()
	if len(recv.messages()) != 3 || recv.badSigs != 0 {
		t.Fatalf("receiver got %d messages (%d with bad signatures), want exactly 3", len(recv.messages()), recv.badSigs)
	}
	var states []string
	rows, err := conn.Query(ctx, "SELECT state FROM alerts WHERE rule = 'server_errors' ORDER BY ts")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		states = append(states, s)
	}
	want := []string{"firing", "resolved", "firing"}
	if len(states) != len(want) || states[0] != want[0] || states[1] != want[1] || states[2] != want[2] {
		t.Fatalf("alerts table states %v, want %v", states, want)
	}
}

// waitRows polls query (a count) until it reaches atLeast, failing after 2 minutes.
func waitRows(ctx context.Context, t *testing.T, conn driver.Conn, query string, atLeast uint64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // returns as soon as it holds
	var n uint64
	for time.Now().Before(deadline) {
		if err := conn.QueryRow(ctx, query).Scan(&n); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		if n >= atLeast {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s = %d, want at least %d", query, n, atLeast)
}
