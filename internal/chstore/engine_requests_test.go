package chstore_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
)

// span is one engine.span row, as the collector writes vLLM's llm_request span.
type span struct {
	requestID, engineRequestID   string
	promptIndex, childIndex      *uint32
	start                        time.Time
	queue, prefill, decode, ttft *float64
	e2e                          float64
	prompt, completion           uint32
	finish                       string
}

func p64(v float64) *float64 { return &v }
func p32(v uint32) *uint32   { return &v }

func insertSpans(t *testing.T, ctx context.Context, conn driver.Conn, spans []span) {
	t.Helper()
	b, err := conn.PrepareBatch(ctx, `INSERT INTO engine_spans (event_id, request_id, engine_request_id, prompt_index,
		child_index, ts, start_ts, engine, queue_s, prefill_s, decode_s, inference_s, ttft_s, e2e_s, prompt_tokens,
		completion_tokens, finish_reason)`)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range spans {
		var inference *float64
		if s.prefill != nil && s.decode != nil {
			inference = p64(*s.prefill + *s.decode)
		}
		end := s.start.Add(time.Duration(s.e2e * float64(time.Second)))
		if err := b.Append(fmt.Sprintf("span-%s-%d", s.requestID, i), s.requestID, s.engineRequestID, s.promptIndex, s.childIndex,
			end, s.start, "qwen-a", s.queue, s.prefill, s.decode, inference, s.ttft, s.e2e, s.prompt, s.completion, s.finish); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

// request is one requests row (request.finished).
type request struct {
	id                     string
	stream                 bool
	ttft, queue, scheduled *float64
}

func insertRequests(t *testing.T, ctx context.Context, conn driver.Conn, arrival time.Time, reqs []request) {
	t.Helper()
	b, err := conn.PrepareBatch(ctx, `INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint,
		stream, status_code, ttft_s, queue_s, scheduled_to_first_token_s)`)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		for range 2 { // delivered twice: FINAL keeps one
			if err := b.Append("ev-"+r.id, r.id, arrival.Add(5*time.Second), arrival, arrival.Add(5*time.Second), "qwen", "/v1/chat/completions",
				r.stream, uint16(200), r.ttft, r.queue, r.scheduled); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

// arrival is two hours ago, so that the rows are inside the tables' TTL; nothing depends on the
// hour or the date.
var arrival = time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Second)

// chTime formats t as a ClickHouse DateTime64 literal.
func chTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }

// childrenOf returns the spans vLLM main sends for an n-choice chat request (every child carries
// the parent's id) or, with prompts > 1, for a multi-prompt completion as v0.10 sends it.
func childrenOf(id string, prompts, n int) []span {
	var out []span
	for p := range prompts {
		for c := range n {
			k := float64(p*n + c)
			s := span{
				requestID: id, engineRequestID: "chatcmpl-" + id, start: arrival,
				// Child k waits 0.4 + 0.1k s, prefills 0.3 s and decodes 2 + k s.
				queue: p64(0.4 + 0.1*k), prefill: p64(0.3), decode: p64(2 + k), ttft: p64(0.75 + 0.1*k),
				e2e: 2.8 + 1.1*k, prompt: uint32(40 + 10*p), completion: uint32(101 + 100*c), finish: []string{"stop", "length"}[c%2],
			}
			if prompts > 1 {
				s.engineRequestID = fmt.Sprintf("%d_cmpl-%s-%d", c, id, p)
				s.promptIndex, s.childIndex = p32(uint32(p)), p32(uint32(c))
			}
			out = append(out, s)
		}
	}
	return out
}

type fact struct {
	id                                string
	children, prompts                 uint32
	queue, prefill, decode, inference *float64
	ttft, engineTTFT, e2e, tpot       *float64
	source                            string
	promptTokens, completionTokens    *uint32
	finish                            []string
}

func readFacts(t *testing.T, ctx context.Context, conn driver.Conn, query string) map[string]fact {
	t.Helper()
	rows, err := conn.Query(ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]fact{}
	for rows.Next() {
		var f fact
		if err := rows.Scan(&f.id, &f.children, &f.prompts, &f.queue, &f.prefill, &f.decode, &f.inference, &f.ttft, &f.engineTTFT,
			&f.e2e, &f.tpot, &f.source, &f.promptTokens, &f.completionTokens, &f.finish); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[f.id]; dup {
			t.Errorf("request %s has several rows", f.id)
		}
		out[f.id] = f
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

const factColumns = `request_id, engine_children, engine_prompts, queue_s, prefill_s, decode_s, inference_s, ttft_s,
	engine_ttft_s, engine_e2e_s, engine_tpot_s, ttft_source, prompt_tokens, completion_tokens, engine_finish_reasons`

func near(got *float64, want float64) bool { return got != nil && math.Abs(*got-want) < 1e-9 }

// TestOneEngineRowPerRequest feeds the span sets vLLM sends for n = 1, n = 3 chat and a
// two-prompt n = 2 completion, and checks that request_facts, request_facts_window and
// engine_requests hold one row per request, combined as migrations/000009 states.
func TestOneEngineRowPerRequest(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var spans []span
	spans = append(spans, childrenOf("one", 1, 1)...)
	spans = append(spans, childrenOf("three", 1, 3)...)
	spans = append(spans, childrenOf("multi", 2, 2)...)
	v0 := childrenOf("v0", 1, 2) // V0 spans: no prefill, decode or inference
	for i := range v0 {
		v0[i].prefill, v0[i].decode = nil, nil
		v0[i].engineRequestID = fmt.Sprintf("chatcmpl-v0_parallel_sample_%d", i)
	}
	spans = append(spans, v0...)
	insertSpans(t, ctx, conn, spans)
	insertSpans(t, ctx, conn, spans) // a re-delivery changes nothing
	// The gateway saw "three" as a stream (it measured TTFT) and the others as whole bodies.
	insertRequests(t, ctx, conn, arrival, []request{
		{id: "one"}, {id: "three", stream: true, ttft: p64(0.9)}, {id: "multi"}, {id: "v0"},
	})

	want := map[string]fact{
		"one": {children: 1, prompts: 1, queue: p64(0.4), prefill: p64(0.3), decode: p64(2), inference: p64(2.3),
			ttft: p64(0.75), e2e: p64(2.8), tpot: p64(2.0 / 100), source: "engine_span",
			promptTokens: p32(40), completionTokens: p32(101), finish: []string{"stop"}},
		// Children k = 0, 1, 2: first token at enqueue + 0.7, 0.8, 0.9 s, last at 2.7, 3.8, 4.9 s.
		"three": {children: 3, prompts: 1, queue: p64(0.4), prefill: p64(0.3), decode: p64(4.9 - 0.7), inference: p64(4.9 - 0.4),
			ttft: p64(0.9), engineTTFT: p64(0.75), e2e: p64(2.8 + 2.2), tpot: p64((2.0/100 + 3.0/200 + 4.0/300) / 3), source: "gateway",
			promptTokens: p32(40), completionTokens: p32(101 + 201 + 301), finish: []string{"length", "stop", "stop"}},
		// Prompt 0: children 0, 1; prompt 1: children 2, 3. Prompt tokens 40 + 50, each once.
		"multi": {children: 4, prompts: 2, queue: p64(0.4), prefill: p64(0.3), decode: p64(6.0 - 0.7), inference: p64(6.0 - 0.4),
			ttft: p64(0.75), e2e: p64(2.8 + 3.3), tpot: p64((2.0/100 + 3.0/200 + 4.0/100 + 5.0/200) / 4), source: "engine_span",
			promptTokens: p32(90), completionTokens: p32(101 + 201 + 101 + 201), finish: []string{"length", "length", "stop", "stop"}},
		"v0": {children: 2, prompts: 1, queue: p64(0.4), ttft: p64(0.75), e2e: p64(3.9), source: "engine_span",
			promptTokens: p32(40), completionTokens: p32(101 + 201), finish: []string{"length", "stop"}},
	}
	for _, q := range []string{
		"SELECT " + factColumns + " FROM request_facts",
		"SELECT " + factColumns + " FROM request_facts_window(from = '" + chTime(arrival.Add(-time.Minute)) + "', to = '" + chTime(arrival.Add(time.Minute)) + "')",
	} {
		got := readFacts(t, ctx, conn, q)
		if len(got) != len(want) {
			t.Errorf("%s: %d rows, want %d", q, len(got), len(want))
		}
		for id, w := range want {
			g := got[id]
			if w.engineTTFT == nil {
				w.engineTTFT = w.ttft
			}
			checks := []struct {
				name      string
				got, want *float64
			}{
				{"queue_s", g.queue, w.queue}, {"prefill_s", g.prefill, w.prefill}, {"decode_s", g.decode, w.decode},
				{"inference_s", g.inference, w.inference}, {"ttft_s", g.ttft, w.ttft}, {"engine_ttft_s", g.engineTTFT, w.engineTTFT},
				{"engine_e2e_s", g.e2e, w.e2e}, {"engine_tpot_s", g.tpot, w.tpot},
			}
			for _, c := range checks {
				if (c.want == nil) != (c.got == nil) || (c.want != nil && !near(c.got, *c.want)) {
					t.Errorf("%s: %s = %v, want %v", id, c.name, deref(c.got), deref(c.want))
				}
			}
			if g.children != w.children || g.prompts != w.prompts || g.source != w.source ||
				g.promptTokens == nil || *g.promptTokens != *w.promptTokens || g.completionTokens == nil || *g.completionTokens != *w.completionTokens ||
				!slices.Equal(g.finish, w.finish) {
				t.Errorf("%s: children %d prompts %d source %q tokens %v/%v finish %v, want %d %d %q %v/%v %v", id,
					g.children, g.prompts, g.source, deref32(g.promptTokens), deref32(g.completionTokens), g.finish,
					w.children, w.prompts, w.source, *w.promptTokens, *w.completionTokens, w.finish)
			}
		}
	}
	// engine_requests alone (deployments without a gateway): one row per request too.
	var rows, children uint64
	if err := conn.QueryRow(ctx, "SELECT count(), sum(engine_children) FROM engine_requests(from = '"+chTime(arrival)+"', to = '"+chTime(arrival.Add(time.Hour))+"')").Scan(&rows, &children); err != nil {
		t.Fatal(err)
	}
	if rows != 4 || children != uint64(len(spans)) {
		t.Errorf("engine_requests: %d rows combining %d spans, want 4 and %d", rows, children, len(spans))
	}
}

// TestTTFTFromArrivalBySource: request_facts gives a TTFT from arrival whenever a source has
// one, and names the source. The non-streaming request that waited 0.8 s has 0.8 + 0.05 s.
func TestTTFTFromArrivalBySource(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	insertRequests(t, ctx, conn, arrival, []request{
		{id: "stream", stream: true, ttft: p64(0.9), queue: p64(0.8), scheduled: p64(0.05)},
		{id: "span"},
		{id: "timing", queue: p64(0.8), scheduled: p64(0.05)},
		{id: "none"},
	})
	insertSpans(t, ctx, conn, []span{{requestID: "span", engineRequestID: "chatcmpl-span", start: arrival, queue: p64(0.8),
		prefill: p64(0.04), decode: p64(1), ttft: p64(0.86), e2e: 1.9, prompt: 10, completion: 20}})
	type row struct {
		ttft, gateway, scheduled *float64
		source                   string
		children                 uint32
	}
	want := map[string]row{
		"stream": {p64(0.9), p64(0.9), p64(0.05), "gateway", 0},
		"span":   {p64(0.86), nil, nil, "engine_span", 1},
		"timing": {p64(0.85), nil, p64(0.05), "engine_timing", 0},
		"none":   {nil, nil, nil, "", 0},
	}
	rows, err := conn.Query(ctx, "SELECT request_id, ttft_s, gateway_ttft_s, scheduled_to_first_token_s, ttft_source, engine_children FROM request_facts")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id string
		var r row
		if err := rows.Scan(&id, &r.ttft, &r.gateway, &r.scheduled, &r.source, &r.children); err != nil {
			t.Fatal(err)
		}
		n++
		w := want[id]
		same := func(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || math.Abs(*a-*b) < 1e-9) }
		if !same(r.ttft, w.ttft) || !same(r.gateway, w.gateway) || !same(r.scheduled, w.scheduled) || r.source != w.source || r.children != w.children {
			t.Errorf("%s: ttft %v gateway %v scheduled %v source %q children %d, want %v %v %v %q %d", id, deref(r.ttft), deref(r.gateway),
				deref(r.scheduled), r.source, r.children, deref(w.ttft), deref(w.gateway), deref(w.scheduled), w.source, w.children)
		}
	}
	if n != len(want) {
		t.Errorf("%d rows, want %d", n, len(want))
	}
	// The column types other readers rely on.
	types := map[string]string{}
	trows, err := conn.Query(chstore.WithParams(ctx, nil), "SELECT name, type FROM system.columns WHERE database = currentDatabase() AND table = 'request_facts'")
	if err != nil {
		t.Fatal(err)
	}
	defer trows.Close()
	for trows.Next() {
		var name, typ string
		if err := trows.Scan(&name, &typ); err != nil {
			t.Fatal(err)
		}
		types[name] = typ
	}
	for col, typ := range map[string]string{
		"ttft_s": "Nullable(Float64)", "ttft_source": "LowCardinality(String)", "gateway_ttft_s": "Nullable(Float64)",
		"scheduled_to_first_token_s": "Nullable(Float64)", "engine_children": "UInt32", "engine_ttft_s": "Nullable(Float64)",
	} {
		if types[col] != typ {
			t.Errorf("request_facts.%s is %q, want %s", col, types[col], typ)
		}
	}
}

// TestAppRecordsCombined: several app.records of one request are one request_facts row, each
// field from the latest record that set it.
func TestAppRecordsCombined(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	insertRequests(t, ctx, conn, arrival, []request{{id: "rag"}})
	b, err := conn.PrepareBatch(ctx, "INSERT INTO app_records (event_id, request_id, ts, app, retrieval_top_score, index_version, output_script_violation)")
	if err != nil {
		t.Fatal(err)
	}
	// A retrieval, its retry, then the output check of the answer.
	for i, r := range []struct {
		score     *float64
		index     string
		violation *bool
	}{{p64(0.31), "idx-1", nil}, {p64(0.88), "idx-2", nil}, {nil, "", func() *bool { v := true; return &v }()}} {
		if err := b.Append(fmt.Sprint("app-", i), "rag", arrival.Add(time.Duration(i)*time.Second), "ragdemo", r.score, r.index, r.violation); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	var n uint64
	var records uint32
	var score *float64
	var index string
	var violation *bool
	if err := conn.QueryRow(ctx, "SELECT count(), any(app_records), any(retrieval_top_score), any(index_version), any(output_script_violation) FROM request_facts").
		Scan(&n, &records, &score, &index, &violation); err != nil {
		t.Fatal(err)
	}
	if n != 1 || records != 3 || !near(score, 0.88) || index != "idx-2" || violation == nil || !*violation {
		t.Errorf("rows %d, records %d, score %v, index %q, violation %v; want 1, 3, 0.88, idx-2, true", n, records, deref(score), index, violation)
	}
}

// TestMigrationKeepsSpans: migration 000009 down and up again keeps the engine_spans rows
// written before it and after it.
func TestMigrationKeepsSpans(t *testing.T) {
	t.Parallel()
	conn, cfg := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, err := chstore.NewMigrator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	stepDownBelow := func(version uint) {
		for {
			v, _, err := g.Version()
			if err != nil {
				t.Fatal(err)
			}
			if v < version {
				return
			}
			if err := g.Down(1); err != nil {
				t.Fatalf("down from %d: %v", v, err)
			}
		}
	}
	stepDownBelow(9)
	b, err := conn.PrepareBatch(ctx, "INSERT INTO engine_spans (event_id, request_id, engine_request_id, ts, ttft_s)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append("before", "r1", "chatcmpl-r1", arrival, p64(0.5)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	if err := g.Up(); err != nil {
		t.Fatalf("up: %v", err)
	}
	insertSpans(t, ctx, conn, childrenOf("r2", 2, 2))
	count := func() (n uint64) {
		if err := conn.QueryRow(ctx, "SELECT count() FROM engine_spans").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 5 {
		t.Fatalf("%d spans after up, want 5", n)
	}
	stepDownBelow(9)
	if n := count(); n != 5 {
		t.Errorf("%d spans after down, want 5", n)
	}
	var facts uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM request_facts").Scan(&facts); err != nil {
		t.Errorf("request_facts after down: %v", err)
	}
	if err := g.Up(); err != nil {
		t.Fatalf("up again: %v", err)
	}
	var ttft *float64
	if err := conn.QueryRow(ctx, "SELECT ttft_s FROM engine_requests(from = '"+chTime(arrival.Add(-time.Hour))+"', to = '"+chTime(arrival.Add(time.Hour))+"') WHERE request_id = 'r1'").Scan(&ttft); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 5 || !near(ttft, 0.5) {
		t.Errorf("after up again: %d spans, r1 ttft %v; want 5, 0.5", n, deref(ttft))
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func deref32(p *uint32) any {
	if p == nil {
		return nil
	}
	return *p
}
