package record

import (
	"bytes"
	"strings"
)

// errorFields gathers the members of a JSON object that may describe an error, in every shape
// vLLM's OpenAI server has used:
//
//   - {"error": {"message", "type", "param", "code"}}: ErrorResponse with ErrorInfo (vLLM 0.10.2
//     and later, bodies and stream events alike), and stream events up to 0.10 ({"error": <the
//     flat object below>});
//   - {"object": "error", "message", "type", "param", "code"}: ErrorResponse bodies up to 0.10;
//   - {"error": "Unauthorized"}: the --api-key middleware, every version;
//   - {"detail": "..."} or {"detail": [...]}: FastAPI's own answers (unknown route, method not
//     allowed, request validation where vLLM does not override it);
//   - {"type": "error", "code", "message", "param"}: the error event of a Responses stream.
type errorFields struct {
	errV, object, typ, code, message, detail []byte
}

func (e *errorFields) member(key, v []byte) {
	switch string(key) {
	case "error":
		e.errV = v
	case "object":
		e.object = v
	case "type":
		e.typ = v
	case "code":
		e.code = v
	case "message":
		e.message = v
	case "detail":
		e.detail = v
	}
}

// engineError returns the error the object describes, or nil.
func (e *errorFields) engineError() *EngineError {
	if e.errV != nil && !isNull(e.errV) {
		if s, ok := strValue(e.errV); ok {
			return &EngineError{Message: strings.Clone(s)}
		}
		var inner errorFields
		if objectEach(e.errV, func(k, v []byte) bool { inner.member(k, v); return true }) {
			return inner.fields()
		}
	}
	if obj, _ := strValue(e.object); obj == "error" {
		return e.fields()
	}
	if t, _ := strValue(e.typ); t == "error" && (e.message != nil || e.code != nil) {
		return (&errorFields{code: e.code, message: e.message}).fields()
	}
	if e.detail != nil && !isNull(e.detail) {
		if s, ok := strValue(e.detail); ok {
			return &EngineError{Message: strings.Clone(s)}
		}
		var b bytes.Buffer
		b.Write(e.detail)
		return &EngineError{Message: strings.ToValidUTF8(b.String(), "\uFFFD")}
	}
	return nil
}

// fields builds the error from message, type and code (strings, numbers or absent).
func (e *errorFields) fields() *EngineError {
	err := &EngineError{Message: strings.Clone(rawText(e.message)), Type: strings.Clone(rawText(e.typ))}
	if err.Type == "" {
		err.Type = strings.Clone(rawText(e.code))
	}
	if err.Message == "" && err.Type == "" {
		err.Message = "engine reported an error without a message"
	}
	return err
}

// rawText is a raw value as text: a string's content, a number's digits, "" for null or absent.
func rawText(v []byte) string {
	if s, ok := strValue(v); ok {
		return s
	}
	if len(v) == 0 || isNull(v) || v[0] == '{' || v[0] == '[' {
		return ""
	}
	return bstr(v)
}
