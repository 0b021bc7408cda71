package record

import (
	"bytes"
	"strconv"
	"time"
)

// The gateway reads every chunk of every stream, one per generated token, so the plainest chunk
// shape — what vLLM sends for all but a stream's first and last few chunks — has a reader of its
// own: one strict pass over the bytes, taking only a choice's index, text, role and finish
// reason, the id and the model, with no number or string decoded that is not used. It reads a
// chunk only when it is valid JSON (it checks the grammar of every value it passes over) whose
// top-level members are the usual ones and whose strings that count hold no escape; anything
// else (usage, the timing object, an error, tool calls, more choices than fastChoices, an escape
// in a text) is left to the general reader (Observer.chunk), which reads the chunk from scratch:
// the fast reader changes nothing before it has accepted the whole chunk. And since the chunks
// of a stream differ in their text alone, a chunk that is the last plain chunk's bytes with
// another text is read by comparing bytes (chunkTemplate). FuzzChunkFastPath and
// FuzzChunkTemplate hold both to the general reader's facts.
//
// Instructions per content chunk of a long stream (callgrind, BenchmarkObserverContentChunk; a
// count a loaded machine does not change): 13,611 with gjson alone (and bytes.IndexAny finding
// line ends), 6,156 with the strict reader, 1,696 with the template. The gateway's CPU per
// streamed chunk is a bare proxy's plus this.

// fastChoices is the most choices one chunk may carry for the fast reader (vLLM sends one choice
// per chunk, n > 1 included).
const fastChoices = 4

// fastChoice is what one choice of a chunk says.
type fastChoice struct {
	index         int
	text          []byte // content or text, when a string (last given wins, as in streamChoice)
	hasText       bool
	textAt        int    // offset of text in the chunk, when hasText
	reasoning     []byte // the first non-null reasoning_content or reasoning, when a string
	reasoningSet  bool   // a non-null reasoning member was seen
	reasoningText bool   // and it was a string
	finish        []byte
	hasFinish     bool
	hasRole       bool
}

// fastChunk is what one chunk says.
type fastChunk struct {
	id, model []byte // the first non-empty ones
	choices   [fastChoices]fastChoice
	n         int // choices
}

// chunkTemplate is a chunk read by the fast reader whose one choice's text is the only thing
// the next chunks of its stream change (vLLM's chunks differ in their content alone): the bytes
// before and after that text, and the chunk's facts. A chunk that is the template's bytes with
// another text that holds no quote or backslash has the same JSON structure, so the same facts
// but its text, and is read by comparing those bytes.
type chunkTemplate struct {
	before, after []byte
	c             fastChunk
}

// match returns the text of data when data is the template with another text in it.
func (t *chunkTemplate) match(data []byte) ([]byte, bool) {
	if len(t.before) == 0 || len(data) < len(t.before)+len(t.after) ||
		!bytes.HasPrefix(data, t.before) || !bytes.HasSuffix(data, t.after) {
		return nil, false
	}
	text := data[len(t.before) : len(data)-len(t.after)]
	if bytes.IndexByte(text, '"') >= 0 || bytes.IndexByte(text, '\\') >= 0 {
		return nil, false
	}
	return text, true
}

// set makes the chunk data, read into c, the template when its one choice's text came from
// data's bytes.
func (t *chunkTemplate) set(data []byte, c *fastChunk) {
	t.before = t.before[:0]
	if c.n != 1 || !c.choices[0].hasText {
		return
	}
	ch := &c.choices[0]
	at := ch.textAt
	t.before = append(t.before, data[:at]...)
	t.after = append(t.after[:0], data[at+len(ch.text):]...)
	// The facts keep no bytes of data, which the next read overwrites.
	t.c = *c
	t.c.id, t.c.model = bytes.Clone(c.id), bytes.Clone(c.model)
	t.c.choices[0].finish = bytes.Clone(ch.finish)
	t.c.choices[0].reasoning = bytes.Clone(ch.reasoning)
	t.c.choices[0].text = nil
}

