package record

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/tidwall/gjson"
)

// FuzzObserverFeed checks the SSE reader on arbitrary engine bytes cut at an arbitrary point:
// no panic; without removal the client gets exactly the engine's bytes; with removal the result
// does not depend on where the bytes were cut.
func FuzzObserverFeed(f *testing.F) {
	for _, name := range []string{"chat_stream.engine.sse", "chat_stream_error.sse", "chat_stream_cjk.sse", "completion_stream.engine.sse"} {
		f.Add(golden(f, name), 10)
	}
	f.Add([]byte("data: {\"choices\":[],\"usage\":{}}\r\n\r\ndata: x\n\n"), 3)
	script, _ := NewScriptCheck(nil)
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		if cut < 0 || cut > len(in) {
			cut = len(in) / 2
		}
		out, _ := feedSplit(in, []int{cut}, false, script)
		if !bytes.Equal(out, in) {
			t.Fatalf("pass-through changed the bytes")
		}
		whole, _ := feedSplit(in, nil, true, script)
		split, _ := feedSplit(in, []int{cut}, true, script)
		if !bytes.Equal(whole, split) {
			t.Fatalf("removal depends on the cut: %q vs %q", whole, split)
		}
	})
}

// FuzzParseRequest reads arbitrary request bodies.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":5,"metadata":{"app":"a"}}`))
	f.Add([]byte(`{"prompt":["a"],"max_completion_tokens":1e99}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r := ParseRequest(body, http.Header{}, true)
		// The captured text is the prompt plus separators, never less.
		if r.PromptBytes != nil && len(r.PromptText) < int(*r.PromptBytes) {
			t.Fatalf("prompt text %d bytes, prompt_bytes %d", len(r.PromptText), *r.PromptBytes)
		}
		if b, err := InjectIncludeUsage(body); err == nil && r.Model != "" {
			if got := ParseRequest(b, http.Header{}, false); got.Model != r.Model {
				t.Fatalf("injecting include_usage changed the model: %q → %q", r.Model, got.Model)
			}
		}
	})
}

// FuzzObjectEach checks the hot-path JSON walker against gjson on valid objects: same members,
// same raw values; and no panic on anything.
func FuzzObjectEach(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":"x\"y","c":{"d":[1,{"e":"]"}]},"f":null,"g":true}`))
	f.Add([]byte(`{ "choices" : [ ] , "usage" : { "prompt_tokens" : 3 } }`))
	f.Add([]byte(`{"s":"\\\\"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var keys, vals []string
		ok := objectEach(in, func(k, v []byte) bool {
			keys = append(keys, string(k))
			vals = append(vals, string(v))
			return true
		})
		if !gjson.ValidBytes(in) || !gjson.ParseBytes(in).IsObject() {
			return
		}
		if !ok {
			t.Fatalf("valid object not walked: %q", in)
		}
		i := 0
		gjson.ParseBytes(in).ForEach(func(k, v gjson.Result) bool {
			if i >= len(keys) || keys[i] != k.Raw[1:len(k.Raw)-1] || vals[i] != v.Raw {
				t.Fatalf("member %d: walker %q=%q, gjson %s=%s", i, at(keys, i), at(vals, i), k.Raw, v.Raw)
			}
			i++
			return true
		})
		if i != len(keys) {
			t.Fatalf("walker saw %d members, gjson %d", len(keys), i)
		}
	})
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "<none>"
}
