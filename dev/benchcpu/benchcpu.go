// Package benchcpu reports a benchmark's CPU time per operation beside Go's wall-clock ns/op.
// On a loaded machine (the development machine here is 2 cores shared by several jobs) ns/op
// counts the time the benchmark waited for a core, and two implementations measured one after
// the other see different loads; the CPU time of the benchmark's own thread does not, so ratios
// between implementations read from it are stable from run to run.
package benchcpu

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Start locks the benchmark goroutine to its OS thread and returns a function that, called
// after the benchmark loop, reports that thread's CPU time (CLOCK_THREAD_CPUTIME_ID: user and
// system, in nanoseconds) divided by b.N as the metric "cpu-ns/op" and unlocks the thread. CPU
// spent by other threads (the garbage collector's background workers) is not counted: compare
// allocations with -benchmem.
func Start(b *testing.B) (stop func()) {
	runtime.LockOSThread()
	before := threadCPU(b)
	return func() {
		used := threadCPU(b) - before
		runtime.UnlockOSThread()
		if b.N > 0 {
			b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}

func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatalf("clock_gettime(CLOCK_THREAD_CPUTIME_ID): %v", err)
	}
	return time.Duration(ts.Nano())
}
