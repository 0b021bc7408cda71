package server_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/schema"
)

// stalledEngine answers a streamed chat completion with its headers and one chunk, then holds the
// stream open until release is closed: an engine whose answer hangs mid-stream.
func stalledEngine(t *testing.T, release <-chan struct{}) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`+"\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}`+"\n\n")
		fmt.Fprint(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`+"\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// TestHeartbeatListsOpenRequests: the gateway's heartbeats list a stream that hangs, with its
// model, upstream and phase, for as long as it hangs, and stop listing it once it ends; a request
// younger than GATEWAY_HEARTBEAT_LIST_AFTER is counted in in_flight only.
func TestHeartbeatListsOpenRequests(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	release := make(chan struct{})
	engineURL := stalledEngine(t, release)
	_, gw := startGateway(t, engineURL, natsCfg, map[string]string{
		"GATEWAY_HEARTBEAT_INTERVAL": "200ms", "GATEWAY_HEARTBEAT_LIST_AFTER": "1s", "GATEWAY_NAME": "gw-hb",
	})
	rid := newID("hung")
	req, _ := http.NewRequest(http.MethodPost, gw+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	req.Header.Set("X-Request-Id", rid)
	req.Header.Set("X-Servescope-App", "docs-qa")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.Contains(sc.Text(), "Hel") {
		t.Fatalf("first chunk: %q %v", sc.Text(), sc.Err())
	}
	arrival := time.Now()

	// heartbeats returns the gateway's heartbeats on the stream, in order.
	heartbeats := func() []*schema.GatewayHeartbeat {
		var out []*schema.GatewayHeartbeat
		for _, e := range streamEvents(t, js, topo) {
			if hb, ok := e.(*schema.GatewayHeartbeat); ok {
				out = append(out, hb)
			}
		}
		return out
	}
	listing := func(hb *schema.GatewayHeartbeat) *schema.OpenRequest {
		for i := range hb.Open {
			if hb.Open[i].RequestID == rid {
				return &hb.Open[i]
			}
		}
		return nil
	}
	// Young, the request is counted and not listed; from 1 s on it is listed.
	var counted, listed *schema.GatewayHeartbeat
	waitFor(t, func() bool {
		for _, hb := range heartbeats() {
			if hb.InFlight == 1 && listing(hb) == nil && hb.TS.Before(arrival.Add(500*time.Millisecond)) {
				counted = hb
			}
			if listing(hb) != nil {
				listed = hb
			}
		}
		return counted != nil && listed != nil
	}, "a heartbeat counting the young request and one listing it")
	o := listing(listed)
	if listed.Gateway != "gw-hb" || listed.IntervalSeconds != 0.2 || listed.ListedAfterSeconds != 1 || listed.InFlight != 1 {
		t.Errorf("heartbeat %+v, want gateway gw-hb, interval 0.2 s, listed after 1 s, 1 in flight", listed)
	}
	if o.Model != "m" || o.Endpoint != "/v1/chat/completions" || !o.Stream || o.Upstream != engineURL || o.App != "docs-qa" ||
		o.Phase != "responding" || listed.TS.Sub(o.ArrivalTS) < time.Second {
		t.Errorf("listed request %+v in the heartbeat of %s", o, listed.TS)
	}
	n := len(heartbeats())
	// It stays listed while it hangs.
	waitFor(t, func() bool { return len(heartbeats()) >= n+3 }, "three more heartbeats")
	for _, hb := range heartbeats()[n:] {
		if listing(hb) == nil {
			t.Fatalf("heartbeat of %s no longer lists the hanging request: %+v", hb.TS, hb)
		}
	}
	close(release)
	for sc.Scan() {
	}
	ended := time.Now()
	_, fin := recordsOf(t, js, topo, rid)
	if fin.StatusCode != 200 {
		t.Errorf("request.finished %+v", fin)
	}
	waitFor(t, func() bool {
		hbs := heartbeats()
		last := hbs[len(hbs)-1]
		return last.TS.After(ended) && last.InFlight == 0 && len(last.Open) == 0
	}, "a heartbeat with nothing open after the stream ended")
	hbs := heartbeats()
	if !slices.IsSortedFunc(hbs, func(a, b *schema.GatewayHeartbeat) int { return a.TS.Compare(b.TS) }) {
		t.Errorf("heartbeats out of order")
	}
}
