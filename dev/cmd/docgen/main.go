// Command docgen writes the reference pages of docs/ that the code defines: docs/configuration.md
// from the programs' settings structs and docs/cli.md from the binaries' --help (package
// dev/docgen says how). Run it from the repository root after changing a setting, a flag or a
// command: go run ./dev/cmd/docgen
package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/servescope/servescope/dev/docgen"
	"github.com/servescope/servescope/internal/service"
)

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("docgen", "Usage: docgen [--root DIR]\n\n"+
		"Writes docs/configuration.md and docs/cli.md from the code of the repository at --root.")
	root := c.Flags.String("root", ".", "the repository's root directory")
	c.Run = func(ctx context.Context, log *slog.Logger, args []string) error {
		if len(args) > 0 {
			return service.UsageError(fmt.Errorf("unexpected arguments %q", args))
		}
		return run(ctx, log, *root)
	}
	return c
}

func run(ctx context.Context, log *slog.Logger, root string) error {
	pages, err := docgen.Pages(ctx, root)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(pages)) {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.WriteFile(p, pages[name], 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		log.Info("wrote", "page", name, "bytes", len(pages[name]))
	}
	return nil
}
