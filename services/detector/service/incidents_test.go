package service_test

import (
	"math"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/dev/testclock"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/service"
)

// Each built-in rule fires on its incident, written as synthetic traffic with past timestamps after
// 26 hours of normal traffic, when the detector replays the incident's end (--at). The normal
// traffic follows the time of day, and so does the evaluation time (testclock): the incident is
// drawn from its own generator, so it is the same at every hour and only the baseline before it
// changes.
func TestBuiltinRulesFireOnTheirIncidents(t *testing.T) {
	t.Parallel()
	at := testclock.EvalTime(t, 2*time.Hour)
	// What each incident must produce beyond its rule firing.
	checks := map[string]func(t *testing.T, lines []service.ReplayLine){
		"retrieval_score_drift": func(t *testing.T, lines []service.ReplayLine) {
			f := firing(lines, "retrieval_score_drift")[0]
			if v, b := val(f.Value), val(f.Baseline); math.Abs(v-0.12) > 0.03 || math.Abs(b-0.88) > 0.03 {
				t.Errorf("median top score %.3f against baseline %.3f, want ≈0.12 against ≈0.88", v, b)
			}
			vc := firing(lines, "retrieval_version_change")
			if len(vc) != 1 || vc[0].Labels["version"] != "bge-m3@2" || vc[0].Labels["kind"] != "embedding_model_version" {
				t.Errorf("retrieval_version_change firing: %+v, want the new embedding model bge-m3@2", vc)
			}
		},
		"output_language_errors": func(t *testing.T, lines []service.ReplayLine) {
			f := firing(lines, "output_language_errors")[0]
			if v := val(f.Value); v != 4.0/32 {
				t.Errorf("violating share %v, want 4/32", v)
			}
		},
		"unfinished_rising": func(t *testing.T, lines []service.ReplayLine) {
			f := firing(lines, "unfinished_rising")
			if len(f) != 1 || f[0].Labels["kind"] != "in_flight" || val(f[0].Value) < 150 {
				t.Errorf("unfinished_rising firing: %+v, want kind=in_flight with about 240 in flight", f)
			}
		},
		"overload_queue": func(t *testing.T, lines []service.ReplayLine) {
			signals := map[string]bool{}
			for _, f := range firing(lines, "overload_queue") {
				signals[f.Labels["signal"]] = true
			}
			if !signals["num_requests_waiting"] || !signals["queue_s"] {
				t.Errorf("overload_queue fired on %v, want num_requests_waiting and queue_s", signals)
			}
		},
		"slot_limit": func(t *testing.T, lines []service.ReplayLine) {
			if f := firing(lines, "slot_limit")[0]; val(f.Value) != 256 {
				t.Errorf("slot_limit value %v, want 256", val(f.Value))
			}
			if len(firing(lines, "kv_cache_pressure")) != 0 {
				t.Errorf("kv_cache_pressure fires at 28%% KV cache")
			}
		},
		"kv_cache_pressure": func(t *testing.T, lines []service.ReplayLine) {
			if f := firing(lines, "kv_cache_pressure")[0]; math.Abs(val(f.Value)-0.98) > 1e-9 {
				t.Errorf("kv_cache_pressure value %v, want 0.98", val(f.Value))
			}
		},
		"server_errors": func(t *testing.T, lines []service.ReplayLine) {
			f := firing(lines, "server_errors")
			if len(f) != 1 || f[0].Labels["class"] != "5xx" || val(f[0].Value) < 1 {
				t.Errorf("server_errors firing: %+v, want class=5xx", f)
			}
		},
		"latency_p95": func(t *testing.T, lines []service.ReplayLine) {
			metrics := map[string]float64{}
			for _, f := range firing(lines, "latency_p95") {
				metrics[f.Labels["metric"]] = val(f.Value)
			}
			if e2e, ok := metrics["e2e_s"]; !ok || e2e < 20 {
				t.Errorf("latency_p95 fired on %v, want e2e_s with p95 above 20 s", metrics)
			}
			if _, ok := metrics["ttft_s"]; ok {
				t.Errorf("latency_p95 fires on ttft_s, which did not change")
			}
		},
		"truncated_outputs": func(t *testing.T, lines []service.ReplayLine) {
			if f := firing(lines, "truncated_outputs")[0]; val(f.Value) < 0.2 {
				t.Errorf("truncated share %v, want about 0.4", val(f.Value))
			}
		},
	}
	incidents := synth.Incidents()
	if len(incidents) != len(checks) {
		t.Fatalf("%d incidents, %d checks", len(incidents), len(checks))
	}
	for i, tc := range incidents {
		t.Run(tc.Rule, func(t *testing.T) {
			t.Parallel()
			conn, ch := testenv.ClickHouse(t)
			from := at.Add(-tc.Duration)
			tr := synth.New(uint64(100+i)).Normal(at.Add(-26*time.Hour), from)
			tr.Add(tc.Generate(synth.New(uint64(200+i)), from, at))
			insert(t, conn, tr)
			d := newDetector(t, testConfig(ch), conn)
			lines := replay(t, d, at)
			t.Logf("alerts at %s: %v", at.Format(time.RFC3339), ruleStates(lines))
			if len(firing(lines, tc.Rule)) == 0 {
				t.Fatalf("%s does not fire on its incident; replay: %+v", tc.Rule, lines)
			}
			checks[tc.Rule](t, lines)
			for _, l := range lines {
				if l.Summary == "" || !l.BaselineOK {
					t.Errorf("alert %s %v: summary %q baseline_ok %v", l.Rule, l.Labels, l.Summary, l.BaselineOK)
				}
			}
			if tc.Rule == "retrieval_score_drift" {
				// One minute into the switch the version change fires and the drift has not yet.
				early := replay(t, d, from.Add(time.Minute))
				if len(firing(early, "retrieval_version_change")) != 1 || len(firing(early, "retrieval_score_drift")) != 0 {
					t.Errorf("one minute in: %v, want retrieval_version_change firing before retrieval_score_drift", ruleStates(early))
				}
			}
		})
	}
}

// Without a baseline, rules compare with their absolute floors and say so.
func TestNoBaselineUsesFloorAndSaysSo(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	at := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	g := synth.New(7)
	s := synth.NormalShape()
	s.LengthProb = 0.5
	insert(t, conn, g.Requests(at.Add(-15*time.Minute), at, synth.Constant(0.2), s))
	lines := replay(t, newDetector(t, testConfig(ch), conn, "truncated_outputs"), at)
	f := firing(lines, "truncated_outputs")
	if len(f) != 1 || f[0].BaselineOK || f[0].Baseline != nil || val(f[0].Threshold) != 0.2 {
		t.Fatalf("truncated_outputs without baseline: %+v, want firing against the 0.2 floor with baseline_ok=false", lines)
	}
}
