package benchkit

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Usage is what the machine's cores did during one phase of a bench: how many were busy on
// average, how much CPU the bench's own processes (itself, the servers it drives, the programs
// it measures) used, and the rest, which is outside work competing with the bench: other
// programs, and the time the hypervisor gave the cores to other machines (steal).
type Usage struct {
	// Seconds is the phase's wall time.
	Seconds float64 `json:"seconds"`
	// Cores is the machine's CPU count (runtime.NumCPU).
	Cores int `json:"cores"`
	// BusyCores is the cores kept busy on average, by anyone (from /proc/stat: user, nice,
	// system, irq, softirq and steal time over the phase ÷ its wall time).
	BusyCores float64 `json:"busy_cores"`
	// OwnCPU is the CPU time of each of the bench's processes over the phase, in seconds; a
	// process without a readable pid is left out.
	OwnCPU map[string]float64 `json:"own_cpu_s"`
	// OutsideCores is BusyCores less the bench's own processes' share: the outside work.
	OutsideCores float64 `json:"outside_cores"`
	// LoadAvg1m is the 1-minute load average at the phase's end.
	LoadAvg1m float64 `json:"load_avg_1m"`
}

// OutsideShare is OutsideCores as a share of the machine (0–1).
func (u Usage) OutsideShare() float64 {
	if u.Cores == 0 {
		return 0
	}
	return u.OutsideCores / float64(u.Cores)
}

// Meter measures a phase's Usage from StartMeter to Stop.
type Meter struct {
	mu    sync.Mutex
	t0    time.Time
	busy0 time.Duration
	pids  map[string]int
	cpu0  map[string]time.Duration
	done  *Usage // set by the first Stop
}

// StartMeter starts measuring the machine and the named processes of the bench (pid 0: not
// known, left out).
func StartMeter(procs map[string]int) *Meter {
	m := &Meter{t0: time.Now(), busy0: machineBusy(), pids: map[string]int{}, cpu0: map[string]time.Duration{}}
	for name, pid := range procs {
		m.Add(name, pid, false)
	}
	return m
}

// Add counts process pid as the bench's own under name from now on; started says it started
// during the phase (all its CPU time counts) rather than before (only what it uses from now).
func (m *Meter) Add(name string, pid int, started bool) {
	if pid <= 0 {
		return
	}
	cpu := ProcCPU(pid)
	if cpu < 0 {
		return
	}
	if started {
		cpu = 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pids[name], m.cpu0[name] = pid, cpu
}

// Stop ends the phase at its first call, which must come while the bench's processes still run,
// and returns its usage (again at later calls).
func (m *Meter) Stop() Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done != nil {
		return *m.done
	}
	wall := time.Since(m.t0)
	u := Usage{Seconds: wall.Seconds(), Cores: runtime.NumCPU(), OwnCPU: map[string]float64{}, LoadAvg1m: LoadAvg()}
	if wall <= 0 {
		return u
	}
	u.BusyCores = (machineBusy() - m.busy0).Seconds() / wall.Seconds()
	own := 0.0
	for name, pid := range m.pids {
		cpu := ProcCPU(pid)
		if cpu < 0 {
			continue
		}
		s := (cpu - m.cpu0[name]).Seconds()
		u.OwnCPU[name] = Round(s, 3)
		own += s
	}
	u.OutsideCores = max(0, u.BusyCores-own/wall.Seconds())
	u.BusyCores, u.OutsideCores = Round(u.BusyCores, 3), Round(u.OutsideCores, 3)
	m.done = &u
	return u
}

// machineBusy is the CPU time all cores spent busy since boot, from the first line of
// /proc/stat (user nice system idle iowait irq softirq steal ..., in USER_HZ ticks); 0 when
// unreadable.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	// USER_HZ is 100 on every Linux the project runs on (sysconf(_SC_CLK_TCK)).
	return time.Duration(ticks) * 10 * time.Millisecond
}

// String is the usage in a line: wall, busy, outside and load.
func (u Usage) String() string {
	return fmt.Sprintf("%.1f s, %.2f of %d cores busy, %.2f outside, load %.1f", u.Seconds, u.BusyCores, u.Cores, u.OutsideCores, u.LoadAvg1m)
}
