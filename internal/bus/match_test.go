package bus

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

func TestSubjectMatches(t *testing.T) {
	cases := []struct {
		filter, subject string
		want            bool
	}{
		{"servescope.v1.>", "servescope.v1.request.finished", true},
		{"servescope.v1.>", "servescope.v1", false},
		{"servescope.v1.>", "servescope.dlq.v1.app.record", false},
		{"servescope.>", "servescope.dlq.v1.app.record", true},
		{"servescope.v1.request.*", "servescope.v1.request.started", true},
		{"servescope.v1.request.*", "servescope.v1.engine.log", false},
		{"servescope.v1.request.*", "servescope.v1.request.started.x", false},
		{"servescope.*.app.record", "servescope.v1.app.record", true},
		{"servescope.v1.app.record", "servescope.v1.app.record", true},
		{"servescope.v1.app.record", "servescope.v1.app", false},
		{">", "anything.at.all", true},
		{"servescope.v1.>.x", "servescope.v1.a.x", false}, // '>' only counts last
	}
	for _, c := range cases {
		if got := subjectMatches(c.filter, c.subject); got != c.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", c.filter, c.subject, got, c.want)
		}
	}
}

// FuzzSubjectMatches checks subjectMatches, which reads the subject filters of a stream or a
// durable consumer as the server returns them, against nats-server's own matcher for every valid
// filter and literal subject.
func FuzzSubjectMatches(f *testing.F) {
	f.Add("servescope.v1.>", "servescope.v1.request.finished")
	f.Add("servescope.*.app.record", "servescope.v1.app.record")
	f.Add(">", "a")
	f.Add("a.*.>", "a.b")
	f.Add("servescope.v1.app.record", "servescope.v1.app")
	f.Fuzz(func(t *testing.T, filter, subject string) {
		got := subjectMatches(filter, subject)
		if !server.IsValidSubject(filter) || !server.IsValidLiteralSubject(subject) || !wholeTokenWildcards(filter) {
			return
		}
		if want := server.SubjectMatchesFilter(subject, filter); got != want {
			t.Errorf("subjectMatches(%q, %q) = %v, nats-server says %v", filter, subject, got, want)
		}
	})
}

// wholeTokenWildcards reports whether every '*' and '>' of f is a token of its own, the only
// wildcards NATS defines: nats-server accepts a token such as "*x" and its matcher reads it as a
// wildcard by its first byte, a spelling no servescope resource uses.
func wholeTokenWildcards(f string) bool {
	for _, tok := range strings.Split(f, ".") {
		if tok != "*" && tok != ">" && strings.ContainsAny(tok, "*>") {
			return false
		}
	}
	return true
}
