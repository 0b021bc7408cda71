package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/servescope/servescope/sim/vllmsim/sim"
)

// captureStdout runs f with os.Stdout redirected and returns what it printed.
func captureStdout(t *testing.T, f func()) []byte {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	out := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		out <- b
	}()
	f()
	os.Stdout = old
	w.Close()
	return <-out
}

func TestRunExitsZeroAndCountsErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := sim.New(sim.Options{TimeScale: 50})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Engine.Run(ctx)
	}()
	srv := httptest.NewServer(s.Handler)
	defer func() {
		cancel()
		<-done
		srv.Close()
	}()
	var code int
	out := captureStdout(t, func() {
		// max_tokens beyond the context: every request is a 400, the run still completes.
		code = execute([]string{"run", "--target", srv.URL, "--scenario", "custom", "--requests", "3", "--rate", "50",
			"--max-tokens", "5000", "--time-scale", "50", "--json"})
	})
	if code != 0 {
		t.Fatalf("exit code %d, want 0 for a completed run", code)
	}
	var rep struct {
		Sent   int            `json:"sent"`
		Errors map[string]int `json:"errors_by_code"`
		Engine map[string]any `json:"engine"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if rep.Sent != 3 || rep.Errors["400"] != 3 || rep.Engine == nil {
		t.Fatalf("report %+v", rep)
	}
	if code := execute([]string{"run", "--target", srv.URL, "--duration", "1s", "--requests", "2"}); code == 0 {
		t.Fatal("--duration with --requests accepted")
	}
	out = captureStdout(t, func() {
		code = execute([]string{"run", "--target", srv.URL, "--scenario", "custom", "--requests", "4", "--rate", "50",
			"--max-tokens", "8", "--time-scale", "50", "--stream-share", "0.5", "--json"})
	})
	var mixed struct {
		Succeeded int `json:"succeeded"`
		Streamed  int `json:"streamed"`
		TTFT      struct {
			Count int `json:"count"`
		} `json:"ttft"`
	}
	if err := json.Unmarshal(out, &mixed); code != 0 || err != nil || mixed.Succeeded != 4 || mixed.Streamed != 2 || mixed.TTFT.Count != 2 {
		t.Fatalf("--stream-share 0.5: exit %d, %v, %+v; want 4 answered, 2 streamed\n%s", code, err, mixed, out)
	}
	for _, args := range [][]string{{"--stream-share", "1.5"}, {"--stream-share", "-0.5"}, {"--stream=false", "--stream-share", "0.5"}} {
		if code := execute(append([]string{"run", "--target", srv.URL, "--requests", "1"}, args...)); code == 0 {
			t.Errorf("%v accepted", args)
		}
	}
	if code := execute([]string{"run", "--target", "http://127.0.0.1:1", "--requests", "1"}); code == 0 {
		t.Fatal("unreachable target: run that could not start exited 0")
	}
}
