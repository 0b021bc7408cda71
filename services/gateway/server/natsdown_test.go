package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/schema"
)

// TestNATSStoppedDuringRun stops the NATS server process in the middle of 1,000 requests and
// starts it again: every request must succeed, and afterwards each request's request.started and
// request.finished must be on the stream exactly once.
func TestNATSStoppedDuringRun(t *testing.T) {
	t.Parallel()
	const total = 1000
	ns := testenv.StartNATS(t)
	natsCfg := testenv.NATSConfig(t)
	natsCfg.URL = ns.URL()
	natsCfg.SubjectPrefix = testenv.UniqueName("t")
	topo := natsCfg.Topology()

	js := privateJetStream(t, ns.URL())
	testenv.Provision(t, js, natsCfg)

	_, engineURL := startEngine(t, 0, 0)
	srv, gw := startGateway(t, engineURL, natsCfg, nil)

	var done atomic.Int64
	var failures atomic.Int64
	var firstFailure atomic.Value
	ids := make(chan string, total)
	for i := range total {
		ids <- fmt.Sprintf("down-%04d", i)
	}
	close(ids)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rid := range ids {
				body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
				if w%2 == 0 {
					body = `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true}`
				}
				req, _ := http.NewRequest(http.MethodPost, gw+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("X-Request-Id", rid)
				resp, err := client.Do(req)
				if err == nil {
					_, err = drain(resp)
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					failures.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("%s: %v", rid, err))
				}
				done.Add(1)
			}
		}()
	}

	waitFor(t, func() bool { return done.Load() >= 300 }, "300 requests before the stop")
	ns.Stop()
	stoppedAt := time.Now()
	waitFor(t, func() bool { return done.Load() >= 700 && time.Since(stoppedAt) > 2*time.Second }, "700 requests and 2 s with NATS stopped")
	if st := srv.Publisher().Stats(); st.Spooled == 0 {
		t.Errorf("no event was spooled while NATS was stopped: %+v", st)
	}
	ns.Start()
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d user requests failed; first: %v", n, total, firstFailure.Load())
	}

	// After NATS is back, the spool drains into the stream.
	js = privateJetStream(t, ns.URL())
	waitFor(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, topo.Stream())
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs >= 2*total
	}, "2,000 events on the stream")
	// Give a late duplicate the chance to show up before counting.
	time.Sleep(500 * time.Millisecond)

	evs := events(t, js, topo)
	byEvent := map[string]int{}
	perKind := map[schema.Kind]map[string]int{schema.KindRequestStarted: {}, schema.KindRequestFinished: {}}
	for _, e := range evs {
		byEvent[e.Head().EventID]++
		perKind[e.Kind()][e.Head().RequestID]++
	}
	for id, n := range byEvent {
		if n != 1 {
			t.Errorf("event %s on the stream %d times", id, n)
		}
	}
	for k, m := range perKind {
		if len(m) != total {
			t.Errorf("%s: %d distinct requests, want %d", k, len(m), total)
		}
		for rid, n := range m {
			if n != 1 {
				t.Errorf("%s for %s: %d events, want 1", k, rid, n)
			}
		}
	}
	if len(evs) != 2*total {
		t.Errorf("%d events on the stream, want %d", len(evs), 2*total)
	}
	st := srv.Publisher().Stats()
	if st.Dropped != 0 || st.Replayed == 0 {
		t.Errorf("publisher stats %+v: want replays and no drops", st)
	}
	t.Logf("publisher: %+v", st)
}

func privateJetStream(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect to private NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func drain(resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	var n int64
	buf := make([]byte, 8192)
	for {
		m, err := resp.Body.Read(buf)
		n += int64(m)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
	}
}
