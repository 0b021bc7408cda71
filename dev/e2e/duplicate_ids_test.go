package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// TestDuplicateRequestIDsThroughThePipeline: three requests with one X-Request-Id through the
// gateway, vllmsim, the collector and the consumer: a long stream, a second request sent while it
// runs, and a third once it finished. vLLM main serves all three (its engine ids get a random
// suffix, its spans keep the caller's id); 0.10 refuses the second with a 400 ("Request id
// chatcmpl-dup already running.") and runs no engine request for it. In request_facts every row
// has its own span's tokens and TTFT, or none: the refused one borrows nothing.
func TestDuplicateRequestIDsThroughThePipeline(t *testing.T) {
	t.Parallel()
	for _, v := range []vllmversion.Version{vllmversion.Main, vllmversion.V0_10} {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			p := startPipeline(t, pipelineOptions{Version: v})
			const id = "dup-e2e"
			send := func(body string) *http.Response {
				req, err := http.NewRequest(http.MethodPost, p.GatewayURL+"/v1/chat/completions", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Request-Id", id)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			first := send(`{"model":"servescope/sim-7b","messages":[{"role":"user","content":"tell me"}],"max_tokens":120,"min_tokens":120,"stream":true}`)
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
			second := send(`{"model":"servescope/sim-7b","messages":[{"role":"user","content":"and you"}],"max_tokens":20,"min_tokens":20}`)
			_, _ = io.Copy(io.Discard, second.Body)
			second.Body.Close()
			_, _ = io.Copy(io.Discard, br)
			first.Body.Close()
			third := send(`{"model":"servescope/sim-7b","messages":[{"role":"user","content":"once more"}],"max_tokens":5,"min_tokens":5}`)
			_, _ = io.Copy(io.Discard, third.Body)
			third.Body.Close()
			wantSecond, wantSpans := http.StatusOK, 3
			if v.RefusesRunningDuplicateIDs() {
				wantSecond, wantSpans = http.StatusBadRequest, 2
			}
			if second.StatusCode != wantSecond || third.StatusCode != http.StatusOK {
				t.Fatalf("second %d, third %d; want %d and 200", second.StatusCode, third.StatusCode, wantSecond)
			}

			waitFor(t, 90*time.Second, "3 requests and their spans in ClickHouse", func(ctx context.Context) (bool, string, error) {
				var reqs, spans uint64
				err := p.Conn.QueryRow(ctx, `SELECT (SELECT count() FROM requests FINAL WHERE request_id = $1),
					(SELECT count() FROM engine_spans FINAL WHERE request_id = $1)`, id).Scan(&reqs, &spans)
				return reqs == 3 && int(spans) == wantSpans, fmt.Sprintf("%d requests, %d spans", reqs, spans), err
			})
			rows, err := p.Conn.Query(t.Context(), `SELECT status_code, engine_children, completion_tokens, engine_ttft_s
				FROM request_facts WHERE request_id = $1 ORDER BY arrival_ts`, id)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			type fact struct {
				status   uint16
				children uint32
				tokens   *uint32
				ttft     *float64
			}
			var got []fact
			for rows.Next() {
				var f fact
				if err := rows.Scan(&f.status, &f.children, &f.tokens, &f.ttft); err != nil {
					t.Fatal(err)
				}
				got = append(got, f)
			}
			if len(got) != 3 {
				t.Fatalf("%d request_facts rows, want 3", len(got))
			}
			for i, want := range []uint32{120, 20, 5} {
				f := got[i]
				if i == 1 && v.RefusesRunningDuplicateIDs() {
					if f.status != http.StatusBadRequest || f.children != 0 || f.tokens != nil || f.ttft != nil {
						t.Errorf("refused request: status %d, %d engine children, tokens %v, engine TTFT %v; want 400 and no engine data",
							f.status, f.children, f.tokens, f.ttft)
					}
					continue
				}
				if f.status != http.StatusOK || f.children != 1 || f.tokens == nil || *f.tokens != want || f.ttft == nil {
					t.Errorf("request %d: status %d, %d engine children, tokens %v, engine TTFT %v; want 200, its own one span, %d tokens",
						i, f.status, f.children, f.tokens, f.ttft, want)
				}
			}
		})
	}
}
