package demo

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/services/detector/rules"
)

// ScaleRule rewrites one rule file so its window, hold (for) and own interval are divided by
// factor, rounded to whole seconds (at least 1 s). The SQL, parameters, thresholds and baseline
// (a normal day before the last hour) stay as shipped. The demo compresses hours of serving into
// minutes, so the production windows (5–15 minutes) would mix every scenario into one window.
func ScaleRule(src []byte, factor float64) ([]byte, error) {
	if factor < 1 {
		return nil, fmt.Errorf("scale factor %g: must be at least 1", factor)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("parse rule: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("rule file is not a YAML mapping")
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		key, val := m.Content[i].Value, m.Content[i+1]
		switch key {
		case "window", "for", "interval":
			d, err := time.ParseDuration(val.Value)
			if err != nil {
				return nil, fmt.Errorf("%s %q: %w", key, val.Value, err)
			}
			if d == 0 {
				continue
			}
			s := time.Duration(float64(d) / factor).Round(time.Second)
			s = max(s, time.Second)
			val.Value = s.String()
			val.Style = 0
		}
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("encode rule: %w", err)
	}
	return out.Bytes(), nil
}

// WriteScaledRules writes every built-in rule, scaled by factor, into dir (created if needed) for
// DETECTOR_RULES_DIR; rules named like the built-in ones replace them. Each written file is
// checked with the detector's own parser. It returns the rule names.
func WriteScaledRules(dir string, factor float64) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create rules directory: %w", err)
	}
	entries, err := fs.ReadDir(builtin.Rules, builtin.RulesDir)
	if err != nil {
		return nil, fmt.Errorf("list built-in rules: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		src, err := fs.ReadFile(builtin.Rules, path.Join(builtin.RulesDir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read built-in rule %s: %w", e.Name(), err)
		}
		scaled, err := ScaleRule(src, factor)
		if err != nil {
			return nil, fmt.Errorf("scale rule %s: %w", e.Name(), err)
		}
		header := fmt.Sprintf("# Written by scripts/demo: the built-in rule %s with window, for and interval divided by %g.\n", e.Name(), factor)
		data := append([]byte(header), scaled...)
		def, err := rules.Parse(e.Name(), data)
		if err != nil {
			return nil, fmt.Errorf("scaled rule %s does not load: %w", e.Name(), err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			return nil, fmt.Errorf("write rule %s: %w", e.Name(), err)
		}
		names = append(names, def.Name)
	}
	return names, nil
}
