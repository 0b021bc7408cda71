package jsonschemagen

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/servescope/servescope/schema"
)

func TestForUnknownKind(t *testing.T) {
	if _, err := For("request.cancelled", "../../schema"); err == nil || !strings.Contains(err.Error(), `unknown kind "request.cancelled"`) {
		t.Errorf("For(unknown kind) error = %v", err)
	}
}

func TestForRequiredFollowsValidator(t *testing.T) {
	tests := []struct {
		kind     schema.Kind
		required []string
	}{
		{schema.KindRequestStarted, []string{"schema", "event_id", "ts", "arrival_ts", "endpoint", "request_id"}},
		{schema.KindRequestFinished, []string{"schema", "event_id", "ts", "arrival_ts", "finished_ts", "endpoint", "status_code", "request_id"}},
		{schema.KindAppRecord, []string{"schema", "event_id", "ts", "request_id"}},
		{schema.KindEngineSample, []string{"schema", "event_id", "ts", "engine"}},
		{schema.KindEngineSpan, []string{"schema", "event_id", "ts", "request_id"}},
		{schema.KindEngineLog, []string{"schema", "event_id", "ts", "engine", "line"}},
	}
	for _, tt := range tests {
		s, err := For(tt.kind, "../../schema")
		if err != nil {
			t.Fatalf("For(%s): %v", tt.kind, err)
		}
		got := slices.Sorted(slices.Values(s.Required))
		want := slices.Sorted(slices.Values(tt.required))
		if !slices.Equal(got, want) {
			t.Errorf("%s required %q, want %q", tt.kind, got, want)
		}
		// Strings the validator refuses when empty must say so; engine.log's line may be empty.
		for _, name := range []string{"event_id", "request_id", "endpoint", "engine", "line"} {
			p, ok := s.Properties.Get(name)
			if !ok {
				continue
			}
			nonEmpty := p.MinLength != nil && *p.MinLength == 1
			if wantNonEmpty := slices.Contains(tt.required, name) && name != "line"; nonEmpty != wantNonEmpty {
				t.Errorf("%s.%s minLength 1 = %v, want %v", tt.kind, name, nonEmpty, wantNonEmpty)
			}
		}
	}
}

func TestFloatOrInfAndUnsignedSchemas(t *testing.T) {
	s, err := For(schema.KindEngineSample, "../../schema")
	if err != nil {
		t.Fatal(err)
	}
	le, err := json.Marshal(s.Definitions["Bucket"].Properties.Value("le"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(le), `"anyOf":[{"type":"number"},{"type":"string","enum":["+Inf","-Inf","NaN"]}]`) {
		t.Errorf("le schema: %s", le)
	}
	log, err := For(schema.KindEngineLog, "../../schema")
	if err != nil {
		t.Fatal(err)
	}
	for name, max := range map[string]string{"offset": "18446744073709551615", "running": "4294967295"} {
		p := log.Properties.Value(name)
		if p.Type != "integer" || p.Minimum != "0" || string(p.Maximum) != max {
			t.Errorf("%s: type %q minimum %q maximum %q, want integer 0 %s", name, p.Type, p.Minimum, p.Maximum, max)
		}
	}
}

func TestCommentsReadOnlyThePackage(t *testing.T) {
	docs, err := comments("../../schema")
	if err != nil {
		t.Fatal(err)
	}
	if got := docs[ModulePath+".Header.EventID"]; !strings.HasPrefix(got, "EventID is a KSUID") {
		t.Errorf("Header.EventID doc %q", got)
	}
	if got := docs[ModulePath+".RequestFinished.TTFTSeconds"]; strings.Contains(got, "\n") {
		t.Errorf("wrapped comment not joined: %q", got)
	}
	for k := range docs {
		if !strings.HasPrefix(k, ModulePath+".") || strings.Count(strings.TrimPrefix(k, ModulePath+"."), ".") > 1 {
			t.Errorf("unexpected key %q", k)
		}
	}
	if _, err := comments(t.TempDir()); err == nil {
		t.Errorf("comments of an empty directory succeeded")
	}
}
