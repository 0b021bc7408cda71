package schema_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/servescope/servescope/schema"
)

// fuzzSeeds returns (subject, message) pairs: a real-looking event of every kind and hostile
// inputs a publisher outside our control could send.
func fuzzSeeds(t testing.TB) [][2]string {
	var seeds [][2]string
	add := func(k schema.Kind, data string) { seeds = append(seeds, [2]string{schema.Subject(k), data}) }
	for _, e := range fullEvents() {
		add(e.Kind(), string(mustEncode(t, e)))
	}
	const ts = `"ts":"2026-06-01T11:59:00Z"`
	ar := `"schema":"app.record/v1","event_id":"2Iq3zfE8Fh6hvZ2gwA9eWl0j5bA","request_id":"r-1",` + ts
	rf := `"schema":"request.finished/v1","event_id":"e1","request_id":"r1",` + ts + `,"arrival_ts":"2026-06-01T11:58:59Z","finished_ts":"2026-06-01T11:59:00Z","endpoint":"/v1/chat/completions","stream":true,"status_code":200`
	es := `"schema":"engine.sample/v1","event_id":"e2",` + ts + `,"engine":"http://127.0.0.1:8000/metrics","up":true`
	add(schema.KindAppRecord, `{`+ar+`}`)
	add(schema.KindRequestFinished, `{`+rf+`}`)
	add(schema.KindEngineSample, `{`+es+`}`)
	add(schema.KindEngineLog, `{"schema":"engine.log/v1","event_id":"e3",`+ts+`,"engine":"vllm","line":"INFO 06-01 11:59:00 [loggers.py:123] Engine 000: Avg prompt throughput: 412.3 tokens/s"}`)
	add(schema.KindEngineSpan, `{"schema":"engine.span/v1","event_id":"e4","request_id":"r1",`+ts+`,"start_ts":"2026-06-01T11:58:59Z","ttft_s":0.04}`)
	add(schema.KindRequestStarted, `{"schema":"request.started/v1","event_id":"e5","request_id":"r1",`+ts+`,"arrival_ts":"2026-06-01T11:59:00Z","endpoint":"/v1/completions","stream":false}`)

	// Deep nesting, in an ignored field and in a known one.
	add(schema.KindAppRecord, `{`+ar+`,"x":`+strings.Repeat("[", 20000)+strings.Repeat("]", 20000)+`}`)
	add(schema.KindAppRecord, `{`+ar+`,"passages":[{"id":"p","score":0.1,"source":{"a":{"b":{"c":[[[[{}]]]]}}}}]}`)
	// Huge numbers and numbers at the edges of their types.
	add(schema.KindRequestFinished, `{`+rf+`,"ttft_s":1e308,"e2e_s":1e-320,"prompt_tokens":4294967295}`)
	add(schema.KindRequestFinished, `{`+rf+`,"ttft_s":1e309}`)
	add(schema.KindRequestFinished, `{`+rf+`,"prompt_tokens":4294967296}`)
	add(schema.KindRequestFinished, `{`+rf+`,"status_code":65536}`)
	add(schema.KindRequestFinished, `{`+rf+`,"status_code":200.5}`)
	add(schema.KindEngineLog, `{"schema":"engine.log/v1","event_id":"e3",`+ts+`,"engine":"vllm","line":"x","offset":18446744073709551616}`)
	add(schema.KindEngineSample, `{`+es+`,"gauges":{"a":-0,"b":1E+2,"c":-1e-7}}`)
	// Invalid UTF-8, escaped oddities.
	add(schema.KindAppRecord, "{"+ar+",\"model\":\"\xff\xfe\xc0\xaf\"}")
	add(schema.KindAppRecord, `{`+ar+`,"model":"\ud800\udc00\ud800 \u0000 \u2028 <&>"}`)
	add(schema.KindAppRecord, "\xef\xbb\xbf{"+ar+"}")
	// Wrong types.
	add(schema.KindAppRecord, `{`+ar+`,"passages":"doc-1"}`)
	add(schema.KindAppRecord, `{`+ar+`,"cache_hit":"true","citation_count":"3"}`)
	add(schema.KindEngineSample, `{`+es+`,"gauges":[1,2],"histograms":{"h":[]}}`)
	add(schema.KindAppRecord, `{"schema":"app.record/v1","event_id":42,"request_id":true,"ts":1764500000}`)
	add(schema.KindAppRecord, `{"schema":["app.record/v1"]}`)
	// SQL-looking strings.
	add(schema.KindAppRecord, `{"schema":"app.record/v1","event_id":"1'; DROP TABLE requests; --","request_id":"' OR '1'='1",`+ts+`,"app":"x\\'); SELECT * FROM system.users; --"}`)
	// Nulls.
	add(schema.KindAppRecord, `{"schema":"app.record/v1","event_id":null,"request_id":null,"ts":null,"passages":null,"cache_hit":null}`)
	add(schema.KindAppRecord, `{`+ar+`,"passages":[null,{"id":"p1","score":null}],"retrieval_top_score":null}`)
	add(schema.KindEngineSample, `{`+es+`,"gauges":{"g":null},"histograms":{"h":null}}`)
	add(schema.KindAppRecord, `null`)
	// Duplicated and case-folded keys.
	add(schema.KindAppRecord, `{`+ar+`,"schema":"request.finished/v1"}`)
	add(schema.KindAppRecord, `{"schema":"request.finished/v1",`+ar+`}`)
	add(schema.KindAppRecord, `{`+ar+`,"event_id":"","EVENT_ID":"k2","Schema":"app.record/v1"}`)
	// Bucket bounds and infinities as strings.
	add(schema.KindEngineSample, `{`+es+`,"histograms":{"h":{"sum":1,"count":1,"buckets":[{"le":"-Inf","count":0},{"le":"NaN","count":0},{"le":"Inf","count":1},{"le":"+Inf","count":1}]}}}`)
	add(schema.KindRequestFinished, `{`+rf+`,"ttft_s":"+Inf"}`)
	add(schema.KindEngineSample, `{`+es+`,"histograms":{"h":{"sum":"+Inf","count":1}}}`)
	// Not objects, trailing data, truncated input.
	add(schema.KindAppRecord, ``)
	add(schema.KindAppRecord, `[]`)
	add(schema.KindAppRecord, `"app.record/v1"`)
	add(schema.KindAppRecord, `{`+ar+`} {}`)
	add(schema.KindAppRecord, `{`+ar+`}garbage`)
	add(schema.KindAppRecord, `{`+ar)
	// Timestamps: offsets, leap second, far future, far past, many fraction digits.
	add(schema.KindAppRecord, `{"schema":"app.record/v1","event_id":"e","request_id":"r","ts":"2026-06-01T13:59:00.123456789+02:00"}`)
	add(schema.KindAppRecord, `{"schema":"app.record/v1","event_id":"e","request_id":"r","ts":"2016-12-31T23:59:60Z"}`)
	add(schema.KindAppRecord, `{"schema":"app.record/v1","event_id":"e","request_id":"r","ts":"9999-12-31T23:59:59Z"}`)
	add(schema.KindAppRecord, `{"schema":"app.record/v1","event_id":"e","request_id":"r","ts":"0001-01-01T00:00:00Z"}`)
	add(schema.KindAppRecord, `{"schema":"app.record/v1","event_id":"e","request_id":"r","ts":"2026-06-01T11:00:00.1234567890123Z"}`)

	// Subjects: other prefixes, versions, kinds.
	seeds = append(seeds,
		[2]string{"tenant-9.v1.app.record", `{` + ar + `}`},
		[2]string{"servescope.v2.app.record", `{` + ar + `}`},
		[2]string{"servescope.v1.app.record.x", `{` + ar + `}`},
		[2]string{"servescope.v1.v1.app.record", `{` + ar + `}`},
		[2]string{"", `{` + ar + `}`},
	)
	return seeds
}

