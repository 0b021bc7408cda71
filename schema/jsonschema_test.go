package schema_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sjs "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/servescope/servescope/dev/jsonschemagen"
	"github.com/servescope/servescope/schema"
)

const jsonSchemaDir = "jsonschema"

func TestJSONSchemaFilesUpToDate(t *testing.T) {
	want, err := jsonschemagen.Files(".")
	if err != nil {
		t.Fatalf("generate JSON Schema: %v", err)
	}
	for name, doc := range want {
		got, err := os.ReadFile(filepath.Join(jsonSchemaDir, name))
		if err != nil {
			t.Errorf("%v; run `go generate ./schema/...`", err)
			continue
		}
		if !bytes.Equal(got, doc) {
			t.Errorf("%s/%s is stale (differs from the Go types); run `go generate ./schema/...`", jsonSchemaDir, name)
		}
	}
	entries, err := os.ReadDir(jsonSchemaDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := want[e.Name()]; !ok {
			t.Errorf("%s/%s is not generated from any event kind; remove it", jsonSchemaDir, e.Name())
		}
	}
	if len(want) != len(schema.Kinds()) {
		t.Errorf("generated %d files for %d kinds", len(want), len(schema.Kinds()))
	}
}

// compileJSONSchemas compiles the committed JSON Schema file of every kind, asserting formats
// (date-time) as a strict publisher-side validator would.
func compileJSONSchemas(t *testing.T) map[schema.Kind]*sjs.Schema {
	t.Helper()
	c := sjs.NewCompiler()
	c.AssertFormat()
	out := map[schema.Kind]*sjs.Schema{}
	for _, k := range schema.Kinds() {
		f, err := os.Open(filepath.Join(jsonSchemaDir, jsonschemagen.FileName(k)))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := sjs.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			t.Fatalf("parse %s: %v", jsonschemagen.FileName(k), err)
		}
		url := "https://servescope.invalid/schema/" + jsonschemagen.FileName(k)
		if err := c.AddResource(url, doc); err != nil {
			t.Fatalf("add %s: %v", url, err)
		}
		s, err := c.Compile(url)
		if err != nil {
			t.Fatalf("compile %s: %v", jsonschemagen.FileName(k), err)
		}
		out[k] = s
	}
	return out
}

