package demo

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/services/detector/slo"
)

// SLOScale divides the built-in SLOs' burn-rate windows in the demo: the page pairs of 1 h/5 m and
// 6 h/30 m become 2 m/10 s and 12 m/1 m, so that the overload's TTFT burn pages within its
// 40 seconds and the page resolves a minute after it ends, inside the demo's minutes. The burn
// factors, the objectives and the 28-day period stay as shipped.
const SLOScale = 30

// ScaleSLO returns d with every burn-rate window divided by factor (whole seconds, at least 1 s).
func ScaleSLO(d *slo.Definition, factor float64) (*slo.Definition, error) {
	if factor < 1 {
		return nil, fmt.Errorf("scale factor %g: must be at least 1", factor)
	}
	c := *d
	scale := func(ws []slo.Window) *[]slo.Window {
		out := make([]slo.Window, len(ws))
		for i, w := range ws {
			div := func(s slo.Span) slo.Span {
				return slo.Span(max(time.Duration(float64(s.D())/factor).Round(time.Second), time.Second))
			}
			out[i] = slo.Window{Long: div(w.Long), Short: div(w.Short), Factor: w.Factor}
		}
		return &out
	}
	c.Alerts.Page, c.Alerts.Ticket = scale(d.Alerts.PageWindows()), scale(d.Alerts.TicketWindows())
	return &c, nil
}

// WriteScaledSLOs writes every built-in SLO with its windows divided by factor into dir (created
// if needed) for DETECTOR_SLOS_DIR, each checked with the detector's own parser, and returns the
// written SLOs.
func WriteScaledSLOs(dir string, factor float64) ([]*slo.Definition, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create SLO directory: %w", err)
	}
	defs, err := slo.LoadBuiltin(builtin.SLOs, builtin.SLOsDir, builtin.RepoDir)
	if err != nil {
		return nil, err
	}
	var out []*slo.Definition
	for _, d := range defs {
		scaled, err := ScaleSLO(d, factor)
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "# Written by scripts/demo: the built-in SLO %s with its burn-rate windows divided by %g.\n", d.Source, factor)
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(scaled); err != nil {
			return nil, fmt.Errorf("write SLO %s: %w", d.Name, err)
		}
		name := d.Name + ".yaml"
		back, err := slo.Parse(name, b.Bytes())
		if err != nil {
			return nil, fmt.Errorf("scaled SLO %s does not load: %w", d.Name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
			return nil, fmt.Errorf("write SLO %s: %w", d.Name, err)
		}
		out = append(out, back)
	}
	return out, nil
}

// EnginePricePerHour is what the demo's engine costs an hour: an RTX 3060's, as a cloud rents one.
const EnginePricePerHour = 0.25

// WriteEngines writes the demo's engines file (DETECTOR_ENGINES_FILE): the engine's price per hour
// and its slot limit (vllmsim runs vLLM's default, 256, and its start-up log line does not say it).
func WriteEngines(path string) error {
	text := fmt.Sprintf("# Written by scripts/demo: the demo engine's price and slot limit.\ncurrency: USD\nengines:\n  %s: {price_per_hour: %g, max_num_seqs: 256}\n",
		EngineName, EnginePricePerHour)
	if _, err := slo.ParseEngines(path, []byte(text)); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(text), 0o644)
}

func windowsText(ws []slo.Window) string {
	var b bytes.Buffer
	for i, w := range ws {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%g× over %s and %s", w.Factor, w.Long, w.Short)
	}
	return b.String()
}
