package schema_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/schema"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, e := range fullEvents() {
		t.Run(string(e.Kind()), func(t *testing.T) {
			b := mustEncode(t, e)
			for _, subject := range []string{schema.Subject(e.Kind()), schema.SubjectWithPrefix("test-7f3a.tenant", e.Kind())} {
				got, err := schema.DecodeAt(subject, b, now)
				if err != nil {
					t.Fatalf("DecodeAt(%q): %v\nevent: %s", subject, err, b)
				}
				if got.Kind() != e.Kind() {
					t.Fatalf("decoded kind %s, want %s", got.Kind(), e.Kind())
				}
				if !sameEvent(e, got) {
					t.Errorf("round trip changed the event\nwant %#v\ngot  %#v", normalize(e), normalize(got))
				}
				again := mustEncode(t, got)
				if !bytes.Equal(b, again) {
					t.Errorf("re-encoding differs\nfirst  %s\nsecond %s", b, again)
				}
			}
		})
	}
}

// TestEncodeKeepsHTMLCharacters checks that "<", ">" and "&" are written as themselves: escaped
// they take six bytes each, and a prompt full of markup would outgrow MaxEventBytes.
func TestEncodeKeepsHTMLCharacters(t *testing.T) {
	b := mustEncode(t, fullEvent(t, schema.KindRequestFinished))
	if !bytes.Contains(b, []byte(`Résumé of <b>Q3</b> & \"Ünïcode\"`)) {
		t.Errorf("prompt_text not encoded verbatim: %s", b)
	}
	if bytes.HasSuffix(b, []byte("\n")) {
		t.Errorf("encoding ends with a newline")
	}
}

