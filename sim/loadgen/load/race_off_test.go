//go:build !race

package load_test

// Time scales of the scenarios in tests.
const (
	lightScale    = 20.0
	overloadScale = 10.0
)
