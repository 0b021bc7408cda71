package bus

import "testing"

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
