package simserver

import (
	"bytes"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// vLLM's bodies are written by Python: pydantic's model_dump_json for SSE chunks, Starlette's
// JSONResponse (json.dumps with ensure_ascii=False and compact separators) for JSON bodies, and
// plain json.dumps (", " and ": " separators, ensure_ascii=True) for the error event inside a
// stream. None of them escapes HTML characters as Go's encoding/json does, and floats are written
// as Python's repr writes them (500.0, 1e-05). The encoder below reproduces those bytes, with
// fields in the order vLLM's pydantic models declare them.

const hexDigits = "0123456789abcdef"

// appendPyString appends s as pydantic and Starlette write a JSON string: '"', '\\' and control
// characters escaped (\b \t \n \f \r short forms, others as \u00xx), everything else raw UTF-8.
// Invalid UTF-8 (Python strings cannot hold it) becomes U+FFFD.
func appendPyString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = appendEscapedASCII(dst, b)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func appendEscapedASCII(dst []byte, b byte) []byte {
	switch b {
	case '"', '\\':
		return append(dst, '\\', b)
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
}

// appendPyASCIIString appends s as Python's json.dumps writes it by default (ensure_ascii=True):
// like appendPyString, and every non-ASCII character as \uxxxx (astral ones as surrogate pairs).
func appendPyASCIIString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for _, r := range s { // invalid UTF-8 decodes to U+FFFD here
		switch {
		case r < 0x20 || r == '"' || r == '\\':
			dst = appendEscapedASCII(dst, byte(r))
		case r < utf8.RuneSelf:
			dst = append(dst, byte(r))
		case r > 0xFFFF:
			hi, lo := utf16.EncodeRune(r)
			dst = appendU4(appendU4(dst, hi), lo)
		default:
			dst = appendU4(dst, r)
		}
	}
	return append(dst, '"')
}

func appendU4(dst []byte, r rune) []byte {
	return append(dst, '\\', 'u', hexDigits[r>>12&0xF], hexDigits[r>>8&0xF], hexDigits[r>>4&0xF], hexDigits[r&0xF])
}

// appendPyFloat appends f as Python's repr (and so json.dumps and pydantic) writes a float: the
// shortest round-tripping digits, positional between 1e-4 and 1e16 with at least one decimal
// ("500.0"), scientific outside ("1e-05", "1e+16"). NaN and infinities have no JSON form; they
// are written as null.
func appendPyFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	if f == 0 {
		if math.Signbit(f) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	// The decimal exponent of the shortest digits decides the form, as in Python's float_repr.
	sci := strconv.AppendFloat(nil, f, 'e', -1, 64)
	exp, _ := strconv.Atoi(string(sci[bytes.IndexByte(sci, 'e')+1:]))
	if exp < -4 || exp >= 16 {
		// Go's 'e' format has Python's shape: at least two exponent digits, explicit sign.
		return append(dst, sci...)
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, 'f', -1, 64)
	for _, c := range dst[start:] {
		if c == '.' {
			return dst
		}
	}
	return append(dst, '.', '0')
}

// enc writes one JSON value with compact separators, tracking where a comma is due.
type enc struct {
	b    []byte
	more bool // a value was written at this level: the next one needs a comma
}

func (e *enc) sep() {
	if e.more {
		e.b = append(e.b, ',')
	}
	e.more = false
}

func (e *enc) key(k string) {
	e.sep()
	e.b = appendPyString(e.b, k)
	e.b = append(e.b, ':')
}

// open starts an object as a value (top level or array element).
func (e *enc) open() {
	e.sep()
	e.b = append(e.b, '{')
}

// openKey starts an object under key k.
func (e *enc) openKey(k string) {
	e.key(k)
	e.b = append(e.b, '{')
}

func (e *enc) close() {
	e.b = append(e.b, '}')
	e.more = true
}

// arr starts an array under key k.
func (e *enc) arr(k string) {
	e.key(k)
	e.b = append(e.b, '[')
}

func (e *enc) endArr() {
	e.b = append(e.b, ']')
	e.more = true
}

func (e *enc) str(k, v string) {
	e.key(k)
	e.b = appendPyString(e.b, v)
	e.more = true
}

// strOrNull writes v, or null when v is nil.
func (e *enc) strOrNull(k string, v *string) {
	if v == nil {
		e.null(k)
		return
	}
	e.str(k, *v)
}

func (e *enc) int(k string, v int) {
	e.key(k)
	e.b = strconv.AppendInt(e.b, int64(v), 10)
	e.more = true
}

func (e *enc) int64(k string, v int64) {
	e.key(k)
	e.b = strconv.AppendInt(e.b, v, 10)
	e.more = true
}

func (e *enc) float(k string, v float64) {
	e.key(k)
	e.b = appendPyFloat(e.b, v)
	e.more = true
}

func (e *enc) null(k string) { e.raw(k, "null") }

func (e *enc) bool(k string, v bool) {
	if v {
		e.raw(k, "true")
		return
	}
	e.raw(k, "false")
}

// raw writes a JSON literal ("null", "[]", "{}") under k.
func (e *enc) raw(k, literal string) {
	e.key(k)
	e.b = append(e.b, literal...)
	e.more = true
}

// pyDumpsError is json.dumps({"error": body}) with Python's default separators and ensure_ascii,
// as vLLM's create_streaming_error_response writes the error event of a stream. The flat body of
// v0.8 ({"object": "error", ...}) is wrapped the same way.
func pyDumpsError(flat bool, msg, typ string, param *string, code int) []byte {
	b := []byte(`{"error": {`)
	if flat {
		b = append(b, `"object": "error", `...)
	}
	b = append(b, `"message": `...)
	b = appendPyASCIIString(b, msg)
	b = append(b, `, "type": `...)
	b = appendPyASCIIString(b, typ)
	b = append(b, `, "param": `...)
	if param == nil {
		b = append(b, "null"...)
	} else {
		b = appendPyASCIIString(b, *param)
	}
	b = append(b, `, "code": `...)
	b = strconv.AppendInt(b, int64(code), 10)
	return append(b, "}}"...)
}
