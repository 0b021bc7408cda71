package load_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/servescope/servescope/sim/loadgen/load"
	"github.com/servescope/servescope/sim/vllmsim/sim"
)

// startSim serves a fresh simulator with vLLM's defaults at the given time scale.
func startSim(t *testing.T, scale float64) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := sim.New(sim.Options{TimeScale: scale})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Engine.Run(ctx)
	}()
	srv := httptest.NewServer(s.Handler)
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
	})
	return srv.URL
}

// TestScenarioSignatures runs the four workloads of docs/measurements.md against vllmsim with its
// default settings and checks that each leaves its signature on the engine's own figures.
func TestScenarioSignatures(t *testing.T) {
	reports := map[string]*load.Report{}
	for _, name := range []string{"normal", "overload", "long-prompt", "long-output"} {
		// The simulator must keep up with its schedule: a step that starts late bunches
		// arrivals into one step and distorts the figures. Overload streams ~50k tokens to 256
		// clients, so it gets more wall time than the light scenarios.
		scale := lightScale
		if name == "overload" {
			scale = overloadScale
		}
		url := startSim(t, scale)
		rep, err := load.Run(context.Background(), load.Config{Target: url, Scenario: name, TimeScale: scale})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rep.Engine == nil {
			t.Fatalf("%s: no engine figures: %s", name, rep.EngineError)
		}
		e := rep.Engine
		t.Logf("%-11s sent=%d ok=%d in/out=%.0f/%.0f queue=%.3f prefill=%.3f ttft=%.3f itl=%.3f decode=%.2f e2e=%.2f maxRun=%.0f maxWait=%.0f maxKV=%.1f%% samples=%d wall=%.1fs",
			name, rep.Sent, rep.Succeeded, *e.PromptTokens, *e.GenerationTokens, *e.QueueSeconds, *e.PrefillSeconds, *e.TTFTSeconds, *e.InterTokenSeconds, *e.DecodeSeconds, *e.E2ESeconds,
			e.MaxRunning, e.MaxWaiting, e.MaxKVCacheUsagePerc, e.Samples, rep.WallSeconds)
		if rep.Failed != 0 || rep.Succeeded != rep.Sent || rep.Sent == 0 {
			t.Fatalf("%s: sent %d, succeeded %d, errors %v %v", name, rep.Sent, rep.Succeeded, rep.Errors, rep.ErrorSamples)
		}
		if rep.FinishReasons["length"] != rep.Succeeded {
			t.Errorf("%s: finish reasons %v, want all length (ignore_eos)", name, rep.FinishReasons)
		}
		if rep.TTFT == nil || rep.TPOT == nil || rep.E2E == nil {
			t.Errorf("%s: missing client-side latencies", name)
		}
		reports[name] = rep
	}
	n, o, lp, lo := reports["normal"].Engine, reports["overload"].Engine, reports["long-prompt"].Engine, reports["long-output"].Engine

	// Token counts are the stable signature.
	for name, want := range map[string][2]float64{"normal": {44, 128}, "overload": {44, 128}, "long-prompt": {2905, 64}, "long-output": {44, 1024}} {
		e := reports[name].Engine
		if *e.PromptTokens != want[0] || *e.GenerationTokens != want[1] {
			t.Errorf("%s: tokens in/out %.1f/%.1f, want %v/%v", name, *e.PromptTokens, *e.GenerationTokens, want[0], want[1])
		}
	}
	// Only overload queues.
	if *o.QueueSeconds <= 0.01 || o.MaxWaiting < 1 {
		t.Errorf("overload: queue %.3f s, max waiting %.0f; want both > 0", *o.QueueSeconds, o.MaxWaiting)
	}
	for name, e := range map[string]*load.EngineReport{"normal": n, "long-prompt": lp, "long-output": lo} {
		if *e.QueueSeconds > 0.005 || e.MaxWaiting != 0 {
			t.Errorf("%s: queue %.3f s, max waiting %.0f; want 0", name, *e.QueueSeconds, e.MaxWaiting)
		}
	}
	// Overload runs out of slots, not KV memory, and every step is slower.
	if o.MaxRunning != 256 {
		t.Errorf("overload: max running %.0f, want the 256-slot limit", o.MaxRunning)
	}
	if o.MaxKVCacheUsagePerc > 60 || o.MaxKVCacheUsagePerc < 10 {
		t.Errorf("overload: max KV %.1f%%, want well below 100%% (measured on vLLM: 28%%)", o.MaxKVCacheUsagePerc)
	}
	if *o.InterTokenSeconds < 4**n.InterTokenSeconds {
		t.Errorf("overload inter-token %.3f s is not several times normal %.3f s", *o.InterTokenSeconds, *n.InterTokenSeconds)
	}
	if *o.PrefillSeconds < 3**n.PrefillSeconds {
		t.Errorf("overload prefill %.3f s is not several times normal %.3f s", *o.PrefillSeconds, *n.PrefillSeconds)
	}
	if *n.InterTokenSeconds < 0.014 || *n.InterTokenSeconds > 0.02 {
		t.Errorf("normal inter-token %.3f s, want ~0.016", *n.InterTokenSeconds)
	}
	// Long output: the worst E2E with normal TTFT and queue. Overload is left out of the E2E
	// comparison: its E2E holds the queue wait, which grows with how far a starved simulator
	// falls behind the open-loop arrivals (a CI run under load: 26.7 s against long output's
	// 25.4 s); what tells the two apart is the queue and TTFT, checked above and below.
	for name, e := range map[string]*load.EngineReport{"normal": n, "long-prompt": lp} {
		if *lo.E2ESeconds <= *e.E2ESeconds {
			t.Errorf("long-output E2E %.2f s is not worse than %s's %.2f s", *lo.E2ESeconds, name, *e.E2ESeconds)
		}
	}
	if *lo.TTFTSeconds > 3**n.TTFTSeconds || *lo.TTFTSeconds > 0.2 {
		t.Errorf("long-output TTFT %.3f s is not normal (normal %.3f s)", *lo.TTFTSeconds, *n.TTFTSeconds)
	}
	if lo.MaxRunning <= n.MaxRunning || lo.MaxKVCacheUsagePerc <= n.MaxKVCacheUsagePerc {
		t.Errorf("long-output should hold more running (%.0f vs %.0f) and KV (%.1f%% vs %.1f%%) than normal",
			lo.MaxRunning, n.MaxRunning, lo.MaxKVCacheUsagePerc, n.MaxKVCacheUsagePerc)
	}
	// Long prompt: the prefix cache swallows most of the 2,905-token prefill (1.55 s uncached).
	if *lp.PrefillSeconds > 0.5 {
		t.Errorf("long-prompt prefill %.3f s, want small thanks to the prefix cache", *lp.PrefillSeconds)
	}
}

