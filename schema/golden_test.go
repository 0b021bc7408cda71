package schema_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/servescope/servescope/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/events")

// TestWireFormatGolden pins the JSON of a fully populated event of every kind: a renamed field or
// a changed encoding is a change of the v1 contract and shows up here. The files double as
// examples for publishers in other languages (they validate against jsonschema/).
func TestWireFormatGolden(t *testing.T) {
	for _, e := range fullEvents() {
		k := e.Kind()
		t.Run(string(k), func(t *testing.T) {
			path := filepath.Join("testdata", "events", string(k)+".v1.json")
			b := mustEncode(t, e)
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, b, "", "  "); err != nil {
				t.Fatal(err)
			}
			pretty.WriteByte('\n')
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			golden, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./schema -run TestWireFormatGolden -update)", err)
			}
			if !bytes.Equal(golden, pretty.Bytes()) {
				t.Errorf("encoding of %s differs from %s:\ngot:\n%s", k, path, pretty.Bytes())
			}
			// The golden file decodes to the same event.
			got, err := schema.DecodeAt(schema.Subject(k), golden, now)
			if err != nil {
				t.Fatalf("decode %s: %v", path, err)
			}
			if !sameEvent(e, got) {
				t.Errorf("%s decodes to %#v", path, normalize(got))
			}
		})
	}
}

func TestGoldenEventsMatchJSONSchema(t *testing.T) {
	schemas := compileJSONSchemas(t)
	for _, k := range schema.Kinds() {
		b, err := os.ReadFile(filepath.Join("testdata", "events", string(k)+".v1.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := validateJSON(schemas[k], b); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
}
