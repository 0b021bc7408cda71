package scrape

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servescope/servescope/schema"
)

type collected struct {
	mu     sync.Mutex
	events []*schema.EngineSample
}

func (c *collected) Publish(e schema.Event) error {
	if err := e.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e.(*schema.EngineSample))
	return nil
}

func (c *collected) all() []*schema.EngineSample {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*schema.EngineSample(nil), c.events...)
}

// serveFile serves a golden exposition the way vLLM's prometheus_client does: OpenMetrics when
// the request's Accept header names application/openmetrics-text (q-values are ignored), the
// Prometheus text format otherwise. name is the file's base name under promparse's testdata.
func serveFile(t *testing.T, name string) *httptest.Server {
	return serveFileAs(t, name, false)
}

// serveFileAs is serveFile, or with forceOM a server that answers OpenMetrics whatever is asked.
func serveFileAs(t *testing.T, name string, forceOM bool) *httptest.Server {
	t.Helper()
	text, err := os.ReadFile("../promparse/testdata/" + name + ".prom")
	if err != nil {
		t.Fatal(err)
	}
	om, omErr := os.ReadFile("../promparse/testdata/" + name + ".om")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if omErr == nil && (forceOM || strings.Contains(r.Header.Get("Accept"), "application/openmetrics-text")) {
			w.Header().Set("Content-Type", "application/openmetrics-text; version=1.0.0; charset=utf-8")
			_, _ = w.Write(om)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(text)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestScrapeOK(t *testing.T) {
	srv := serveFile(t, "vllm_main")
	s, err := New(nil, &collected{}, Config{Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	evs := s.Scrape(context.Background(), Target{URL: srv.URL + "/metrics", Engine: "vllm-a"})
	if len(evs) != 1 {
		t.Fatalf("%d samples, want 1", len(evs))
	}
	e := evs[0]
	if err := e.Validate(); err != nil {
		t.Fatalf("invalid sample: %v", err)
	}
	if !e.Up || e.Engine != "vllm-a" || e.Model != "Qwen/Qwen2.5-7B-Instruct-AWQ" {
		t.Errorf("up %v engine %q model %q", e.Up, e.Engine, e.Model)
	}
	if *e.NumRequestsRunning != 256 || *e.NumRequestsWaiting != 44 || *e.KVCacheUsagePerc != 0.28 {
		t.Errorf("running %v waiting %v kv %v", *e.NumRequestsRunning, *e.NumRequestsWaiting, *e.KVCacheUsagePerc)
	}
	if h := e.Histograms["request_queue_time_seconds"]; h.Count != 40 || h.Sum <= 20 || h.Sum >= 80 {
		t.Errorf("queue histogram %+v", h)
	}
	if h := e.Histograms["inter_token_latency_seconds"]; h.Count != 400 {
		t.Errorf("inter-token histogram %+v", h)
	}
	if e.ScrapeDurationSeconds == nil || *e.ScrapeDurationSeconds <= 0 {
		t.Errorf("scrape duration %v", e.ScrapeDurationSeconds)
	}
}

func TestScrapeDataParallel(t *testing.T) {
	srv := serveFile(t, "vllm_main_dp2")
	s, _ := New(nil, &collected{}, Config{})
	evs := s.Scrape(context.Background(), Target{URL: srv.URL})
	if len(evs) != 2 || evs[0].Engine != srv.URL+"#0" || evs[1].Engine != srv.URL+"#1" {
		t.Fatalf("engines: %v", evs)
	}
	if *evs[1].NumRequestsRunning != 9 {
		t.Errorf("engine 1 running %v", *evs[1].NumRequestsRunning)
	}
	// Each sample says which engine it is about and how many the server runs (--data-parallel-size 2).
	for i, e := range evs {
		if e.EngineIndex != strconv.Itoa(i) || e.Engines == nil || *e.Engines != 2 {
			t.Errorf("sample %d: engine_index %q engines %v, want %d of 2", i, e.EngineIndex, e.Engines, i)
		}
	}
	// One engine without data parallelism: engine "0" of 1.
	one := s.Scrape(context.Background(), Target{URL: serveFile(t, "vllm_main").URL})
	if len(one) != 1 || one[0].EngineIndex != "0" || one[0].Engines == nil || *one[0].Engines != 1 {
		t.Errorf("single engine: %+v", one)
	}
}

// TestScrapeEveryRelease scrapes each release's exposition as vLLM serves it (the scraper's
// Accept header gets the text format from prometheus_client) and from a server that answers
// OpenMetrics whatever is asked, and checks both give the same headline values.
func TestScrapeEveryRelease(t *testing.T) {
	for _, name := range []string{"vllm_v0_8_v0engine", "vllm_v0_8", "vllm_v0_10", "vllm_main"} {
		t.Run(name, func(t *testing.T) {
			var got []*schema.EngineSample
			for _, forceOM := range []bool{false, true} {
				srv := serveFileAs(t, name, forceOM)
				s, _ := New(nil, &collected{}, Config{})
				evs := s.Scrape(context.Background(), Target{URL: srv.URL, Engine: "e"})
				if len(evs) != 1 || !evs[0].Up {
					t.Fatalf("forceOM %v: samples %+v", forceOM, evs)
				}
				got = append(got, evs[0])
			}
			for _, e := range got {
				if e.NumRequestsRunning == nil || e.NumRequestsWaiting == nil || e.KVCacheUsagePerc == nil ||
					*e.KVCacheUsagePerc > 1 || e.Histograms["inter_token_latency_seconds"].Count == 0 {
					t.Errorf("sample %+v", e)
				}
				if _, ok := e.Gauges["kv_cache_usage_perc"]; ok {
					t.Error("the KV gauge was left among the other gauges")
				}
			}
			if *got[0].NumRequestsRunning != *got[1].NumRequestsRunning || *got[0].KVCacheUsagePerc != *got[1].KVCacheUsagePerc ||
				len(got[0].Counters) != len(got[1].Counters) || len(got[0].Histograms) != len(got[1].Histograms) {
				t.Errorf("text and OpenMetrics scrapes differ:\n%+v\n%+v", got[0], got[1])
			}
		})
	}
}

// TestAcceptHeaderGetsText: the scraper's Accept header must not name OpenMetrics, or vLLM's
// prometheus_client answers it.
func TestAcceptHeaderGetsText(t *testing.T) {
	var accept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accept = r.Header.Get("Accept")
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"))
	}))
	defer srv.Close()
	s, _ := New(nil, &collected{}, Config{})
	if evs := s.Scrape(context.Background(), Target{URL: srv.URL}); len(evs) != 1 || !evs[0].Up {
		t.Fatalf("samples %+v", evs)
	}
	if strings.Contains(accept, "openmetrics") {
		t.Errorf("Accept %q names OpenMetrics", accept)
	}
}

func TestScrapeFailures(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	tests := []struct {
		name    string
		handler http.HandlerFunc
		url     string
		want    string
	}{
		{name: "HTTP 503", handler: func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "engine is starting", http.StatusServiceUnavailable)
		}, want: "HTTP 503: engine is starting"},
		{name: "unparsable body", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = w.Write([]byte("vllm:num_requests_running{engine=\"0\" 3\n"))
		}, want: "decode metrics"},
		{name: "timeout", handler: func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
		}, want: "deadline exceeded"},
		{name: "connection refused", url: closedURL, want: "connection refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url
			if tc.handler != nil {
				srv := httptest.NewServer(tc.handler)
				defer srv.Close()
				url = srv.URL
			}
			s, _ := New(nil, &collected{}, Config{Interval: 200 * time.Millisecond})
			evs := s.Scrape(context.Background(), Target{URL: url})
			if len(evs) != 1 {
				t.Fatalf("%d samples, want 1", len(evs))
			}
			e := evs[0]
			if e.Up || !strings.Contains(e.ScrapeError, tc.want) || e.NumRequestsRunning != nil {
				t.Errorf("up %v error %q running %v; want down with %q", e.Up, e.ScrapeError, e.NumRequestsRunning, tc.want)
			}
			if err := e.Validate(); err != nil {
				t.Errorf("invalid sample: %v", err)
			}
		})
	}
}