// TestRunCountsErrorsAndKeepsGoing sends prompts longer than the context to a simulator with a
// short max_model_len: every request fails with 400, the run still completes and counts them.
func TestRunCountsErrorsAndKeepsGoing(t *testing.T) {
	const scale = 50
	url := startSim(t, scale)
	rep, err := load.Run(context.Background(), load.Config{
		Target: url, Scenario: "custom", Requests: 6, Rate: 20, PromptTokens: 44, MaxTokens: 5000, TimeScale: scale,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent != 6 || rep.Failed != 6 || rep.Errors["400"] != 6 {
		t.Fatalf("sent %d failed %d errors %v, want 6 × 400", rep.Sent, rep.Failed, rep.Errors)
	}
	if len(rep.ErrorSamples) == 0 {
		t.Fatal("no error sample kept")
	}
}

// TestRunRequestsNonStreaming checks --requests with non-streaming answers and uniform arrivals.
func TestRunRequestsNonStreaming(t *testing.T) {
	const scale = 50
	url := startSim(t, scale)
	stream := false
	rep, err := load.Run(context.Background(), load.Config{
		Target: url, Scenario: "custom", Requests: 5, Rate: 10, PromptTokens: 100, MaxTokens: 16, Stream: &stream,
		Arrival: "uniform", TimeScale: scale,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Succeeded != 5 || rep.PromptTokensMean != 100 || rep.CompletionTokensMean != 16 {
		t.Fatalf("succeeded %d, tokens %v/%v; want 5 requests of 100/16 tokens (errors %v)", rep.Succeeded, rep.PromptTokensMean, rep.CompletionTokensMean, rep.ErrorSamples)
	}
	if rep.TTFT != nil {
		t.Error("TTFT reported without a stream")
	}
	if rep.E2E == nil || rep.E2E.P50 <= 0 {
		t.Error("missing E2E")
	}
}

// TestRunMixesStreamingAndNot sends half the requests with one JSON body: all are answered, the
// client-side TTFT and TPOT come from the streamed half, E2E from all.
func TestRunMixesStreamingAndNot(t *testing.T) {
	const scale = 50
	url := startSim(t, scale)
	half := 0.5
	rep, err := load.Run(context.Background(), load.Config{
		Target: url, Scenario: "custom", Requests: 8, Rate: 20, PromptTokens: 44, MaxTokens: 16, StreamShare: &half,
		Arrival: "uniform", TimeScale: scale,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Succeeded != 8 || rep.Streamed != 4 || rep.Stream || rep.StreamShare != 0.5 {
		t.Fatalf("succeeded %d, streamed %d, stream %v, share %v; want 8 answered, 4 streamed (errors %v)",
			rep.Succeeded, rep.Streamed, rep.Stream, rep.StreamShare, rep.ErrorSamples)
	}
	if rep.TTFT == nil || rep.TTFT.Count != 4 || rep.E2E == nil || rep.E2E.Count != 8 || rep.CompletionTokensMean != 16 {
		t.Fatalf("TTFT %+v E2E %+v tokens out %v: want TTFT of the 4 streams, E2E of all 8, 16 tokens each", rep.TTFT, rep.E2E, rep.CompletionTokensMean)
	}
	var buf strings.Builder
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "4 of 8 sent (share 0.5)") {
		t.Errorf("report does not say how many streamed:\n%s", buf.String())
	}
}
