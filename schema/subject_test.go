package schema_test

import (
	"strings"
	"testing"

	"github.com/servescope/servescope/schema"
)

func TestSubjects(t *testing.T) {
	for _, k := range schema.Kinds() {
		want := "servescope.v1." + string(k)
		if got := schema.Subject(k); got != want {
			t.Errorf("Subject(%s) = %q, want %q", k, got, want)
		}
		if got := schema.SubjectWithPrefix("it-4f2a", k); got != "it-4f2a.v1."+string(k) {
			t.Errorf("SubjectWithPrefix(it-4f2a, %s) = %q", k, got)
		}
		if !k.Valid() {
			t.Errorf("%s.Valid() = false", k)
		}
	}
	if got := schema.KindAppRecord.SchemaID(); got != "app.record/v1" {
		t.Errorf("SchemaID = %q", got)
	}
	if schema.Kind("app.records").Valid() || schema.Kind("").Valid() {
		t.Errorf("invalid kinds reported valid")
	}
}

func TestKindFromSubject(t *testing.T) {
	tests := []struct {
		subject string
		want    schema.Kind
		err     string // part of the error; empty when the subject is valid
	}{
		{"servescope.v1.request.started", schema.KindRequestStarted, ""},
		{"servescope.v1.request.finished", schema.KindRequestFinished, ""},
		{"servescope.v1.app.record", schema.KindAppRecord, ""},
		{"servescope.v1.engine.sample", schema.KindEngineSample, ""},
		{"servescope.v1.engine.span", schema.KindEngineSpan, ""},
		{"servescope.v1.engine.log", schema.KindEngineLog, ""},
		{"test-1a2b.v1.app.record", schema.KindAppRecord, ""},
		{"acme.prod.eu.v1.engine.log", schema.KindEngineLog, ""},
		{schema.SubjectWithPrefix("tenant_42", schema.KindEngineSpan), schema.KindEngineSpan, ""},
		{"servescope.v2.app.record", "", "not a servescope v1 subject"},
		{"servescope.dlq.app.record", "", "not a servescope v1 subject"},
		{"v1.app.record", "", "not a servescope v1 subject"},
		{"", "", "not a servescope v1 subject"},
		{"servescope.v1.", "", `unknown event kind ""`},
		{"servescope.v1.app", "", `unknown event kind "app"`},
		{"servescope.v1.app.record.extra", "", `unknown event kind "app.record.extra"`},
		{"servescope.v1.*", "", `unknown event kind "*"`},
		{"servescope.v1.>", "", `unknown event kind ">"`},
		{"servescope.V1.app.record", "", "not a servescope v1 subject"},
	}
	for _, tt := range tests {
		got, err := schema.KindFromSubject(tt.subject)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("KindFromSubject(%q): %v", tt.subject, err)
		case tt.err == "" && got != tt.want:
			t.Errorf("KindFromSubject(%q) = %q, want %q", tt.subject, got, tt.want)
		case tt.err != "" && err == nil:
			t.Errorf("KindFromSubject(%q) = %q, want an error", tt.subject, got)
		case tt.err != "" && !strings.Contains(err.Error(), tt.err):
			t.Errorf("KindFromSubject(%q) error %q, want it to contain %q", tt.subject, err, tt.err)
		case tt.err != "" && got != "":
			t.Errorf("KindFromSubject(%q) returned kind %q with its error", tt.subject, got)
		}
	}
}
