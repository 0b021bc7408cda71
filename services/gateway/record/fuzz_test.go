package record

import (
	"bytes"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/tidwall/gjson"
)

// FuzzObserverFeed checks the SSE reader on arbitrary engine bytes cut at an arbitrary point: no
// panic; without removal the client gets exactly the engine's bytes; with removal at most one
// usage-only event is removed and the result does not depend on where the bytes were cut.
func FuzzObserverFeed(f *testing.F) {
	for _, name := range []string{"chat_stream.engine.sse", "chat_stream_error.sse", "chat_stream_error_v08.sse", "chat_stream_cjk.sse", "completion_stream.engine.sse", "responses_stream.sse"} {
		f.Add(golden(f, name), 10)
	}
	f.Add([]byte("data: {\"choices\":[],\"usage\":{}}\r\n\r\ndata: x\n\n"), 3)
	f.Add([]byte("data: {\"choices\":[],\"usage\":{}}\r\rdata: {\"choices\":[],\"usage\":{}}\n\n"), 40)
	script, _ := NewScriptCheck(nil)
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		if cut < 0 || cut > len(in) {
			cut = len(in) / 2
		}
		for _, e := range []Endpoint{Chat, Responses} {
			o := NewObserver(ObserverOptions{Endpoint: e, Script: script, Capture: true, CaptureMax: 64})
			if out := feedSplit(o, in, []int{cut}); !bytes.Equal(out, in) {
				t.Fatalf("%s: pass-through changed the bytes", e)
			}
		}
		whole := feedSplit(NewObserver(ObserverOptions{Endpoint: Chat, Script: script, StripUsage: true}), in, nil)
		split := feedSplit(NewObserver(ObserverOptions{Endpoint: Chat, Script: script, StripUsage: true}), in, []int{cut})
		if !bytes.Equal(whole, split) {
			t.Fatalf("removal depends on the cut: %q vs %q", whole, split)
		}
		if len(whole) > len(in) {
			t.Fatalf("removal added bytes")
		}
		// The proxy sends what Pass returns before Read reads the rest: the same bytes, and the
		// same facts as an observer that removes nothing and reads every event in Read, in order.
		passed, strip := passRead(NewObserver(ObserverOptions{Endpoint: Chat, Script: script, StripUsage: true, Capture: true, CaptureMax: 64}), in, cut)
		if !bytes.Equal(passed, split) {
			t.Fatalf("Pass then Read sent %q, Feed %q", passed, split)
		}
		_, keep := passRead(NewObserver(ObserverOptions{Endpoint: Chat, Script: script, Capture: true, CaptureMax: 64}), in, cut)
		if !reflect.DeepEqual(strip.Response, keep.Response) || strip.Output() != keep.Output() ||
			!reflect.DeepEqual(strip.FinishReasons(), keep.FinishReasons()) || strip.TokenEvents() != keep.TokenEvents() ||
			!strip.FirstOutput().Equal(keep.FirstOutput()) {
			t.Fatalf("removing the usage chunk changed what was read:\n%+v %q\n%+v %q", strip.Response, strip.Output(), keep.Response, keep.Output())
		}
		if len(whole) < len(in) {
			// What was removed is one whole event of the stream.
			found := false
			for start := 0; start < len(in); {
				n := eventEnd(in[start:])
				if n < 0 {
					break
				}
				if n == len(in)-len(whole) && bytes.Equal(whole, append(append([]byte(nil), in[:start]...), in[start+n:]...)) {
					found = true
					break
				}
				start += n
			}
			if !found {
				t.Fatalf("removal is not one event of the stream:\n in %q\nout %q", in, whole)
			}
		}
	})
}

// passRead sends in through o as the proxy does, in two reads cut at cut (at t0 and t0 + 1 ms)
// into one buffer: the bytes Pass returns go out, then Read reads the rest, then the next read
// overwrites the buffer; it returns what went out.
func passRead(o *Observer, in []byte, cut int) ([]byte, *Observer) {
	var out []byte
	for i, piece := range [][]byte{in[:cut], in[cut:]} {
		buf := append([]byte(nil), piece...)
		out = append(out, o.Pass(buf, t0.Add(time.Duration(i)*time.Millisecond))...)
		o.Read()
		clear(buf) // the proxy reads the next bytes into the same buffer

	}
	return append(out, o.End()...), o
}

