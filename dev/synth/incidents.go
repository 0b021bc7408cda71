package synth

import "time"

// NormalRate is the synthetic normal service's arrival rate: 0.1 requests/s on average with daily
// seasonality (±60%), small enough for tests to write days of it quickly.
var NormalRate = Daily(0.1, 0.6)

// NormalE2ES is the normal service's typical end-to-end time in seconds (NormalShape: TTFT 0.05 s +
// 127 × 0.016 s), used for engine samples by Little's law.
const NormalE2ES = 2.1

// Normal is a healthy service in [from, to): requests with NormalShape at NormalRate, their app
// records, and one engine's samples every 15 s.
func (g *Generator) Normal(from, to time.Time) *Traffic {
	t := g.Requests(from, to, NormalRate, NormalShape())
	return t.Add(g.Samples(from, to, NormalEngine(NormalRate, NormalE2ES)))
}

// Incident is traffic that a built-in rule must detect when evaluated at the incident's end, after
// at least 26 h of Normal traffic (a full baseline) up to the incident's start.
type Incident struct {
	// Rule is the built-in rule that must fire.
	Rule string
	// Duration is how long before the evaluation time the incident starts.
	Duration time.Duration
	// Generate produces the incident's traffic in [from, to); it replaces Normal traffic there.
	Generate func(g *Generator, from, to time.Time) *Traffic
}

// Incidents returns one incident per built-in rule, with the numbers of docs/measurements.md where
// it has them.
func Incidents() []Incident {
	engineAt := func(running, waiting, kv float64) func(g *Generator, from, to time.Time) *Traffic {
		return func(g *Generator, from, to time.Time) *Traffic {
			es := NormalEngine(NormalRate, NormalE2ES)
			es.Noise = 0
			es.Running = func(time.Time) float64 { return running }
			es.Waiting = func(time.Time) float64 { return waiting }
			es.KVCache = func(time.Time) float64 { return kv }
			return g.Requests(from, to, NormalRate, NormalShape()).Add(g.Samples(from, to, es))
		}
	}
	withShape := func(rate float64, change func(*Shape)) func(g *Generator, from, to time.Time) *Traffic {
		return func(g *Generator, from, to time.Time) *Traffic {
			s := NormalShape()
			change(&s)
			return g.Requests(from, to, Constant(rate), s).Add(g.Samples(from, to, NormalEngine(NormalRate, NormalE2ES)))
		}
	}
	return []Incident{
		// An encoder version mismatch drops the top passage score 0.878 → 0.120.
		{Rule: "retrieval_score_drift", Duration: 10 * time.Minute,
			Generate: withShape(0.5, func(s *Shape) { s.TopScore, s.EmbeddingModelVersion = 0.12, "bge-m3@2" })},
		// 4 of 32 answers contain Chinese characters.
		{Rule: "output_language_errors", Duration: 15 * time.Minute, Generate: LanguageErrors(4, 32)},
		// Arrivals keep coming and 80% never finish: in flight grows across every sub-window.
		{Rule: "unfinished_rising", Duration: 5 * time.Minute,
			Generate: withShape(1, func(s *Shape) { s.UnfinishedProb = 0.8 })},
		// The overload workload: 44 waiting, 0.47 s queue wait, 256 running, KV cache 28%.
		{Rule: "overload_queue", Duration: 6 * time.Minute,
			Generate: func(g *Generator, from, to time.Time) *Traffic {
				s := NormalShape()
				s.QueueProb, s.QueueSeconds = 1, 0.47
				return g.Requests(from, to, Constant(0.3), s).Add(engineAt(256, 44, 0.28)(g, from, to))
			}},
		// Running stops at exactly 256 (max_num_seqs) while the KV cache is 28% used.
		{Rule: "slot_limit", Duration: 4 * time.Minute, Generate: engineAt(256, 0, 0.28)},
		{Rule: "kv_cache_pressure", Duration: 4 * time.Minute, Generate: engineAt(40, 0, 0.98)},
		{Rule: "server_errors", Duration: 5 * time.Minute,
			Generate: withShape(0.2, func(s *Shape) { s.Status5xxProb = 0.2 })},
		// The long-output workload: 1,024 output tokens, 0.026 s between tokens, E2E 26.6 s.
		{Rule: "latency_p95", Duration: 13 * time.Minute,
			Generate: withShape(0.1, func(s *Shape) { s.TPOTSeconds, s.CompletionTokens = 0.026, 1024 })},
		{Rule: "truncated_outputs", Duration: 13 * time.Minute,
			Generate: withShape(0.1, func(s *Shape) { s.LengthProb = 0.4 })},
	}
}

// LanguageErrors generates exactly n answers spread over [from+1s, to-1m), of which bad (the 1st,
// then every n/bad-th) contain letters outside the allowed scripts, flagged by both the gateway
// (request.finished) and the application (app.record).
func LanguageErrors(bad, n int) func(g *Generator, from, to time.Time) *Traffic {
	return func(g *Generator, from, to time.Time) *Traffic {
		s := NormalShape()
		s.ViolationProb, s.LengthProb, s.Status4xxProb = 0, 0, 0
		t := g.RequestsN(from.Add(time.Second), to.Add(-time.Minute), n, s)
		for k := range bad {
			i := k * n / bad
			yes, chars := true, uint32(17)
			t.Finished[i].OutputScriptViolation, t.Finished[i].OutputForeignChars = &yes, &chars
			t.Apps[i].OutputScriptViolation, t.Apps[i].OutputForeignChars = &yes, &chars
		}
		return t.Add(g.Samples(from, to, NormalEngine(NormalRate, NormalE2ES)))
	}
}
