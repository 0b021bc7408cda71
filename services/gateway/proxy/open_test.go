package proxy

import (
	"testing"
	"time"

	"github.com/servescope/servescope/schema"
)

// Open lists the requests open long enough, oldest first and at most max of them, counts the
// rest, and names each one's phase.
func TestOpenListsOldestFirst(t *testing.T) {
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	h := &Handler{}
	add := func(id string, age time.Duration, p phase) *openEntry {
		e := &openEntry{req: schema.OpenRequest{RequestID: id, ArrivalTS: now.Add(-age), Model: "m"}}
		e.phase.Store(uint32(p))
		h.open.add(e)
		return e
	}
	add("young", time.Second, phaseUpstream)
	add("b", time.Minute, phaseResponding)
	a := add("a", time.Hour, phaseUpstream)
	add("c", 30*time.Second, phaseAnswered)
	n, listed, omitted := h.Open(now, 30*time.Second, 2)
	if n != 4 || omitted != 1 || len(listed) != 2 || listed[0].RequestID != "a" || listed[1].RequestID != "b" {
		t.Fatalf("Open: %d in flight, listed %+v, %d omitted; want 4, [a b], 1", n, listed, omitted)
	}
	if listed[0].Phase != "upstream" || listed[1].Phase != "responding" {
		t.Errorf("phases %q %q, want upstream, responding", listed[0].Phase, listed[1].Phase)
	}
	h.open.remove(a)
	n, listed, omitted = h.Open(now, 0, schema.MaxOpenListed)
	if n != 3 || omitted != 0 || len(listed) != 3 || listed[0].RequestID != "b" || listed[2].RequestID != "young" {
		t.Fatalf("after a ended: %d in flight, listed %+v, %d omitted", n, listed, omitted)
	}
}
