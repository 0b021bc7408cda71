package chaos

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/demo"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/detector/notify"
)

func TestCompare(t *testing.T) {
	tests := []struct {
		name             string
		want             map[string]bool
		got              map[string]uint64
		lost, dup, extra []string
	}{
		{"exact", map[string]bool{"a": true, "b": true}, map[string]uint64{"a": 1, "b": 1}, nil, nil, nil},
		{"lost", map[string]bool{"a": true, "b": true}, map[string]uint64{"a": 1}, []string{"b"}, nil, nil},
		{"duplicated", map[string]bool{"a": true}, map[string]uint64{"a": 2}, nil, []string{"a"}, nil},
		{"unexpected", map[string]bool{"a": true}, map[string]uint64{"a": 1, "z": 1}, nil, nil, []string{"z"}},
		{"all three", map[string]bool{"a": true, "b": true}, map[string]uint64{"a": 3, "c": 1}, []string{"b"}, []string{"a"}, []string{"c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lost, dup, extra := compare(tt.want, tt.got)
			if !reflect.DeepEqual(lost, tt.lost) || !reflect.DeepEqual(dup, tt.dup) || !reflect.DeepEqual(extra, tt.extra) {
				t.Errorf("compare = lost %v dup %v extra %v, want %v %v %v", lost, dup, extra, tt.lost, tt.dup, tt.extra)
			}
		})
	}
}

// post sends one webhook message with one alert to the receiver, as the detector would.
func post(t *testing.T, recv *demo.Receiver, status, fp string, start time.Time) {
	t.Helper()
	m := notify.Message{Version: "4", Status: status, Alerts: []notify.Alert{{Status: status, Fingerprint: fp, StartsAt: start,
		Labels: map[string]string{"alertname": "kv_cache_pressure", "engine": kvEngine}}}}
	body, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	recv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/alerts", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("receiver answered %d", rec.Code)
	}
}

func TestAlertLedger(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		messages []string // status:fingerprint
		gaps     int
	}{
		{"fired and resolved once", []string{"firing:f1", "resolved:f1"}, 0},
		{"firing sent again after the restart", []string{"firing:f1", "firing:f1", "resolved:f1"}, 2},
		{"never resolved", []string{"firing:f1"}, 1},
		{"a new fingerprint after the restart", []string{"firing:f1", "firing:f2", "resolved:f2"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recv := demo.NewReceiver()
			for _, m := range tt.messages {
				status, fp, _ := strings.Cut(m, ":")
				post(t, recv, status, fp, start)
			}
			l := &Ledger{}
			alertLedger(l, recv, kvEngine, time.Hour)
			if len(l.Gaps) != tt.gaps {
				t.Errorf("%d gaps, want %d: %q", len(l.Gaps), tt.gaps, l.Gaps)
			}
		})
	}
}

// TestBadEventsAreRefused holds the burst to its purpose: every malformed event is refused by
// the schema package (the consumer's decoder) and every hostile one is accepted.
func TestBadEventsAreRefused(t *testing.T) {
	now := time.Now()
	bad, hostile, payloads, err := badEvents("chaos_test", now)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) < 12 {
		t.Errorf("%d malformed cases, want at least 12", len(bad))
	}
	for _, b := range bad {
		if _, err := schema.DecodeAt(b.Subject, b.Payload, now); err == nil {
			t.Errorf("case %q decodes", b.Case)
		}
	}
	if len(hostile) == 0 || len(payloads) < len(hostile) {
		t.Fatalf("%d hostile records with %d payloads", len(hostile), len(payloads))
	}
	for i, p := range payloads {
		e, err := schema.DecodeAt("chaos_test.v1.app.record", p, now)
		if err != nil {
			t.Errorf("hostile payload %d refused: %v", i, err)
			continue
		}
		if id := e.Head().RequestID; !strings.HasPrefix(id, "chaos-") {
			t.Errorf("hostile payload %d has request id %q", i, id)
		}
	}
}

// chunked returns the body in pieces of n bytes, so markers straddle reads.
type chunked struct {
	data []byte
	n    int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := min(c.n, len(p), len(c.data))
	copy(p, c.data[:k])
	c.data = c.data[k:]
	return k, nil
}

func (c *chunked) Close() error { return nil }

func TestWatchBody(t *testing.T) {
	tests := []struct {
		name, body string
		readAll    bool
		ok         bool
		err        string
	}{
		{"complete stream", "data: {\"choices\":[]}\n\ndata: [DONE]\n\n", true, true, ""},
		{"closed early, rest drained", "data: {\"choices\":[]}\n\ndata: [DONE]\n\n", false, true, ""},
		{"no [DONE]", "data: {\"choices\":[]}\n\n", true, false, "stream ended without [DONE]"},
		{"error event", "data: {\"error\":{\"message\":\"x\"}}\n\ndata: [DONE]\n\n", true, false, "error event in the stream"},
	}
	for _, tt := range tests {
		for _, n := range []int{1, 3, 7, 4096} {
			book := NewBook()
			o := &Outcome{ID: "r1"}
			b := &watchBody{ReadCloser: &chunked{data: []byte(tt.body), n: n}, o: o, book: book}
			if tt.readAll {
				if _, err := io.ReadAll(b); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			got := book.All()
			if len(got) != 1 || got[0].OK != tt.ok || got[0].Err != tt.err {
				t.Errorf("%s (reads of %d bytes): outcome %+v, want ok=%v err=%q", tt.name, n, got, tt.ok, tt.err)
			}
		}
	}
}
