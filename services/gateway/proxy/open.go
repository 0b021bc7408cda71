package proxy

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/servescope/servescope/schema"
)

// openSet is the gateway's own view of its recorded requests in flight: a request is in it from
// its request.started to its request.finished. The heartbeat (Handler.Open) reads it, so that a
// request that hangs is known to be open however long ago it started, and known to be gone the
// moment it ends, without a reader having to pair requests_started with requests over a lookback.
type openSet struct {
	mu sync.Mutex
	m  map[*openEntry]struct{}
}

// openEntry is one open request: what its heartbeat line says, fixed at request.started, and how
// far the exchange has come, which the request's goroutine advances.
type openEntry struct {
	req   schema.OpenRequest
	phase atomic.Uint32
}

func (s *openSet) add(e *openEntry) {
	s.mu.Lock()
	if s.m == nil {
		s.m = map[*openEntry]struct{}{}
	}
	s.m[e] = struct{}{}
	s.mu.Unlock()
}

func (s *openSet) remove(e *openEntry) {
	s.mu.Lock()
	delete(s.m, e)
	s.mu.Unlock()
}

// phaseName is the heartbeat's name of a phase (schema.OpenRequest.Phase). An answered exchange
// whose request.finished is about to go out is still responding.
func phaseName(p phase) string {
	switch p {
	case phaseRequest:
		return "request"
	case phaseUpstream:
		return "upstream"
	default:
		return "responding"
	}
}

// Open returns the recorded requests open at now: how many there are, and those that arrived at
// least listedAfter before now, oldest first, at most max of them, with how many such requests
// it left out. It takes a lock held for a map insert by each request, and copies what it lists.
func (h *Handler) Open(now time.Time, listedAfter time.Duration, max int) (inFlight int, listed []schema.OpenRequest, omitted int) {
	cutoff := now.Add(-listedAfter)
	h.open.mu.Lock()
	inFlight = len(h.open.m)
	for e := range h.open.m {
		if e.req.ArrivalTS.After(cutoff) {
			continue
		}
		r := e.req
		r.Phase = phaseName(phase(e.phase.Load()))
		listed = append(listed, r)
	}
	h.open.mu.Unlock()
	sort.Slice(listed, func(i, j int) bool {
		if !listed[i].ArrivalTS.Equal(listed[j].ArrivalTS) {
			return listed[i].ArrivalTS.Before(listed[j].ArrivalTS)
		}
		return listed[i].RequestID < listed[j].RequestID
	})
	if max >= 0 && len(listed) > max {
		omitted = len(listed) - max
		listed = listed[:max]
	}
	return inFlight, listed, omitted
}
