package sink

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/schema"
)

// The column lists must be exactly the tables' columns (in order, without ingested_at, which
// keeps its DEFAULT): a column added by a migration and not mapped here would silently stay empty.
func TestTableColumnsMatchMigration(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx := context.Background()
	s := New(conn)
	for _, tbl := range Tables() {
		rows, err := conn.Query(ctx, "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = ? AND name != 'ingested_at' ORDER BY position", tbl)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			got = append(got, n)
		}
		rows.Close()
		want, ok := s.Columns(tbl)
		if !ok {
			t.Fatalf("no columns for %s", tbl)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: migration has columns\n%v\nsink writes\n%v", tbl, got, want)
		}
	}
	if err := s.Check(ctx); err != nil {
		t.Errorf("Check on a migrated database: %v", err)
	}
}

func TestCheckNamesMissingTables(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx := context.Background()
	if err := conn.Exec(ctx, "DROP TABLE engine_logs SYNC"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "ALTER TABLE requests DROP COLUMN ttft_s"); err != nil {
		t.Fatal(err)
	}
	err := New(conn).Check(ctx)
	if !errors.Is(err, ErrMissingTables) {
		t.Fatalf("Check = %v, want ErrMissingTables", err)
	}
	for _, want := range []string{"table engine_logs", "column requests.ttft_s", "servescope migrate up"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Check error %q does not name %q", err, want)
		}
	}
}

// Every kind round-trips: the row read back holds the event's values, NULL for absent ones.
func TestInsertEventsEveryKind(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx := context.Background()
	s := New(conn)
	base := time.Now().Add(-time.Minute).UTC()
	for _, k := range schema.Kinds() {
		events := []schema.Event{eventgen.Event(k, 1, base), eventgen.Event(k, 2, base)}
		// Decode what was encoded, as the consumer does, so the row holds the wire values.
		for i, e := range events {
			d, err := schema.Decode(schema.Subject(k), eventgen.Encode(e))
			if err != nil {
				t.Fatal(err)
			}
			events[i] = d
		}
		if err := s.InsertEvents(ctx, k, events, Token(string(k), []string{events[0].Head().EventID, events[1].Head().EventID})); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	var (
		ttft     *float64
		tpot     *float64
		status   uint16
		finished time.Time
	)
	row := conn.QueryRow(ctx, "SELECT ttft_s, tpot_s, status_code, finished_ts FROM requests ORDER BY request_id LIMIT 1")
	if err := row.Scan(&ttft, &tpot, &status, &finished); err != nil {
		t.Fatal(err)
	}
	want := eventgen.RequestFinished(1, base)
	if ttft == nil || *ttft != *want.TTFTSeconds || tpot != nil || status != 200 || !finished.Equal(want.FinishedTS) {
		t.Errorf("requests row: ttft=%v tpot=%v status=%d finished=%s, want ttft=%v tpot=NULL status=200 finished=%s", ttft, tpot, status, finished, *want.TTFTSeconds, want.FinishedTS)
	}
	var ids []string
	var scores []float64
	var top *float64
	var traceID string
	if err := conn.QueryRow(ctx, "SELECT passage_ids, retrieval_scores, retrieval_top_score, trace_id FROM app_records ORDER BY request_id LIMIT 1").Scan(&ids, &scores, &top, &traceID); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 || ids[0] != "doc-1#3" || len(scores) != 2 || scores[0] != 0.82 || top == nil || *top != 0.82 ||
		traceID != eventgen.Event(schema.KindAppRecord, 1, base).(*schema.AppRecord).TraceID {
		t.Errorf("app_records row: ids=%v scores=%v top=%v trace_id=%q", ids, scores, top, traceID)
	}
	var le float64
	var sum float64
	var start *time.Time
	if err := conn.QueryRow(ctx, "SELECT histogram_buckets['time_to_first_token_seconds'][3].le, histogram_sum['time_to_first_token_seconds'] FROM engine_samples LIMIT 1").Scan(&le, &sum); err != nil {
		t.Fatal(err)
	}
	if !math.IsInf(le, 1) || sum != 12.5 {
		t.Errorf("engine_samples: last bucket le=%v sum=%v, want +Inf and 12.5", le, sum)
	}
	var promptIndex, childIndex *uint32
	var finish string
	if err := conn.QueryRow(ctx, "SELECT start_ts, prompt_index, child_index, finish_reason FROM engine_spans LIMIT 1").Scan(&start, &promptIndex, &childIndex, &finish); err != nil {
		t.Fatal(err)
	}
	if start == nil {
		t.Errorf("engine_spans.start_ts is NULL, want the span start")
	}
	if promptIndex == nil || *promptIndex != 0 || childIndex == nil || *childIndex != 1 || finish != "length" {
		t.Errorf("engine_spans: prompt_index %v child_index %v finish_reason %q, want 0, 1, length", promptIndex, childIndex, finish)
	}
	for _, tbl := range Tables()[:6] {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM "+tbl).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 2 {
			t.Errorf("%s holds %d rows, want 2", tbl, n)
		}
	}
}

