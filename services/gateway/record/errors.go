package record

import (
	"strings"

	"github.com/tidwall/gjson"
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
	errV, object, typ, code, message, detail gjson.Result
}

func (e *errorFields) member(key string, v gjson.Result) {
	switch key {
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
	if given(e.errV) {
		if s, ok := str(e.errV); ok {
			return &EngineError{Message: strings.Clone(s)}
		}
		var inner errorFields
		if eachMember(e.errV, inner.member) {
			return inner.fields()
		}
	}
	if obj, _ := str(e.object); obj == "error" {
		return e.fields()
	}
	if t, _ := str(e.typ); t == "error" && (e.message.Exists() || e.code.Exists()) {
		return (&errorFields{code: e.code, message: e.message}).fields()
	}
	if given(e.detail) {
		if s, ok := str(e.detail); ok {
			return &EngineError{Message: strings.Clone(s)}
		}
		return &EngineError{Message: strings.Clone(strings.ToValidUTF8(e.detail.Raw, "\uFFFD"))}
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
func rawText(v gjson.Result) string {
	if s, ok := str(v); ok {
		return s
	}
	if !given(v) || v.IsObject() || v.IsArray() {
		return ""
	}
	return v.Raw
}
