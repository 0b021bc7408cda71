package notify

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func alert(name, fp, status string, extra map[string]string) Alert {
	labels := map[string]string{"alertname": name, "severity": "critical"}
	for k, v := range extra {
		labels[k] = v
	}
	a := Alert{Status: status, Labels: labels, Annotations: map[string]string{"summary": "s " + fp, "description": "d"},
		StartsAt: t0, GeneratorURL: "http://detector/rules#" + name, Fingerprint: fp}
	if status == "resolved" {
		a.EndsAt = t0.Add(10 * time.Minute)
	}
	return a
}

// The message matches Alertmanager's webhook v4 JSON (golden file).
func TestMessageGolden(t *testing.T) {
	m := NewMessage("http://hook/x", "http://detector", []Alert{
		alert("server_errors", "b2", "resolved", map[string]string{"model": "m", "class": "5xx"}),
		alert("server_errors", "a1", "firing", map[string]string{"model": "m", "class": "4xx"}),
	})
	got, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "message.golden.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("message:\n%s\nwant (%s):\n%s", got, path, want)
	}
	if m.Status != "firing" || m.CommonLabels["class"] != "" || m.CommonLabels["model"] != "m" {
		t.Fatalf("status %s common labels %v", m.Status, m.CommonLabels)
	}
}

func TestSignature(t *testing.T) {
	body := []byte(`{"version":"4"}`)
	sig := Sign([]byte("k"), body)
	// HMAC-SHA256("k", body), computed independently with `openssl dgst -sha256 -hmac k`.
	if want := "sha256=9a11c076e066cc713a005c3f2ee5be6e79ba8fb633baa6d38f35db0ffc9dac2a"; sig != want {
		t.Fatalf("signature %s, want %s", sig, want)
	}
	if !Verify([]byte("k"), body, sig) {
		t.Fatalf("signature %s does not verify", sig)
	}
	if Verify([]byte("other"), body, sig) || Verify([]byte("k"), append(body, ' '), sig) || Verify([]byte("k"), body, "") {
		t.Fatal("a wrong key, body or header verifies")
	}
}

type memRecorder struct {
	mu sync.Mutex
	d  []Delivery
}

func (m *memRecorder) RecordDelivery(_ context.Context, d Delivery) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.d = append(m.d, d)
	return nil
}

