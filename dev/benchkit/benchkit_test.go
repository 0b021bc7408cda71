package benchkit

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/proc"
)

func TestPctIsNearestRankBelowAndLeavesItsInputAlone(t *testing.T) {
	d := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0, 1}, {50, 5}, {90, 9}, {99, 9}, {100, 10}} {
		if got := Pct(d, c.p); got != c.want {
			t.Errorf("Pct(1..10, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if d[0] != 5 {
		t.Errorf("Pct sorted its input: %v", d)
	}
	if Pct(nil, 50) != 0 || Median(nil) != 0 {
		t.Error("no values should give 0")
	}
	if got := Median([]float64{3, 1, 2, 10}); got != 3 {
		t.Errorf("Median = %v, want the upper middle 3", got)
	}
}

func TestRatioRaisesBothSidesToTheFloor(t *testing.T) {
	for _, c := range []struct{ a, b, floor, want float64 }{
		{2, 1, 0, 2},
		{-3, 0.1, 0.5, 1},     // both below the resolution: indistinguishable
		{1, 0.1, 0.5, 2},      // the bare side below the floor counts as the floor
		{1, 0, 0, 0},          // no denominator
		{0.3333, 1, 0, 0.333}, // rounded to 3 decimals
	} {
		if got := Ratio(c.a, c.b, c.floor); got != c.want {
			t.Errorf("Ratio(%v, %v, %v) = %v, want %v", c.a, c.b, c.floor, got, c.want)
		}
	}
}

func TestProcReadsOfThisProcess(t *testing.T) {
	pid := os.Getpid()
	if cpu := ProcCPU(pid); cpu <= 0 {
		t.Errorf("ProcCPU(self) = %v, want positive", cpu)
	}
	if rss := RSSBytes(pid); rss < 1<<20 {
		t.Errorf("RSSBytes(self) = %d, want at least 1 MiB", rss)
	}
	if ProcCPU(-1) != -1 {
		t.Error("ProcCPU of no process should be -1")
	}
	dir := t.TempDir()
	if ReadPID(dir+"/missing.pid") != 0 {
		t.Error("ReadPID of a missing file should be 0")
	}
	if err := os.WriteFile(dir+"/self.pid", []byte("  \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ReadPID(dir+"/self.pid") != 0 {
		t.Error("ReadPID of an empty file should be 0")
	}
	// The format scripts/dev-services writes (the pid, the executable, the command line): the
	// bench reads nats-server's CPU time through it.
	if err := proc.WritePidFile(dir+"/self.pid", pid); err != nil {
		t.Fatal(err)
	}
	if got := ReadPID(dir + "/self.pid"); got != pid {
		t.Errorf("ReadPID of this process's pid file = %d, want %d", got, pid)
	}
	if err := os.WriteFile(dir+"/bare.pid", []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := ReadPID(dir + "/bare.pid"); got != pid {
		t.Errorf("ReadPID of a file holding only this process's pid = %d, want %d", got, pid)
	}
	if LoadAvg() < 0 {
		t.Error("LoadAvg unreadable on Linux")
	}
}

func TestFreePortsAreDistinct(t *testing.T) {
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	if ports[0] == ports[1] || ports[1] == ports[2] || ports[0] == ports[2] || ports[0] == 0 {
		t.Errorf("FreePorts(3) = %v", ports)
	}
}

// reported collects what ReportPerOp reports.
type reported map[string]float64

func (r reported) ReportMetric(n float64, unit string) { r[unit] = n }

func TestCountersSeeThisProcessWriteAndStartGoroutines(t *testing.T) {
	before, err := ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(t.TempDir() + "/w")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 10 {
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	for range 4 {
		go func() { done <- struct{}{} }()
	}
	for range 4 {
		<-done
	}
	// /proc counts CPU time in clock ticks (10 ms): work until a tick lands, so that the CPU
	// figure has something to show whatever the machine's speed.
	spin := 0
	for deadline := time.Now().Add(10 * time.Second); ProcCPU(os.Getpid()) <= before.CPU && time.Now().Before(deadline); {
		for i := range 1_000_000 {
			spin ^= i
		}
	}
	after, err := ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	r := reported{}
	after.ReportPerOp(r, before, 2)
	if r["writes/op"] < 5 {
		t.Errorf("writes/op = %v after 10 writes in 2 ops, want at least 5", r["writes/op"])
	}
	if r["goroutines/op"] < 2 {
		t.Errorf("goroutines/op = %v after 4 goroutines in 2 ops, want at least 2", r["goroutines/op"])
	}
	if r["cpu-ns/op"] <= 0 || r["reads/op"] < 0 {
		t.Errorf("cpu-ns/op = %v, reads/op = %v (spin %d)", r["cpu-ns/op"], r["reads/op"], spin)
	}
}
