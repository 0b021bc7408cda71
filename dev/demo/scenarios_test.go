package demo

import (
	"bytes"
	"strings"
	"testing"

	"github.com/servescope/servescope/internal/diagnose"
)

func p(v float64) *float64 { return &v }

// measured is docs/measurements.md's Four workloads table as Stats.
func measured() ([]Window, []diagnose.Stats) {
	ws := []Window{{Key: "normal", Title: "Normal"}, {Key: "overload", Title: "Overload"},
		{Key: "long-prompt", Title: "Long prompt"}, {Key: "long-output", Title: "Long output"}}
	st := []diagnose.Stats{
		{Requests: 60, PromptTokensMean: p(44), CompletionTokensMean: p(128), QueueMean: p(0), PrefillMean: p(0.036), TTFTMean: p(0.051), TPOTMean: p(0.016), DecodeMean: p(2.02), E2EMean: p(2.07), RunningMax: p(12), WaitingMax: p(0), KVMax: p(0.014)},
		{Requests: 420, PromptTokensMean: p(44), CompletionTokensMean: p(128), QueueMean: p(0.472), PrefillMean: p(0.288), TTFTMean: p(0.853), TPOTMean: p(0.147), DecodeMean: p(18.61), E2EMean: p(19.46), RunningMax: p(256), WaitingMax: p(44), KVMax: p(0.28)},
		{Requests: 30, PromptTokensMean: p(2905), CompletionTokensMean: p(64), QueueMean: p(0), PrefillMean: p(0.082), TTFTMean: p(0.120), TPOTMean: p(0.017), DecodeMean: p(1.06), E2EMean: p(1.18), RunningMax: p(4), WaitingMax: p(0), KVMax: p(0.041)},
		{Requests: 60, PromptTokensMean: p(44), CompletionTokensMean: p(1024), QueueMean: p(0), PrefillMean: p(0.062), TTFTMean: p(0.083), TPOTMean: p(0.026), DecodeMean: p(26.54), E2EMean: p(26.62), RunningMax: p(33), WaitingMax: p(0), KVMax: p(0.261)},
	}
	return ws, st
}

func TestWriteTable(t *testing.T) {
	ws, st := measured()
	st[2].KVMax, st[2].QueueMean = nil, nil // unknown prints as "-"
	var buf bytes.Buffer
	if err := WriteTable(&buf, ws, st, SignatureRows); err != nil {
		t.Fatal(err)
	}
	golden(t, "table.txt", buf.Bytes())
}

func TestSignatureChecks(t *testing.T) {
	tests := []struct {
		name   string
		change func([]diagnose.Stats)
		failed []string // texts of the checks that must fail
	}{
		{name: "measured", change: func([]diagnose.Stats) {}},
		{name: "normal queues too", change: func(s []diagnose.Stats) { s[0].QueueMean = p(0.01) }, failed: []string{"queue wait > 0 only in overload"}},
		{name: "no queue at all", change: func(s []diagnose.Stats) { s[1].QueueMean = nil }, failed: []string{"queue wait > 0 only in overload"}},
		{name: "rounds to zero", change: func(s []diagnose.Stats) { s[3].QueueMean = p(0.0004) }},
		{name: "overload slowest", change: func(s []diagnose.Stats) { s[1].E2EMean = p(30) }, failed: []string{"long output has the largest E2E"}},
		{name: "short long prompt", change: func(s []diagnose.Stats) { s[2].PromptTokensMean = p(2048) }, failed: []string{"long prompt carries"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws, st := measured()
			tc.change(st)
			checks := SignatureChecks(ws, st)
			if len(checks) != 3 {
				t.Fatalf("%d checks, want 3", len(checks))
			}
			for _, c := range checks {
				wantFail := false
				for _, f := range tc.failed {
					wantFail = wantFail || strings.HasPrefix(c.Text, f)
				}
				if c.OK == wantFail {
					t.Errorf("check %q: ok %v, want %v", c.Text, c.OK, !wantFail)
				}
			}
		})
	}
}

func TestSentences(t *testing.T) {
	msg := "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a total capacity of 11.63 GiB."
	got := sentences(msg, 2)
	want := []string{"torch.OutOfMemoryError: CUDA out of memory.", "Tried to allocate 112.00 MiB."}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("sentences = %q, want %q", got, want)
	}
	if got := sentences("no period at all", 3); len(got) != 1 || got[0] != "no period at all" {
		t.Errorf("sentences = %q", got)
	}
}

// The overload scenario sends part of its requests without a stream, so the report can show their
// TTFT; the others stream every request.
func TestScenariosStreamShare(t *testing.T) {
	for _, sc := range Scenarios("http://gateway") {
		switch {
		case sc.Key == "overload":
			if sc.Load.StreamShare == nil || *sc.Load.StreamShare != OverloadStreamShare || OverloadStreamShare <= 0 || OverloadStreamShare >= 1 {
				t.Errorf("overload stream share %v, want %v (some streaming, some not)", sc.Load.StreamShare, OverloadStreamShare)
			}
		case sc.Load.StreamShare != nil || sc.Load.Stream != nil:
			t.Errorf("%s: stream %v, share %v; want every request streamed", sc.Key, sc.Load.Stream, sc.Load.StreamShare)
		}
	}
}
