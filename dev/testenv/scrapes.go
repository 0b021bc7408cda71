package testenv

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// ScrapeWatch sees an engine's /metrics being scraped, so that a test can wait for the
// collector's sample taken after a moment instead of sleeping a few scrape intervals, which a
// starved scraper on a loaded machine outlasts.
type ScrapeWatch struct {
	mu    sync.Mutex
	began time.Time // when the latest completed scrape began
}

// Wrap serves next and notes each completed request for /metrics.
func (s *ScrapeWatch) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		next.ServeHTTP(w, r)
		if r.URL.Path != "/metrics" {
			return
		}
		s.mu.Lock()
		if began.After(s.began) {
			s.began = began
		}
		s.mu.Unlock()
	})
}

// WaitAfter waits until a scrape that began after ts has completed (the engine's values are in
// the collector's hands by then), failing the test after 2 minutes.
func (s *ScrapeWatch) WaitAfter(t testing.TB, ts time.Time) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s.mu.Lock()
		began := s.began
		s.mu.Unlock()
		if began.After(ts) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scrape of the engine began after %s in 2 minutes (the last at %s)", ts.Format(time.RFC3339Nano), began.Format(time.RFC3339Nano))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
