package app

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/consumer/sink"
)

// ingestErrorRow is a row of ingest_errors.
type ingestErrorRow struct {
	subject, reason, payload string
	seq                      uint64
}

// ingestErrors returns ingest_errors with FINAL, by stream sequence.
func ingestErrors(t *testing.T, conn driver.Conn) []ingestErrorRow {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT subject, stream_seq, reason, payload FROM ingest_errors FINAL ORDER BY stream_seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []ingestErrorRow
	for rows.Next() {
		var r ingestErrorRow
		if err := rows.Scan(&r.subject, &r.seq, &r.reason, &r.payload); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// deadLetters returns every message of the dead-letter stream, in order.
func deadLetters(t *testing.T, js jetstream.JetStream, topo bus.Topology) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, topo.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := int(info.State.Msgs)
	if n == 0 {
		return nil
	}
	c, err := js.OrderedConsumer(ctx, topo.DLQStream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for len(out) < n {
		mb, err := c.Fetch(n-len(out), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range mb.Messages() {
			out = append(out, m)
		}
		if err := mb.Error(); err != nil {
			t.Fatalf("read the dead-letter stream: %v (%d of %d read)", err, len(out), n)
		}
	}
	return out
}

// A backfill: 150 valid app.record events, one a day over 150 days, taken in one batch as one
// ingest call's worth would be. ClickHouse refuses the 150-partition insert (code 252); the
// consumer splits it and nothing stays pending. With the retention raised first every event
// lands once; with the default 30 days the older ones would be dropped by ClickHouse at insert,
// so they are dead-lettered with the TTL in the reason instead.
func TestBackfillSpanningDays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		ttlDays int // 0: the migration's 30 days
		landed  int
	}{
		{"retention raised to 365 days", 365, 150},
		{"default retention of 30 days", 0, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			js, topo, natsCfg := testenv.JetStream(t)
			conn, chCfg := testenv.ClickHouse(t)
			ctx := context.Background()
			if tc.ttlDays > 0 {
				if err := chstore.SetTTL(ctx, conn, sink.TableAppRecords, tc.ttlDays); err != nil {
					t.Fatal(err)
				}
			}
			// An hour clear of each day boundary: event i is i days and one hour old, so the
			// 30-day TTL keeps events 0–29 and drops the rest.
			base := time.Now().Add(-time.Hour)
			const n = 150
			for i := range n {
				e := eventgen.Event(schema.KindAppRecord, i, base).(*schema.AppRecord)
				e.TS = base.Add(-time.Duration(i) * 24 * time.Hour).UTC()
				publishRaw(t, js, topo.Subject(schema.KindAppRecord), eventgen.Encode(e), e.EventID)
			}
			waitPublished(t, js)
			cfg := testConfig(natsCfg, chCfg)
			// The batch is sealed at exactly these 150 rows, never earlier by the clock.
			cfg.BatchRows, cfg.FlushInterval = n, 10*time.Minute
			start := time.Now()
			addr, stop := startConsumer(t, cfg)
			refused := n - tc.landed
			waitFor(t, drainDeadline, func() string {
				if why := drained(t, js, topo); why != "" {
					return why
				}
				if got := count(t, conn, "SELECT count() FROM ingest_errors FINAL"); got != uint64(refused) {
					return fmt.Sprintf("ingest_errors has %d rows, want %d", got, refused)
				}
				return landed(t, conn, map[schema.Kind]int{schema.KindAppRecord: tc.landed})
			})
			t.Logf("backfill settled %s after the consumer started", time.Since(start).Round(time.Millisecond))
			if got := count(t, conn, "SELECT count() FROM app_records"); got != uint64(tc.landed) {
				t.Errorf("app_records stores %d rows before merging, want %d: a part was inserted twice", got, tc.landed)
			}
			if got := count(t, conn, "SELECT count() FROM app_records WHERE ts > now() - INTERVAL 29 DAY"); got != 29 {
				t.Errorf("%d rows of the last 29 days, want 29", got)
			}
			if tc.ttlDays > 0 {
				if v := scrape(t, addr, "servescope_consumer_batch_splits_total"); v < 1 {
					t.Errorf("batch_splits_total = %v: the 150-day insert was never refused and split", v)
				}
			}
			for _, r := range ingestErrors(t, conn) {
				if r.subject != topo.Subject(schema.KindAppRecord) || !strings.Contains(r.reason, "older than the TTL of app_records (toDateTime(ts) + toIntervalDay(30))") {
					t.Errorf("ingest_errors row %d: subject %s reason %q, want the TTL refusal", r.seq, r.subject, r.reason)
				}
			}
			dl := deadLetters(t, js, topo)
			if len(dl) != refused {
				t.Errorf("dead-letter stream holds %d messages, want %d", len(dl), refused)
			}
			for _, m := range dl {
				if !strings.Contains(m.Headers().Get(bus.HeaderDLQReason), "older than the TTL of app_records") {
					t.Errorf("dead letter %s: reason %q", m.Headers().Get(bus.HeaderDLQStreamSeq), m.Headers().Get(bus.HeaderDLQReason))
				}
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Tables altered under the running consumer while good events of every kind flow: a CHECK
// constraint ClickHouse enforces (it refuses the batch, and the consumer finds the row by
// splitting) and a column turned into an Enum the client cannot encode every value into. Every
// good event lands once; every refused one is in the dead-letter stream and ingest_errors with
// ClickHouse's message; nothing stays pending.
func TestRowsRefusedWhileGoodEventsFlow(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	conn, chCfg := testenv.ClickHouse(t)
	ctx := context.Background()
	addr, stop := startConsumer(t, testConfig(natsCfg, chCfg))
	base := time.Now().Add(-time.Hour)
	want := publishEvents(t, js, topo, schema.Kinds(), 0, 3000, base)
	waitFor(t, drainDeadline, func() string { return landed(t, conn, want) })

	for _, ddl := range []string{
		"ALTER TABLE engine_logs ADD CONSTRAINT no_critical CHECK level != 'CRITICAL'",
		"ALTER TABLE requests_started MODIFY COLUMN endpoint Enum8('/v1/chat/completions' = 1, '/v1/completions' = 2)",
	} {
		if err := conn.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu       sync.Mutex
		bads     = map[string]string{} // event id → a substring of the reason
		pubDone  = make(chan struct{})
		next     = 3000
		goodMore = map[schema.Kind]int{}
	)
	go func() {
		defer close(pubDone)
		for r := range 20 {
			for k, v := range publishEvents(t, js, topo, schema.Kinds(), next, 300, base) {
				mu.Lock()
				goodMore[k] += v
				mu.Unlock()
			}
			next += 300
			// Two refused events in the middle of each round's good ones.
			crit := eventgen.Event(schema.KindEngineLog, 100_000+r, base).(*schema.EngineLog)
			crit.Level = "CRITICAL"
			embed := eventgen.Event(schema.KindRequestStarted, 200_000+r, base).(*schema.RequestStarted)
			embed.Endpoint = "/v1/embeddings"
			mu.Lock()
			bads[crit.EventID] = "code 469 VIOLATED_CONSTRAINT: Constraint `no_critical`"
			bads[embed.EventID] = "ClickHouse column endpoint Enum8("
			mu.Unlock()
			publishRaw(t, js, topo.Subject(schema.KindEngineLog), eventgen.Encode(crit), crit.EventID)
			publishRaw(t, js, topo.Subject(schema.KindRequestStarted), eventgen.Encode(embed), embed.EventID)
			waitPublished(t, js)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	<-pubDone
	mu.Lock()
	for k, v := range goodMore {
		want[k] += v
	}
	final := maps.Clone(want)
	mu.Unlock()
	start := time.Now()
	waitFor(t, drainDeadline, func() string {
		if why := drained(t, js, topo); why != "" {
			return why
		}
		if got := count(t, conn, "SELECT count() FROM ingest_errors FINAL"); got != uint64(len(bads)) {
			return fmt.Sprintf("ingest_errors has %d rows, want %d", got, len(bads))
		}
		return landed(t, conn, final)
	})
	t.Logf("settled %s after the last publish", time.Since(start).Round(time.Millisecond))
	for _, k := range schema.Kinds() {
		table, _ := sink.TableFor(k)
		if raw := count(t, conn, "SELECT count() FROM "+table); raw != uint64(final[k]) {
			t.Errorf("%s stores %d rows before merging, want %d: a part landed twice", table, raw, final[k])
		}
	}
	checkRefusal := func(where, eventID, reason string) {
		t.Helper()
		want, ok := bads[eventID]
		if !ok {
			t.Errorf("%s: event %s refused but it is a good one (reason %q)", where, eventID, reason)
			return
		}
		if !strings.Contains(reason, want) {
			t.Errorf("%s: event %s refused with %q, want a reason containing %q", where, eventID, reason, want)
		}
	}
	for _, r := range ingestErrors(t, conn) {
		e, err := schema.Decode(r.subject, []byte(r.payload))
		if err != nil {
			t.Errorf("ingest_errors row %d: payload is not the event: %v", r.seq, err)
			continue
		}
		checkRefusal("ingest_errors", e.Head().EventID, r.reason)
	}
	dl := deadLetters(t, js, topo)
	if len(dl) != len(bads) {
		t.Errorf("dead-letter stream holds %d messages, want %d", len(dl), len(bads))
	}
	for _, m := range dl {
		e, err := schema.Decode(m.Headers().Get(bus.HeaderDLQSubject), m.Data())
		if err != nil {
			t.Errorf("dead letter: payload is not the event: %v", err)
			continue
		}
		checkRefusal("dead letter", e.Head().EventID, m.Headers().Get(bus.HeaderDLQReason))
	}
	if v := scrape(t, addr, "servescope_consumer_dead_lettered_total"); v != float64(len(bads)) {
		t.Errorf("dead_lettered_total = %v, want %d", v, len(bads))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A refused message whose payload nearly fills the server's max_payload: its dead letter, with
// the reason headers, would not fit. It is published with the payload cut (and its length in a
// header) instead of being retried forever; ingest_errors keeps the whole payload.
func TestDeadLetterOfAMessageNearMaxPayload(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	conn, chCfg := testenv.ClickHouse(t)
	size := int(js.Conn().MaxPayload()) - 64
	if size > schema.MaxEventBytes {
		size = schema.MaxEventBytes
	}
	payload := []byte(`{"schema":"app.record/v1","x":"` + strings.Repeat("a", size-len(`{"schema":"app.record/v1","x":""}`)) + `"}`)
	payload[len(payload)-2] = '\\' // an invalid escape: invalid JSON
	publishRaw(t, js, topo.Subject(schema.KindAppRecord), payload, "")
	good := eventgen.Event(schema.KindAppRecord, 1, time.Now().Add(-time.Hour))
	publishRaw(t, js, topo.Subject(schema.KindAppRecord), eventgen.Encode(good), "")
	waitPublished(t, js)
	startConsumer(t, testConfig(natsCfg, chCfg))
	waitFor(t, drainDeadline, func() string {
		if why := drained(t, js, topo); why != "" {
			return why
		}
		return landed(t, conn, map[schema.Kind]int{schema.KindAppRecord: 1})
	})
	rows := ingestErrors(t, conn)
	if len(rows) != 1 || rows[0].payload != string(payload) || !strings.Contains(rows[0].reason, "invalid_json") {
		t.Fatalf("ingest_errors = %d rows, want the one refused message with its whole payload", len(rows))
	}
	dl := deadLetters(t, js, topo)
	if len(dl) != 1 {
		t.Fatalf("dead-letter stream holds %d messages, want 1", len(dl))
	}
	h := dl[0].Headers()
	if h.Get(bus.HeaderDLQPayloadTruncated) != strconv.Itoa(len(payload)) || len(dl[0].Data()) >= len(payload) ||
		string(dl[0].Data()) != string(payload[:len(dl[0].Data())]) || !strings.Contains(h.Get(bus.HeaderDLQReason), "invalid_json") {
		t.Errorf("dead letter: %d of %d bytes, headers %v; want a prefix of the payload, its length in %s and the reason", len(dl[0].Data()), len(payload), h, bus.HeaderDLQPayloadTruncated)
	}
}
