package chstore_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
)

// contract is the tables and views that other parts and users' saved queries rely on (docs/concepts.md,
// "What is recorded", names them), each with key columns it must keep.
var contract = map[string][]string{
	"requests_started": {"request_id", "arrival_ts", "model", "stream"},
	"requests": {"request_id", "arrival_ts", "finished_ts", "model", "endpoint", "stream", "status_code", "error_layer", "error_message",
		"queue_s", "prefill_s", "decode_s", "ttft_s", "tpot_s", "e2e_s", "prompt_tokens", "completion_tokens", "cached_tokens",
		"finish_reason", "max_tokens", "output_foreign_chars", "output_script_violation", "prompt_version", "config_version"},
	"app_records": {"request_id", "ts", "app", "retrieval_top_score", "retrieval_scores", "passage_ids", "embedding_model_version",
		"index_version", "prompt_version", "config_version", "cache_hit", "cache_kind", "citations_missing", "error_layer", "error_message"},
	"engine_samples": {"ts", "engine", "model", "up", "num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"},
	"engine_spans":   {"request_id", "trace_id", "ts", "queue_s", "prefill_s", "decode_s", "inference_s", "ttft_s", "e2e_s", "prompt_tokens", "completion_tokens"},
	"engine_logs":    {"ts", "engine", "level", "message", "running", "waiting", "kv_cache_usage_perc", "oom_bytes_requested"},
	"alerts":         {"ts", "rule", "fingerprint", "state", "severity", "value", "baseline", "threshold", "labels", "annotations"},
	"ingest_errors":  {"ts", "subject", "reason", "payload"},
	"request_facts":  {"request_id", "arrival_ts", "ttft_s", "retrieval_top_score", "queue_s", "prefill_s", "decode_s"},
}

// TestMigrateUpTwiceDownUp runs the migrations against the real server: up from empty, up again
// (no-op, same tables), down (nothing left), up again; then checks the contract.
func TestMigrateUpTwiceDownUp(t *testing.T) {
	t.Parallel()
	conn, cfg := testenv.ClickHouse(t) // already migrated up once
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	listTables := func() []string {
		var names []string
		r, err := conn.Query(chstore.WithParams(ctx, map[string]string{"db": cfg.Database}),
			"SELECT name FROM system.tables WHERE database = {db:String} AND name != 'schema_migrations' ORDER BY name")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for r.Next() {
			var n string
			if err := r.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		return names
	}
	first := listTables()
	g, err := chstore.NewMigrator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Up(); err != nil {
		t.Fatalf("second up: %v", err)
	}
	if second := listTables(); !slices.Equal(first, second) {
		t.Errorf("tables changed by a second up: %v → %v", first, second)
	}
	for table := range contract {
		if !slices.Contains(first, table) {
			t.Errorf("table %s missing after up (have %v)", table, first)
		}
	}
	if err := g.Down(0); err != nil {
		t.Fatalf("down: %v", err)
	}
	if left := listTables(); len(left) != 0 {
		t.Errorf("tables left after down: %v", left)
	}
	if v, dirty, err := g.Version(); err != nil || v != 0 || dirty {
		t.Errorf("version after down = %d dirty=%v err=%v", v, dirty, err)
	}
	if err := g.Up(); err != nil {
		t.Fatalf("up after down: %v", err)
	}
	if again := listTables(); !slices.Equal(first, again) {
		t.Errorf("tables after down+up: %v, want %v", again, first)
	}
	for table, cols := range contract {
		r, err := conn.Query(chstore.WithParams(ctx, map[string]string{"db": cfg.Database, "t": table}),
			"SELECT name FROM system.columns WHERE database = {db:String} AND table = {t:String}")
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for r.Next() {
			var n string
			if err := r.Scan(&n); err != nil {
				t.Fatal(err)
			}
			have[n] = true
		}
		r.Close()
		for _, c := range cols {
			if !have[c] {
				t.Errorf("%s.%s missing", table, c)
			}
		}
	}
}

// TestWriteReadBackAndTTL writes a row into the requests table with a native batch, reads it back
// through the request_facts view with FINAL semantics (a duplicate insert counts once), and changes
// the table's TTL.
func TestWriteReadBackAndTTL(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now().UTC().Truncate(time.Microsecond)
	ttft := 0.051
	for range 2 { // the same event delivered twice
		b, err := conn.PrepareBatch(ctx, "INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, stream, status_code, ttft_s, prompt_tokens, finish_reason)")
		if err != nil {
			t.Fatal(err)
		}
		var tokens uint32 = 44
		if err := b.Append("ev1", "req1", now, now, now.Add(2*time.Second), "m", "/v1/chat/completions", true, uint16(200), &ttft, &tokens, "stop"); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(); err != nil {
			t.Fatal(err)
		}
	}
	var n uint64
	var gotTTFT *float64
	var tokens *uint32
	if err := conn.QueryRow(ctx, "SELECT count(), any(ttft_s), any(prompt_tokens) FROM request_facts WHERE arrival_ts >= now64() - INTERVAL 1 HOUR").Scan(&n, &gotTTFT, &tokens); err != nil {
		t.Fatal(err)
	}
	if n != 1 || gotTTFT == nil || *gotTTFT != ttft || tokens == nil || *tokens != 44 {
		t.Errorf("request_facts: count=%d ttft=%v tokens=%v, want 1, %v, 44", n, gotTTFT, tokens, ttft)
	}
	if err := chstore.SetTTL(ctx, conn, "requests", 7); err != nil {
		t.Fatal(err)
	}
	var ddl string
	if err := conn.QueryRow(ctx, "SELECT create_table_query FROM system.tables WHERE database = currentDatabase() AND name = 'requests'").Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ddl, "toIntervalDay(7)") {
		t.Errorf("TTL not changed: %s", ddl)
	}
	if err := chstore.SetTTL(ctx, conn, "requests; DROP TABLE requests", 7); err == nil {
		t.Error("SetTTL accepted an unknown table name")
	}
}

// TestStringParamRoundTrips: a String query parameter reads back as given, whatever it holds
// (a model filter with a backslash failed every read with code 25, "Cannot parse escape sequence").
func TestStringParamRoundTrips(t *testing.T) {
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, v := range []string{"Qwen/Qwen2.5-7B-Instruct-AWQ", `o'brien"\x`, `a\b\\c\`, "tab\there", "two\nlines\r\n", "", `\N`} {
		var got string
		if err := conn.QueryRow(chstore.WithParams(ctx, map[string]string{"v": chstore.StringParam(v)}), "SELECT {v:String}").Scan(&got); err != nil || got != v {
			t.Errorf("%q read back as %q (%v)", v, got, err)
		}
	}
}