func TestEncodeRefusesInvalidEvents(t *testing.T) {
	tests := []struct {
		name   string
		event  func() schema.Event
		fields []string
	}{
		{"missing endpoint and negative ttft", func() schema.Event {
			e := fullEvent(t, schema.KindRequestFinished).(*schema.RequestFinished)
			e.Endpoint = ""
			e.TTFTSeconds = ptr(-0.5)
			return e
		}, []string{"endpoint", "ttft_s"}},
		{"NaN histogram sum and bucket count", func() schema.Event {
			e := fullEvent(t, schema.KindEngineSample).(*schema.EngineSample)
			e.Histograms["e2e_request_latency_seconds"] = schema.Histogram{Sum: math.NaN(), Count: 1, Buckets: []schema.Bucket{{LE: 1, Count: math.Inf(1)}}}
			return e
		}, []string{"histograms[e2e_request_latency_seconds].sum", "histograms[e2e_request_latency_seconds].buckets[0].count"}},
		{"infinite gauge", func() schema.Event {
			e := fullEvent(t, schema.KindEngineSample).(*schema.EngineSample)
			e.Gauges["num_requests_swapped"] = math.Inf(-1)
			return e
		}, []string{"gauges[num_requests_swapped]"}},
		{"over MaxEventBytes", func() schema.Event {
			// Control characters are escaped as \u00XX, six bytes each: 256 KiB of them is
			// within prompt_text's limit but encodes to 1.5 MiB.
			e := fullEvent(t, schema.KindRequestFinished).(*schema.RequestFinished)
			e.PromptText = strings.Repeat("\x01", 256<<10)
			return e
		}, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := schema.Encode(tt.event())
			if err == nil {
				t.Fatalf("Encode succeeded: %.200s", b)
			}
			if got := fieldsOf(err); !equalStrings(got, tt.fields) {
				t.Errorf("Encode error fields %q, want %q (error: %.300v)", got, tt.fields, err)
			}
		})
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDecodeErrors(t *testing.T) {
	finished := mustEncode(t, fullEvent(t, schema.KindRequestFinished))
	set := func(base []byte, key string, val any) []byte {
		return mutate(t, base, func(m map[string]any) { m[key] = val })
	}
	del := func(base []byte, keys ...string) []byte {
		return mutate(t, base, func(m map[string]any) {
			for _, k := range keys {
				delete(m, k)
			}
		})
	}
	rfSubject := schema.Subject(schema.KindRequestFinished)
	record := mustEncode(t, fullEvent(t, schema.KindAppRecord))
	arSubject := schema.Subject(schema.KindAppRecord)

	tests := []struct {
		name    string
		subject string
		data    []byte
		reason  string   // DecodeError.Reason, for input that is not an event
		fields  []string // FieldError.Field values, in order, for invalid events
		message string   // a part of the error text
	}{
		{"missing event_id", rfSubject, del(finished, "event_id"), "", []string{"event_id"}, "missing"},
		{"empty event_id", rfSubject, set(finished, "event_id", ""), "", []string{"event_id"}, "missing"},
		{"missing request_id", rfSubject, del(finished, "request_id"), "", []string{"request_id"}, "missing"},
		{"missing ts", rfSubject, set(finished, "ts", nil), "", []string{"ts"}, "missing"},
		{"negative ttft_s", rfSubject, set(finished, "ttft_s", -1), "", []string{"ttft_s"}, "negative duration -1"},
		{"several bad fields reported together", rfSubject, set(del(finished, "event_id"), "e2e_s", -0.001), "", []string{"event_id", "e2e_s"}, ""},
		{"ts 6 minutes in the future", rfSubject, set(finished, "ts", now.Add(6*time.Minute)), "", []string{"ts"}, "in the future"},
		{"finished_ts in the future and before arrival_ts", rfSubject,
			set(set(finished, "arrival_ts", now.Add(7*time.Minute)), "finished_ts", now.Add(6*time.Minute)), "",
			[]string{"arrival_ts", "finished_ts", "finished_ts"}, "before arrival_ts"},
		{"ts before 2000", rfSubject, set(finished, "ts", "1999-12-31T23:59:59Z"), "", []string{"ts"}, "before the year 2000"},
		{"ts not RFC 3339", rfSubject, set(finished, "ts", "30/11/2026 12:00"), "invalid_json", nil, "cannot parse"},
		{"invalid UTF-8", rfSubject, bytes.Replace(finished, []byte("support-bot"), []byte("support-\xff\xfebot"), 1), "invalid_utf8", nil, "not valid UTF-8"},
		{"error_message over 8 KiB", rfSubject, set(finished, "error_message", strings.Repeat("e", 8<<10+1)), "", []string{"error_message"}, "8193 bytes, over the limit of 8192"},
		{"trace_id over 32 bytes", rfSubject, set(finished, "trace_id", strings.Repeat("a", 33)), "", []string{"trace_id"}, "over the limit of 32"},
		{"app.record trace_id over 32 bytes", arSubject, set(record, "trace_id", strings.Repeat("f", 33)), "", []string{"trace_id"}, "over the limit of 32"},
		{"unknown error_layer", rfSubject, set(finished, "error_layer", "database"), "", []string{"error_layer"}, `unknown layer "database"`},
		{"unknown schema version", rfSubject, set(finished, "schema", "request.finished/v2"), "", []string{"schema"}, `unknown schema version "v2"`},
		{"missing schema", rfSubject, del(finished, "schema"), "", []string{"schema"}, "missing"},
		{"null schema", rfSubject, set(finished, "schema", nil), "", []string{"schema"}, "missing"},
		{"schema of another kind", rfSubject, set(finished, "schema", "app.record/v1"), "", []string{"schema"}, `"app.record/v1" does not match subject kind request.finished/v1`},
		{"app.record on request.finished subject", rfSubject, mustEncode(t, fullEvent(t, schema.KindAppRecord)), "", []string{"schema"}, "does not match"},
		{"subject of another version", "servescope.v2.request.finished", finished, "subject", nil, "not a servescope v1 subject"},
		{"subject of unknown kind", "servescope.v1.request.cancelled", finished, "subject", nil, `unknown event kind "request.cancelled"`},
		{"truncated JSON", rfSubject, finished[:len(finished)/2], "invalid_json", nil, ""},
		{"not an object", rfSubject, []byte(`["request.finished/v1"]`), "invalid_json", nil, ""},
		{"empty input", rfSubject, nil, "invalid_json", nil, ""},
		{"trailing data", rfSubject, append(append([]byte{}, finished...), ` {"schema":"request.finished/v1"}`...), "invalid_json", nil, ""},
		{"NaN literal", rfSubject, bytes.Replace(finished, []byte(`"ttft_s":0.041`), []byte(`"ttft_s":NaN`), 1), "invalid_json", nil, ""},
		{"NaN string in a duration", rfSubject, set(finished, "ttft_s", "NaN"), "invalid_json", nil, "ttft_s"},
		{"number too large for float64", rfSubject, bytes.Replace(finished, []byte(`"ttft_s":0.041`), []byte(`"ttft_s":1e400`), 1), "invalid_json", nil, ""},
		{"status_code 600", rfSubject, set(finished, "status_code", 600), "", []string{"status_code"}, "600 is not an HTTP status"},
		{"status_code 99", rfSubject, set(finished, "status_code", 99), "", []string{"status_code"}, "99 is not an HTTP status"},
		{"status_code missing", rfSubject, del(finished, "status_code"), "", []string{"status_code"}, "0 is not an HTTP status"},
		{"status_code over uint16", rfSubject, set(finished, "status_code", 70000), "invalid_json", nil, "status_code"},
		{"status_code negative", rfSubject, set(finished, "status_code", -200), "invalid_json", nil, "status_code"},
		{"status_code as string", rfSubject, set(finished, "status_code", "200"), "invalid_json", nil, "status_code"},
		{"token count negative", rfSubject, set(finished, "prompt_tokens", -1), "invalid_json", nil, "prompt_tokens"},
		{"oversize", rfSubject, append(append([]byte{}, finished[:len(finished)-1]...), []byte(`,"pad":"`+strings.Repeat("p", schema.MaxEventBytes)+`"}`)...), "oversize", nil, "over the limit of 1048576"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := schema.DecodeAt(tt.subject, tt.data, now)
			if err == nil {
				t.Fatalf("DecodeAt succeeded: %+v", e)
			}
			if e != nil {
				t.Errorf("DecodeAt returned an event with its error")
			}
			var de *schema.DecodeError
			if tt.reason != "" {
				if !errors.As(err, &de) {
					t.Fatalf("error %T %v, want *DecodeError with reason %q", err, err, tt.reason)
				}
				if de.Reason != tt.reason {
					t.Errorf("DecodeError.Reason %q, want %q (%v)", de.Reason, tt.reason, err)
				}
			} else {
				var ve schema.ValidationErrors
				if !errors.As(err, &ve) {
					t.Fatalf("error %T %v, want ValidationErrors", err, err)
				}
				if got := fieldsOf(err); !equalStrings(got, tt.fields) {
					t.Errorf("error fields %q, want %q (%v)", got, tt.fields, err)
				}
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error %q does not contain %q", err, tt.message)
			}
		})
	}
}