// chunkFast reads data as Observer.chunk does and reports true, or reports false having changed
// nothing when data is not of the plainest shape (see above).
func (o *Observer) chunkFast(data []byte, now time.Time) bool {
	if text, ok := o.tmpl.match(data); ok {
		c := o.tmpl.c
		c.choices[0].text = text
		o.apply(&c, now)
		return true
	}
	var c fastChunk
	if !c.read(data) {
		return false
	}
	o.tmpl.set(data, &c)
	o.apply(&c, now)
	return true
}

// apply takes in the facts of a chunk, as Observer.chunk and streamChoice do.
func (o *Observer) apply(c *fastChunk, now time.Time) {
	if len(c.id) > 0 && o.ResponseID == "" {
		o.ResponseID = string(c.id)
	}
	if len(c.model) > 0 && o.Model == "" {
		o.Model = string(c.model)
	}
	for i := range c.n {
		ch := &c.choices[i]
		output := false
		if ch.reasoningText && len(ch.reasoning) > 0 {
			output = true
			o.addText(ch.index, bstr(ch.reasoning))
		}
		if ch.hasText && len(ch.text) > 0 {
			output = true
			o.addText(ch.index, bstr(ch.text))
		}
		if output && o.firstOutput.IsZero() {
			o.firstOutput = now
		}
		st := o.choices.at(ch.index)
		if st == nil {
			continue
		}
		if output || !ch.hasRole {
			st.token(now)
			o.choices.events++
		}
		if ch.hasFinish && len(ch.finish) > 0 {
			st.finish = string(ch.finish)
		}
	}
}

// read scans a whole chunk; false when it is not of the plainest shape.
func (c *fastChunk) read(b []byte) bool {
	s := scanner{b: b}
	ok := s.object(func(key []byte) bool {
		switch string(key) {
		// The first non-empty id and model count, as setID and setModel keep them.
		case "id":
			return keepFirst(&s, &c.id)
		case "model":
			return keepFirst(&s, &c.model)
		case "object":
			// "error" here is vLLM's old flat error shape, for the general reader.
			v, ok := s.plainString()
			return ok && string(v) != "error"
		case "choices":
			if s.null() {
				return true
			}
			return s.array(func() bool {
				if c.n == fastChoices {
					return false
				}
				c.n++
				return c.choices[c.n-1].read(&s)
			})
		case "created", "system_fingerprint", "service_tier", "prompt_logprobs", "prompt_token_ids", "kv_transfer_params":
			return s.skip()
		}
		// usage, metrics, error, message, type, code, detail and the unknown: the general reader.
		return false
	})
	s.ws()
	return ok && s.i == len(b)
}

// keepFirst reads a string without escapes into *v unless *v holds a non-empty one already.
func keepFirst(s *scanner, v *[]byte) bool {
	str, ok := s.plainString()
	if ok && len(*v) == 0 {
		*v = str
	}
	return ok
}

// read scans one choice.
func (ch *fastChoice) read(s *scanner) bool {
	ch.index = -1
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "index":
			num, ok := s.number()
			if !ok {
				return false
			}
			ch.index = -1
			if n, err := strconv.Atoi(string(num)); err == nil && n >= 0 {
				ch.index = n
			}
			return true
		case "finish_reason":
			return stringOrNull(s, &ch.finish, &ch.hasFinish)
		case "text":
			ch.textAt = s.at()
			return stringOrNull(s, &ch.text, &ch.hasText)
		case "delta":
			return s.object(func(key []byte) bool {
				switch string(key) {
				case "role":
					null := s.null()
					ch.hasRole = !null
					return null || s.skip()
				case "content":
					ch.textAt = s.at()
					return stringOrNull(s, &ch.text, &ch.hasText)
				case "reasoning_content", "reasoning":
					if ch.reasoningSet {
						return s.skip()
					}
					if s.null() {
						return true
					}
					ch.reasoningSet = true
					if s.peek() == '"' {
						ch.reasoning, ch.reasoningText = s.plainString()
						return ch.reasoningText
					}
					return s.skip()
				case "tool_calls":
					return false
				}
				return s.skip()
			})
		}
		return s.skip()
	})
}

