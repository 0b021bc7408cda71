package demo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/services/detector/rules"
)

func TestScaleRule(t *testing.T) {
	src := `# a comment that stays
name: example
severity: warning
window: 10m
for: 2m
interval: 30s
params:
  min_count: 3
query: |
  SELECT map() AS labels, 1.0 AS value, NULL AS baseline, 1.0 AS threshold, true AS baseline_ok,
         true AS firing FROM system.one WHERE {{window "ts"}}
`
	tests := []struct {
		factor                 float64
		window, hold, interval time.Duration
		wantErr                string
	}{
		{factor: 1, window: 10 * time.Minute, hold: 2 * time.Minute, interval: 30 * time.Second},
		{factor: 10, window: time.Minute, hold: 12 * time.Second, interval: 3 * time.Second},
		{factor: 1000, window: time.Second, hold: time.Second, interval: time.Second},
		{factor: 0.5, wantErr: "at least 1"},
	}
	for _, tc := range tests {
		out, err := ScaleRule([]byte(src), tc.factor)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("factor %g: error %v, want one containing %q", tc.factor, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("factor %g: %v", tc.factor, err)
		}
		def, err := rules.Parse("example.yaml", out)
		if err != nil {
			t.Fatalf("factor %g: scaled rule does not parse: %v\n%s", tc.factor, err, out)
		}
		if def.Window.D() != tc.window || def.For.D() != tc.hold || def.Interval.D() != tc.interval {
			t.Errorf("factor %g: window %s for %s interval %s, want %s %s %s", tc.factor,
				def.Window.D(), def.For.D(), def.Interval.D(), tc.window, tc.hold, tc.interval)
		}
		if def.Params["min_count"] != 3 || !strings.Contains(def.Query, `{{window "ts"}}`) {
			t.Errorf("factor %g: params or query changed: %v\n%s", tc.factor, def.Params, def.Query)
		}
		if !strings.Contains(string(out), "# a comment that stays") {
			t.Errorf("factor %g: comment lost:\n%s", tc.factor, out)
		}
	}
}

func TestScaleRuleKeepsZeroHold(t *testing.T) {
	out, err := ScaleRule([]byte("name: x\nwindow: 5m\nfor: 0s\nquery: SELECT 1\n"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "for: 0s") || !strings.Contains(string(out), "window: 30s") {
		t.Errorf("scaled rule:\n%s", out)
	}
}

func TestScaleRuleBadInput(t *testing.T) {
	for _, src := range []string{"window: soon\n", "- a\n- b\n", "name: [\n"} {
		if _, err := ScaleRule([]byte(src), 10); err == nil {
			t.Errorf("ScaleRule(%q): no error", src)
		}
	}
}

func TestWriteScaledRules(t *testing.T) {
	dir := t.TempDir()
	names, err := WriteScaledRules(dir, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"output_language_errors", "overload_queue", "retrieval_version_change", "server_errors", "unfinished_rising"}
	for _, w := range want {
		found := false
		for _, n := range names {
			found = found || n == w
		}
		if !found {
			t.Errorf("rule %s not written (got %v)", w, names)
		}
	}
	loaded, err := rules.Load(os.DirFS(dir), ".")
	if err != nil {
		t.Fatalf("the detector cannot load the written rules: %v", err)
	}
	for _, d := range loaded {
		if d.Name == "overload_queue" && d.Window.D() != 30*time.Second {
			t.Errorf("overload_queue window %s, want 30s (5m ÷ 10)", d.Window.D())
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "server_errors.yaml"))
	if err != nil || !strings.HasPrefix(string(raw), "# Written by scripts/demo") {
		t.Errorf("server_errors.yaml lacks its header: %v\n%.200s", err, raw)
	}
}
