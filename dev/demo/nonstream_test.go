package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/diagnose"
)

// overloadNonStreaming is a healthy overload's non-streaming half, as request_facts gives it.
func overloadNonStreaming() NonStreaming {
	return NonStreaming{Requests: 540, NonStreaming: 270, WithTTFT: 270, Compared: 270, TTFTMean: p(1.399), QueueMean: p(1.145),
		Sources: map[string]uint64{"engine_timing": 262, "engine_span": 8}}
}

func TestWriteNonStreaming(t *testing.T) {
	var buf bytes.Buffer
	n := overloadNonStreaming()
	if err := WriteNonStreaming(&buf, "Overload", n); err != nil {
		t.Fatal(err)
	}
	c := n.Check()
	buf.WriteString("  " + mark(c.OK) + " " + c.Text + "\n")
	golden(t, "nonstream.txt", buf.Bytes())
}

func TestNonStreamingCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*NonStreaming)
		ok     bool
	}{
		{"overload", func(*NonStreaming) {}, true},
		{"no non-streaming request", func(n *NonStreaming) {
			*n = NonStreaming{Requests: 540}
		}, false},
		// A non-streaming request without a TTFT is what request_facts gave before the engine's
		// timings filled it.
		{"a request without TTFT", func(n *NonStreaming) { n.WithTTFT, n.Compared = 269, 269 }, false},
		{"a request without queue wait", func(n *NonStreaming) { n.Compared = 269 }, false},
		// vLLM's timing object's time_to_first_token_ms, counted from scheduling, read as TTFT.
		{"TTFT below the queue wait", func(n *NonStreaming) { n.BelowQueue, n.TTFTMean = 270, p(0.254) }, false},
		{"one below", func(n *NonStreaming) { n.BelowQueue = 1 }, false},
		{"nothing waited", func(n *NonStreaming) { n.QueueMean, n.TTFTMean = p(0.0004), p(0.05) }, false},
		{"queue wait unknown", func(n *NonStreaming) { n.QueueMean = nil }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := overloadNonStreaming()
			tc.change(&n)
			if c := n.Check(); c.OK != tc.ok || !strings.HasPrefix(c.Text, "non-streaming TTFT includes the queue wait") {
				t.Errorf("check %+v, want ok=%v", c, tc.ok)
			}
		})
	}
}

// TestMeasureNonStreaming reads the non-streaming requests of a window from ClickHouse through the
// columns of request_facts the demo reads (request_id, arrival_ts, stream, ttft_s, ttft_source,
// queue_s). The test's database holds them as a table of that shape in place of the view, so the
// query runs on real ClickHouse whatever joins fill the view.
func TestMeasureNonStreaming(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, q := range []string{
		"DROP VIEW request_facts",
		`CREATE TABLE request_facts (request_id String, arrival_ts DateTime64(6, 'UTC'), stream Bool,
			ttft_s Nullable(Float64), ttft_source LowCardinality(String), queue_s Nullable(Float64))
		 ENGINE = MergeTree ORDER BY arrival_ts`,
	} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	from := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	w := Window{Key: "overload", Title: "Overload", Range: diagnose.Range{From: from, To: from.Add(time.Minute)}}
	b, err := conn.PrepareBatch(ctx, "INSERT INTO request_facts (request_id, arrival_ts, stream, ttft_s, ttft_source, queue_s)")
	if err != nil {
		t.Fatal(err)
	}
	f64 := func(v float64) *float64 { return &v }
	for _, r := range []struct {
		id     string
		at     time.Duration
		stream bool
		ttft   *float64
		source string
		queue  *float64
	}{
		{"s1", time.Second, true, f64(1.5), "gateway", f64(1.2)},
		{"s2", 2 * time.Second, true, f64(0.9), "gateway", f64(0.7)},
		{"j1", 3 * time.Second, false, f64(1.3), "engine_timing", f64(1.0)},
		{"j2", 4 * time.Second, false, f64(0.7), "engine_span", f64(0.5)},
		// The timing object's milliseconds against the span's queue wait: within QueueSlackS.
		{"j3", 5 * time.Second, false, f64(0.8), "engine_timing", f64(0.8004)},
		// Outside the window on either side.
		{"before", -time.Millisecond, false, f64(0.1), "engine_timing", f64(5)},
		{"after", time.Minute, false, nil, "", f64(1)},
	} {
		if err := b.Append(r.id, from.Add(r.at), r.stream, r.ttft, r.source, r.queue); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	n, err := MeasureNonStreaming(ctx, conn, w)
	if err != nil {
		t.Fatal(err)
	}
	if n.Requests != 5 || n.NonStreaming != 3 || n.WithTTFT != 3 || n.Compared != 3 || n.BelowQueue != 0 ||
		!near(n.TTFTMean, (1.3+0.7+0.8)/3) || !near(n.QueueMean, (1.0+0.5+0.8004)/3) ||
		n.Sources["engine_timing"] != 2 || n.Sources["engine_span"] != 1 || len(n.Sources) != 2 {
		t.Fatalf("measured %+v (TTFT %v, queue %v)", n, deref(n.TTFTMean), deref(n.QueueMean))
	}
	if c := n.Check(); !c.OK {
		t.Errorf("check failed: %s", c.Text)
	}

	// A TTFT counted from scheduling (vLLM's time_to_first_token_ms) and a request without one.
	b, err = conn.PrepareBatch(ctx, "INSERT INTO request_facts (request_id, arrival_ts, stream, ttft_s, ttft_source, queue_s)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append("j4", from.Add(6*time.Second), false, f64(0.2), "engine_timing", f64(1.1)); err != nil {
		t.Fatal(err)
	}
	if err := b.Append("j5", from.Add(7*time.Second), false, nil, "", f64(0.9)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	n, err = MeasureNonStreaming(ctx, conn, w)
	if err != nil {
		t.Fatal(err)
	}
	if n.NonStreaming != 5 || n.WithTTFT != 4 || n.Compared != 4 || n.BelowQueue != 1 {
		t.Fatalf("measured %+v", n)
	}
	if c := n.Check(); c.OK {
		t.Errorf("check passed: %s", c.Text)
	}
}

func near(p *float64, want float64) bool { return p != nil && *p > want-1e-9 && *p < want+1e-9 }

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
