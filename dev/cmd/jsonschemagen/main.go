// Command jsonschemagen writes the JSON Schema file of every servescope event kind. It is run by
// `go generate ./schema/...` from the schema directory.
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/servescope/servescope/dev/jsonschemagen"
)

func main() {
	src := flag.String("src", ".", "directory of package schema's Go sources (for doc comments)")
	out := flag.String("out", "jsonschema", "directory to write the JSON Schema files into")
	flag.Parse()
	if err := run(*src, *out); err != nil {
		fmt.Fprintln(os.Stderr, "jsonschemagen:", err)
		os.Exit(1)
	}
}

func run(src, out string) error {
	files, err := jsonschemagen.Files(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", out, err)
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		p := filepath.Join(out, name)
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}
