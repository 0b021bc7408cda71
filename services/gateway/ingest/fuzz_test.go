package ingest

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/servescope/servescope/schema"
)

// published keeps what the handler handed to the publisher.
type published struct {
	mu     sync.Mutex
	events []schema.Event
}

func (p *published) Publish(e schema.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, e)
	return nil
}

// FuzzIngest posts arbitrary bodies to the records endpoint: it never panics, answers 202, 400
// or 413, publishes only valid app.record events, and publishes nothing unless it answered 202.
func FuzzIngest(f *testing.F) {
	f.Add([]byte(`{"request_id":"r1","app":"a","passages":[{"id":"p","score":0.9}],"retrieval_top_score":0.9}`))
	f.Add([]byte(`[{"request_id":"r1"},{"request_id":"r2","ts":"2026-11-30T10:00:00Z"}]`))
	f.Add([]byte(`{"request_id":"","ttft_s":-1}`))
	f.Add([]byte(`[{"request_id":"x'; DROP TABLE requests; --"}]`))
	f.Add([]byte("\xff\xfe{}"))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		pub := &published{}
		h := New("tok", 64<<10, pub, slog.New(slog.NewTextHandler(io.Discard, nil)))
		req := httptest.NewRequest(http.MethodPost, "/servescope/v1/records", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusAccepted:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if len(pub.events) != 0 {
				t.Fatalf("status %d but %d events published", rec.Code, len(pub.events))
			}
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
		for _, e := range pub.events {
			if e.Kind() != schema.KindAppRecord || e.Validate() != nil {
				t.Fatalf("published an invalid event: %+v (%v)", e, e.Validate())
			}
		}
	})
}
