package pipeline

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/consumer/sink"
)

// A dead letter always fits the server's max_payload with its headers: the reason is shortened,
// then the payload cut, with the original length in a header. Otherwise the publish fails on the
// client every time and the message is retried forever.
func TestDeadLetterMsgFitsMaxPayload(t *testing.T) {
	p := &Pipeline{topo: bus.Topology{Prefix: "servescope"}}
	const maxPayload = 1 << 20
	long := strings.Repeat("r", 5000)
	for _, tc := range []struct {
		name       string
		payload    int
		reason     string
		truncated  bool
		fullReason bool
	}{
		{"small", 400, "invalid_json: unexpected end", false, true},
		{"long reason, small payload", 400, long, false, false},
		{"payload near the limit", maxPayload - 64, "invalid_json: unexpected end", true, true},
		{"payload at the limit, long reason", maxPayload, long, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := sink.IngestError{Subject: "servescope.v1.app.record", StreamSeq: 42, Reason: tc.reason, Payload: []byte(strings.Repeat("x", tc.payload))}
			m := p.deadLetterMsg(e, maxPayload)
			if n := msgSize(m); n > maxPayload {
				t.Fatalf("dead letter is %d bytes with headers, over max_payload %d", n, maxPayload)
			}
			if got := m.Header.Get(bus.HeaderDLQPayloadTruncated); (got != "") != tc.truncated || (tc.truncated && got != strconv.Itoa(tc.payload)) {
				t.Errorf("%s = %q, want truncated=%v of %d bytes", bus.HeaderDLQPayloadTruncated, got, tc.truncated, tc.payload)
			}
			if !tc.truncated && len(m.Data) != tc.payload {
				t.Errorf("payload %d bytes, want all %d", len(m.Data), tc.payload)
			}
			if reason := m.Header.Get(bus.HeaderDLQReason); (reason == tc.reason) != tc.fullReason || !strings.HasPrefix(tc.reason, reason) || reason == "" {
				t.Errorf("reason header of %d bytes, want %d (full: %v)", len(reason), len(tc.reason), tc.fullReason)
			}
			if m.Header.Get(bus.HeaderDLQStreamSeq) != "42" || m.Header.Get(bus.HeaderDLQSubject) != e.Subject || m.Subject != "servescope.dlq.v1.app.record" {
				t.Errorf("dead letter %s headers %v", m.Subject, m.Header)
			}
		})
	}
}

// The parts of a split batch hold its rows exactly once, in order, each with its own event.
func TestBatchParts(t *testing.T) {
	base := time.Now().Add(-time.Hour)
	b := &batch{table: sink.TableRequests, kind: schema.KindRequestFinished, unknownLeft: 7}
	for i := range 9 {
		b.add(item{event: eventgen.Event(schema.KindRequestFinished, i, base)}, base)
	}
	ids := func(parts ...*batch) []string {
		var out []string
		for _, part := range parts {
			if len(part.msgs) != len(part.events) {
				t.Fatalf("part has %d messages and %d events", len(part.msgs), len(part.events))
			}
			for _, e := range part.events {
				out = append(out, e.Head().EventID)
			}
		}
		return out
	}
	all := ids(b)
	p := &Pipeline{metrics: NewMetrics(prometheus.NewRegistry())}

	h := p.halves(b, 7)
	if len(h) != 2 || len(h[1].msgs) != 4 || len(h[0].msgs) != 5 || !slices.Equal(ids(h[1], h[0]), all) || h[0].unknownLeft != 7 {
		t.Errorf("halves: %d and %d rows (first half last), want 4 then 5 covering the batch in order", len(h[1].msgs), len(h[0].msgs))
	}
	if h := p.halves(b, 0); h[0].unknownLeft != 1 || h[1].unknownLeft != 1 {
		t.Errorf("halves after an exhausted Unknown budget: %d and %d attempts, want 1 each", h[0].unknownLeft, h[1].unknownLeft)
	}

	iso := p.isolate(b, 3)
	row, rest := iso[1], iso[0]
	if len(row.msgs) != 1 || row.events[0].Head().EventID != all[3] || row.hintFor != rest || len(rest.msgs) != 8 ||
		!slices.Equal(ids(rest), slices.Delete(slices.Clone(all), 3, 4)) {
		t.Errorf("isolate row 3: row %v, rest of %d rows", ids(row), len(rest.msgs))
	}

	parts, refused := p.without(b, sink.Verdict{Class: sink.Refuse, Rows: []int{0, 8}, Reasons: []string{"a", "b"}})
	if len(parts) != 1 || !slices.Equal(ids(parts[0]), all[1:8]) || len(refused) != 2 || refused[1].reason != "b" {
		t.Errorf("without rows 0 and 8: %v, %d refused", ids(parts...), len(refused))
	}
	if parts, refused := p.without(b.slice(2, 3), sink.Verdict{Class: sink.Refuse, Rows: []int{0}, Reasons: []string{"a"}}); len(parts) != 0 || len(refused) != 1 {
		t.Errorf("without the only row: %d parts, %d refused; want none and 1", len(parts), len(refused))
	}
}
