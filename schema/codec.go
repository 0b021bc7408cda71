package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxEventBytes is the largest encoded event accepted (NATS's default max payload is 1 MiB).
const MaxEventBytes = 1 << 20

// Encode validates e and returns its JSON encoding. It fails with a [ValidationErrors] when the
// event is invalid, so nothing invalid is ever published.
func Encode(e Event) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	// Without HTML escaping, so that "<", ">" and "&" (common in prompts and code) take one byte
	// each instead of six and an event that decodes within MaxEventBytes also encodes within it.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, fmt.Errorf("encode %s: %w", e.Kind(), err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(b) > MaxEventBytes {
		return nil, ValidationErrors{{Field: "", Reason: fmt.Sprintf("event is %d bytes, over the limit of %d", len(b), MaxEventBytes)}}
	}
	return b, nil
}

// Decode parses one event received on subject and validates it as of now. The subject decides
// the kind; the event's `schema` field must agree with it and name version v1. Errors say what is
// wrong (a *DecodeError for undecodable input, [ValidationErrors] for invalid fields); the
// consumer puts such messages in the dead-letter stream with the error as the reason.
func Decode(subject string, data []byte) (Event, error) {
	return DecodeAt(subject, data, time.Now())
}

// DecodeAt is [Decode] with an explicit "now" for the future-timestamp check.
func DecodeAt(subject string, data []byte, now time.Time) (Event, error) {
	k, err := KindFromSubject(subject)
	if err != nil {
		return nil, &DecodeError{Reason: "subject", Err: err}
	}
	if len(data) > MaxEventBytes {
		return nil, &DecodeError{Reason: "oversize", Err: fmt.Errorf("event is %d bytes, over the limit of %d", len(data), MaxEventBytes)}
	}
	// encoding/json silently replaces invalid UTF-8 with U+FFFD; refuse it instead so that what
	// lands in ClickHouse is exactly what was sent.
	if !utf8.Valid(data) {
		return nil, &DecodeError{Reason: "invalid_utf8", Err: fmt.Errorf("event is not valid UTF-8")}
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, &DecodeError{Reason: "invalid_json", Err: fmt.Errorf("event is not a JSON object")}
	}
	var probe struct {
		Schema *string `json:"schema"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, &DecodeError{Reason: "invalid_json", Err: err}
	}
	if probe.Schema == nil {
		return nil, ValidationErrors{{Field: "schema", Reason: "missing"}}
	}
	if *probe.Schema != k.SchemaID() {
		name, ver, _ := strings.Cut(*probe.Schema, "/")
		if Kind(name) == k {
			return nil, ValidationErrors{{Field: "schema", Reason: fmt.Sprintf("unknown schema version %q (this consumer reads %s)", ver, Version)}}
		}
		return nil, ValidationErrors{{Field: "schema", Reason: fmt.Sprintf("%q does not match subject kind %s", *probe.Schema, k.SchemaID())}}
	}
	e := New(k)
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(e); err != nil {
		return nil, &DecodeError{Reason: "invalid_json", Err: err}
	}
	if dec.More() {
		return nil, &DecodeError{Reason: "invalid_json", Err: fmt.Errorf("trailing data after the event object")}
	}
	if err := e.ValidateAt(now); err != nil {
		return nil, err
	}
	return e, nil
}

// UnmarshalJSON reads RequestFinished, including fields under the names they had before a rename
// so that events written by older publishers (and replayed from their spools) keep their values;
// the current name wins when an event has both.
func (e *RequestFinished) UnmarshalJSON(b []byte) error {
	type plain RequestFinished
	aux := struct {
		*plain
		EngineTTFTSeconds *float64 `json:"engine_ttft_s"` // before 0.2
	}{plain: (*plain)(e)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	if e.ScheduledToFirstTokenSeconds == nil {
		e.ScheduledToFirstTokenSeconds = aux.EngineTTFTSeconds
	}
	return nil
}

// DecodeError is returned by [Decode] for input that is not an event at all.
type DecodeError struct {
	// Reason is a short machine-readable reason: "subject", "oversize", "invalid_utf8", "invalid_json".
	Reason string
	Err    error
}

func (e *DecodeError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// FloatOrInf is a float64 that encodes ±Inf and NaN as the strings "+Inf", "-Inf" and "NaN",
// which JSON numbers cannot hold (a histogram's last bucket bound is +Inf).
type FloatOrInf float64

// MarshalJSON implements json.Marshaler.
func (f FloatOrInf) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (f *FloatOrInf) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		switch s {
		case "+Inf", "Inf":
			*f = FloatOrInf(math.Inf(1))
		case "-Inf":
			*f = FloatOrInf(math.Inf(-1))
		case "NaN":
			*f = FloatOrInf(math.NaN())
		default:
			return fmt.Errorf("bucket bound %q is not a number, +Inf, -Inf or NaN", s)
		}
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = FloatOrInf(v)
	return nil
}
