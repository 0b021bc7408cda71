package chstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
)

// A caller's X-Request-Id may repeat, and vLLM's span carries it (gen_ai.request.id =
// chatcmpl-<X-Request-Id>, vllm/v1/engine/output_processor.py do_tracing: main's
// req_state.external_req_id). What each release does with a second request of one id, read from
// vLLM's source:
//   - 0.14 and later (vLLM PR #27987, vllm/v1/engine/input_processor.py assign_request_id): the
//     engine's own id gets 8 random characters, both requests are served, and both spans carry
//     the caller's id.
//   - 0.8 to 0.13, while the first is running: OutputProcessor.add_request raises
//     ValueError("Request id chatcmpl-<id> already running."): a non-streamed request gets a 400
//     BadRequestError, a streamed one a 200 whose stream is that error event and [DONE]
//     (serving_chat.py; the generator's first step adds the request). No span: the engine never
//     ran it.
//   - every release, once the first has finished: served again, a second span with the same id.
//
// The gateway sends each request its own span id as the traceparent's parent-id (requests.span_id)
// and vLLM's span is that span's child (engine_spans.parent_span_id), so engine rows belong to one
// gateway request whatever its id. Each case states what request_facts must show.
func TestDuplicateCallerIDs(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	type gw struct {
		event, id, trace, span string
		status                 uint16
		errCode                string
		stream                 bool
		ttft                   *float64 // the gateway's stream TTFT (absent: refused or not streamed)
	}
	type sp struct {
		event, id, trace, parent string
		ttft                     float64
		prompt, completion       uint32
	}
	const (
		traceA = "4bf92f3577b34da6a3ce929d0e0e4736" // a client's traceparent, sent twice
		traceB = "0af7651916cd43dd8448eb211c80319c"
		traceC = "5c6f2d1a9e0b4f7a8c3d2e1f0a9b8c7d"
		traceD = "7d3e1c5b9a2f4e6d8b0c1a3f5e7d9b2c"
		traceE = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b"
	)
	reqs := []gw{
		// main: two concurrent requests with one id, one client span (same trace), both served.
		{"g1", "dup-main", traceA, "a1a1a1a1a1a1a1a1", 200, "", true, p64(0.20)},
		{"g2", "dup-main", traceA, "a2a2a2a2a2a2a2a2", 200, "", true, p64(0.90)},
		// 0.10: the second non-streamed request refused with 400, no span.
		{"g3", "dup-010", traceB, "b1b1b1b1b1b1b1b1", 200, "", false, nil},
		{"g4", "dup-010", traceC, "b2b2b2b2b2b2b2b2", 400, "BadRequestError", false, nil},
		// 0.10: a streamed second request refused inside a 200 stream, no span.
		{"g5", "dup-stream", traceD, "c1c1c1c1c1c1c1c1", 200, "", true, p64(0.30)},
		{"g6", "dup-stream", traceD, "c2c2c2c2c2c2c2c2", 200, "BadRequestError", true, nil},
		// Rows written before migration 000020: no span ids on either side, joined as before.
		{"g7", "legacy", traceE, "", 200, "", true, p64(0.40)},
	}
	spans := []sp{
		{"s1", "dup-main", traceA, "a1a1a1a1a1a1a1a1", 0.19, 12, 100},
		{"s2", "dup-main", traceA, "a2a2a2a2a2a2a2a2", 0.88, 30, 7},
		{"s3", "dup-010", traceB, "b1b1b1b1b1b1b1b1", 0.25, 20, 64},
		{"s5", "dup-stream", traceD, "c1c1c1c1c1c1c1c1", 0.29, 15, 40},
		{"s7", "legacy", traceE, "", 0.39, 9, 33},
	}
	rb, err := conn.PrepareBatch(ctx, `INSERT INTO requests (event_id, request_id, trace_id, span_id, ts, arrival_ts, finished_ts,
		model, endpoint, stream, status_code, error_layer, error_code, ttft_s)`)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		layer := ""
		if r.errCode != "" {
			layer = "upstream"
		}
		if err := rb.Append(r.event, r.id, r.trace, r.span, arrival.Add(3*time.Second), arrival, arrival.Add(3*time.Second),
			"qwen", "/v1/chat/completions", r.stream, r.status, layer, r.errCode, r.ttft); err != nil {
			t.Fatal(err)
		}
	}
	if err := rb.Send(); err != nil {
		t.Fatal(err)
	}
	sb, err := conn.PrepareBatch(ctx, `INSERT INTO engine_spans (event_id, request_id, engine_request_id, trace_id, span_id,
		parent_span_id, ts, start_ts, engine, queue_s, prefill_s, decode_s, ttft_s, e2e_s, prompt_tokens, completion_tokens, finish_reason)`)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range spans {
		if err := sb.Append(s.event, s.id, "chatcmpl-"+s.id, s.trace, "f0f0f0f0f0f0f0f0", s.parent, arrival.Add(2*time.Second), arrival,
			"qwen-a", 0.01, s.ttft-0.01, 1.5, s.ttft, 2.0, s.prompt, s.completion, "stop"); err != nil {
			t.Fatal(err)
		}
	}
	if err := sb.Send(); err != nil {
		t.Fatal(err)
	}

	type row struct {
		children               uint32
		prompt, completion     *uint32
		ttft, engineTTFT       *float64
		ttftSource, statusText string
	}
	want := map[string]row{
		// Each served duplicate has its own span's tokens and TTFT, one child each.
		"g1": {children: 1, prompt: p32(12), completion: p32(100), ttft: p64(0.20), engineTTFT: p64(0.19), ttftSource: "gateway"},
		"g2": {children: 1, prompt: p32(30), completion: p32(7), ttft: p64(0.90), engineTTFT: p64(0.88), ttftSource: "gateway"},
		// The served one keeps its span; the refused one has no engine data at all.
		"g3": {children: 1, prompt: p32(20), completion: p32(64), ttft: p64(0.25), engineTTFT: p64(0.25), ttftSource: "engine_span"},
		"g4": {},
		"g5": {children: 1, prompt: p32(15), completion: p32(40), ttft: p64(0.30), engineTTFT: p64(0.29), ttftSource: "gateway"},
		"g6": {},
		"g7": {children: 1, prompt: p32(9), completion: p32(33), ttft: p64(0.40), engineTTFT: p64(0.39), ttftSource: "gateway"},
	}
	params := chstore.WithParams(ctx, map[string]string{"from": chTime(arrival.Add(-time.Second)), "to": chTime(arrival.Add(time.Second))})
	// request_facts_window names its rows by the gateway's span id; read each row with it.
	rows, err := conn.Query(params, `SELECT f.request_id, f.span_id, f.engine_children, f.prompt_tokens, f.completion_tokens,
		f.ttft_s, f.engine_ttft_s, f.ttft_source
		FROM request_facts_window(from = {from:String}, to = {to:String}) AS f
		WHERE f.request_id IN ('dup-main', 'dup-010', 'dup-stream', 'legacy')`)
	if err != nil {
		t.Fatalf("read request_facts_window: %v", err)
	}
	got := map[string]row{}
	bySpan := map[string]string{}
	for _, r := range reqs {
		bySpan[r.id+"/"+r.span] = r.event
	}
	for rows.Next() {
		var id, span string
		var r row
		if err := rows.Scan(&id, &span, &r.children, &r.prompt, &r.completion, &r.ttft, &r.engineTTFT, &r.ttftSource); err != nil {
			t.Fatal(err)
		}
		ev, ok := bySpan[id+"/"+span]
		if !ok {
			t.Fatalf("request_facts_window row %s/%s matches no gateway row", id, span)
		}
		if _, dup := got[ev]; dup {
			t.Errorf("gateway row %s (%s) appears twice in request_facts_window", ev, id)
		}
		got[ev] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	eq32 := func(a, b *uint32) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	eq64 := func(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	for ev, w := range want {
		g, ok := got[ev]
		if !ok {
			t.Errorf("%s: no request_facts_window row", ev)
			continue
		}
		if g.children != w.children || !eq32(g.prompt, w.prompt) || !eq32(g.completion, w.completion) ||
			!eq64(g.ttft, w.ttft) || !eq64(g.engineTTFT, w.engineTTFT) || g.ttftSource != w.ttftSource {
			t.Errorf("%s: children %d prompt %v completion %v ttft %v engine ttft %v source %q, want %d %v %v %v %v %q", ev,
				g.children, deref32(g.prompt), deref32(g.completion), d64(g.ttft), d64(g.engineTTFT), g.ttftSource,
				w.children, deref32(w.prompt), deref32(w.completion), d64(w.ttft), d64(w.engineTTFT), w.ttftSource)
		}
	}

	// The timing views (overload_queue, diagnose and the console read them) join the same way:
	// per request id, the served rows carry their own span's tokens, the refused ones none.
	for _, view := range []string{"request_timings_window", "request_timings_sampled"} {
		var refusedWithTokens, servedTokens uint64
		var mainTokens []uint32
		if err := conn.QueryRow(params, `SELECT
				countIf(status_code = 400 AND completion_tokens IS NOT NULL),
				sumIf(completion_tokens, request_id IN ('dup-010', 'dup-stream', 'legacy')),
				arraySort(groupArrayIf(assumeNotNull(completion_tokens), request_id = 'dup-main' AND completion_tokens IS NOT NULL))
			FROM `+view+`(from = {from:String}, to = {to:String})
			WHERE request_id IN ('dup-main', 'dup-010', 'dup-stream', 'legacy')`).Scan(&refusedWithTokens, &servedTokens, &mainTokens); err != nil {
			t.Fatalf("read %s: %v", view, err)
		}
		// dup-010: 64 (the refused 400 none), dup-stream: 40 (the refused stream none), legacy: 33.
		if refusedWithTokens != 0 || servedTokens != 64+40+33 || len(mainTokens) != 2 || mainTokens[0] != 7 || mainTokens[1] != 100 {
			t.Errorf("%s: refused rows with tokens %d, served tokens %d, dup-main tokens %v; want 0, 137, [7 100]", view, refusedWithTokens, servedTokens, mainTokens)
		}
	}

	// The engine alone (no gateway rows read): engine_requests keeps the two served requests of
	// one id apart, one row per parent span, and has nothing for a refused one.
	var n uint64
	var completions []uint32
	if err := conn.QueryRow(chstore.WithParams(ctx, map[string]string{"from": chTime(arrival), "to": chTime(arrival.Add(time.Hour))}),
		`SELECT count(), arraySort(groupArray(assumeNotNull(completion_tokens))) FROM engine_requests(from = {from:String}, to = {to:String})
		 WHERE request_id = 'dup-main'`).Scan(&n, &completions); err != nil {
		t.Fatal(err)
	}
	if n != 2 || len(completions) != 2 || completions[0] != 7 || completions[1] != 100 {
		t.Errorf("engine_requests for dup-main: %d rows with completion tokens %v, want 2 rows, [7 100]", n, completions)
	}
}

func d64(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
