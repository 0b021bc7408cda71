package simserver_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/sim"
	"github.com/servescope/servescope/sim/vllmsim/simtrace"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// TestDuplicateRequestIDs: a second request with the X-Request-Id of one still running, per
// release. 0.8 and 0.10 refuse it (vllm/v1/engine/output_processor.py add_request:
// ValueError("Request id chatcmpl-<id> already running.")): a whole answer gets a 400
// BadRequestError, a stream a 200 whose only event is that error (json.dumps, the release's error
// shape) and [DONE], and neither reaches the engine (no span). Main (0.14 and later, vLLM PR
// #27987) serves both, and both spans carry the caller's id, each a child of its own request's
// traceparent. Once the first has finished, every release serves the id again.
func TestDuplicateRequestIDs(t *testing.T) {
	for _, v := range vllmversion.APIs {
		t.Run(v.String(), func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			clock := engine.NewClock(testScale)
			x := simtrace.NewWithExporter(exp, clock, simtrace.WithVersion(v))
			ts := startSim(t, sim.Options{Version: v, Clock: clock, Observers: []engine.Observer{x}})
			const id = "dup-1"
			traceparent := func(span string) map[string]string {
				return map[string]string{"X-Request-Id": id, "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-" + span + "-01"}
			}
			// The first: a long stream, read until its first token so it is running.
			first := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":400,"min_tokens":400,"stream":true}`,
				traceparent("a1a1a1a1a1a1a1a1"))
			br := bufio.NewReader(first.Body)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
					break
				}
			}
			whole := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`, traceparent("b2b2b2b2b2b2b2b2"))
			wholeBody, _ := io.ReadAll(whole.Body)
			whole.Body.Close()
			streamed := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}`, traceparent("c3c3c3c3c3c3c3c3"))
			streamBody, _ := io.ReadAll(streamed.Body)
			streamed.Body.Close()
			_, _ = io.Copy(io.Discard, br)
			first.Body.Close()

			refused := v.RefusesRunningDuplicateIDs()
			msg := "Request id chatcmpl-" + id + " already running."
			if refused {
				wantWhole := `{"error":{"message":"` + msg + `","type":"BadRequestError","param":null,"code":400}}`
				wantEvent := `data: {"error": {"message": "` + msg + `", "type": "BadRequestError", "param": null, "code": 400}}`
				if v == vllmversion.V0_8 {
					wantWhole = `{"object":"error","message":"` + msg + `","type":"BadRequestError","param":null,"code":400}`
					wantEvent = `data: {"error": {"object": "error", "message": "` + msg + `", "type": "BadRequestError", "param": null, "code": 400}}`
				}
				if whole.StatusCode != http.StatusBadRequest || string(wholeBody) != wantWhole {
					t.Errorf("whole answer: %d %s, want 400 %s", whole.StatusCode, wholeBody, wantWhole)
				}
				if streamed.StatusCode != http.StatusOK || strings.TrimSpace(string(streamBody)) != wantEvent+"\n\ndata: [DONE]" {
					t.Errorf("stream: %d %q, want 200 with the error event and [DONE]", streamed.StatusCode, streamBody)
				}
			} else if whole.StatusCode != http.StatusOK || !strings.Contains(string(wholeBody), `"id":"chatcmpl-`+id+`"`) ||
				streamed.StatusCode != http.StatusOK || !strings.Contains(string(streamBody), "[DONE]") || strings.Contains(string(streamBody), "error") {
				t.Errorf("main serves duplicates: whole %d %s, stream %d %s", whole.StatusCode, wholeBody, streamed.StatusCode, streamBody)
			}
			// After the first finished, the id is free again on every release.
			again := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`, traceparent("d4d4d4d4d4d4d4d4"))
			_, _ = io.Copy(io.Discard, again.Body)
			again.Body.Close()
			if again.StatusCode != http.StatusOK {
				t.Errorf("the id once the first finished: %d", again.StatusCode)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := x.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			parents := map[string]bool{}
			for _, sp := range exp.GetSpans() {
				for _, a := range sp.Attributes {
					if a.Key == "gen_ai.request.id" && a.Value.AsString() != "chatcmpl-"+id {
						t.Errorf("span request id %q, want the caller's chatcmpl-%s", a.Value.AsString(), id)
					}
				}
				parents[sp.Parent.SpanID().String()] = true
			}
			want := map[string]bool{"a1a1a1a1a1a1a1a1": true, "d4d4d4d4d4d4d4d4": true}
			if !refused {
				want["b2b2b2b2b2b2b2b2"], want["c3c3c3c3c3c3c3c3"] = true, true
			}
			if len(parents) != len(want) {
				t.Errorf("spans of parents %v, want one for each of %v", parents, want)
			}
			for p := range want {
				if !parents[p] {
					t.Errorf("no span for the request of parent %s (spans of %v)", p, parents)
				}
			}
		})
	}
}
