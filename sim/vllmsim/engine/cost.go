package engine

// CostModel gives the simulated GPU time of one engine step. The defaults are calibrated on the
// measurements of docs/measurements.md (Qwen2.5-7B-Instruct-AWQ on one RTX 3060; its section
// vllmsim's engine model derives them):
//
//	step = StepBaseSeconds
//	     + max(0, PerTokenSeconds·decodeTokens + PrefillPerTokenSeconds·prefillTokens − PerTokenSeconds·KneeTokens)
//	     + ContextPerTokenSeconds·(KV tokens read by the decoding sequences)
//	     + CachedPerTokenSeconds·(cached prefix tokens attended by prefill chunks)
//
// A small batch costs a flat StepBaseSeconds (decoding is memory-bandwidth-bound: a few more tokens
// ride along for free); beyond the knee every scheduled token adds compute; longer contexts make
// every decode step read more KV. This one rule gives 16 ms per step with a dozen short sequences,
// ~26 ms with ~30 sequences holding ~550 tokens each (long output), ~170 ms with 256 running plus
// new prefills (overload), 1.55 s to prefill 2,843 uncached tokens, ~0.036 s for a 44-token prefill
// in a small batch and a prefill several times slower when it shares the step with a large decode
// batch. Prompt tokens found in the prefix cache are not recomputed; attending over them still
// costs CachedPerTokenSeconds each, which is why a cached 2,905-token prompt takes ~0.08 s.
type CostModel struct {
	StepBaseSeconds        float64 // seconds per step up to the knee
	KneeTokens             int     // decode tokens per step absorbed by StepBaseSeconds
	PerTokenSeconds        float64 // seconds per decode token beyond the knee
	PrefillPerTokenSeconds float64 // seconds per uncached prefill token
	ContextPerTokenSeconds float64 // seconds per KV token read by decoding sequences
	CachedPerTokenSeconds  float64 // seconds per cached prefix token attended during a prefill
}

// DefaultCostModel is the calibration described on CostModel.
func DefaultCostModel() CostModel {
	return CostModel{
		StepBaseSeconds:        0.016,
		KneeTokens:             15,
		PerTokenSeconds:        0.00054,
		PrefillPerTokenSeconds: 0.00054,
		ContextPerTokenSeconds: 0.00000035,
		CachedPerTokenSeconds:  0.000022,
	}
}

// Work is what one step computes.
type Work struct {
	DecodeTokens  int // one per decoding sequence
	PrefillTokens int // uncached prompt (or recomputed) tokens
	ContextTokens int // KV tokens the decoding sequences attend to
	CachedTokens  int // cached prefix tokens attended by this step's first prefill chunks
}

// StepSeconds is the simulated duration of a step doing w.
func (m CostModel) StepSeconds(w Work) float64 {
	compute := m.PerTokenSeconds*float64(w.DecodeTokens) + m.PrefillPerTokenSeconds*float64(w.PrefillTokens) - m.PerTokenSeconds*float64(m.KneeTokens)
	return m.StepBaseSeconds + max(0, compute) + m.ContextPerTokenSeconds*float64(w.ContextTokens) + m.CachedPerTokenSeconds*float64(w.CachedTokens)
}