func TestDecodeAccepts(t *testing.T) {
	finished := mustEncode(t, fullEvent(t, schema.KindRequestFinished))
	set := func(base []byte, key string, val any) []byte {
		return mutate(t, base, func(m map[string]any) { m[key] = val })
	}
	tests := []struct {
		name  string
		kind  schema.Kind
		data  []byte
		check func(t *testing.T, e schema.Event)
	}{
		{"ts 4 minutes in the future", schema.KindRequestFinished, set(finished, "ts", now.Add(4*time.Minute)), nil},
		{"error_message of exactly 8 KiB", schema.KindRequestFinished, set(finished, "error_message", strings.Repeat("é", 4<<10)), func(t *testing.T, e schema.Event) {
			if n := len(e.(*schema.RequestFinished).ErrorMessage); n != 8<<10 {
				t.Errorf("error_message is %d bytes, want %d", n, 8<<10)
			}
		}},
		{"status_code 599", schema.KindRequestFinished, set(finished, "status_code", 599), nil},
		{"status_code 100", schema.KindRequestFinished, set(finished, "status_code", 100), nil},
		{"unknown fields are ignored", schema.KindRequestFinished, set(finished, "x_vendor_field", map[string]any{"a": 1}), nil},
		{"timestamp with an offset", schema.KindRequestFinished, set(finished, "ts", now.Add(-time.Hour).In(time.FixedZone("CET", 3600)).Format(time.RFC3339Nano)), func(t *testing.T, e schema.Event) {
			if got := e.Head().TS; !got.Equal(now.Add(-time.Hour)) {
				t.Errorf("ts %v, want %v", got, now.Add(-time.Hour))
			}
		}},
		{"engine_ttft_s, the old name of scheduled_to_first_token_s", schema.KindRequestFinished,
			mutate(t, finished, func(m map[string]any) { delete(m, "scheduled_to_first_token_s"); m["engine_ttft_s"] = 0.25 }),
			func(t *testing.T, e schema.Event) {
				if v := e.(*schema.RequestFinished).ScheduledToFirstTokenSeconds; v == nil || *v != 0.25 {
					t.Errorf("scheduled_to_first_token_s %v, want 0.25 from engine_ttft_s", v)
				}
			}},
		{"the current name wins over the old one", schema.KindRequestFinished,
			mutate(t, finished, func(m map[string]any) { m["scheduled_to_first_token_s"] = 0.5; m["engine_ttft_s"] = 0.25 }),
			func(t *testing.T, e schema.Event) {
				if v := e.(*schema.RequestFinished).ScheduledToFirstTokenSeconds; v == nil || *v != 0.5 {
					t.Errorf("scheduled_to_first_token_s %v, want 0.5", v)
				}
			}},
		{"engine.sample without request_id", schema.KindEngineSample,
			mutate(t, mustEncode(t, fullEvent(t, schema.KindEngineSample)), func(m map[string]any) { delete(m, "request_id") }), nil},
		{"engine.log without request_id", schema.KindEngineLog,
			mutate(t, mustEncode(t, fullEvent(t, schema.KindEngineLog)), func(m map[string]any) { delete(m, "request_id") }), nil},
		{"minimal app.record", schema.KindAppRecord,
			[]byte(`{"schema":"app.record/v1","event_id":"2Iq3zfE8Fh6hvZ2gwA9eWl0j5bA","request_id":"r-1","ts":"2026-06-01T11:59:00Z"}`),
			func(t *testing.T, e schema.Event) {
				r := e.(*schema.AppRecord)
				if r.CacheHit != nil || r.RetrievalTopScore != nil || r.Passages != nil {
					t.Errorf("absent optional fields decoded as present: %+v", r)
				}
			}},
		{"bucket bounds as strings", schema.KindEngineSample,
			[]byte(`{"schema":"engine.sample/v1","event_id":"e1","ts":"2026-06-01T11:59:00Z","engine":"vllm","up":true,` +
				`"histograms":{"h":{"sum":1,"count":2,"buckets":[{"le":"-Inf","count":0},{"le":"NaN","count":0},{"le":0.5,"count":1},{"le":"Inf","count":2},{"le":"+Inf","count":2}]}}}`),
			func(t *testing.T, e schema.Event) {
				b := e.(*schema.EngineSample).Histograms["h"].Buckets
				if !math.IsInf(float64(b[0].LE), -1) || !math.IsNaN(float64(b[1].LE)) || b[2].LE != 0.5 ||
					!math.IsInf(float64(b[3].LE), 1) || !math.IsInf(float64(b[4].LE), 1) {
					t.Errorf("bucket bounds decoded as %v", b)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := schema.DecodeAt(schema.Subject(tt.kind), tt.data, now)
			if err != nil {
				t.Fatalf("DecodeAt: %v", err)
			}
			if e.Kind() != tt.kind {
				t.Fatalf("kind %s, want %s", e.Kind(), tt.kind)
			}
			if tt.check != nil {
				tt.check(t, e)
			}
		})
	}
}

func TestDecodeRequestIDRequirement(t *testing.T) {
	required := map[schema.Kind]bool{
		schema.KindRequestStarted: true, schema.KindRequestFinished: true, schema.KindAppRecord: true,
		schema.KindEngineSpan: true, schema.KindEngineSample: false, schema.KindEngineLog: false,
	}
	for _, e := range fullEvents() {
		t.Run(string(e.Kind()), func(t *testing.T) {
			b := mutate(t, mustEncode(t, e), func(m map[string]any) { m["request_id"] = "" })
			_, err := schema.DecodeAt(schema.Subject(e.Kind()), b, now)
			if required[e.Kind()] {
				if got := fieldsOf(err); !equalStrings(got, []string{"request_id"}) {
					t.Errorf("empty request_id: error fields %q, want [request_id] (%v)", got, err)
				}
			} else if err != nil {
				t.Errorf("empty request_id refused: %v", err)
			}
		})
	}
}

func TestFloatOrInfJSON(t *testing.T) {
	tests := []struct {
		in   schema.FloatOrInf
		json string
	}{
		{0, `0`},
		{0.25, `0.25`},
		{-3, `-3`},
		{1e21, `1e+21`},
		{schema.FloatOrInf(math.Inf(1)), `"+Inf"`},
		{schema.FloatOrInf(math.Inf(-1)), `"-Inf"`},
		{schema.FloatOrInf(math.NaN()), `"NaN"`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.in)
		if err != nil {
			t.Fatalf("Marshal(%v): %v", tt.in, err)
		}
		if string(b) != tt.json {
			t.Errorf("Marshal(%v) = %s, want %s", tt.in, b, tt.json)
		}
		var back schema.FloatOrInf
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("Unmarshal(%s): %v", b, err)
		}
		if back != tt.in && !(math.IsNaN(float64(back)) && math.IsNaN(float64(tt.in))) {
			t.Errorf("Unmarshal(%s) = %v, want %v", b, back, tt.in)
		}
	}
	for _, bad := range []string{`"inf"`, `"1.5"`, `""`, `true`, `{}`, `"+Inf`} {
		var f schema.FloatOrInf
		if err := json.Unmarshal([]byte(bad), &f); err == nil {
			t.Errorf("Unmarshal(%s) accepted as %v", bad, f)
		}
	}
}

