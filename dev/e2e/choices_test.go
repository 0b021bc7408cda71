package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// engineTap keeps, per X-Request-Id, the bytes the engine wrote, so a test can compare what the
// client received through the gateway with what the engine sent.
type engineTap struct {
	mu   sync.Mutex
	sent map[string]*bytes.Buffer
}

func (e *engineTap) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := &bytes.Buffer{}
		e.mu.Lock()
		e.sent[r.Header.Get("X-Request-Id")] = buf
		e.mu.Unlock()
		next.ServeHTTP(&tapWriter{ResponseWriter: w, buf: buf, mu: &e.mu}, r)
	})
}

func (e *engineTap) bytes(id string) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	if b := e.sent[id]; b != nil {
		return bytes.Clone(b.Bytes())
	}
	return nil
}

type tapWriter struct {
	http.ResponseWriter
	buf *bytes.Buffer
	mu  *sync.Mutex
}

func (w *tapWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	w.mu.Unlock()
	return w.ResponseWriter.Write(p)
}

func (w *tapWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// withoutUsageChunk removes the one usage-only event (`"choices":[]` with `usage`) from an SSE
// body: the chunk the gateway asks the engine for on a client's behalf and keeps to itself.
func withoutUsageChunk(t *testing.T, body []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	removed := 0
	for _, ev := range bytes.SplitAfter(body, []byte("\n\n")) {
		if bytes.HasPrefix(ev, []byte("data: {")) && bytes.Contains(ev, []byte(`"choices":[]`)) && bytes.Contains(ev, []byte(`"usage":{`)) {
			removed++
			continue
		}
		out.Write(ev)
	}
	if removed != 1 {
		t.Fatalf("the engine's stream holds %d usage-only chunks, want 1", removed)
	}
	return out.Bytes()
}

// TestSeveralChoicesThroughTheGateway sends, through the gateway to vllmsim, a streamed
// /v1/completions with three prompts and a streamed chat completion with n = 3. vLLM runs one
// engine request per prompt or sample and interleaves their chunks; the client must receive
// exactly the engine's bytes (less the usage chunk the gateway itself asked for), the request
// must be one finished record whose TPOT is the engine's own inter-token time, and one row of
// request_facts combining its three engine spans.
func TestSeveralChoicesThroughTheGateway(t *testing.T) {
	t.Parallel()
	tap := &engineTap{sent: map[string]*bytes.Buffer{}}
	// Real time: the gateway measures wall seconds, the engine reports its own (simulated) ones.
	p := startPipeline(t, pipelineOptions{TimeScale: 1, WrapEngine: tap.wrap})

	const maxTokens = 48
	cases := []struct {
		name, path, body string
		clientAskedUsage bool
	}{
		{"three prompts", "/v1/completions",
			fmt.Sprintf(`{"model":"servescope/sim-7b","prompt":["The first question","A second one","And a third"],"max_tokens":%d,"ignore_eos":true,"stream":true}`, maxTokens), false},
		{"n = 3 chat", "/v1/chat/completions",
			fmt.Sprintf(`{"model":"servescope/sim-7b","messages":[{"role":"user","content":"Say something"}],"n":3,"max_tokens":%d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, maxTokens), true},
	}
	from := time.Now().UTC()
	for i, tc := range cases {
		id := fmt.Sprintf("choices-%d-%d", i, time.Now().UnixNano())
		req, err := http.NewRequest(http.MethodPost, p.GatewayURL+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := io.ReadAll(bufio.NewReader(resp.Body))
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d, read error %v", tc.name, resp.StatusCode, err)
		}
		sent := tap.bytes(id)
		want := sent
		if !tc.clientAskedUsage {
			want = withoutUsageChunk(t, sent)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the client got %d bytes, the engine sent %d (%d without the gateway's usage chunk); they differ", tc.name, len(got), len(sent), len(want))
		}
		for c := range 3 {
			if !bytes.Contains(got, []byte(fmt.Sprintf(`"index":%d`, c))) {
				t.Errorf("%s: the client never saw choice %d", tc.name, c)
			}
		}
		t.Logf("%s: engine %d bytes, client %d bytes", tc.name, len(sent), len(got))
		cases[i].name = id
	}

	// One finished record each, and one engine row per request combining its three spans.
	w := window{From: from, To: time.Now().UTC().Add(time.Second)}
	p.waitIngested(t, w, len(cases))
	for _, tc := range cases {
		id := tc.name
		waitFor(t, 60*time.Second, "three engine spans of "+id, func(ctx context.Context) (bool, string, error) {
			var n uint64
			err := p.Conn.QueryRow(ctx, "SELECT count() FROM engine_spans FINAL WHERE request_id = $1", id).Scan(&n)
			return n == 3, fmt.Sprintf("%d spans", n), err
		})
		var finished uint64
		var completion uint32
		var tpot float64
		if err := p.Conn.QueryRow(t.Context(), "SELECT count(), any(completion_tokens), any(tpot_s) FROM requests FINAL WHERE request_id = $1", id).
			Scan(&finished, &completion, &tpot); err != nil {
			t.Fatal(err)
		}
		if finished != 1 || completion != 3*maxTokens {
			t.Errorf("%s: %d finished records with %d completion tokens, want 1 with %d", id, finished, completion, 3*maxTokens)
		}
		var facts uint64
		var children uint32
		var engineTPOT float64
		if err := p.Conn.QueryRow(t.Context(), "SELECT count(), any(engine_children), any(engine_tpot_s) FROM request_facts WHERE request_id = $1", id).
			Scan(&facts, &children, &engineTPOT); err != nil {
			t.Fatal(err)
		}
		if facts != 1 || children != 3 {
			t.Errorf("%s: %d request_facts rows combining %d engine spans, want 1 combining 3", id, facts, children)
		}
		// The misreading this guards against divides one timeline by every choice's tokens: a
		// third of the engine's time here (three choices), or three times it the other way. The
		// gateway measures wall time, which a loaded machine only stretches (late timers), so the
		// band is asymmetric and wide: either error falls far outside it.
		if ratio := tpot / engineTPOT; engineTPOT <= 0 || ratio < 0.8 || ratio > 2 {
			t.Errorf("%s: gateway TPOT %.4f s, engine's own inter-token time %.4f s: ratio %.2f, want 0.8 to 2", id, tpot, engineTPOT, ratio)
		}
		t.Logf("%s: TPOT gateway %.4f s, engine %.4f s", id, tpot, engineTPOT)
	}
}
