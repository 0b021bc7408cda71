// Command jsonschemagen writes the JSON Schema file of every servescope event kind. It is run by
// `go generate ./schema/...` from the schema directory.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/servescope/servescope/dev/jsonschemagen"
	"github.com/servescope/servescope/internal/service"
)

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("jsonschemagen", "Usage: jsonschemagen [--src DIR] [--out DIR]\n\n"+
		"Writes the JSON Schema file of every servescope event kind.")
	src := c.Flags.String("src", ".", "directory of package schema's Go sources (for doc comments)")
	out := c.Flags.String("out", "jsonschema", "directory to write the JSON Schema files into")
	c.Run = func(_ context.Context, _ *slog.Logger, args []string) error {
		if len(args) > 0 {
			return service.UsageError(fmt.Errorf("unexpected arguments %q", args))
		}
		return run(*src, *out)
	}
	return c
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
