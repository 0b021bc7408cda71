// Command grafanagen writes the Grafana dashboard of the console's panels
// (deploy/grafana/dashboards/servescope.json) from deploy/console/panels. Run it from the
// repository root after changing a panel file: go run ./dev/cmd/grafanagen
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/servescope/servescope/internal/service"

	"github.com/servescope/servescope/dev/grafanagen"
)

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("grafanagen", "Usage: grafanagen [--out FILE]\n\nWrites the Grafana dashboard built from the console's panel files.")
	out := c.Flags.String("out", grafanagen.Path, "the dashboard file to write")
	c.Run = func(context.Context, *slog.Logger, []string) error { return run(*out) }
	return c
}

func run(out string) error {
	b, err := grafanagen.Generate()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("create the directory of %s: %w", out, err)
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}
