package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/schema"
)

// sqlText is the hostile string of the burst: it must be stored or refused as text, never run.
const sqlText = `x'); DROP TABLE requests; SELECT ('1`

// BadEvent is one malformed or hostile message published straight to a NATS subject.
type BadEvent struct {
	Case    string
	Subject string
	Payload []byte
	Seq     uint64 // its sequence in the events stream, from the publish acknowledgement
}

// HostileRecord is a hostile but valid app.record: it must land verbatim in app_records.
type HostileRecord struct {
	Case, RequestID, App string
}

// IngestCase is one request to the gateway's ingest endpoint and the answer it must get.
type IngestCase struct {
	Case       string
	Want       int // expected HTTP status
	Got        int
	Body       string // the answer, shortened
	RequestIDs []string
}

func mustJSON(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	return m
}

func enc(m map[string]any) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// badEvents builds the burst for NATS. Every payload is checked against the schema package
// here too: a "malformed" event that decodes would be a bug in the burst, not in the consumer.
func badEvents(prefix string, now time.Time) ([]BadEvent, []HostileRecord, [][]byte, error) {
	topo := bus.Topology{Prefix: prefix}
	started := func() map[string]any {
		e := schema.NewRequestStarted("chaos-bad-"+schema.NewRequestID(), now)
		e.Model, e.Endpoint = "servescope/sim-7b", "/v1/chat/completions"
		return mustJSON(e)
	}
	finished := func() map[string]any {
		e := schema.NewRequestFinished("chaos-bad-"+schema.NewRequestID(), now.Add(-time.Second), now)
		e.Model, e.Endpoint = "servescope/sim-7b", "/v1/chat/completions"
		e.StatusCode = 200
		return mustJSON(e)
	}
	app := func() map[string]any {
		return mustJSON(schema.NewAppRecord("chaos-bad-"+schema.NewRequestID(), "chaos", now))
	}
	// The bases must be valid, or the cases prove nothing.
	for _, b := range []struct {
		k schema.Kind
		m map[string]any
	}{{schema.KindRequestStarted, started()}, {schema.KindRequestFinished, finished()}, {schema.KindAppRecord, app()}} {
		if _, err := schema.DecodeAt(topo.Subject(b.k), enc(b.m), now); err != nil {
			return nil, nil, nil, fmt.Errorf("the burst's valid %s event does not validate: %w", b.k, err)
		}
	}
	var out []BadEvent
	add := func(name string, k schema.Kind, payload []byte) {
		out = append(out, BadEvent{Case: name, Subject: topo.Subject(k), Payload: payload})
	}
	m := started()
	add("invalid JSON (truncated object)", schema.KindRequestStarted, enc(m)[:40])
	add("invalid JSON (not an object)", schema.KindRequestFinished, []byte(`[1,2,3]`))
	add("invalid JSON (empty)", schema.KindAppRecord, []byte{})
	m = started()
	m["schema"] = "request.started/v2"
	add("wrong schema version", schema.KindRequestStarted, enc(m))
	m = app()
	m["schema"] = "request.started/v1"
	add("schema of another kind", schema.KindAppRecord, enc(m))
	m = app()
	m["error_message"] = strings.Repeat("x", schema.MaxEventBytes+1024)
	add("oversize (1 MiB + 1 KiB)", schema.KindAppRecord, enc(m))
	m = app()
	m["app"] = "chaos-UTF8-MARK"
	add("invalid UTF-8", schema.KindAppRecord, bytes.Replace(enc(m), []byte("UTF8-MARK"), []byte("\xff\xfe\xfd"), 1))
	m = finished()
	m["ttft_s"] = -1.5
	add("negative duration (ttft_s)", schema.KindRequestFinished, enc(m))
	m = finished()
	m["e2e_s"] = -0.001
	add("negative duration (e2e_s)", schema.KindRequestFinished, enc(m))
	m = started()
	// Ten years after now rather than a fixed year, which would one day stop being the future.
	future := now.AddDate(10, 0, 0).UTC().Format(time.RFC3339)
	m["ts"] = future
	m["arrival_ts"] = future
	add("far-future timestamp", schema.KindRequestStarted, enc(m))
	m = started()
	delete(m, "event_id")
	add("missing event_id", schema.KindRequestStarted, enc(m))
	m = app()
	delete(m, "request_id")
	add("missing request_id", schema.KindAppRecord, enc(m))
	m = app()
	m["schema"] = sqlText
	add("SQL-looking schema", schema.KindAppRecord, enc(m))
	m = finished()
	m["ttft_s"] = sqlText
	add("SQL-looking string as a number", schema.KindRequestFinished, enc(m))
	out = append(out, BadEvent{Case: "subject of no kind", Subject: prefix + ".v1.nonsense", Payload: enc(app())})

	for _, b := range out {
		if _, err := schema.DecodeAt(b.Subject, b.Payload, now); err == nil {
			return nil, nil, nil, fmt.Errorf("burst case %q decodes as valid; it proves nothing", b.Case)
		}
	}

	// Hostile but valid: SQL in free-text fields must be stored as text.
	var hostile []HostileRecord
	var hostilePayloads [][]byte
	for i, field := range []string{"app", "request_id"} {
		e := schema.NewAppRecord(fmt.Sprintf("chaos-sql-%d-%s", i, schema.NewRequestID()), "chaos", now)
		e.ErrorMessage = sqlText
		if field == "app" {
			e.App = sqlText
		} else {
			e.RequestID = e.RequestID + sqlText
		}
		p := enc(mustJSON(e))
		if _, err := schema.DecodeAt(topo.Subject(schema.KindAppRecord), p, now); err != nil {
			return nil, nil, nil, fmt.Errorf("hostile valid record (SQL in %s) does not validate: %w", field, err)
		}
		hostile = append(hostile, HostileRecord{Case: "SQL-looking " + field + " (valid, via NATS)", RequestID: e.RequestID, App: e.App})
		hostilePayloads = append(hostilePayloads, p)
	}
	// A publisher that retries after the duplicate window sends the same event again under a new
	// message: three copies of one event must be one row.
	dup := schema.NewAppRecord("chaos-dup-"+schema.NewRequestID(), "chaos", now)
	p := enc(mustJSON(dup))
	hostile = append(hostile, HostileRecord{Case: "one event published 3 times (no Nats-Msg-Id)", RequestID: dup.RequestID, App: dup.App})
	hostilePayloads = append(hostilePayloads, p, p, p)
	return out, hostile, hostilePayloads, nil
}