// FuzzBodyMembers checks the incremental top-level reader of response bodies against gjson: on a
// valid object the same members (raw keys, raw values), whatever the pieces the body arrives in.
func FuzzBodyMembers(f *testing.F) {
	for _, name := range []string{"chat.json", "error_nested.json", "error_flat.json", "responses.json", "embeddings.json", "error_unauthorized.json"} {
		f.Add(golden(f, name), 7)
	}
	f.Add([]byte(`{"a":"x\"}","b":[{"c":"]"}],"d":-1e3,"e":true}`), 3)
	f.Add([]byte(` { } `), 1)
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		if cut < 0 || cut > len(in) {
			cut = len(in) / 2
		}
		s := newBodyMembers(1<<20, nil)
		s.Write(in[:cut])
		s.Write(in[cut:])
		if !gjson.ValidBytes(in) || !gjson.ParseBytes(in).IsObject() {
			return
		}
		if !s.complete() {
			t.Fatalf("valid object not read to its end: %q", in)
		}
		i := 0
		gjson.ParseBytes(in).ForEach(func(k, v gjson.Result) bool {
			if i >= len(s.members) || s.members[i].key != k.Raw[1:len(k.Raw)-1] || string(s.members[i].raw) != v.Raw {
				t.Fatalf("member %d: scanner %+v, gjson %s=%s", i, s.members, k.Raw, v.Raw)
			}
			i++
			return true
		})
		if i != len(s.members) {
			t.Fatalf("scanner read %d members, gjson %d", len(s.members), i)
		}
	})
}

