package eventgen

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/schema"
)

func TestEventsAreValidAndMalformedAreRefused(t *testing.T) {
	base := time.Now().Add(-time.Hour)
	for _, k := range schema.Kinds() {
		data := Encode(Event(k, 7, base))
		subject := schema.Subject(k)
		if _, err := schema.Decode(subject, data); err != nil {
			t.Errorf("%s: generated event does not decode: %v\n%s", k, err, data)
		}
		for _, m := range MalformedFor(k, 7, base) {
			_, err := schema.Decode(subject, m.Data)
			if err == nil {
				t.Errorf("%s/%s: decoded, want a refusal", k, m.Name)
				continue
			}
			var de *schema.DecodeError
			var ve schema.ValidationErrors
			if !errors.As(err, &de) && !errors.As(err, &ve) {
				t.Errorf("%s/%s: error %T is neither *DecodeError nor ValidationErrors", k, m.Name, err)
			}
			if !strings.Contains(err.Error(), m.Reason) {
				t.Errorf("%s/%s: error %q does not contain %q", k, m.Name, err, m.Reason)
			}
		}
	}
	if n := len(Encode(RequestFinished(1, base))); n < 300 || n > 400 {
		t.Errorf("request.finished is %d bytes, want about 350", n)
	}
}
