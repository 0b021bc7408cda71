package e2e

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/servescope/servescope/internal/diagnose"
	"github.com/servescope/servescope/sim/loadgen/load"
	"github.com/servescope/servescope/sim/vllmsim/engine"
)

// TestScenariosDiagnosed: each workload of docs/measurements.md, run by loadgen through the
// gateway into vllmsim and recorded by the whole pipeline, leaves the signature diagnose reads
// from ClickHouse: overload → queue_overload, long prompt → long_prompt, long output →
// long_output, normal → no finding. The scenarios are scaled down (fewer requests, 20×
// simulated time, 8 slots instead of 256 for the overload) with their signatures intact; each
// runs in its own database with no earlier day, so diagnose compares with its absolute floors.
func TestScenariosDiagnosed(t *testing.T) {
	t.Parallel()
	overloadEngine := engine.DefaultConfig()
	overloadEngine.MaxNumSeqs = 8
	cases := []struct {
		name   string
		engine engine.Config
		load   load.Config
		want   []string
	}{
		{"normal", engine.Config{}, load.Config{Scenario: "normal", Requests: 16, Rate: 2, PromptTokens: 44, MaxTokens: 128}, nil},
		{"overload", overloadEngine, load.Config{Scenario: "overload", Requests: 48, Rate: 8, PromptTokens: 44, MaxTokens: 256},
			[]string{diagnose.BranchQueueOverload}},
		{"long-prompt", engine.Config{}, load.Config{Scenario: "long-prompt", Requests: 8, Rate: 1, PromptTokens: 1500, MaxTokens: 64},
			[]string{diagnose.BranchLongPrompt}},
		{"long-output", engine.Config{}, load.Config{Scenario: "long-output", Requests: 6, Rate: 1, PromptTokens: 44, MaxTokens: 768},
			[]string{diagnose.BranchLongOutput}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startPipeline(t, pipelineOptions{Engine: tc.engine})
			rep, w := p.load(t, tc.load)
			p.waitIngested(t, w, rep.Sent)
			// The baseline is an hour that ended an hour before the run: empty in this fresh
			// database. (The default, the day just before the window, would catch spans of the
			// window's own requests: the collector moves spans the 20× simulated clock stamped
			// in the future back to their arrival, so a long request's span starts seconds of
			// simulated time before the wall-clock window.)
			d, err := diagnose.Run(t.Context(), p.Conn, diagnose.Options{
				Window:   diagnose.Range{From: w.From, To: w.To},
				Baseline: diagnose.Range{From: w.From.Add(-2 * time.Hour), To: w.From.Add(-time.Hour)},
			})
			if err != nil {
				t.Fatalf("diagnose: %v", err)
			}
			var text bytes.Buffer
			if err := d.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if d.Current.Requests != uint64(rep.Sent) {
				t.Errorf("diagnose read %d requests in the window, loadgen sent %d", d.Current.Requests, rep.Sent)
			}
			if d.HasBaseline {
				t.Errorf("the baseline %s of a fresh database has records", d.Baseline)
			}
			findings := slices.Clone(d.Findings)
			slices.Sort(findings)
			if !slices.Equal(findings, tc.want) {
				t.Errorf("findings %v, want %v\n%s", d.Findings, tc.want, text.String())
				return
			}
			t.Logf("findings %v\n%s", d.Findings, text.String())
		})
	}
}
