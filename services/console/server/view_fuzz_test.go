package server

import (
	"net/url"
	"testing"
	"time"
)

// FuzzParseView feeds the console's URL query parser (the filters, range and from/to of every
// page and API call) arbitrary queries: it never panics, and a view it accepts is a non-empty
// range of whole steps, at most 31 days long, with filters of at most 256 bytes.
func FuzzParseView(f *testing.F) {
	for _, q := range []string{
		"range=1h", "range=7d&model=Qwen%2FQwen2.5-7B-Instruct-AWQ", "from=2026-12-01T10:00:00Z&to=2026-12-01T11:00:00Z",
		"from=1764583200000&to=1764586800000", "from=2026-12-01T10:00", "range=2y", "from=x", "model=x%27+OR+1%3D1+--",
		"from=2026-12-01T11:00:00Z&to=2026-12-01T10:00:00Z", "from=-9223372036854775808&to=9223372036854775807",
	} {
		f.Add(q)
	}
	s := &Server{now: func() time.Time { return time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) }}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		v, err := s.parseView(q)
		if err != nil {
			return
		}
		if !v.To.After(v.From) || v.Step < time.Second || v.To.Sub(v.From) > 31*24*time.Hour+v.Step {
			t.Fatalf("%q: accepted range %s → %s, step %s", raw, v.From, v.To, v.Step)
		}
		if !v.From.Equal(v.From.Truncate(v.Step)) {
			t.Fatalf("%q: range starts at %s, not on a step of %s", raw, v.From, v.Step)
		}
		for name, val := range v.Filters {
			if len(val) > 256 {
				t.Fatalf("%q: filter %s of %d bytes accepted", raw, name, len(val))
			}
		}
	})
}
