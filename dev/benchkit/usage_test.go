package benchkit

import (
	"os"
	"testing"
	"time"
)

// A phase's own CPU is the bench's processes' CPU time over it, which counts toward the busy
// cores and not toward the outside work; a second Stop repeats the first.
func TestMeterTellsOwnWorkFromOutsideWork(t *testing.T) {
	m := StartMeter(map[string]int{"self": os.Getpid(), "unknown": 0})
	start := ProcCPU(os.Getpid())
	deadline := time.Now().Add(time.Minute)
	x := 0
	for ProcCPU(os.Getpid())-start < 300*time.Millisecond && time.Now().Before(deadline) {
		for i := range 1_000_000 {
			x += i
		}
	}
	u := m.Stop()
	if u.OwnCPU["self"] < 0.3 {
		t.Fatalf("own CPU %.3f s, want at least the 0.3 s spent (x=%d)", u.OwnCPU["self"], x)
	}
	if _, ok := u.OwnCPU["unknown"]; ok {
		t.Error("a process without a pid was metered")
	}
	// /proc/stat counts in 10 ms ticks: the busy cores hold the own CPU within one tick per core.
	if own := u.OwnCPU["self"] / u.Seconds; u.BusyCores < own-0.01*float64(u.Cores)/u.Seconds || u.OutsideCores < 0 {
		t.Errorf("busy %.3f cores with %.3f own, outside %.3f", u.BusyCores, own, u.OutsideCores)
	}
	if u.Cores < 1 || u.Seconds <= 0 {
		t.Errorf("usage %+v", u)
	}
	if again := m.Stop(); again.Seconds != u.Seconds || again.OwnCPU["self"] != u.OwnCPU["self"] {
		t.Errorf("second Stop %+v, want the first %+v", again, u)
	}
}
