package main

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/detector/notify"
)

// The tests of this file run two detector processes (the binary, through dev/proc) on one
// database and SIGKILL the first while an alert fires. Their rule is the built-in server_errors
// with a 10 s window instead of 5 minutes, fed with 5xx answers by the test while the incident
// lasts. Every wait is a poll with a deadline of minutes: the machine is shared and loaded, and
// only outcomes are asserted, never how fast they came.

// pairLeaseTTL is the lease bucket's TTL in these tests: a takeover comes within about 4 s of a
// holder's death.
const pairLeaseTTL = 3 * time.Second

// pairWait bounds each wait for a state the detectors reach on their own.
const pairWait = 3 * time.Minute

// pairRules writes server_errors with a 10 s window into a rules directory.
func pairRules(t *testing.T) string {
	t.Helper()
	src, err := fs.ReadFile(builtin.Rules, path.Join(builtin.RulesDir, "server_errors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	scaled := strings.Replace(string(src), "\nwindow: 5m\n", "\nwindow: 10s\n", 1)
	if scaled == string(src) {
		t.Fatal("server_errors.yaml has no 'window: 5m' line to shorten")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "server_errors.yaml"), []byte(scaled), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// detectorProcess is one detector binary running as a child process.
type detectorProcess struct {
	*proc.Process
	name, metrics, log string
}

// startDetector starts the detector binary named name with env on top of the test's settings.
func startDetector(t *testing.T, name string, env map[string]string) *detectorProcess {
	t.Helper()
	bin := testenv.Binary(t, "github.com/servescope/servescope/services/detector")
	d := &detectorProcess{name: name, log: filepath.Join(t.TempDir(), name+".log")}
	t.Cleanup(func() {
		if d.Process != nil {
			_ = d.Kill(context.Background())
		}
		if t.Failed() {
			b, _ := os.ReadFile(d.log)
			t.Logf("detector %s log:\n%s", name, b)
		}
	})
	// On a fresh port again when another process took the one picked before the detector bound it.
	p, ports, err := proc.StartOnFreePorts(t.Context(), 1, func(ports []int) (proc.Spec, error) {
		metrics := "127.0.0.1:" + strconv.Itoa(ports[0])
		environ := []string{"DETECTOR_METRICS_ADDR=" + metrics, "DETECTOR_INSTANCE=" + name}
		for k, v := range env {
			environ = append(environ, k+"="+v)
		}
		return proc.Spec{Name: "detector " + name, Path: bin, Env: environ, Log: d.log, DieWithCaller: true,
			StopGrace: time.Minute, ReadyTimeout: pairWait,
			Ready: proc.HTTPReady("http://" + metrics + "/readyz")}, nil
	})
	if err != nil {
		t.Fatalf("start detector %s: %v", name, err)
	}
	d.Process, d.metrics = p, "127.0.0.1:"+strconv.Itoa(ports[0])
	return d
}

// metric is the value of series on d's /metrics, -1 when there is none.
func (d *detectorProcess) metric(series string) float64 {
	return testenv.MetricValue("http://"+d.metrics+"/metrics", series)
}

// evaluations is how many times d evaluated server_errors.
func (d *detectorProcess) evaluations() float64 {
	return d.metric(`servescope_detector_rule_evaluation_duration_seconds_count{rule="server_errors"}`)
}

func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(pairWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after %s", what, pairWait)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// incident feeds 5xx answers of model pairModel into the requests table, two a second with the
// wall clock's timestamps, until stop is called.
type incident struct {
	stop func()
	done chan struct{}
}

const pairModel = "pair-model"

func startIncident(t *testing.T, conn driver.Conn) *incident {
	ctx, cancel := context.WithCancel(t.Context())
	in := &incident{stop: cancel, done: make(chan struct{})}
	shape := synth.NormalShape()
	shape.Model, shape.Status5xxProb, shape.Status4xxProb, shape.TopScore = pairModel, 1, 0, 0
	g := synth.New(7)
	go func() {
		defer close(in.done)
		for ctx.Err() == nil {
			now := time.Now().UTC()
			if err := synth.Insert(ctx, conn, g.RequestsN(now.Add(-time.Second), now, 2, shape)); err != nil && ctx.Err() == nil {
				t.Errorf("insert the incident's requests: %v", err)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-in.done })
	return in
}

func (in *incident) end() { in.stop(); <-in.done }

// webhookReceiver keeps every webhook message it is sent, and when it came.
type webhookReceiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	msgs []notify.Message
	at   []time.Time
}

func startReceiver(t *testing.T) *webhookReceiver {
	r := &webhookReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var m notify.Message
		if err := json.NewDecoder(req.Body).Decode(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.msgs = append(r.msgs, m)
		r.at = append(r.at, time.Now())
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// changes returns the server_errors state changes received for pairModel, in order, as
// "firing@<startsAt>" and "resolved@<startsAt>".
func (r *webhookReceiver) changes() []string {
	out, _ := r.changesAt()
	return out
}

// changesAt is changes with the time each arrived.
func (r *webhookReceiver) changesAt() ([]string, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	var at []time.Time
	for i, m := range r.msgs {
		for _, a := range m.Alerts {
			if a.Labels["alertname"] == "server_errors" && a.Labels["model"] == pairModel {
				out = append(out, a.Status+"@"+a.StartsAt.UTC().Format(time.RFC3339Nano))
				at = append(at, r.at[i])
			}
		}
	}
	return out, at
}

func count(list []string, prefix string) int {
	n := 0
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// pairEnv is the environment both detectors share: the test's database and lease bucket, the
// shortened rule, an evaluation every 2 s on the data as written (no delay).
func pairEnv(t *testing.T, ch config.ClickHouse, nc config.NATS) map[string]string {
	return map[string]string{
		"SERVESCOPE_CLICKHOUSE_ADDR":     strings.Join(ch.Addr, ","),
		"SERVESCOPE_CLICKHOUSE_DATABASE": ch.Database,
		"SERVESCOPE_NATS_URL":            nc.URL,
		"SERVESCOPE_SUBJECT_PREFIX":      nc.SubjectPrefix,
		"DETECTOR_RULES_DIR":             pairRules(t),
		"DETECTOR_INTERVAL":              "2s",
		"DETECTOR_EVAL_DELAY":            "0s",
	}
}

// Two detectors sharing the lease, one webhook receiver: only the holder sends; SIGKILLed while
// the alert fires, it is replaced by the standby, which neither sends the firing again (the
// receiver accepted it: alert_deliveries says so) nor forgets it (the alerts table does), and
// sends the resolution when the incident ends. The receiver sees one firing — two at most, the
// documented duplicate of a holder killed between the receiver's answer and its record — and one
// resolution.
func TestTwoDetectorsOneWebhookReceiverHolderKilled(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	js, _, nc := testenv.NATSPrefix(t)
	nc.LeaseTTL = pairLeaseTTL
	testenv.Provision(t, js, nc)
	recv := startReceiver(t)
	env := pairEnv(t, ch, nc)
	env["DETECTOR_LEASE"] = "true"
	env["DETECTOR_WEBHOOK_URLS"] = recv.srv.URL + "/alerts"

	a := startDetector(t, "a", env)
	waitCond(t, "a holds the lease", func() bool { return a.metric("servescope_detector_lease_held") == 1 })
	b := startDetector(t, "b", env)
	if got := b.metric("servescope_detector_lease_held"); got != 0 {
		t.Fatalf("b: lease_held %v while a holds it, want 0", got)
	}

	in := startIncident(t, conn)
	waitCond(t, "firing at the receiver", func() bool { return count(recv.changes(), "firing@") > 0 })
	if got := b.evaluations(); got > 0 {
		t.Errorf("the standby evaluated server_errors %v times", got)
	}
	killed := time.Now()
	if err := a.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "b holds the lease", func() bool { return b.metric("servescope_detector_lease_held") == 1 })
	t.Logf("b took over %s after a's SIGKILL (lease TTL %s)", time.Since(killed).Round(100*time.Millisecond), pairLeaseTTL)
	// b evaluates the firing alert a few times before the incident ends.
	waitCond(t, "b evaluating", func() bool { return b.evaluations() >= 3 })
	in.end()
	waitCond(t, "resolved at the receiver", func() bool { return count(recv.changes(), "resolved@") > 0 })
	// Room for a second copy of anything to arrive: three more evaluations.
	n := b.evaluations()
	waitCond(t, "b evaluating after the resolution", func() bool { return b.evaluations() >= n+3 })

	changes, at := recv.changesAt()
	t.Logf("state changes at the receiver: %v", changes)
	firings, resolutions := count(changes, "firing@"), count(changes, "resolved@")
	if firings < 1 || firings > 2 || resolutions != 1 {
		t.Fatalf("receiver got %d firings and %d resolutions (%v), want 1 (2 at most) and 1", firings, resolutions, changes)
	}
	// A second firing is the documented duplicate only when b sent it, after a's death.
	if firings == 2 && at[1].Before(killed) {
		t.Fatalf("two firings before a was killed (%v): both detectors sent", changes)
	}
	// Every change is of one episode: the same startsAt, firing before resolved.
	start := strings.SplitN(changes[0], "@", 2)[1]
	for _, c := range changes {
		if !strings.HasSuffix(c, "@"+start) {
			t.Errorf("change %s is of another episode than %s (a flap)", c, changes[0])
		}
	}
	if !strings.HasPrefix(changes[len(changes)-1], "resolved@") {
		t.Errorf("the last change is %s, want the resolution", changes[len(changes)-1])
	}
	if err := b.Stop(context.Background()); err != nil || b.ExitCode() != 0 {
		t.Errorf("b after SIGTERM: %v, exit status %d", err, b.ExitCode())
	}
}

// amConfigFor routes every alert to webhook, one group per alert name and model, each change of a
// group sent after a second.
func amConfigFor(webhook string) string {
	return `route:
  receiver: oncall
  group_by: [alertname, model]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: oncall
    webhook_configs:
      - url: ` + webhook + `
        send_resolved: true
`
}

// Two detectors without a lease, both sending to one Alertmanager: Alertmanager takes their
// identical alerts as one (same labels, same startsAt). The first is SIGKILLed while the alert
// fires; the second keeps sending it, and its resolution. Alertmanager's webhook receiver gets one
// firing group message and one resolved.
func TestTwoDetectorsOneAlertmanagerOneKilled(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	_, _, nc := testenv.NATSPrefix(t)
	recv := startReceiver(t)
	am := testenv.StartAlertmanager(t, amConfigFor(recv.srv.URL+"/oncall"))
	env := pairEnv(t, ch, nc)
	env["DETECTOR_ALERTMANAGER_URLS"] = am.URL()

	a := startDetector(t, "a", env)
	b := startDetector(t, "b", env)
	in := startIncident(t, conn)
	waitCond(t, "firing at Alertmanager's receiver", func() bool { return count(recv.changes(), "firing@") > 0 })
	// Both have sent it before one dies.
	waitCond(t, "both detectors sending", func() bool {
		return a.metric(`servescope_detector_alertmanager_alerts_sent_total{alertmanager="`+am.URL()+`"}`) > 0 &&
			b.metric(`servescope_detector_alertmanager_alerts_sent_total{alertmanager="`+am.URL()+`"}`) > 0
	})
	if err := a.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := b.evaluations()
	waitCond(t, "b evaluating", func() bool { return b.evaluations() >= n+3 })
	in.end()
	waitCond(t, "resolved at Alertmanager's receiver", func() bool { return count(recv.changes(), "resolved@") > 0 })
	n = b.evaluations()
	waitCond(t, "b evaluating after the resolution", func() bool { return b.evaluations() >= n+3 })

	changes := recv.changes()
	t.Logf("alert states in Alertmanager's group messages: %v", changes)
	if firings, resolutions := count(changes, "firing@"), count(changes, "resolved@"); firings != 1 || resolutions != 1 {
		t.Fatalf("Alertmanager's receiver got %d firing and %d resolved messages (%v), want 1 and 1", firings, resolutions, changes)
	}
	if !strings.HasPrefix(changes[0], "firing@") || !strings.HasPrefix(changes[1], "resolved@") {
		t.Errorf("changes %v: want firing, then resolved", changes)
	}
	// alert_deliveries holds each detector's state changes once, not each evaluation's resend:
	// the firing from each detector (a and b), the resolution from b alone. (The 5xx burn the
	// built-in SLO's availability budget too: its alerts are other fingerprints.)
	rows, err := conn.Query(t.Context(), `
		SELECT status, count() FROM alert_deliveries ARRAY JOIN fingerprints AS fp, statuses AS status
		WHERE receiver = {am:String} AND ok
		  AND fp IN (SELECT fingerprint FROM alerts WHERE rule = 'server_errors')
		GROUP BY status ORDER BY status`,
		clickhouse.Named("am", am.URL()))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	recorded := map[string]uint64{}
	for rows.Next() {
		var status string
		var n uint64
		if err := rows.Scan(&status, &n); err != nil {
			t.Fatal(err)
		}
		recorded[status] = n
	}
	if recorded["firing"] < 1 || recorded["firing"] > 2 || recorded["resolved"] != 1 {
		t.Errorf("alert_deliveries for Alertmanager: %v, want the firing once per detector and the resolution once", recorded)
	}
}