// FuzzParseRequest reads arbitrary request bodies, and asks for usage only for a body
// ParseRequest reads as a stream and only in ways that keep every other field as it was.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":5,"metadata":{"app":"a"}}`))
	f.Add([]byte(`{"prompt":["a"],"max_completion_tokens":1e99}`))
	f.Add([]byte(`{"model":"m","stream":true,"stream_options":{"include_usage":false}}`))
	f.Add([]byte(`{"model":"m","stream":true,"stream_options":null,"input":"x"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, e := range []Endpoint{Chat, Completions, Responses, Embeddings} {
			r := ParseRequest(e, body, http.Header{}, true)
			// The captured text is the prompt plus separators, never less.
			if r.PromptBytes != nil && len(r.PromptText) < int(*r.PromptBytes) {
				t.Fatalf("prompt text %d bytes, prompt_bytes %d", len(r.PromptText), *r.PromptBytes)
			}
		}
		b, ok := AskUsage(body)
		// The proxy calls AskUsage only for a request ParseRequest read as a stream.
		if ok && !ParseRequest(Chat, body, http.Header{}, false).Stream {
			t.Fatalf("AskUsage asked for usage in a body ParseRequest reads as no stream: %s", body)
		}
		if !ok {
			if !bytes.Equal(b, body) {
				t.Fatal("body changed without asking")
			}
			return
		}
		if !gjson.ValidBytes(b) {
			t.Fatalf("asking made invalid JSON: %s", b)
		}
		after := gjson.ParseBytes(b)
		if !after.Get("stream_options.include_usage").Bool() || after.Get("stream_options.continuous_usage_stats").Bool() {
			t.Fatalf("%s → %s: usage not asked for, or asked on every chunk", body, b)
		}
		// Every other member keeps its key and value bytes, in order.
		others := func(doc []byte) (out []string) {
			ms, ok := members(doc)
			if !ok {
				t.Fatalf("not an object: %s", doc)
			}
			for _, m := range ms {
				if string(m.key) != "stream_options" {
					out = append(out, string(m.key)+"="+string(doc[m.start:m.end]))
				}
			}
			return out
		}
		if a, z := others(body), others(b); fmt.Sprint(a) != fmt.Sprint(z) {
			t.Fatalf("%s → %s: other members changed", body, b)
		}
	})
}

// FuzzMembers checks the member offsets AskUsage splices at, on valid objects with any
// whitespace around them: each value's bytes are one JSON value, preceded by its key, a colon and
// nothing but whitespace; no member is missed.
func FuzzMembers(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":"x\"y","c":{"d":[1,{"e":"]"}]},"f":null,"g":true}`))
	f.Add([]byte(" \n{ \"choices\" : [ ] , \"usage\" : { \"prompt_tokens\" : 3 } }\t"))
	f.Add([]byte(`{"s":"\\\\","k\u0065y":-1.5e3}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		if !gjson.ValidBytes(in) {
			return
		}
		ms, ok := members(in)
		if ok != gjson.ParseBytes(in).IsObject() {
			t.Fatalf("members ok=%v on %q", ok, in)
		}
		n := 0
		gjson.ParseBytes(in).ForEach(func(_, _ gjson.Result) bool { n++; return true })
		if ok && len(ms) != n {
			t.Fatalf("%d members, gjson %d: %q", len(ms), n, in)
		}
		for _, m := range ms {
			if !gjson.ValidBytes(in[m.start:m.end]) {
				t.Fatalf("value %q of %q is not one JSON value", in[m.start:m.end], in)
			}
			before := bytes.TrimRight(in[:m.start], " \t\r\n")
			before, colon := bytes.CutSuffix(before, []byte(":"))
			if !colon || !bytes.HasSuffix(bytes.TrimRight(before, " \t\r\n"), []byte(`"`+string(m.key)+`"`)) {
				t.Fatalf("value at %d of %q does not follow its key %q", m.start, in, m.key)
			}
		}
	})
}

// FuzzChunkFastPath holds the fast reader of plain chunks (chunkFast) to the general reader: the
// same facts from any data, whether the fast reader takes it or leaves it.
func FuzzChunkFastPath(f *testing.F) {
	for _, name := range []string{"chat_stream.engine.sse", "chat_stream_cjk.sse", "completion_stream.engine.sse", "chat_stream_error.sse", "chat_stream_error_v08.sse"} {
		for _, line := range bytes.Split(golden(f, name), []byte("\n")) {
			if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				f.Add(data)
			}
		}
	}
	for _, s := range []string{
		`{"id":"a","id":"b","model":"","model":"m","choices":[{"index":1,"delta":{"content":"x","content":null}},{"delta":{"role":null,"reasoning":null,"reasoning_content":"r","reasoning":"s"}}]}`,
		`{"choices":[{"index":0,"text":"a","delta":{"content":"b"},"text":"c","finish_reason":"stop","finish_reason":null}]}`,
		`{"choices":[{"index":-1,"delta":{"role":"assistant","content":""}},{"index":2.0},{"index":"3"}],"object":"error"}`,
		`{"choices":[{"index":0,"delta":{"content":"a\nb","reasoning":7}}], "created" : 1e3 }  `,
		`{"choices":[1],"x":{"y":[true,false,null,"\u00e9"]}}`,
	} {
		f.Add([]byte(s))
	}
	script, _ := NewScriptCheck(nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		ev := append(append([]byte("data: "), data...), '\n', '\n')
		if bytes.ContainsAny(data, "\r\n") {
			return // one data line: the chunk as vLLM writes it
		}
		fast := NewObserver(ObserverOptions{Endpoint: Chat, Script: script, Capture: true, CaptureMax: 64})
		slow := NewObserver(ObserverOptions{Endpoint: Chat, Script: script, Capture: true, CaptureMax: 64})
		slow.slowOnly = true
		fast.Feed(ev, t0)
		slow.Feed(ev, t0)
		fast.Feed(ev, t0.Add(time.Second)) // a second chunk: ids kept, timelines extended
		slow.Feed(ev, t0.Add(time.Second))
		if !reflect.DeepEqual(fast.Response, slow.Response) || fast.Output() != slow.Output() ||
			!reflect.DeepEqual(fast.FinishReasons(), slow.FinishReasons()) || fast.TokenEvents() != slow.TokenEvents() ||
			!fast.FirstOutput().Equal(slow.FirstOutput()) || !reflect.DeepEqual(fast.choices, slow.choices) {
			t.Fatalf("fast and general readers differ on %q:\n%+v %q %+v\n%+v %q %+v", data,
				fast.Response, fast.Output(), fast.choices, slow.Response, slow.Output(), slow.choices)
		}
	})
}

// FuzzChunkTemplate holds the template (a stream's next chunk that differs from the last only in
// its text) to the general reader: a chunk, then the same chunk with the value of its first
// "content" or "text" string replaced, read by both.
func FuzzChunkTemplate(f *testing.F) {
	for _, name := range []string{"chat_stream.engine.sse", "chat_stream_cjk.sse", "completion_stream.engine.sse"} {
		for _, line := range bytes.Split(golden(f, name), []byte("\n")) {
			if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				f.Add(data, " next")
			}
		}
	}
	f.Add([]byte(`{"choices":[{"index":0,"text":"a","delta":{"content":"b"},"text":"c","finish_reason":"stop"}]}`), "q")
	f.Add([]byte(`{"choices":[{"delta":{"reasoning":"r","content":"x"},"finish_reason":null}],"model":"m"}`), "")
	script, _ := NewScriptCheck(nil)
	f.Fuzz(func(t *testing.T, data []byte, text string) {
		if bytes.ContainsAny(data, "\r\n") || strings.ContainsAny(text, "\"\\\r\n") {
			return
		}
		next := data
		for _, key := range []string{`"content":"`, `"text":"`} {
			if i := bytes.Index(data, []byte(key)); i >= 0 {
				start := i + len(key)
				if end := bytes.IndexByte(data[start:], '"'); end >= 0 {
					next = append(append(append([]byte(nil), data[:start]...), text...), data[start+end:]...)
					break
				}
			}
		}
		fast := NewObserver(ObserverOptions{Endpoint: Chat, Script: script, Capture: true, CaptureMax: 64})
		slow := NewObserver(ObserverOptions{Endpoint: Chat, Script: script, Capture: true, CaptureMax: 64})
		slow.slowOnly = true
		for i, d := range [][]byte{data, next, data} {
			ev := append(append([]byte("data: "), d...), '\n', '\n')
			fast.Feed(ev, t0.Add(time.Duration(i)*time.Second))
			slow.Feed(append([]byte(nil), ev...), t0.Add(time.Duration(i)*time.Second))
			clear(ev) // the proxy's buffer is reused: nothing may keep its bytes
		}
		if !reflect.DeepEqual(fast.Response, slow.Response) || fast.Output() != slow.Output() ||
			!reflect.DeepEqual(fast.FinishReasons(), slow.FinishReasons()) || fast.TokenEvents() != slow.TokenEvents() ||
			!fast.FirstOutput().Equal(slow.FirstOutput()) || !reflect.DeepEqual(fast.choices, slow.choices) {
			t.Fatalf("fast and general readers differ on %q then %q:\n%+v %q %+v\n%+v %q %+v", data, next,
				fast.Response, fast.Output(), fast.choices, slow.Response, slow.Output(), slow.choices)
		}
	})
}

// FuzzEventEnd holds eventEnd (an LF-only scan of the first event, the general one only when a
// CR comes before its end) to eventEndAny, the scan of every kind of line end, on any bytes.
func FuzzEventEnd(f *testing.F) {
	for _, s := range []string{
		"data: {}\n\n", "data: a\ndata: b\n\ndata: c\n\n", "data: a\r\n\r\n", "data: a\n\r\n",
		"data: a\r", "data: a\r\r", "event: x\ndata: y\n\ndata: z\r\n\r\n", ":\n\n", "\n", "\r", "",
		"data: a\nb\rc\n\n", "data: a\n\ndata: b\r\r",
	} {
		f.Add([]byte(s))
	}
	f.Add(golden(f, "chat_stream.engine.sse"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := eventEnd(b), eventEndAny(b); got != want {
			t.Fatalf("eventEnd(%q) = %d, eventEndAny %d", b, got, want)
		}
	})
}

// FuzzScriptForeign holds Foreign (ASCII skipped eight bytes at a time when Latin is allowed) to
// its definition: the letters of s, rune by rune, outside the allowed scripts.
func FuzzScriptForeign(f *testing.F) {
	for _, s := range []string{
		"Hello, world! 123 — ça va?", "Привет", "答案是北京", "The answer is Привет, and then 北京 again.",
		"12345678Привет12345678x", "abcdefgh\xff\xfeabcdefgh", "e\u0301 ①",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	latin, _ := NewScriptCheck(nil)
	cyrillic, _ := NewScriptCheck([]string{"Cyrillic"})
	f.Fuzz(func(t *testing.T, s string, cyr bool) {
		c := latin
		if cyr {
			c = cyrillic
		}
		var want uint32
		for _, r := range s {
			if unicode.IsLetter(r) && !unicode.IsOneOf(c.allowed, r) {
				want++
			}
		}
		if got := c.Foreign(s); got != want {
			t.Fatalf("Foreign(%q) = %d, want %d (cyrillic only: %v)", s, got, want, cyr)
		}
	})
}
