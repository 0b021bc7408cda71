package record

import (
	"bytes"
	"strconv"

	"github.com/tidwall/gjson"
)

// A minimal JSON walker for the hot path: it visits an object's keys and hands over each value's
// raw bytes, skipping the values nobody asked for without parsing them (numbers are not
// converted, strings not unescaped). Malformed input stops the walk; nothing panics.

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, bool) {
	i++
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b), false
		}
		i += j
		// The quote is escaped when an odd number of backslashes precede it.
		bs := 0
		for k := i - 1; k >= 0 && b[k] == '\\'; k-- {
			bs++
		}
		if bs%2 == 0 {
			return i + 1, true
		}
		i++
	}
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				var ok bool
				if i, ok = skipString(b, i); !ok {
					return i, false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return i, false
	default:
		// A number, true, false or null: up to the next delimiter.
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && !isSpace(b[j]) {
			j++
		}
		return j, j > i
	}
}

// objectEach calls fn with the raw key (without quotes, still escaped) and raw value of each
// member of the object in b, until fn returns false. It reports whether b was an object it
// could walk to the end.
func objectEach(b []byte, fn func(key, val []byte) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return true
	}
	for i < len(b) {
		if b[i] != '"' {
			return false
		}
		end, ok := skipString(b, i)
		if !ok {
			return false
		}
		key := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		vend, ok := skipValue(b, i)
		if !ok {
			return false
		}
		if !fn(key, b[i:vend]) {
			return true
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return false
		}
		if b[i] == '}' {
			return true
		}
		if b[i] != ',' {
			return false
		}
		i = skipSpace(b, i+1)
	}
	return false
}

// arrayEach calls fn with each raw element of the array in b; it returns the number of elements
// and -1 when b is not an array.
func arrayEach(b []byte, fn func(val []byte)) int {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return -1
	}
	n := 0
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return 0
	}
	for i < len(b) {
		end, ok := skipValue(b, i)
		if !ok {
			return n
		}
		n++
		fn(b[i:end])
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ',' {
			return n
		}
		i = skipSpace(b, i+1)
	}
	return n
}

// strValue returns the string a raw JSON string value holds; ok is false for other values. The
// result aliases val when it needed no unescaping: clone it to keep it.
func strValue(val []byte) (s string, ok bool) {
	if len(val) < 2 || val[0] != '"' || val[len(val)-1] != '"' {
		return "", false
	}
	inner := val[1 : len(val)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return bstr(inner), true
	}
	return gjson.Parse(bstr(val)).Str, true
}

// numValue returns a raw JSON number; ok is false for other values.
func numValue(val []byte) (float64, bool) {
	if len(val) == 0 || !(val[0] == '-' || val[0] >= '0' && val[0] <= '9') {
		return 0, false
	}
	f, err := strconv.ParseFloat(bstr(val), 64)
	return f, err == nil
}

func isNull(val []byte) bool { return len(val) == 4 && string(val) == "null" }