func validateJSON(s *sjs.Schema, b []byte) error {
	inst, err := sjs.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

func TestJSONSchemaAcceptsValidEvents(t *testing.T) {
	schemas := compileJSONSchemas(t)
	minimal := map[schema.Kind]string{
		schema.KindRequestStarted:   `{"schema":"request.started/v1","event_id":"e","request_id":"r","ts":"2026-06-01T11:00:00Z","arrival_ts":"2026-06-01T11:00:00Z","endpoint":"/v1/completions","stream":false}`,
		schema.KindRequestFinished:  `{"schema":"request.finished/v1","event_id":"e","request_id":"r","ts":"2026-06-01T11:00:01Z","arrival_ts":"2026-06-01T11:00:00Z","finished_ts":"2026-06-01T11:00:01Z","endpoint":"/v1/completions","stream":false,"status_code":502}`,
		schema.KindAppRecord:        `{"schema":"app.record/v1","event_id":"e","request_id":"r","ts":"2026-06-01T11:00:00.5+02:00"}`,
		schema.KindEngineSample:     `{"schema":"engine.sample/v1","event_id":"e","ts":"2026-06-01T11:00:00Z","engine":"vllm","up":false}`,
		schema.KindEngineSpan:       `{"schema":"engine.span/v1","event_id":"e","request_id":"r","ts":"2026-06-01T11:00:00Z"}`,
		schema.KindEngineLog:        `{"schema":"engine.log/v1","event_id":"e","ts":"2026-06-01T11:00:00Z","engine":"vllm","line":""}`,
		schema.KindGatewayHeartbeat: `{"schema":"gateway.heartbeat/v1","event_id":"e","ts":"2026-06-01T11:00:00Z","gateway":"gw","interval_s":15,"listed_after_s":30,"in_flight":0}`,
	}
	for _, e := range fullEvents() {
		k := e.Kind()
		t.Run(string(k), func(t *testing.T) {
			full := mustEncode(t, e)
			if err := validateJSON(schemas[k], full); err != nil {
				t.Errorf("full event refused by %s: %v\n%s", jsonschemagen.FileName(k), err, full)
			}
			if err := validateJSON(schemas[k], []byte(minimal[k])); err != nil {
				t.Errorf("minimal event refused by %s: %v", jsonschemagen.FileName(k), err)
			}
			// Both sides must agree: what the JSON Schema accepts, Decode accepts.
			if _, err := schema.DecodeAt(schema.Subject(k), []byte(minimal[k]), now); err != nil {
				t.Errorf("minimal event refused by Decode: %v", err)
			}
		})
	}
}

// TestJSONSchemaRefusesWhatDecodeRefuses checks the rules a publisher can check before sending
// against Decode's: each mutation must fail both.
func TestJSONSchemaRefusesWhatDecodeRefuses(t *testing.T) {
	schemas := compileJSONSchemas(t)
	tests := []struct {
		name   string
		kind   schema.Kind
		change func(m map[string]any)
	}{
		{"missing event_id", schema.KindAppRecord, func(m map[string]any) { delete(m, "event_id") }},
		{"empty event_id", schema.KindEngineSample, func(m map[string]any) { m["event_id"] = "" }},
		{"missing request_id", schema.KindRequestFinished, func(m map[string]any) { delete(m, "request_id") }},
		{"empty request_id", schema.KindEngineSpan, func(m map[string]any) { m["request_id"] = "" }},
		{"missing ts", schema.KindEngineLog, func(m map[string]any) { delete(m, "ts") }},
		{"ts not a date-time", schema.KindEngineLog, func(m map[string]any) { m["ts"] = "yesterday" }},
		{"missing schema", schema.KindRequestStarted, func(m map[string]any) { delete(m, "schema") }},
		{"schema of another version", schema.KindRequestFinished, func(m map[string]any) { m["schema"] = "request.finished/v2" }},
		{"schema of another kind", schema.KindRequestFinished, func(m map[string]any) { m["schema"] = "request.started/v1" }},
		{"negative ttft_s", schema.KindRequestFinished, func(m map[string]any) { m["ttft_s"] = -1 }},
		{"status_code out of range", schema.KindRequestFinished, func(m map[string]any) { m["status_code"] = 600 }},
		{"missing status_code", schema.KindRequestFinished, func(m map[string]any) { delete(m, "status_code") }},
		{"unknown error_layer", schema.KindRequestFinished, func(m map[string]any) { m["error_layer"] = "database" }},
		{"error_message over 8 KiB", schema.KindRequestFinished, func(m map[string]any) { m["error_message"] = strings.Repeat("e", 8193) }},
		{"negative token count", schema.KindRequestFinished, func(m map[string]any) { m["completion_tokens"] = -3 }},
		{"token count over uint32", schema.KindEngineSpan, func(m map[string]any) { m["prompt_tokens"] = 1 << 32 }},
		{"fractional token count", schema.KindRequestStarted, func(m map[string]any) { m["max_tokens"] = 12.5 }},
		{"string duration", schema.KindAppRecord, func(m map[string]any) { m["retrieval_s"] = "0.2" }},
		{"missing endpoint", schema.KindRequestStarted, func(m map[string]any) { delete(m, "endpoint") }},
		{"empty passage id", schema.KindAppRecord, func(m map[string]any) { m["passages"] = []any{map[string]any{"id": "", "score": 0.3}} }},
		{"passage without id", schema.KindAppRecord, func(m map[string]any) { m["passages"] = []any{map[string]any{"score": 0.3}} }},
		{"missing engine", schema.KindEngineSample, func(m map[string]any) { delete(m, "engine") }},
		{"empty engine", schema.KindEngineLog, func(m map[string]any) { m["engine"] = "" }},
		{"bucket bound not a number", schema.KindEngineSample, func(m map[string]any) {
			m["histograms"] = map[string]any{"h": map[string]any{"sum": 1, "count": 1, "buckets": []any{map[string]any{"le": "infinity", "count": 1}}}}
		}},
		{"gauge as string", schema.KindEngineSample, func(m map[string]any) { m["gauges"] = map[string]any{"g": "NaN"} }},
		{"too many frames", schema.KindEngineLog, func(m map[string]any) { m["frames"] = make([]any, 65) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mutate(t, mustEncode(t, fullEvent(t, tt.kind)), tt.change)
			if err := validateJSON(schemas[tt.kind], b); err == nil {
				t.Errorf("%s accepted it: %.300s", jsonschemagen.FileName(tt.kind), b)
			}
			if _, err := schema.DecodeAt(schema.Subject(tt.kind), b, now); err == nil {
				t.Errorf("Decode accepted it: %.300s", b)
			}
		})
	}
}

func TestJSONSchemaProperties(t *testing.T) {
	for _, e := range fullEvents() {
		k := e.Kind()
		t.Run(string(k), func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(jsonSchemaDir, jsonschemagen.FileName(k)))
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Properties map[string]struct {
					Const string `json:"const"`
				} `json:"properties"`
				Required             []string `json:"required"`
				AdditionalProperties *bool    `json:"additionalProperties"`
			}
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			var event map[string]json.RawMessage
			if err := json.Unmarshal(mustEncode(t, e), &event); err != nil {
				t.Fatal(err)
			}
			// The full sample sets every field, so the two key sets must be equal: the JSON
			// Schema lacks nothing that is emitted (embedded structs are flat in both) and the
			// sample leaves nothing out.
			var emitted, described []string
			for name := range event {
				emitted = append(emitted, name)
			}
			for name := range doc.Properties {
				// An engine scrape or a gateway heartbeat belongs to no request; the header
				// field stays allowed.
				if (k == schema.KindEngineSample || k == schema.KindGatewayHeartbeat) && name == "request_id" {
					continue
				}
				described = append(described, name)
			}
			slices.Sort(emitted)
			slices.Sort(described)
			if !slices.Equal(emitted, described) {
				t.Errorf("encoded properties %q\nJSON Schema properties %q", emitted, described)
			}
			for _, embedded := range []string{"schema", "event_id", "ts"} {
				if !slices.Contains(doc.Required, embedded) {
					t.Errorf("header field %s not required at top level: %q", embedded, doc.Required)
				}
			}
			if got := doc.Properties["schema"].Const; got != k.SchemaID() {
				t.Errorf("schema const %q, want %q", got, k.SchemaID())
			}
			if doc.AdditionalProperties == nil || *doc.AdditionalProperties {
				t.Errorf("additionalProperties is not false: misspelled fields would pass unnoticed")
			}
		})
	}
}
