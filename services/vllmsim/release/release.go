// Package release names the vLLM releases whose wire formats vllmsim can reproduce: the /metrics
// names, labels and units, and the log lines. It holds only the names, so the metrics and the log
// writer agree on them.
package release

import (
	"fmt"
	"strings"
)

// Release is a vLLM release (and engine) whose formats vllmsim emits.
type Release string

// The releases vllmsim reproduces.
const (
	// V08V0 is vLLM 0.8 run with VLLM_USE_V1=0: the V0 engine (vllm/engine/metrics.py): metrics
	// labelled by model_name only, num_requests_swapped, the "Running/Swapped/Pending" stats line,
	// and penalties applied to the model's float16 logits.
	V08V0 Release = "0.8-v0"
	// V08 is vLLM 0.8.0–0.8.4 with its default V1 engine: gpu_cache_usage_perc, prefix-cache
	// counters in blocks, no process prefix in the log, "EngineCore hit an exception:" tracebacks.
	V08 Release = "0.8"
	// V010 is vLLM 0.10.2: both KV names, process prefixes "(APIServer pid=N)", the scheduler dump
	// and "EngineCore encountered a fatal error." at a death.
	V010 Release = "0.10"
	// Main is vLLM's main branch: inter_token_latency_seconds and the per-request TPOT histogram,
	// no deprecated names, "Preemptions: N" on the stats line.
	Main Release = "main"
)

// All lists the releases, oldest first.
var All = []Release{V08V0, V08, V010, Main}

// Parse reads a release name; the empty string is Main.
func Parse(s string) (Release, error) {
	if s == "" {
		return Main, nil
	}
	for _, r := range All {
		if string(r) == s {
			return r, nil
		}
	}
	names := make([]string, len(All))
	for i, r := range All {
		names[i] = string(r)
	}
	return "", fmt.Errorf("unknown vLLM release %q (want one of %s)", s, strings.Join(names, ", "))
}

// V1 reports whether the release runs the V1 engine.
func (r Release) V1() bool { return r != V08V0 }

// Version is the version string the release reports in its log and on /version.
func (r Release) Version() string {
	switch r {
	case V08V0, V08:
		return "0.8.4"
	case V010:
		return "0.10.2"
	}
	return "0.14.0rc1.dev12+g3e342658"
}