// TestRunLoop runs two targets at a 50 ms interval, one up and one down, and checks that both keep
// being sampled. It waits for the samples rather than for a fixed time, so a loaded machine only
// makes it slower.
func TestRunLoop(t *testing.T) {
	up := serveFile(t, "vllm_v0_8_v0engine")
	c := &collected{}
	s, err := New([]Target{{URL: up.URL, Engine: "up"}, {URL: "http://127.0.0.1:1/metrics", Engine: "down"}}, c, Config{Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	count := map[string]int{}
	deadline := time.Now().Add(60 * time.Second)
	for count["up"] < 5 || count["down"] < 5 {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
		count = map[string]int{}
		for _, e := range c.all() {
			count[e.Engine]++
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, e := range c.all() {
		if e.Up != (e.Engine == "up") {
			t.Errorf("sample of %s has up=%v", e.Engine, e.Up)
		}
	}
	if count["up"] < 5 || count["down"] < 5 {
		t.Errorf("samples per target %v, want at least 5 each", count)
	}
}

func TestParseTargets(t *testing.T) {
	got, err := ParseTargets([]string{" http://a:8000/metrics ", "b=http://b:8000/metrics", ""})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (Target{URL: "http://a:8000/metrics"}) || got[1] != (Target{Engine: "b", URL: "http://b:8000/metrics"}) {
		t.Errorf("got %+v", got)
	}
	if _, err := ParseTargets([]string{"a:8000/metrics"}); err == nil {
		t.Error("a URL without scheme was accepted")
	}
	if _, err := New([]Target{{URL: "http://x"}, {URL: "http://x"}}, &collected{}, Config{}); err == nil {
		t.Error("duplicate target accepted")
	}
}
