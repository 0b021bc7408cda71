package server_test

import (
	"bytes"
	"fmt"
	"math"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/enginetest"
	"github.com/servescope/servescope/dev/testenv"
)

// startReplay runs an engine that answers every request with s's bytes, at s's pace.
func startReplay(t *testing.T, s enginetest.VLLMStream) (*enginetest.Replay, string) {
	t.Helper()
	e := &enginetest.Replay{Writes: s.Writes()}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return e, srv.URL
}

// Streamed /v1/completions with three prompts, through the whole gateway: vLLM interleaves the
// prompts' chunks (choice index = output index + prompt index × n), and the client gets every
// byte the engine sent but the usage chunk the gateway asked for. (The gateway used to end the
// client's stream with its own [DONE] once choice 0 finished: 2,118 of these 5,276 bytes.)
func TestSeveralPromptsStreamedThroughTheGateway(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	s := enginetest.VLLMStream{ID: "cmpl-x", Model: "m", Created: 1, Prompts: 3, N: 1,
		Tokens: []int{4, 9, 12}, Finish: []string{"length", "stop", "length"}, IncludeUsage: true, StepGap: 2 * time.Millisecond}
	_, engineURL := startReplay(t, s)
	_, gw := startGateway(t, engineURL, natsCfg, nil)
	rid := newID("three")
	status, got, _ := post(t, gw+"/v1/completions", rid, `{"model":"m","prompt":["a","b","c"],"stream":true}`, nil)
	ws := s.Writes()
	sent := enginetest.Bytes(ws)
	var usage []byte
	for _, w := range ws {
		if bytes.Contains(w.Data, []byte(`"choices":[]`)) {
			usage = w.Data
		}
	}
	want := bytes.Replace(sent, usage, nil, 1)
	t.Logf("engine sent %d bytes (%d without the usage chunk the gateway asked for); the client received %d", len(sent), len(want), len(got))
	if status != 200 || !bytes.Equal(got, want) {
		t.Fatalf("status %d; client bytes differ from the engine's:\n got %q\nwant %q", status, got, want)
	}
	_, fin := recordsOf(t, js, topo, rid)
	_, completion := s.Usage()
	if fin.CompletionTokens == nil || int(*fin.CompletionTokens) != completion || !slices.Equal(fin.FinishReasons, s.Finish) || fin.ResponseID != "cmpl-x" {
		t.Fatalf("record: completion %v finish %q response %q", fin.CompletionTokens, fin.FinishReasons, fin.ResponseID)
	}
}

// TPOT with several choices: vLLM generates them side by side and sums their tokens in usage; the
// gateway's TPOT is each choice's time per token, within 30% of the engine's own inter-token
// time (measured from the engine's write times; the gateway's are read times, and a loaded
// machine delays a first or last read by tens of milliseconds). One timeline divided by the
// summed tokens would be 1/n of it: 50% off or more.
func TestTPOTWithSeveralChoicesMatchesTheEngine(t *testing.T) {
	t.Parallel()
	js, topo, natsCfg := testenv.JetStream(t)
	const gap = 50 * time.Millisecond
	for _, tc := range []struct {
		name string
		s    enginetest.VLLMStream
		path string
		body string
	}{
		{"chat n=2", enginetest.VLLMStream{Chat: true, ID: "chatcmpl-n2", N: 2, Tokens: []int{30, 30}}, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a"}],"n":2,"stream":true}`},
		{"chat n=3", enginetest.VLLMStream{Chat: true, ID: "chatcmpl-n3", N: 3, Tokens: []int{30, 24, 30}}, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a"}],"n":3,"stream":true}`},
		{"three prompts", enginetest.VLLMStream{ID: "cmpl-p3", Prompts: 3, N: 1, Tokens: []int{20, 30, 25}}, "/v1/completions", `{"model":"m","prompt":["a","b","c"],"stream":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			s.Model, s.Created, s.IncludeUsage, s.StepGap, s.FirstToken = "m", 1, true, gap, gap
			for range s.Choices() {
				s.Finish = append(s.Finish, "length")
			}
			engine, engineURL := startReplay(t, s)
			_, gw := startGateway(t, engineURL, natsCfg, nil)
			rid := newID("tpot")
			if status, _, _ := post(t, gw+tc.path, rid, tc.body, nil); status != 200 {
				t.Fatalf("status %d", status)
			}
			_, fin := recordsOf(t, js, topo, rid)
			itl := engine.InterTokenTime().Seconds()
			if fin.TPOTSeconds == nil {
				t.Fatal("no TPOT")
			}
			t.Logf("%s: engine inter-token time %.2f ms, gateway TPOT %.2f ms (%+.1f%%)", tc.name, itl*1e3, *fin.TPOTSeconds*1e3, (*fin.TPOTSeconds/itl-1)*100)
			if math.Abs(*fin.TPOTSeconds-itl) > 0.3*itl {
				t.Fatalf("gateway TPOT %v, engine inter-token time %v: more than 30%% apart", *fin.TPOTSeconds, itl)
			}
			if fmt.Sprint(fin.FinishReasons) != fmt.Sprint(s.Finish) {
				t.Fatalf("finish reasons %q", fin.FinishReasons)
			}
		})
	}
}
