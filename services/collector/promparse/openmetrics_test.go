package promparse

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenMetricsRewrite covers what vLLM's expositions do not use but OpenMetrics allows:
// exemplars, timestamps, UNIT lines, info and unknown families, escaped quotes in HELP, and the
// # EOF rules.
func TestOpenMetricsRewrite(t *testing.T) {
	om := `# HELP vllm:x Requests "served".
# TYPE vllm:x counter
# UNIT vllm:x requests
vllm:x_total{engine="0",model_name="m # {not an exemplar}"} 7 1700000000.5 # {trace_id="abc"} 1.0 1700000000.1
vllm:x_created{engine="0",model_name="m # {not an exemplar}"} 1.7e9
# TYPE vllm:build info
vllm:build_info{version="0.10.2"} 1
# TYPE vllm:odd unknown
vllm:odd 3
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m # {not an exemplar}"} 5
# EOF
`
	ems, err := Parse(strings.NewReader(om), omType)
	if err != nil {
		t.Fatal(err)
	}
	if len(ems) != 1 || ems[0].Counters["x_total"] != 7 || ems[0].Gauges["odd"] != 3 || *ems[0].Running != 5 || ems[0].Model != "m # {not an exemplar}" {
		t.Errorf("got %+v", ems)
	}
	if _, ok := ems[0].Gauges["build_info"]; ok {
		t.Error("info family kept")
	}
	for _, bad := range []string{
		"# TYPE vllm:a gauge\nvllm:a 1\n",                  // no # EOF: truncated
		"# TYPE vllm:a gauge\nvllm:a 1\n# EOF\nvllm:a 2\n", // text after # EOF
		"# TYPE vllm:a gauge\nvllm:a{x=\"1 1\n# EOF\n",     // label block not closed
	} {
		if _, err := Parse(strings.NewReader(bad), omType); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// BenchmarkParseOpenMetrics measures one scrape's parse of main's OpenMetrics exposition.
func BenchmarkParseOpenMetrics(b *testing.B) {
	body, err := os.ReadFile(filepath.Join("testdata", "vllm_main.om"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(bytes.NewReader(body), omType); err != nil {
			b.Fatal(err)
		}
	}
}
