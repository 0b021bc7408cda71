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
	n.Send(alert("a", "3", "firing", nil), alert("a", "1", "resolved", nil))
	// Capacity 3: the oldest (1 firing) was dropped.
	first := r.take()
	if len(first) != 3 || first[0].Fingerprint != "2" || first[2].Status != "resolved" {
		t.Fatalf("batch %+v", first)
	}
	n.Send(alert("a", "1", "firing", nil), alert("a", "1", "resolved", nil))
	// The same alert twice goes out in two batches, in order.
	if b := r.take(); len(b) != 1 || b[0].Status != "firing" {
		t.Fatalf("batch %+v, want the firing alone", b)
	}
	if b := r.take(); len(b) != 1 || b[0].Status != "resolved" {
		t.Fatalf("batch %+v, want the resolution", b)
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"ftp://x", "hook", "http://"} {
		if _, err := New(Options{URLs: []string{u}}); err == nil {
			t.Errorf("URL %q accepted", u)
		}
	}
}