// A batch retried with the same token (the insert's outcome was unknown) is stored once; the
// same rows under another token (a redelivery batched differently) are stored again and
// collapsed by FINAL.
func TestInsertDeduplication(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx := context.Background()
	s := New(conn)
	base := time.Now().Add(-time.Minute).UTC()
	var events []schema.Event
	var ids []string
	for i := range 100 {
		e := eventgen.Event(schema.KindRequestFinished, i, base)
		events = append(events, e)
		ids = append(ids, e.Head().EventID)
	}
	tok := Token(TableRequests, ids)
	for range 3 {
		if err := s.InsertEvents(ctx, schema.KindRequestFinished, events, tok); err != nil {
			t.Fatal(err)
		}
	}
	count := func(q string) uint64 {
		var n uint64
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count("SELECT count() FROM requests"); n != 100 {
		t.Errorf("after 3 inserts with one token: %d rows, want 100", n)
	}
	if err := s.InsertEvents(ctx, schema.KindRequestFinished, events[:50], Token(TableRequests, ids[:50])); err != nil {
		t.Fatal(err)
	}
	if n := count("SELECT count() FROM requests FINAL"); n != 100 {
		t.Errorf("FINAL after a re-batched redelivery: %d rows, want 100", n)
	}
	errs := []IngestError{{TS: base, Subject: "x.v1.request.finished", StreamSeq: 7, Reason: "invalid_json: boom", Payload: []byte("{")}}
	for range 2 {
		if err := s.InsertErrors(ctx, errs, ErrorsToken(errs)); err != nil {
			t.Fatal(err)
		}
	}
	if n := count("SELECT count() FROM ingest_errors"); n != 1 {
		t.Errorf("ingest_errors: %d rows, want 1", n)
	}
}

func TestTokenDependsOnEveryKey(t *testing.T) {
	a := Token("requests", []string{"a", "b"})
	for _, other := range []string{Token("requests", []string{"a"}), Token("requests", []string{"b", "a"}), Token("requests", []string{"ab"}), Token("app_records", []string{"a", "b"})} {
		if other == a {
			t.Errorf("token collision: %s", a)
		}
	}
	if Token("requests", []string{"a", "b"}) != a {
		t.Error("token is not deterministic")
	}
}

// The gateway's per-choice finish reasons, response id and trace sampling decision land in
// their columns; an event without them stores an empty array and NULL, not a guess.
func TestRequestChoicesAndTraceColumns(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx := context.Background()
	s := New(conn)
	base := time.Now().Add(-time.Minute).UTC()
	with := eventgen.RequestFinished(1, base)
	with.FinishReasons = []string{"stop", "length", ""}
	with.ResponseID = "cmpl-" + with.RequestID
	sampled := false
	with.TraceSampled = &sampled
	without := eventgen.RequestFinished(2, base)
	events := []schema.Event{with, without}
	if err := s.InsertEvents(ctx, schema.KindRequestFinished, events, Token("rf", []string{with.EventID, without.EventID})); err != nil {
		t.Fatal(err)
	}
	type row struct {
		reasons []string
		respID  string
		sampled *bool
		anyLen  uint8
	}
	read := func(id string) row {
		var r row
		if err := conn.QueryRow(ctx, "SELECT finish_reasons, response_id, trace_sampled, has(finish_reasons, 'length') FROM requests WHERE request_id = ?", id).
			Scan(&r.reasons, &r.respID, &r.sampled, &r.anyLen); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := read(with.RequestID); !slices.Equal(r.reasons, with.FinishReasons) || r.respID != with.ResponseID || r.sampled == nil || *r.sampled || r.anyLen != 1 {
		t.Errorf("row with the fields: %+v", r)
	}
	if r := read(without.RequestID); len(r.reasons) != 0 || r.respID != "" || r.sampled != nil || r.anyLen != 0 {
		t.Errorf("row without the fields: %+v", r)
	}
}

// What ClickHouse 26.7 (and the client) answer to the batches the consumer must not retry
// unchanged, classified as the consumer acts on them.
func TestInsertRefusalsAreClassified(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx := context.Background()
	s := New(conn)
	base := time.Now().Add(-time.Hour).UTC()
	ids := func(evs []schema.Event) []string {
		out := make([]string, len(evs))
		for i, e := range evs {
			out[i] = e.Head().EventID
		}
		return out
	}
	insert := func(k schema.Kind, evs []schema.Event) error {
		table, _ := TableFor(k)
		return s.InsertEvents(ctx, k, evs, Token(table, ids(evs)))
	}

	t.Run("a batch spanning 150 days is split", func(t *testing.T) {
		if err := chstore.SetTTL(ctx, conn, TableAppRecords, 365); err != nil {
			t.Fatal(err)
		}
		var evs []schema.Event
		for i := range 150 {
			e := eventgen.Event(schema.KindAppRecord, i, base).(*schema.AppRecord)
			e.TS = base.Add(-time.Duration(i) * 24 * time.Hour)
			evs = append(evs, e)
		}
		v := Classify(insert(schema.KindAppRecord, evs))
		if v.Class != Split || v.Code != 252 || !strings.Contains(v.Message, "Too many partitions") {
			t.Fatalf("150 days in one insert: %+v, want Split of code 252", v)
		}
		for _, half := range [][]schema.Event{evs[:75], evs[75:]} {
			if err := insert(schema.KindAppRecord, half); err != nil {
				t.Fatalf("75 days in one insert: %v", err)
			}
		}
	})

	t.Run("a constraint added under the consumer refuses a row", func(t *testing.T) {
		if err := conn.Exec(ctx, "ALTER TABLE engine_logs ADD CONSTRAINT no_critical CHECK level != 'CRITICAL'"); err != nil {
			t.Fatal(err)
		}
		good := eventgen.Event(schema.KindEngineLog, 1, base)
		bad := eventgen.Event(schema.KindEngineLog, 2, base).(*schema.EngineLog)
		bad.Level = "CRITICAL"
		v := Classify(insert(schema.KindEngineLog, []schema.Event{good, bad}))
		if v.Class != Refuse || v.Code != 469 || v.Rows != nil || !strings.Contains(v.Reason(), "VIOLATED_CONSTRAINT") || !strings.Contains(v.Reason(), "no_critical") {
			t.Fatalf("constraint violated: %+v (reason %q), want Refuse of code 469 naming the constraint", v, v.Reason())
		}
	})

	t.Run("a column type changed under the consumer refuses the rows it cannot hold", func(t *testing.T) {
		if err := conn.Exec(ctx, "ALTER TABLE requests_started MODIFY COLUMN endpoint Enum8('/v1/chat/completions' = 1, '/v1/completions' = 2)"); err != nil {
			t.Fatal(err)
		}
		var evs []schema.Event
		for i := range 6 {
			e := eventgen.Event(schema.KindRequestStarted, i, base).(*schema.RequestStarted)
			if i%3 != 0 {
				e.Endpoint = "/v1/embeddings" // not one of the Enum's values
			}
			evs = append(evs, e)
		}
		err := insert(schema.KindRequestStarted, evs)
		v := Classify(err)
		if v.Class != Refuse || !slices.Equal(v.Rows, []int{1, 2, 4, 5}) || !strings.Contains(v.Reasons[0], "ClickHouse column endpoint Enum8(") {
			t.Fatalf("type changed: %v → %+v, want Refuse of rows 1, 2, 4, 5 naming the endpoint column", err, v)
		}
		if n := countRows(t, conn, "requests_started"); n != 0 {
			t.Errorf("requests_started holds %d rows after a refused batch, want 0 (nothing sent)", n)
		}
		if err := insert(schema.KindRequestStarted, []schema.Event{evs[0], evs[3]}); err != nil {
			t.Errorf("rows the Enum holds: %v", err)
		}
		// A Go type the client does not convert to the new type refuses every row, NULL or not.
		if err := conn.Exec(ctx, "ALTER TABLE requests_started MODIFY COLUMN max_tokens Nullable(UInt16)"); err != nil {
			t.Fatal(err)
		}
		evs[0].(*schema.RequestStarted).MaxTokens = nil
		if v := Classify(insert(schema.KindRequestStarted, []schema.Event{evs[0], evs[3]})); v.Class != Refuse || !slices.Equal(v.Rows, []int{0, 1}) {
			t.Errorf("max_tokens now UInt16: %+v, want both rows refused", v)
		}
	})

	t.Run("rows older than the TTL are refused before ClickHouse drops them", func(t *testing.T) {
		ret, err := s.LoadRetention(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r := ret[TableEngineSpans]; r.Column != "ts" || r.Keep != 14*24*time.Hour {
			t.Fatalf("retention of engine_spans = %+v, want ts kept 14 days", r)
		}
		if r := ret[TableAppRecords]; r.Keep != 365*24*time.Hour {
			t.Errorf("retention of app_records after migrate ttl 365 = %+v", r)
		}
		var evs []schema.Event
		for i := range 4 {
			e := eventgen.Event(schema.KindEngineSpan, i, base).(*schema.EngineSpan)
			if i%2 == 1 {
				e.TS = base.Add(-20 * 24 * time.Hour)
			}
			evs = append(evs, e)
		}
		v := Classify(insert(schema.KindEngineSpan, evs))
		if v.Class != Refuse || !slices.Equal(v.Rows, []int{1, 3}) || !strings.Contains(v.Reasons[0], "older than the TTL of engine_spans (toDateTime(ts) + toIntervalDay(14))") {
			t.Fatalf("rows 20 days old: %+v, want Refuse of rows 1 and 3 naming the TTL", v)
		}
	})

	t.Run("a dropped column is retried, not refused", func(t *testing.T) {
		if err := conn.Exec(ctx, "ALTER TABLE engine_samples DROP COLUMN kv_cache_usage_perc"); err != nil {
			t.Fatal(err)
		}
		v := Classify(insert(schema.KindEngineSample, []schema.Event{eventgen.Event(schema.KindEngineSample, 1, base)}))
		if v.Class != Retry || v.Code != 16 {
			t.Fatalf("column dropped: %+v, want Retry of code 16", v)
		}
	})
}

func countRows(t *testing.T, conn driver.Conn, table string) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
