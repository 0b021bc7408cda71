package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// amStub answers POSTs with status and keeps the bodies that reached it.
type amStub struct {
	srv    *httptest.Server
	status int

	mu     sync.Mutex
	paths  []string
	bodies [][]PostableAlert
}

func newAMStub(t *testing.T, status int) *amStub {
	s := &amStub{status: status}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var alerts []PostableAlert
		if err := json.Unmarshal(raw, &alerts); err != nil {
			t.Errorf("body %s is not a JSON array of alerts: %v", raw, err)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		s.mu.Lock()
		s.paths = append(s.paths, r.Method+" "+r.URL.Path)
		s.bodies = append(s.bodies, alerts)
		s.mu.Unlock()
		w.WriteHeader(s.status)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func amAlert(fp, model string, ends time.Time) PostableAlert {
	return PostableAlert{Labels: map[string]string{"alertname": "server_errors", "model": model},
		Annotations: map[string]string{"summary": "s"}, StartsAt: t0, EndsAt: ends, Fingerprint: fp}
}

// Every Alertmanager gets the batch at /api/v2/alerts below its base URL (path prefix kept); the
// batch succeeds when one of them took it, and fails, naming each, when none did.
func TestAlertmanagersPostToEvery(t *testing.T) {
	ok, broken := newAMStub(t, http.StatusOK), newAMStub(t, http.StatusBadRequest)
	m, err := NewAlertmanagers(AlertmanagerOptions{URLs: []string{ok.srv.URL, broken.srv.URL + "/am/"}})
	if err != nil {
		t.Fatal(err)
	}
	alerts := []PostableAlert{amAlert("a", "m1", t0.Add(2*time.Minute)), amAlert("b", "m2", t0.Add(time.Minute))}
	if err := m.SendNow(context.Background(), alerts); err != nil {
		t.Fatalf("one Alertmanager took the alerts, SendNow = %v", err)
	}
	if ok.paths[0] != "POST /api/v2/alerts" || broken.paths[0] != "POST /am/api/v2/alerts" {
		t.Fatalf("paths %v and %v", ok.paths, broken.paths)
	}
	got := ok.bodies[0]
	if len(got) != 2 || got[0].Labels["model"] != "m1" || !got[0].EndsAt.Equal(t0.Add(2*time.Minute)) ||
		!got[1].StartsAt.Equal(t0) || got[1].Annotations["summary"] != "s" {
		t.Fatalf("body %+v", got)
	}

	none, err := NewAlertmanagers(AlertmanagerOptions{URLs: []string{broken.srv.URL + "/am"}})
	if err != nil {
		t.Fatal(err)
	}
	err = none.SendNow(context.Background(), alerts)
	if err == nil || !strings.Contains(err.Error(), "HTTP 400") || !strings.Contains(err.Error(), "/am/api/v2/alerts") {
		t.Fatalf("SendNow with no Alertmanager taking the alerts = %v", err)
	}
}

// The wire form is Alertmanager's PostableAlert: no fingerprint (Alertmanager computes its own),
// RFC 3339 times.
func TestPostableAlertJSON(t *testing.T) {
	b, err := json.Marshal(amAlert("a", "m1", t0.Add(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"labels":{"alertname":"server_errors","model":"m1"},"annotations":{"summary":"s"},` +
		`"startsAt":"2026-11-30T09:00:00Z","endsAt":"2026-11-30T09:01:00Z"}`
	if string(b) != want {
		t.Fatalf("JSON %s\nwant %s", b, want)
	}
}

// A later state of a queued alert replaces it (a resolution never goes out before a stale
// firing), and a full queue drops its oldest alerts.
func TestAlertmanagersQueue(t *testing.T) {
	stub := newAMStub(t, http.StatusOK)
	m, err := NewAlertmanagers(AlertmanagerOptions{URLs: []string{stub.srv.URL}, QueueCapacity: 2, MaxBatch: 10})
	if err != nil {
		t.Fatal(err)
	}
	m.Send(amAlert("a", "m1", t0.Add(4*time.Minute)), amAlert("b", "m2", t0.Add(4*time.Minute)))
	m.Send(amAlert("a", "m1", t0.Add(time.Minute))) // a resolved
	m.Send(amAlert("c", "m3", t0.Add(4*time.Minute)))
	if m.Pending() != 2 {
		t.Fatalf("pending %d, want 2", m.Pending())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for m.Pending() > 0 || func() bool { stub.mu.Lock(); defer stub.mu.Unlock(); return len(stub.bodies) == 0 }() {
		if time.Now().After(deadline) {
			t.Fatal("queue not sent")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	stub.mu.Lock()
	defer stub.mu.Unlock()
	body := stub.bodies[0]
	if len(body) != 2 || body[0].Labels["model"] != "m1" || !body[0].EndsAt.Equal(t0.Add(time.Minute)) ||
		body[1].Labels["model"] != "m3" {
		t.Fatalf("sent %+v: want a's resolution then c (b dropped from the full queue)", body)
	}
}

func TestNewAlertmanagersRejectsBadURLs(t *testing.T) {
	for _, urls := range [][]string{{"alertmanager:9093"}, {"ftp://x"}, {"http://a:9093", "http://user:pw@a:9093"}} {
		if _, err := NewAlertmanagers(AlertmanagerOptions{URLs: urls}); err == nil {
			t.Errorf("NewAlertmanagers(%q) accepted", urls)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("error %q shows the password", err)
		}
	}
}

// flakyRecorder is a memRecorder that fails while fail is set.
type flakyRecorder struct {
	memRecorder
	fail bool
}

func (r *flakyRecorder) RecordDelivery(ctx context.Context, d Delivery) error {
	if r.fail {
		return io.ErrUnexpectedEOF
	}
	return r.memRecorder.RecordDelivery(ctx, d)
}

// Deliveries to Alertmanager are recorded per state change, when an Alertmanager first takes it:
// resends of the same firing add no row, the resolution adds one, a refused POST none, and a
// state change whose record failed is recorded at the next send.
func TestAlertmanagersRecordStateChangesOnly(t *testing.T) {
	ok, broken := newAMStub(t, http.StatusOK), newAMStub(t, http.StatusInternalServerError)
	rec := &flakyRecorder{}
	m, err := NewAlertmanagers(AlertmanagerOptions{URLs: []string{ok.srv.URL, broken.srv.URL}, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	firing := amAlert("a", "m1", t0.Add(2*time.Minute))
	firing.Status = "firing"
	send := func(alerts ...PostableAlert) {
		t.Helper()
		if err := m.SendNow(context.Background(), alerts); err != nil {
			t.Fatal(err)
		}
	}
	send(firing)
	send(firing)
	rec.fail = true
	other := amAlert("b", "m2", t0.Add(2*time.Minute))
	other.Status = "firing"
	send(firing, other)
	rec.fail = false
	send(firing, other)
	resolved := firing
	resolved.Status, resolved.EndsAt = "resolved", t0.Add(time.Minute)
	send(resolved, other)
	send(resolved, other)

	var got []string
	for _, d := range rec.all() {
		if d.Receiver != ok.srv.URL || !d.OK || d.HTTPStatus != http.StatusOK {
			t.Errorf("row %+v: want %s's 200", d, ok.srv.URL)
		}
		for i := range d.Fingerprints {
			if !d.StartsAt[i].Equal(t0) {
				t.Errorf("row %+v: startsAt %s, want %s", d, d.StartsAt[i], t0)
			}
			got = append(got, d.Status+":"+d.Fingerprints[i]+"="+d.Statuses[i])
		}
	}
	if want := "firing:a=firing firing:b=firing resolved:a=resolved"; strings.Join(got, " ") != want {
		t.Fatalf("recorded %q, want %q", strings.Join(got, " "), want)
	}
}
