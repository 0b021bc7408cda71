package benchcpu

import (
	"crypto/sha256"
	"testing"
)

// One thread cannot use more CPU time than the wall-clock time that passed, and hashing uses
// some: the metric is reported, positive and at most ns/op.
func TestCPUPerOpBoundedByWallClock(t *testing.T) {
	data := make([]byte, 4096)
	r := testing.Benchmark(func(b *testing.B) {
		stop := Start(b)
		for b.Loop() {
			sha256.Sum256(data)
		}
		stop()
	})
	cpu, ok := r.Extra["cpu-ns/op"]
	if !ok {
		t.Fatalf("no cpu-ns/op metric in %v", r.Extra)
	}
	wall := float64(r.T.Nanoseconds()) / float64(r.N)
	if cpu <= 0 || cpu > wall*1.01 {
		t.Fatalf("cpu-ns/op %.0f, wall ns/op %.0f: want 0 < cpu ≤ wall", cpu, wall)
	}
}
