package chstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
)

// TestAppRecordsJoinByTrace: an application's record joins the gateway's requests on request_id
// when it has theirs, otherwise on the trace id the application sent through the gateway
// (migrations/000012): every gateway request of the trace gets the trace's app fields, a record
// with the request's own request_id wins over its trace's, and a request stays one row.
func TestAppRecordsJoinByTrace(t *testing.T) {
	t.Parallel()
	conn, cfg := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const (
		traceRAG   = "4bf92f3577b34da6a3ce929d0e0e4736" // two LLM calls through the gateway, one OTel record
		traceBoth  = "0af7651916cd43dd8448eb211c80319c" // a hand-written record by request_id and an OTel one
		traceNone  = "b7ad6b7169203331b7ad6b7169203331" // no application record
		traceStray = "00000000000000000000000000000bad" // a record whose trace no request has
	)
	reqs, err := conn.PrepareBatch(ctx, `INSERT INTO requests (event_id, request_id, trace_id, ts, arrival_ts, finished_ts,
		model, endpoint, stream, status_code)`)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ id, trace string }{
		{"rewrite", traceRAG}, {"answer", traceRAG}, {"hand", traceBoth}, {"plain", traceNone}, {"old", ""},
	} {
		if err := reqs.Append("ev-"+r.id, r.id, r.trace, arrival.Add(2*time.Second), arrival, arrival.Add(2*time.Second),
			"qwen", "/v1/chat/completions", false, uint16(200)); err != nil {
			t.Fatal(err)
		}
	}
	if err := reqs.Send(); err != nil {
		t.Fatal(err)
	}
	recs, err := conn.PrepareBatch(ctx, `INSERT INTO app_records (event_id, request_id, trace_id, ts, app,
		retrieval_top_score, embedding_model_version)`)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		event, request, trace string
		score                 float64
		embedding             string
	}{
		// The collector's record of a trace without a known request id: request_id is the trace id.
		{"otel-rag", traceRAG, traceRAG, 0.91, "bge-small"},
		{"hand", "hand", "", 0.52, "hand-embed"},
		{"otel-both", traceBoth, traceBoth, 0.77, "otel-embed"},
		{"stray", traceStray, traceStray, 0.1, "x"},
	} {
		for range 2 { // delivered twice: FINAL keeps one
			if err := recs.Append(r.event, r.request, r.trace, arrival.Add(time.Second), "rag", r.score, r.embedding); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := recs.Send(); err != nil {
		t.Fatal(err)
	}

	type fact struct {
		join      string
		records   uint32
		score     *float64
		embedding string
	}
	want := map[string]fact{
		"rewrite": {"trace_id", 1, p64(0.91), "bge-small"},
		"answer":  {"trace_id", 1, p64(0.91), "bge-small"},
		"hand":    {"request_id", 1, p64(0.52), "hand-embed"},
		"plain":   {"", 0, nil, ""},
		"old":     {"", 0, nil, ""},
	}
	check := func(query string) {
		t.Helper()
		rows, err := conn.Query(ctx, query)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		seen := map[string]int{}
		for rows.Next() {
			var id string
			var f fact
			if err := rows.Scan(&id, &f.join, &f.records, &f.score, &f.embedding); err != nil {
				t.Fatal(err)
			}
			seen[id]++
			w := want[id]
			if f.join != w.join || f.records != w.records || !sameScore(f.score, w.score) || f.embedding != w.embedding {
				t.Errorf("%s: join %q, %d records, score %v, embedding %q; want %q, %d, %v, %q",
					id, f.join, f.records, deref(f.score), f.embedding, w.join, w.records, deref(w.score), w.embedding)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		for id := range want {
			if seen[id] != 1 {
				t.Errorf("%s: %d rows, want 1", id, seen[id])
			}
		}
	}
	check("SELECT request_id, app_join, app_records, retrieval_top_score, embedding_model_version FROM request_facts")
	check("SELECT request_id, app_join, app_records, retrieval_top_score, embedding_model_version FROM request_facts_window(from = '" +
		chTime(arrival.Add(-time.Minute)) + "', to = '" + chTime(arrival.Add(time.Minute)) + "')")

	// app_traces combines the records of one trace and names the latest one's request_id.
	var request string
	var records uint32
	if err := conn.QueryRow(ctx, "SELECT request_id, app_records FROM app_traces(from = '"+chTime(arrival.Add(-time.Minute))+
		"', to = '"+chTime(arrival.Add(time.Minute))+"') WHERE trace_id = '"+traceRAG+"'").Scan(&request, &records); err != nil {
		t.Fatal(err)
	}
	if request != traceRAG || records != 1 {
		t.Errorf("app_traces: request_id %q, %d records; want %q, 1", request, records, traceRAG)
	}

	// Down to 000011 and up again keeps the records; request_facts works at both versions.
	g, err := chstore.NewMigrator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for {
		v, _, err := g.Version()
		if err != nil {
			t.Fatal(err)
		}
		if v < 12 {
			break
		}
		if err := g.Down(1); err != nil {
			t.Fatalf("down from %d: %v", v, err)
		}
	}
	var n, facts uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM app_records FINAL").Scan(&n); err != nil || n != 4 {
		t.Errorf("app_records after down: %d rows, %v; want 4", n, err)
	}
	if err := conn.QueryRow(ctx, "SELECT count() FROM request_facts").Scan(&facts); err != nil || facts != 5 {
		t.Errorf("request_facts after down: %d rows, %v; want 5", facts, err)
	}
	if err := g.Up(); err != nil {
		t.Fatalf("up again: %v", err)
	}
	var traceID string
	if err := conn.QueryRow(ctx, "SELECT trace_id FROM app_records FINAL WHERE event_id = 'otel-rag'").Scan(&traceID); err != nil || traceID != "" {
		// The column was dropped by down: the value comes back as the default.
		t.Errorf("trace_id after down and up: %q, %v; want ''", traceID, err)
	}
}

func sameScore(a, b *float64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return near(a, *b)
}
