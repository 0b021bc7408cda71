package e2e

import (
	"testing"

	"github.com/servescope/servescope/sim/loadgen/load"
)

// TestRequestsJoinSpans: after a loadgen run through the gateway, the gateway's
// request rows and the engine's spans (vLLM's OTLP export, received by the collector) meet on
// request_id one to one: a join returns every request, and every span has its request.
func TestRequestsJoinSpans(t *testing.T) {
	t.Parallel()
	p := startPipeline(t, pipelineOptions{})
	rep, w := p.load(t, load.Config{Scenario: "normal", Requests: 24, Rate: 8, PromptTokens: 44, MaxTokens: 32})
	p.waitIngested(t, w, rep.Sent)

	ctx := t.Context()
	var requests, spans, joined, requestsWithoutSpan, spansWithoutRequest, tokenMismatch uint64
	err := p.Conn.QueryRow(ctx, `
		SELECT
		    (SELECT count() FROM requests FINAL),
		    (SELECT count() FROM engine_spans FINAL),
		    (SELECT count() FROM requests AS r FINAL INNER JOIN engine_spans AS s FINAL ON s.request_id = r.request_id),
		    (SELECT count() FROM requests AS r FINAL LEFT ANTI JOIN engine_spans AS s FINAL ON s.request_id = r.request_id),
		    (SELECT count() FROM engine_spans AS s FINAL LEFT ANTI JOIN requests AS r FINAL ON r.request_id = s.request_id),
		    (SELECT countIf(r.completion_tokens != s.completion_tokens OR r.prompt_tokens != s.prompt_tokens)
		     FROM requests AS r FINAL INNER JOIN engine_spans AS s FINAL ON s.request_id = r.request_id)`,
	).Scan(&requests, &spans, &joined, &requestsWithoutSpan, &spansWithoutRequest, &tokenMismatch)
	if err != nil {
		t.Fatalf("join requests with engine_spans: %v", err)
	}
	t.Logf("loadgen sent %d; requests %d, engine_spans %d, joined %d", rep.Sent, requests, spans, joined)
	if int(requests) != rep.Sent || int(spans) != rep.Sent || int(joined) != rep.Sent {
		t.Errorf("requests %d, spans %d, joined %d: want each the %d requests loadgen sent", requests, spans, joined, rep.Sent)
	}
	if requestsWithoutSpan != 0 || spansWithoutRequest != 0 {
		t.Errorf("%d requests without a span, %d spans without a request", requestsWithoutSpan, spansWithoutRequest)
	}
	if tokenMismatch != 0 {
		t.Errorf("%d joined pairs disagree on prompt or completion tokens", tokenMismatch)
	}
	if rep.CompletionTokens != rep.Sent*32 {
		t.Errorf("loadgen counted %d completion tokens, want %d × 32 (ignore_eos)", rep.CompletionTokens, rep.Sent)
	}
}
