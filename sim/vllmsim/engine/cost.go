package engine

// CostModel gives the simulated GPU time of one engine step. The defaults are calibrated on the
// reference's measurements (Qwen2.5-7B-Instruct-AWQ on one RTX 3060, DESIGN §5):
//
//	step = StepBaseS
//	     + max(0, PerTokenS·decodeTokens + PrefillPerTokenS·prefillTokens − PerTokenS·KneeTokens)
//	     + ContextPerTokenS·(KV tokens read by the decoding sequences)
//	     + CachedPerTokenS·(cached prefix tokens attended by prefill chunks)
//
// A small batch costs a flat StepBaseS (decoding is memory-bandwidth-bound: a few more tokens
// ride along for free); beyond the knee every scheduled token adds compute; longer contexts make every decode step read more KV. This one rule gives
// 16 ms per step with a dozen short sequences, ~26 ms with ~30 sequences holding ~550 tokens
// each (long output), ~170 ms with 256 running plus new prefills (overload), 1.55 s to prefill 2,843 uncached
// tokens, ~0.036 s for a 44-token prefill in a small batch and a prefill several times slower
// when it shares the step with a large decode batch. Prompt tokens found in the prefix cache are
// not recomputed; attending over them still costs CachedPerTokenS each, which is why a cached
// 2,905-token prompt takes ~0.08 s.
type CostModel struct {
	StepBaseS        float64 // seconds per step up to the knee
	KneeTokens       int     // decode tokens per step absorbed by StepBaseS
	PerTokenS        float64 // seconds per decode token beyond the knee
	PrefillPerTokenS float64 // seconds per uncached prefill token
	ContextPerTokenS float64 // seconds per KV token read by decoding sequences
	CachedPerTokenS  float64 // seconds per cached prefix token attended during a prefill
}

// DefaultCostModel is the calibration described on CostModel.
func DefaultCostModel() CostModel {
	return CostModel{
		StepBaseS:        0.016,
		KneeTokens:       15,
		PerTokenS:        0.00054,
		PrefillPerTokenS: 0.00054,
		ContextPerTokenS: 0.00000035,
		CachedPerTokenS:  0.000022,
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
	compute := m.PerTokenS*float64(w.DecodeTokens) + m.PrefillPerTokenS*float64(w.PrefillTokens) - m.PerTokenS*float64(m.KneeTokens)
	return m.StepBaseS + max(0, compute) + m.ContextPerTokenS*float64(w.ContextTokens) + m.CachedPerTokenS*float64(w.CachedTokens)
}
