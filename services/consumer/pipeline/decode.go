package pipeline

import (
	"encoding/json"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/servescope/servescope/schema"
)

// decode returns exactly what schema.DecodeAt returns, faster for the common case of a valid
// event. schema.DecodeAt parses every message twice (a probe of the `schema` field, then the
// event); here a valid event is parsed once — by the hand-written reader of fastjson.go for
// request.started and request.finished, else by encoding/json — with the `schema` field checked
// after decoding and the same validation. Whatever the single pass does not accept goes through schema.DecodeAt,
// so every refusal and its reason is the schema package's own. FuzzDecodeMatchesSchema holds
// the two to the same results.
func decode(subject string, data []byte, now time.Time) (schema.Event, error) {
	k, err := schema.KindFromSubject(subject)
	if err != nil || len(data) > schema.MaxEventBytes || !utf8.Valid(data) {
		return schema.DecodeAt(subject, data, now)
	}
	var e schema.Event
	ok := false
	switch k {
	case schema.KindRequestFinished:
		e, ok = fastRequestFinished(string(data))
	case schema.KindRequestStarted:
		e, ok = fastRequestStarted(string(data))
	}
	if !ok {
		e = schema.New(k)
		// schema.New presets the schema field; cleared, an event without one cannot pass below.
		e.Head().Schema = ""
		ok = json.Unmarshal(data, e) == nil
	}
	if ok && e.Head().Schema == k.SchemaID() && e.ValidateAt(now) == nil {
		return e, nil
	}
	return schema.DecodeAt(subject, data, now)
}

// refusalReason is the short, stable label of a refusal for metrics: the *schema.DecodeError
// reason ("invalid_json", "invalid_utf8", "oversize", "subject") or "invalid" for validation.
func refusalReason(err error) string {
	var de *schema.DecodeError
	if errors.As(err, &de) {
		return de.Reason
	}
	return "invalid"
}