func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s[0], []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		e, err := schema.DecodeAt(subject, data, now)
		if err != nil {
			if e != nil {
				t.Fatalf("DecodeAt returned both an event and %v", err)
			}
			var de *schema.DecodeError
			var ve schema.ValidationErrors
			switch {
			case errors.As(err, &de):
				if de.Reason == "" || de.Err == nil {
					t.Fatalf("DecodeError without reason or cause: %#v", de)
				}
			case errors.As(err, &ve):
				if len(ve) == 0 {
					t.Fatalf("empty ValidationErrors")
				}
			default:
				t.Fatalf("error of unexpected type %T: %v", err, err)
			}
			return
		}
		k, kerr := schema.KindFromSubject(subject)
		if kerr != nil || e.Kind() != k || e.Head().Schema != k.SchemaID() {
			t.Fatalf("decoded %s (schema %q) from subject %q (%v)", e.Kind(), e.Head().Schema, subject, kerr)
		}
		b1, err := schema.Encode(e)
		if err != nil {
			t.Fatalf("Encode of a decoded event: %v\ninput: %q", err, data)
		}
		e2, err := schema.DecodeAt(subject, b1, now)
		if err != nil {
			t.Fatalf("decoding the re-encoded event: %v\ninput: %q\nencoded: %s", err, data, b1)
		}
		if !sameEvent(e, e2) {
			t.Fatalf("event changed through Encode and Decode\nfirst  %#v\nsecond %#v", normalize(e), normalize(e2))
		}
		b2, err := schema.Encode(e2)
		if err != nil {
			t.Fatalf("second Encode: %v", err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not stable\nfirst  %s\nsecond %s", b1, b2)
		}
	})
}