// publishBurst publishes the burst to JetStream, filling in each message's stream sequence.
func publishBurst(ctx context.Context, js jetstream.JetStream, bad []BadEvent, prefix string, hostile [][]byte) error {
	for i := range bad {
		m := nats.NewMsg(bad[i].Subject)
		m.Data = bad[i].Payload
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			return fmt.Errorf("publish burst case %q (%d bytes) to %s: %w", bad[i].Case, len(bad[i].Payload), bad[i].Subject, err)
		}
		bad[i].Seq = ack.Sequence
	}
	topo := bus.Topology{Prefix: prefix}
	for _, p := range hostile {
		if _, err := js.Publish(ctx, topo.Subject(schema.KindAppRecord), p); err != nil {
			return fmt.Errorf("publish hostile record: %w", err)
		}
	}
	return nil
}

// ingestCases posts malformed and hostile records to the gateway's ingest endpoint. It returns
// the cases with their answers and the request ids of the records it must have accepted.
func ingestCases(ctx context.Context, gateway, token string, now time.Time) ([]IngestCase, []HostileRecord, []string) {
	url := gateway + "/servescope/v1/records"
	rec := func(id string) map[string]any {
		return mustJSON(schema.NewAppRecord(id, "chaos-ingest", now))
	}
	var cases []IngestCase
	post := func(name string, want int, tok string, body []byte, ids ...string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		c := IngestCase{Case: name, Want: want, RequestIDs: ids}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			c.Body = err.Error()
		} else {
			raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			c.Got, c.Body = resp.StatusCode, strings.TrimSpace(string(raw))
		}
		cases = append(cases, c)
	}
	badID := func() string { return "chaos-ingest-bad-" + schema.NewRequestID() }

	id := badID()
	post("invalid JSON", 400, token, enc(rec(id))[:30], id)
	m := rec(badID())
	m["schema"] = "app.record/v7"
	post("wrong schema version", 400, token, enc(m), m["request_id"].(string))
	m = rec(badID())
	m["error_message"] = strings.Repeat("y", 5<<20)
	post("oversize (5 MiB)", 413, token, enc(m), m["request_id"].(string))
	m = rec(badID())
	m["app"] = "UTF8-MARK"
	post("invalid UTF-8", 400, token, bytes.Replace(enc(m), []byte("UTF8-MARK"), []byte("\xff\xfe"), 1), m["request_id"].(string))
	m = rec(badID())
	m["retrieval_s"] = -2.0
	post("negative duration (retrieval_s)", 400, token, enc(m), m["request_id"].(string))
	m = rec(badID())
	m["ts"] = "2999-01-01T00:00:00Z"
	post("far-future timestamp", 400, token, enc(m), m["request_id"].(string))
	m = rec("")
	delete(m, "request_id")
	post("missing request_id", 400, token, enc(m))
	m = rec(badID())
	m["schema"] = sqlText
	post("SQL-looking schema", 400, token, enc(m), m["request_id"].(string))
	// All or nothing: one bad record in a batch refuses the good one beside it.
	good, bad := rec(badID()), rec(badID())
	bad["cache_kind"] = 12
	post("batch with one invalid record", 400, token, []byte("["+string(enc(good))+","+string(enc(bad))+"]"), good["request_id"].(string), bad["request_id"].(string))
	id = badID()
	post("wrong token", 401, token+"x", enc(rec(id)), id)
	id = badID()
	post("no token", 401, "", enc(rec(id)), id)

	// Accepted: a hostile valid record and a small batch.
	var accepted []string
	hid := "chaos-ingest-sql-" + schema.NewRequestID() + sqlText
	m = rec(hid)
	m["app"] = sqlText
	post("SQL-looking request_id and app (valid)", 202, token, enc(m), hid)
	hostile := []HostileRecord{{Case: "SQL-looking request_id and app (valid, via ingest)", RequestID: hid, App: sqlText}}
	accepted = append(accepted, hid)
	var batch []string
	var ids []string
	for i := 0; i < 5; i++ {
		rid := "chaos-ingest-ok-" + schema.NewRequestID()
		batch = append(batch, string(enc(rec(rid))))
		ids = append(ids, rid)
	}
	post("batch of 5 valid records", 202, token, []byte("["+strings.Join(batch, ",")+"]"), ids...)
	accepted = append(accepted, ids...)
	return cases, hostile, accepted
}
