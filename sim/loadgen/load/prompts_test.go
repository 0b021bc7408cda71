package load_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/servescope/servescope/sim/loadgen/load"
)

// TestPromptsHitExactTokenCounts checks that prompts built with /tokenize come out at the
// asked size for sizes from tiny to near the context limit, in chat and completions form.
func TestPromptsHitExactTokenCounts(t *testing.T) {
	url := startSim(t, 100)
	for _, tc := range []struct {
		endpoint string
		tokens   int
		same     bool
	}{
		{"chat", 20, false},
		{"chat", 44, false},
		{"chat", 2905, true},
		{"chat", 4000, true},
		{"completions", 44, false},
	} {
		same := tc.same
		rep, err := load.Run(context.Background(), load.Config{
			Target: url, Scenario: "custom", Endpoint: tc.endpoint, Requests: 4, Rate: 50, PromptTokens: tc.tokens, MaxTokens: 2,
			SamePrompt: &same, TimeScale: 100, MetricsURL: "none",
		})
		if err != nil {
			t.Fatalf("%s %d: %v", tc.endpoint, tc.tokens, err)
		}
		if rep.Succeeded != 4 || rep.PromptTokensMean != float64(tc.tokens) {
			t.Errorf("%s %d tokens: succeeded %d, mean prompt %.1f (%v)", tc.endpoint, tc.tokens, rep.Succeeded, rep.PromptTokensMean, rep.ErrorSamples)
		}
	}
	if _, err := load.Run(context.Background(), load.Config{Target: url, Scenario: "custom", Requests: 1, PromptTokens: 3, MetricsURL: "none"}); err == nil ||
		!strings.Contains(err.Error(), "chat template alone") {
		t.Errorf("3-token chat prompt: %v", err)
	}
}

func TestReportText(t *testing.T) {
	url := startSim(t, 100)
	rep, err := load.Run(context.Background(), load.Config{Target: url, Scenario: "normal", Requests: 5, TimeScale: 100})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"sent 5, succeeded 5, failed 0", "Queue wait (s)", "Between two tokens (s)", "Running - maximum", "KV cache - maximum", "TTFT"} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, buf.String())
		}
	}
}
