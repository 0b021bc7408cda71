package record

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// AskUsage returns the body of a streamed chat or text completion rewritten so that vLLM sends
// its final usage-only chunk (`"choices":[]` with `usage`), and true, when the request as sent
// would get no usage at all and asking changes nothing else; otherwise body unchanged and false.
//
// vLLM reads stream_options with pydantic (StreamOptions: include_usage defaults to True when
// stream_options is an object, continuous_usage_stats to False) and sends the final usage chunk
// when include_usage is true, and usage on every chunk when continuous_usage_stats is true as
// well (vllm/entrypoints/openai/serving_chat.py at v0.10, should_include_usage in
// vllm/entrypoints/utils.py on main). So the gateway asks only when:
//
//   - stream is the JSON value true (vLLM refuses stream_options without stream);
//   - stream_options is absent or null: it adds {"include_usage":true};
//   - or stream_options is an object whose include_usage is false or null and whose
//     continuous_usage_stats is absent, false or null: it sets include_usage to true there
//     (an object without include_usage already gets usage);
//   - and the body is valid JSON, an object whose top-level keys and stream_options' keys carry no
//     escapes and appear once each (Python's json keeps the last of duplicate keys; an escaped
//     key may spell the same name), so what the gateway reads is what vLLM reads.
//
// Everything else is left alone: the engine answers as it would without the gateway, and usage is
// read when the client's own options bring it. The rest of the body keeps its bytes.
func AskUsage(body []byte) ([]byte, bool) {
	// Without the key "stream" spelled plainly there is nothing to do (an escaped key is left
	// alone below): most non-streaming bodies are not read further.
	if !bytes.Contains(body, []byte(`"stream"`)) {
		return body, false
	}
	// An invalid body goes to the engine untouched, for the engine to refuse in its own words.
	if !gjson.ValidBytes(body) {
		return body, false
	}
	top, ok := members(body)
	if !ok {
		return body, false
	}
	var stream, opts *member
	for i := range top {
		m := &top[i]
		if bytes.IndexByte(m.key, '\\') >= 0 {
			return body, false
		}
		switch string(m.key) {
		case "stream":
			if stream != nil {
				return body, false
			}
			stream = m
		case "stream_options":
			if opts != nil {
				return body, false
			}
			opts = m
		}
	}
	if stream == nil || string(body[stream.start:stream.end]) != "true" {
		return body, false
	}
	const ask = `{"include_usage":true}`
	if opts == nil {
		// Before the closing brace, after the last member (stream is one, so there is one).
		last := top[len(top)-1]
		return splice(body, last.end, last.end, `,"stream_options":`+ask), true
	}
	val := body[opts.start:opts.end]
	if string(val) == "null" {
		return splice(body, opts.start, opts.end, ask), true
	}
	inner, ok := members(val)
	if !ok {
		return body, false
	}
	var include *member
	for i := range inner {
		m := &inner[i]
		if bytes.IndexByte(m.key, '\\') >= 0 {
			return body, false
		}
		v := val[m.start:m.end]
		switch string(m.key) {
		case "include_usage":
			if include != nil || !(string(v) == "null" || string(v) == "false") {
				return body, false
			}
			include = m
		case "continuous_usage_stats":
			if !(string(v) == "null" || string(v) == "false") {
				return body, false
			}
		}
	}
	if include == nil {
		return body, false // include_usage defaults to true: the engine sends usage already
	}
	return splice(body, opts.start+include.start, opts.start+include.end, "true"), true
}

// splice returns a copy of b with b[from:to] replaced by s.
func splice(b []byte, from, to int, s string) []byte {
	out := make([]byte, 0, len(b)-(to-from)+len(s))
	out = append(out, b[:from]...)
	out = append(out, s...)
	return append(out, b[to:]...)
}

// member is one member of a JSON object: its raw key (escapes kept) and the offsets of its value.
type member struct {
	key        []byte
	start, end int
}

// members returns the members of the object that is the whole of b, which must be valid JSON
// (gjson.Valid), with the offsets of their values in b; false when b is not an object.
func members(b []byte) ([]member, bool) {
	root := parse(b)
	if !root.IsObject() {
		return nil, false
	}
	// Index is a key's or value's offset in b (gjson.Parse gives the root its offset after the
	// leading whitespace, and ForEach adds it).
	var out []member
	root.ForEach(func(k, v gjson.Result) bool {
		out = append(out, member{key: b[k.Index+1 : k.Index+len(k.Raw)-1], start: v.Index, end: v.Index + len(v.Raw)})
		return true
	})
	return out, true
}
