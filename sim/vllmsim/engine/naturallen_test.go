package engine

import (
	"math"
	"sort"
	"testing"
)

// The natural answer length is uniform over 32..1,024 tokens by default, and log-normal around
// NaturalLenMedian with NaturalLenSigma when set: over many prompt hashes its median is the median
// and the share beyond 4× the median is a normal tail's (σ 0.2: none; σ 0.675: about 2%).
func TestNaturalLenDistribution(t *testing.T) {
	lens := func(c Config) []int {
		var out []int
		h := uint64(1469598103934665603)
		for i := range 20000 {
			h = (h ^ uint64(i)) * 1099511628211
			out = append(out, c.naturalLen(h|1))
		}
		sort.Ints(out)
		return out
	}
	def := lens(Config{})
	if def[0] < 32 || def[len(def)-1] > 1024 || math.Abs(float64(def[len(def)/2])-528) > 30 {
		t.Errorf("default: min %d, median %d, max %d; want uniform over 32..1024", def[0], def[len(def)/2], def[len(def)-1])
	}
	for _, tc := range []struct {
		sigma, over4x float64
	}{{0.2, 0}, {0.675, 0.02}} {
		l := lens(Config{NaturalLenMedian: 128, NaturalLenSigma: tc.sigma})
		median := l[len(l)/2]
		over := 0
		for _, n := range l {
			if n > 512 {
				over++
			}
		}
		share := float64(over) / float64(len(l))
		if math.Abs(float64(median)-128) > 3 || math.Abs(share-tc.over4x) > 0.005 {
			t.Errorf("σ %g: median %d, share over 512 %.4f; want 128 and %.2f", tc.sigma, median, share, tc.over4x)
		}
	}
}