func TestConstructors(t *testing.T) {
	cet := time.FixedZone("CET", 3600)
	arrival := now.Add(-2 * time.Second).In(cet)
	end := now.Add(-time.Second).In(cet)
	tests := []struct {
		e    schema.Event
		kind schema.Kind
		req  string
	}{
		{schema.NewRequestStarted("r1", arrival), schema.KindRequestStarted, "r1"},
		{schema.NewRequestFinished("r2", arrival, end), schema.KindRequestFinished, "r2"},
		{schema.NewAppRecord("r3", "support-bot", end), schema.KindAppRecord, "r3"},
		{schema.NewEngineSample("http://127.0.0.1:8000/metrics", end), schema.KindEngineSample, ""},
		{schema.NewEngineSpan("r4", end), schema.KindEngineSpan, "r4"},
		{schema.NewEngineLog("vllm-0", "INFO hello", end), schema.KindEngineLog, ""},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		h := tt.e.Head()
		if tt.e.Kind() != tt.kind || h.Schema != tt.kind.SchemaID() {
			t.Errorf("%T: kind %s schema %q, want %s", tt.e, tt.e.Kind(), h.Schema, tt.kind.SchemaID())
		}
		if len(h.EventID) != 27 || seen[h.EventID] {
			t.Errorf("%T: event_id %q is not a fresh KSUID", tt.e, h.EventID)
		}
		seen[h.EventID] = true
		if h.RequestID != tt.req {
			t.Errorf("%T: request_id %q, want %q", tt.e, h.RequestID, tt.req)
		}
		if h.TS.Location() != time.UTC {
			t.Errorf("%T: ts %v not in UTC", tt.e, h.TS)
		}
		if schema.MsgID(tt.e) != h.EventID {
			t.Errorf("%T: MsgID %q, want the event_id %q", tt.e, schema.MsgID(tt.e), h.EventID)
		}
	}
	if r := tests[1].e.(*schema.RequestFinished); !r.ArrivalTS.Equal(arrival) || !r.FinishedTS.Equal(end) || !r.TS.Equal(end) {
		t.Errorf("NewRequestFinished times: arrival %v finished %v ts %v", r.ArrivalTS, r.FinishedTS, r.TS)
	}
	if r := tests[2].e.(*schema.AppRecord); r.App != "support-bot" {
		t.Errorf("NewAppRecord app %q", r.App)
	}
	if err := tests[2].e.ValidateAt(now); err != nil {
		t.Errorf("NewAppRecord is not valid on its own: %v", err)
	}
}

func TestNewUnknownKind(t *testing.T) {
	if e := schema.New("request.cancelled"); e != nil {
		t.Errorf("New(unknown) = %#v, want nil", e)
	}
	for _, k := range schema.Kinds() {
		e := schema.New(k)
		if e == nil || e.Kind() != k || e.Head().Schema != k.SchemaID() {
			t.Errorf("New(%s) = %#v", k, e)
		}
	}
}

// A payload that is JSON but not an object says so, instead of a Go type dump.
func TestDecodeNonObject(t *testing.T) {
	for _, in := range []string{`[1,2,3]`, `"x"`, `42`, `null`, `  `} {
		_, err := schema.Decode(schema.Subject(schema.KindAppRecord), []byte(in))
		var de *schema.DecodeError
		if !errors.As(err, &de) || de.Reason != "invalid_json" || !strings.Contains(err.Error(), "not a JSON object") {
			t.Errorf("Decode(%q) = %v, want invalid_json: event is not a JSON object", in, err)
		}
	}
}
