package pipeline

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/benchcpu"
	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/schema"
)

// decode must agree with schema.DecodeAt on every input: the same event or the same error.
func FuzzDecodeMatchesSchema(f *testing.F) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	base := now.Add(-time.Hour)
	for _, k := range schema.Kinds() {
		f.Add(string(k), eventgen.Encode(eventgen.Event(k, 3, base)))
		for _, m := range eventgen.MalformedFor(k, 3, base) {
			f.Add(string(k), m.Data)
		}
	}
	f.Add("request.finished", []byte(`{"SCHEMA":"request.finished/v1","schema":null}`))
	// Edges of the hand-written reader: each must end as encoding/json ends it.
	rf := string(eventgen.Encode(eventgen.RequestFinished(5, base)))
	rs := string(eventgen.Encode(eventgen.Event(schema.KindRequestStarted, 5, base)))
	for _, edit := range []struct{ old, new string }{
		{`"prompt_tokens":717`, `"prompt_tokens":7e2`},
		{`"prompt_tokens":717`, `"prompt_tokens":-0`},
		{`"prompt_tokens":717`, `"prompt_tokens":0717`},
		{`"prompt_tokens":717`, `"prompt_tokens":4294967296`},
		{`"prompt_tokens":717`, `"prompt_tokens":null`},
		{`"prompt_tokens":717`, `"Prompt_Tokens":717`},
		{`"status_code":200`, `"status_code":65536`},
		{`"status_code":200`, `"status_code":200.0`},
		{`"ttft_s":0.0712`, `"ttft_s":1e400`},
		{`"ttft_s":0.0712`, `"ttft_s":-1.5E-3`},
		{`"ttft_s":0.0712`, `"ttft_s":.5`},
		{`"ttft_s":0.0712`, `"ttft_s":"0.1"`},
		{`"ttft_s":0.0712`, `"engine_ttft_s":0.25,"ttft_s":0.0712`},
		{`"ttft_s":0.0712`, `"ttft_s":0.0712,"engine_ttft_s":"x"`},
		{`"ttft_s":0.0712`, `"scheduled_to_first_token_s":0.5,"engine_ttft_s":0.25,"ttft_s":0.0712`},
		{`"ttft_s":0.0712`, `"engine_ttft_s":0.25,"scheduled_to_first_token_s":0.5,"ttft_s":0.0712`},
		{`"model":"qwen2.5-7b"`, `"model":"qwené"`},
		{`"model":"qwen2.5-7b"`, `"model":"a","model":"b"`},
		{`"model":"qwen2.5-7b"`, `"model" : "é" `},
		{`"stream":true`, `"stream":tru`},
		{`"stream":true`, `"stream":1`},
		{`"ts":"`, `"ts":"x`},
		{`"finish_reason":"stop"}`, `"finish_reason":"stop"} x`},
		{`"finish_reason":"stop"}`, `"finish_reason":"stop",}`},
		{`"finish_reason":"stop"}`, `"finish_reason":"stop","passages":[]}`},
		{`"finish_reason":"stop"}`, `"finish_reason":"stop","finish_reasons":["stop","length",""],"response_id":"chatcmpl-x","trace_sampled":false}`},
		{`"finish_reason":"stop"}`, `"finish_reason":"stop","finish_reasons":[]}`},
		{`"finish_reason":"stop"}`, `"finish_reason":"stop","finish_reasons":[ "a" , "b" ]}`},
		{`"finish_reason":"stop"}`, `"finish_reason":"stop","finish_reasons":["a",]}`},
		{`"finish_reason":"stop"}`, `"finish_reason":"stop","finish_reasons":["a"],"finish_reasons":["b","c"]}`},
		{`"finish_reason":"stop"}`, `"finish_reason":"stop","finish_reasons":[1]}`},
		{`"finish_reason":"stop"}`, `"finish_reason":"stop","finish_reasons":["\u0061"]}`},
		{`"finish_reason":"stop"}`, `"finish_reason":"stop","finish_reasons":null}`},
		{`"finish_reason":"stop"}`, `"finish_reason":"stop","finish_reasons":"stop"}`},
		{`"finish_reason":"stop"}`, `"finish_reason":"stop","trace_sampled":null}`},
		{`"finish_reason":"stop"}`, `"finish_reason":"stop","response_id":["x"]}`},
	} {
		f.Add("request.finished", []byte(strings.Replace(rf, edit.old, edit.new, 1)))
	}
	f.Add("request.started", []byte(strings.Replace(rs, `"stream":false`, `"stream":false,"max_tokens":12`, 1)))
	f.Add("request.started", []byte(" \n"+rs+"\t"))
	f.Add("request.finished", []byte(`null`))
	f.Add("engine.log", []byte(`{} ]`))
	f.Add("bogus", []byte(`{}`))
	f.Fuzz(func(t *testing.T, kind string, data []byte) {
		subject := "servescope.v1." + kind
		got, gotErr := decode(subject, data, now)
		want, wantErr := schema.DecodeAt(subject, data, now)
		if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
			t.Fatalf("decode error %v, schema.DecodeAt error %v\ninput %q", gotErr, wantErr, data)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decode = %#v, schema.DecodeAt = %#v\ninput %q", got, want, data)
		}
	})
}

func TestRefusalReason(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		subject string
		data    string
		want    string
	}{
		{"s.v1.request.finished", `{`, "invalid_json"},
		{"s.v1.request.finished", "\xff", "invalid_utf8"},
		{"s.v1.nope", `{}`, "subject"},
		{"s.v1.request.finished", `{"schema":"request.finished/v1"}`, "invalid"},
	} {
		_, err := decode(tc.subject, []byte(tc.data), now)
		if err == nil {
			t.Fatalf("%s %q decoded", tc.subject, tc.data)
		}
		if got := refusalReason(err); got != tc.want {
			t.Errorf("%s %q: reason %q, want %q", tc.subject, tc.data, got, tc.want)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	data := eventgen.Encode(eventgen.RequestFinished(1, time.Now().Add(-time.Minute)))
	subject := schema.Subject(schema.KindRequestFinished)
	now := time.Now()
	b.Run("pipeline", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		stop := benchcpu.Start(b)
		for b.Loop() {
			if _, err := decode(subject, data, now); err != nil {
				b.Fatal(err)
			}
		}
		stop()
	})
	b.Run("schema", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		stop := benchcpu.Start(b)
		for b.Loop() {
			if _, err := schema.DecodeAt(subject, data, now); err != nil {
				b.Fatal(err)
			}
		}
		stop()
	})
}

// The gateway's typical request.finished, with every field it fills, takes the fast path.
func TestFastPathReadsGatewayEvents(t *testing.T) {
	ts := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	e := eventgen.RequestFinished(1, ts)
	e.FinishReasons = []string{"stop", "length"}
	e.ResponseID = "chatcmpl-req-1"
	e.TraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	e.TraceSampled = new(bool)
	data := eventgen.Encode(e)
	got, ok := fastRequestFinished(string(data))
	if !ok {
		t.Fatalf("fast path gave up on %s", data)
	}
	if !reflect.DeepEqual(got, e) {
		t.Fatalf("fast path read %#v, want %#v", got, e)
	}
}
