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
