package rules_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/rules"
)

// TestOverloadQueueCountsRequestsNotChildren feeds overload_queue the engine spans of n > 1
// requests (one span per child, all with the request's id, as vLLM sends them) while the gateway
// has no queue wait of its own (no per-request timing object in the responses). The share of
// queued requests must count each request once: counting spans would fire model "few-queued"
// (16 of 22 spans queued, but 4 of 10 requests) and miss model "most-queued" (6 of 22 spans, but
// 6 of 10 requests).
func TestOverloadQueueCountsRequestsNotChildren(t *testing.T) {
	t.Parallel()
	defs, err := rules.Load(builtin.Rules, builtin.RulesDir)
	if err != nil {
		t.Fatal(err)
	}
	var def *rules.Definition
	for _, d := range defs {
		if d.Name == "overload_queue" {
			def = d
		}
	}
	if def == nil {
		t.Fatal("no built-in overload_queue rule")
	}
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The evaluation time is explicit; an hour ago keeps the rows inside the tables' TTL.
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)

	reqs, err := conn.PrepareBatch(ctx, "INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, stream, status_code)")
	if err != nil {
		t.Fatal(err)
	}
	spans, err := conn.PrepareBatch(ctx, "INSERT INTO engine_spans (event_id, request_id, engine_request_id, ts, start_ts, engine, queue_s, ttft_s, e2e_s)")
	if err != nil {
		t.Fatal(err)
	}
	add := func(model string, i, children int, queue float64) {
		id := fmt.Sprintf("%s-%d", model, i)
		arrival := at.Add(-4*time.Minute + time.Duration(i)*10*time.Second)
		end := arrival.Add(3 * time.Second)
		if err := reqs.Append(id, id, end, arrival, end, model, "/v1/chat/completions", false, uint16(200)); err != nil {
			t.Fatal(err)
		}
		for c := range children {
			q := queue
			if q > 0 {
				q += 0.01 * float64(c)
			}
			if err := spans.Append(fmt.Sprintf("%s-span-%d", id, c), id, "chatcmpl-"+id, end, arrival, "vllm-0", q, q+0.3, 3.0); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 10 {
		if i < 4 {
			add("few-queued", i, 4, 0.4) // n = 4, queued
			add("most-queued", i, 4, 0)  // n = 4, not queued
		} else {
			add("few-queued", i, 1, 0)
			add("most-queued", i, 1, 0.4)
		}
	}
	if err := reqs.Send(); err != nil {
		t.Fatal(err)
	}
	if err := spans.Send(); err != nil {
		t.Fatal(err)
	}

	r, err := rules.NewSQLRule(def, conn)
	if err != nil {
		t.Fatal(err)
	}
	samples, err := r.Eval(ctx, at)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		share  float64
		firing bool
	}{"few-queued": {0.4, false}, "most-queued": {0.6, true}}
	seen := 0
	for _, s := range samples {
		if s.Labels["signal"] != "queue_s" {
			continue
		}
		w, ok := want[s.Labels["model"]]
		if !ok {
			t.Errorf("unexpected row %+v", s)
			continue
		}
		seen++
		if s.Value != w.share || s.Firing != w.firing {
			t.Errorf("model %s: queued share %v firing %v, want %v %v (one per request)", s.Labels["model"], s.Value, s.Firing, w.share, w.firing)
		}
	}
	if seen != len(want) {
		t.Errorf("%d queue_s rows, want %d: %+v", seen, len(want), samples)
	}
}
