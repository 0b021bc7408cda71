package record

// bodyMembers reads a JSON object that arrives in pieces (a non-streaming response body) and keeps
// the raw bytes of its top-level members, up to a budget, without holding the whole body: an
// embeddings answer for a large batch is many megabytes of vectors, and its usage comes last.
// Members named by skip are passed over unkept; a member that would overrun the budget is dropped
// (the rest are still read). A body that is not a JSON object keeps its first bytes as text, for
// an error message.
type bodyMembers struct {
	skip   func(key string) bool
	budget int

	st       scanState
	depth    int  // nesting inside the current value
	esc      bool // the previous byte in a string was a backslash
	key      []byte
	val      []byte
	keep     bool
	dropped  bool
	members  []bodyMember
	notJSON  bool
	textHead []byte
}

type bodyMember struct {
	key string // raw key, escapes kept
	raw []byte
}

type scanState uint8

const (
	scanStart     scanState = iota // before the object
	scanKeyOrEnd                   // after '{'
	scanKeyStart                   // after ','
	scanKey                        // inside a key
	scanColon                      // after a key
	scanValueFrom                  // after ':'
	scanString                     // inside a string value
	scanContainer                  // inside an object or array value
	scanScalar                     // inside a number, true, false or null
	scanAfter                      // after a value
	scanEnd                        // after the closing '}'
	scanBad                        // not a well-formed object
)

// textHeadMax is how much of a body that is not JSON is kept for the error message.
const textHeadMax = 1024

func newBodyMembers(budget int, skip func(string) bool) *bodyMembers {
	return &bodyMembers{budget: budget, skip: skip}
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Write feeds the next bytes of the body.
func (s *bodyMembers) Write(p []byte) {
	if s.st == scanBad || s.notJSON {
		s.head(p)
		return
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch s.st {
		case scanStart:
			if isWS(c) {
				continue
			}
			if c != '{' {
				s.notJSON, s.st = true, scanBad
				s.head(p[i:])
				return
			}
			s.st = scanKeyOrEnd
		case scanKeyOrEnd, scanKeyStart:
			switch {
			case isWS(c):
			case c == '"':
				s.st, s.key, s.esc = scanKey, s.key[:0], false
			case c == '}' && s.st == scanKeyOrEnd:
				s.st = scanEnd
			default:
				s.st = scanBad
			}
		case scanKey:
			switch {
			case s.esc:
				s.esc = false
				s.key = append(s.key, c)
			case c == '\\':
				s.esc = true
				s.key = append(s.key, c)
			case c == '"':
				s.st = scanColon
			default:
				s.key = append(s.key, c)
			}
		case scanColon:
			switch {
			case isWS(c):
			case c == ':':
				s.st = scanValueFrom
			default:
				s.st = scanBad
			}
		case scanValueFrom:
			if isWS(c) {
				continue
			}
			s.keep = s.skip == nil || !s.skip(bstr(s.key))
			s.dropped = false
			s.val = s.val[:0]
			switch c {
			case '"':
				s.st, s.esc = scanString, false
			case '{', '[':
				s.st, s.depth, s.esc = scanContainer, 1, false
			case ',', '}', ']', ':':
				s.st = scanBad
				continue
			default:
				s.st = scanScalar
			}
			s.add(c)
		case scanString:
			s.add(c)
			switch {
			case s.esc:
				s.esc = false
			case c == '\\':
				s.esc = true
			case c == '"':
				s.member()
			}
		case scanContainer:
			s.add(c)
			if s.esc {
				s.esc = false
				continue
			}
			if s.depth < 0 { // inside a string within the container
				switch c {
				case '\\':
					s.esc = true
				case '"':
					s.depth = -s.depth
				}
				continue
			}
			switch c {
			case '"':
				s.depth = -s.depth
			case '{', '[':
				s.depth++
			case '}', ']':
				s.depth--
				if s.depth == 0 {
					s.member()
				}
			}
		case scanScalar:
			if c == ',' || c == '}' || isWS(c) {
				s.member()
				i-- // the delimiter is read in scanAfter
				continue
			}
			s.add(c)
		case scanAfter:
			switch {
			case isWS(c):
			case c == ',':
				s.st = scanKeyStart
			case c == '}':
				s.st = scanEnd
			default:
				s.st = scanBad
			}
		case scanEnd:
			if !isWS(c) {
				s.st = scanBad
			}
		case scanBad:
			return
		}
	}
}

// add appends one byte of the current value while it fits the budget.
func (s *bodyMembers) add(c byte) {
	if !s.keep || s.dropped {
		return
	}
	if len(s.val) >= s.budget {
		s.dropped = true
		return
	}
	s.val = append(s.val, c)
}

// member ends the current value.
func (s *bodyMembers) member() {
	s.st = scanAfter
	if s.keep && !s.dropped {
		s.members = append(s.members, bodyMember{key: string(s.key), raw: append([]byte(nil), s.val...)})
		s.budget -= len(s.val)
	}
}

func (s *bodyMembers) head(p []byte) {
	if n := textHeadMax - len(s.textHead); n > 0 {
		s.textHead = append(s.textHead, p[:min(n, len(p))]...)
	}
}

// complete reports whether the body was exactly one well-formed JSON object (as far as this
// scanner checks: strings, nesting and delimiters).
func (s *bodyMembers) complete() bool { return s.st == scanEnd }

// get returns the raw value of the first kept member named key.
func (s *bodyMembers) get(key string) []byte {
	for i := range s.members {
		if s.members[i].key == key {
			return s.members[i].raw
		}
	}
	return nil
}
