package benchkit

import (
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// Counters are what this process has done so far beyond allocating, read at the start and end
// of a Go benchmark's loop to report the difference per iteration (Counters.ReportPerOp). Unlike
// ns/op, none of them depends much on the machine's other load, so they show a change in what a
// request costs where wall-clock figures drown it in noise.
type Counters struct {
	// CPU is the CPU time (user and system) of all the process's threads, from
	// /proc/self/task/*/schedstat.
	CPU time.Duration
	// Reads and Writes count read(2) and write(2) calls, socket ones included (syscr and syscw
	// of /proc/self/io): each flush of a buffered writer to a connection is one write.
	Reads, Writes uint64
	// Goroutines counts the goroutines started (runtime/metrics /sched/goroutines-created).
	Goroutines uint64
}

// ReadCounters reads this process's Counters.
func ReadCounters() (Counters, error) {
	var c Counters
	c.CPU = ProcCPU(os.Getpid())
	if c.CPU < 0 {
		return c, fmt.Errorf("CPU time of this process: /proc/%d/task unreadable", os.Getpid())
	}
	raw, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return c, fmt.Errorf("read(2) and write(2) counts: %w", err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		var dst *uint64
		switch k {
		case "syscr":
			dst = &c.Reads
		case "syscw":
			dst = &c.Writes
		default:
			continue
		}
		if *dst, err = strconv.ParseUint(strings.TrimSpace(v), 10, 64); err != nil {
			return c, fmt.Errorf("/proc/self/io: %q: %w", line, err)
		}
	}
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return c, fmt.Errorf("runtime/metrics has no %s", s[0].Name)
	}
	c.Goroutines = s[0].Value.Uint64()
	return c, nil
}

// MetricReporter is what ReportPerOp needs of a *testing.B.
type MetricReporter interface {
	ReportMetric(n float64, unit string)
}

// ReportPerOp reports what happened between since and c, divided by the n iterations of a
// benchmark's loop: cpu-ns/op, reads/op, writes/op and goroutines/op.
func (c Counters) ReportPerOp(b MetricReporter, since Counters, n int) {
	if n <= 0 {
		return
	}
	per := func(d uint64) float64 { return float64(d) / float64(n) }
	b.ReportMetric(float64(c.CPU-since.CPU)/float64(n), "cpu-ns/op")
	b.ReportMetric(per(c.Reads-since.Reads), "reads/op")
	b.ReportMetric(per(c.Writes-since.Writes), "writes/op")
	b.ReportMetric(per(c.Goroutines-since.Goroutines), "goroutines/op")
}
