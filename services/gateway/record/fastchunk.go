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
// the fast reader changes nothing before it has accepted the whole chunk. FuzzChunkFastPath
// holds the two to the same facts. Measured with callgrind (instructions, which a loaded machine
// does not change) on BenchmarkObserverFeedStream: see the commit that added it.

// fastChoices is the most choices one chunk may carry for the fast reader (vLLM sends one choice
// per chunk, n > 1 included).
const fastChoices = 4

// fastChoice is what one choice of a chunk says.
type fastChoice struct {
	index         int
	text          []byte // content or text, when a string (last given wins, as in streamChoice)
	hasText       bool
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

// chunkFast reads data as Observer.chunk does and reports true, or reports false having changed
// nothing when data is not of the plainest shape (see above).
func (o *Observer) chunkFast(data []byte, now time.Time) bool {
	var c fastChunk
	if !c.read(data) {
		return false
	}
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
	return true
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
			return ch.stringOrNull(s, &ch.finish, &ch.hasFinish)
		case "text":
			return ch.stringOrNull(s, &ch.text, &ch.hasText)
		case "delta":
			return s.object(func(key []byte) bool {
				switch string(key) {
				case "role":
					null := s.null()
					ch.hasRole = !null
					return null || s.skip()
				case "content":
					return ch.stringOrNull(s, &ch.text, &ch.hasText)
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
func (ch *fastChoice) stringOrNull(s *scanner, v *[]byte, set *bool) bool {
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
		key, ok := s.plainString()
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