// stringOrNull reads a value into *v when it is a string without escapes (*set true), a null
// (*set false) or, for any other value, *set false after checking it; an escaped string fails.
func stringOrNull(s *scanner, v *[]byte, set *bool) bool {
	if s.peek() == '"' {
		*v, *set = s.plainString()
		return *set
	}
	*v, *set = nil, false
	return s.skip()
}

// scanner walks JSON text strictly (RFC 8259 grammar), without decoding what it passes.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// object walks an object, calling member with each key (no escapes) with the scanner at its value,
// which member must consume; false on a grammar error or when member says false.
func (s *scanner) object(member func(key []byte) bool) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		key, ok := s.key()
		if !ok || s.peek() != ':' {
			return false
		}
		s.i++
		s.ws()
		if !member(key) {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// array walks an array, calling elem with the scanner at each element, which elem must consume.
func (s *scanner) array(elem func() bool) bool {
	if s.peek() != '[' {
		return false
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// plainString reads a string without escapes and returns its bytes; false for anything else
// (another value, an escape, the end of the text).
func (s *scanner) plainString() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	rest := s.b[s.i+1:]
	n := bytes.IndexByte(rest, '"')
	if n < 0 {
		return nil, false
	}
	v := rest[:n]
	if bytes.IndexByte(v, '\\') >= 0 {
		return nil, false
	}
	// A raw control character is not JSON, but the general reader (gjson) takes it as it is,
	// and so does this one.
	s.i += n + 2
	return v, true
}

// key reads an object key without escapes: a byte loop, as keys are a few bytes long, where a
// vectorized scan costs more in its call than it saves.
func (s *scanner) key() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	start := s.i + 1
	for i := start; i < len(s.b); i++ {
		switch s.b[i] {
		case '"':
			s.i = i + 1
			return s.b[start:i], true
		case '\\':
			return nil, false
		}
	}
	return nil, false
}

// at is the offset where a string value about to be read starts its contents.
func (s *scanner) at() int { return s.i + 1 }

// null consumes a null and reports whether there was one.
func (s *scanner) null() bool {
	if s.peek() == 'n' && bytes.HasPrefix(s.b[s.i:], []byte("null")) {
		s.i += 4
		return true
	}
	return false
}

// number reads a JSON number's text.
func (s *scanner) number() ([]byte, bool) {
	s.ws()
	start := s.i
	b := s.b
	i := s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() bool {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > j
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return nil, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return nil, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return nil, false
		}
	}
	s.i = i
	return b[start:i], true
}

// skip passes over any one value, checking its grammar.
func (s *scanner) skip() bool {
	switch c := s.peek(); {
	case c == '{':
		return s.object(func([]byte) bool { return s.skip() })
	case c == '[':
		return s.array(s.skip)
	case c == '"':
		return s.skipString()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	default:
		_, ok := s.number()
		return ok
	}
}

func (s *scanner) literal(w string) bool {
	if bytes.HasPrefix(s.b[s.i:], []byte(w)) {
		s.i += len(w)
		return true
	}
	return false
}

// skipString passes over a string, escapes included, checking them.
func (s *scanner) skipString() bool {
	i := s.i + 1
	b := s.b
	for i < len(b) {
		switch ch := b[i]; {
		case ch == '"':
			s.i = i + 1
			return true
		case ch == '\\':
			if i+1 >= len(b) {
				return false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return false
				}
				for _, h := range b[i+2 : i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				i += 6
			default:
				return false
			}
		case ch < 0x20:
			return false
		default:
			i++
		}
	}
	return false
}