func (m *memRecorder) all() []Delivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Delivery(nil), m.d...)
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRetriesUntilAcceptedAndRecordsAttempts(t *testing.T) {
	var mu sync.Mutex
	var codes = []int{500, 503, 200}
	var bodies [][]byte
	var sigs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		bodies, sigs = append(bodies, b), append(sigs, r.Header.Get(SignatureHeader))
		w.WriteHeader(codes[min(len(bodies)-1, len(codes)-1)])
	}))
	defer srv.Close()
	rec := &memRecorder{}
	n, err := New(Options{URLs: []string{srv.URL + "/h?token=secret"}, Secret: []byte("k"), Recorder: rec,
		BackoffBase: time.Millisecond, BackoffMax: 4 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	n.Send(alert("a", "1", "firing", nil), alert("b", "2", "firing", nil))
	waitUntil(t, func() bool { return len(rec.all()) == 4 })
	cancel()
	<-done
	d := rec.all()
	// Group a: 500, 503, 200; group b: 200 at once.
	wantOK := []bool{false, false, true, true}
	for i, x := range d {
		if x.OK != wantOK[i] || x.Receiver != srv.URL+"/h" || len(x.Fingerprints) != 1 {
			t.Errorf("delivery %d: %+v", i, x)
		}
	}
	if d[0].HTTPStatus != 500 || d[1].Attempt != 2 || d[2].Attempt != 3 || d[3].Attempt != 1 || d[3].GroupKey != `{}:{alertname="b"}` {
		t.Errorf("deliveries %+v", d)
	}
	for i, b := range bodies {
		if !Verify([]byte("k"), b, sigs[i]) {
			t.Errorf("POST %d: signature %q does not verify", i, sigs[i])
		}
	}
}

func TestClientErrorIsNotRetried(t *testing.T) {
	var mu sync.Mutex
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts++
		mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
	}))
	defer srv.Close()
	rec := &memRecorder{}
	n, _ := New(Options{URLs: []string{srv.URL}, Recorder: rec, BackoffBase: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	n.Send(alert("a", "1", "firing", nil))
	waitUntil(t, func() bool { return len(rec.all()) == 1 })
	time.Sleep(50 * time.Millisecond)
	cancel()
	<-done
	if len(rec.all()) != 1 || rec.all()[0].HTTPStatus != 400 || posts != 1 {
		t.Fatalf("posts %d deliveries %+v, want one refused attempt", posts, rec.all())
	}
}

func TestQueueIsBoundedAndKeepsOrder(t *testing.T) {
	n, err := New(Options{URLs: []string{"http://127.0.0.1:1/x"}, QueueCapacity: 3, MaxBatch: 10})
	if err != nil {
		t.Fatal(err)
	}
	r := n.receivers[0]
	n.Send(alert("a", "1", "firing", nil), alert("a", "2", "firing", nil))
	n.Send(alert("a", "3", "firing", nil), alert("a", "4", "firing", nil))
	// Capacity 3: the oldest (1 firing) was dropped.
	if n.Pending() != 3 {
		t.Fatalf("pending %d, want 3", n.Pending())
	}
	first := r.take()
	if len(first) != 3 || first[0].Fingerprint != "2" || first[2].Fingerprint != "4" || n.Pending() != 3 {
		t.Fatalf("batch %+v (pending %d), want 2, 3, 4 in flight", first, n.Pending())
	}
	r.done(len(first))
	// A resolution replaces its firing still queued: the receiver never gets the stale firing.
	n.Send(alert("a", "1", "firing", nil), alert("a", "2", "firing", nil))
	n.Send(alert("a", "1", "resolved", nil))
	if b := r.take(); len(b) != 2 || b[0].Fingerprint != "2" || b[1].Fingerprint != "1" || b[1].Status != "resolved" {
		t.Fatalf("batch %+v, want 2 firing then 1 resolved", b)
	}
	// A new episode (later startsAt) of the same alert replaces nothing and goes out after the
	// previous one, in its own batch.
	again := alert("a", "1", "firing", nil)
	again.StartsAt = t0.Add(20 * time.Minute)
	n.Send(alert("a", "1", "resolved", nil), again)
	if b := r.take(); len(b) != 1 || b[0].Status != "resolved" {
		t.Fatalf("batch %+v, want the resolution alone", b)
	}
	if b := r.take(); len(b) != 1 || b[0].Status != "firing" || !b[0].StartsAt.Equal(again.StartsAt) {
		t.Fatalf("batch %+v, want the new firing", b)
	}
}

// A firing that a receiver has not accepted yet is dropped from its retries once its resolution is
// queued: the receiver, back, gets the resolution alone.
func TestResolutionSupersedesFiringBeingRetried(t *testing.T) {
	var mu sync.Mutex
	accepting := false
	var got []Message
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if !accepting {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var m Message
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			t.Error(err)
		}
		got = append(got, m)
	}))
	defer srv.Close()
	rec := &memRecorder{}
	// The first attempt is recorded before a wait of at least 250 ms: the resolution is queued
	// and the receiver back while the firing waits for its retry, not while it is being posted.
	n, err := New(Options{URLs: []string{srv.URL}, Recorder: rec, BackoffBase: 500 * time.Millisecond,
		BackoffMax: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	n.Send(alert("a", "1", "firing", nil))
	waitUntil(t, func() bool { return len(rec.all()) >= 1 })
	n.Send(alert("a", "1", "resolved", nil))
	mu.Lock()
	accepting = true
	mu.Unlock()
	waitUntil(t, func() bool { return n.Pending() == 0 })
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Status != "resolved" || got[0].Alerts[0].Status != "resolved" {
		t.Fatalf("receiver got %+v, want the resolution alone", got)
	}
	last := rec.all()[len(rec.all())-1]
	if !last.OK || len(last.Statuses) != 1 || last.Statuses[0] != "resolved" || !last.StartsAt[0].Equal(t0) {
		t.Fatalf("last delivery %+v, want the resolution accepted", last)
	}
	if first := rec.all()[0]; first.OK || first.Statuses[0] != "firing" {
		t.Fatalf("first delivery %+v, want a failed attempt of the firing", first)
	}
	for _, d := range rec.all()[:len(rec.all())-1] {
		if d.OK {
			t.Fatalf("delivery %+v accepted, want only failed attempts before the resolution", d)
		}
	}
}

// SendTo queues for one receiver only; receivers are named by their redacted URL, which must be
// unique because delivered state is kept per name.
func TestSendToOneReceiver(t *testing.T) {
	n, err := New(Options{URLs: []string{"http://u:p@127.0.0.1:1/a?token=x", "http://127.0.0.1:1/b"}})
	if err != nil {
		t.Fatal(err)
	}
	if names := n.Receivers(); len(names) != 2 || names[0] != "http://127.0.0.1:1/a" || names[1] != "http://127.0.0.1:1/b" {
		t.Fatalf("receivers %v", names)
	}
	if err := n.SendTo("http://127.0.0.1:1/b", alert("a", "1", "firing", nil)); err != nil {
		t.Fatal(err)
	}
	if len(n.receivers[0].queue) != 0 || len(n.receivers[1].queue) != 1 || n.Pending() != 1 {
		t.Fatalf("queues %d and %d, want the alert for b only", len(n.receivers[0].queue), len(n.receivers[1].queue))
	}
	if err := n.SendTo("http://127.0.0.1:1/c", alert("a", "1", "firing", nil)); err == nil {
		t.Fatal("SendTo an unknown receiver succeeded")
	}
	if _, err := New(Options{URLs: []string{"http://h/a?token=1", "http://h/a?token=2"}}); err == nil {
		t.Fatal("two URLs differing only in the query accepted")
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"ftp://x", "hook", "http://"} {
		if _, err := New(Options{URLs: []string{u}}); err == nil {
			t.Errorf("URL %q accepted", u)
		}
	}
}
