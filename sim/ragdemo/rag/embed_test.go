package rag

import (
	"sort"
	"testing"
)

// TestRetrievalQualityAndVersionMismatch checks the demo's two regimes: with the index's own
// embedding model every question retrieves its passage first with a high score (about 0.88 on
// median); with another query-side version the top score collapses to about 0.12, the silent
// failure of docs/measurements.md (0.878 → 0.120).
func TestRetrievalQualityAndVersionMismatch(t *testing.T) {
	v1 := HashEmbedder{Version: "hash-embed-v1", Dim: 192}
	v2 := HashEmbedder{Version: "hash-embed-v2", Dim: 192}
	ix := BuildIndex(Corpus(), v1, "corpus-test")
	var same, cross []float64
	for id, q := range Questions() {
		hits := ix.Search(v1.Embed(q), 4)
		if hits[0].Passage.ID != id {
			t.Errorf("question for %s retrieved %s first (%.3f)", id, hits[0].Passage.ID, hits[0].Score)
		}
		same = append(same, hits[0].Score)
		cross = append(cross, ix.Search(v2.Embed(q), 4)[0].Score)
	}
	ms, mc := median(same), median(cross)
	t.Logf("median top score: same version %.3f, mismatched version %.3f", ms, mc)
	if ms < 0.75 || ms > 0.95 {
		t.Errorf("median top score with matching versions = %.3f, want about 0.88", ms)
	}
	if mc < 0.03 || mc > 0.25 {
		t.Errorf("median top score with mismatched versions = %.3f, want about 0.12", mc)
	}
}

func median(x []float64) float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	return s[len(s)/2]
}
