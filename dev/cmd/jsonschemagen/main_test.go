package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/servescope/servescope/dev/jsonschemagen"
)

func TestRunWritesEveryFile(t *testing.T) {
	out := filepath.Join(t.TempDir(), "jsonschema")
	if err := run("../../../schema", out); err != nil {
		t.Fatalf("run: %v", err)
	}
	want, err := jsonschemagen.Files("../../../schema")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Errorf("wrote %d files, want %d", len(entries), len(want))
	}
	for name, doc := range want {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, doc) {
			t.Errorf("%s differs from jsonschemagen.Files", name)
		}
	}
}

func TestRunFailsOnMissingSources(t *testing.T) {
	if err := run(filepath.Join(t.TempDir(), "nothing"), t.TempDir()); err == nil {
		t.Errorf("run with no sources succeeded")
	}
}
