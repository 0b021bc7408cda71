//go:build race

package load_test

// Time scales of the scenarios in tests: the race detector makes streaming several times
// costlier, so the runs are given more wall time.
const (
	lightScale    = 10.0
	overloadScale = 5.0
)
