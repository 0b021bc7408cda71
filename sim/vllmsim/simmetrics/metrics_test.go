package simmetrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// TestHandlerNegotiatesLikePrometheusClient: OpenMetrics (with _created lines and # EOF) as soon
// as the Accept header names it, whatever its q-value, as vLLM's prometheus_client answers; the
// Prometheus text format otherwise.
func TestHandlerNegotiatesLikePrometheusClient(t *testing.T) {
	m := NewRelease("m", 4096, func() engine.Gauges { return engine.Gauges{Running: 1} }, vllmversion.Main)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		accept, contentType string
		has, lacks          []string
	}{
		{"text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5", "application/openmetrics-text",
			[]string{"vllm:prompt_tokens_created{", "# EOF", `vllm:num_requests_running{engine="0",model_name="m"} 1`}, nil},
		{"", "text/plain", []string{`vllm:num_requests_running{engine="0",model_name="m"} 1`, "vllm:prompt_tokens_total{"}, []string{"# EOF"}},
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.contentType) {
			t.Errorf("Accept %q: Content-Type %q, want %s", tc.accept, resp.Header.Get("Content-Type"), tc.contentType)
		}
		for _, s := range tc.has {
			if !strings.Contains(string(body), s) {
				t.Errorf("Accept %q: body lacks %q", tc.accept, s)
			}
		}
		for _, s := range tc.lacks {
			if strings.Contains(string(body), s) {
				t.Errorf("Accept %q: body has %q", tc.accept, s)
			}
		}
	}
}

// TestPerRequestTPOTObservesOneTokenAnswers: main's vllm:request_time_per_output_token_seconds
// observes every finished request, a request of one token as 0 (vllm/v1/metrics/stats.py
// mean_time_per_output_token; vllm/v1/metrics/loggers.py), so its mean is not the gateway's
// (which has no TPOT for one token) unless those are left out, as servescope does with the le="1"
// bucket of vllm:request_generation_tokens, observed for the same requests.
func TestPerRequestTPOTObservesOneTokenAnswers(t *testing.T) {
	m := NewRelease("m", 4096, func() engine.Gauges { return engine.Gauges{} }, vllmversion.Main)
	m.RequestFinished(&engine.Finished{Scheduled: 0, FirstToken: 0.1, LastToken: 2.1, OutputTokens: 101, FinishReason: "stop"})
	m.RequestFinished(&engine.Finished{Scheduled: 0, FirstToken: 0.1, LastToken: 0.1, OutputTokens: 1, FinishReason: "stop"})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`vllm:request_time_per_output_token_seconds_count{engine="0",model_name="m"} 2`,
		`vllm:request_time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.02`,
		`vllm:request_generation_tokens_bucket{engine="0",model_name="m",le="1"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
