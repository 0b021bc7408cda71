// Package benchkit holds what the benchmarks (dev/cmd/bench-*, run by scripts/bench) share, so
// each does a thing one way: percentiles and medians over interleaved rounds, CPU time of a
// process read from /proc, the machine's load average to print beside every figure, a private
// ClickHouse server for benches that must not load the shared dev server, a bench's own NATS
// streams and ClickHouse databases (set up with the setup step's code, removed afterwards), its
// comma-separated flag lists, its final JSON line and its exit status; and, for Go benchmarks,
// what an iteration costs the process besides allocations (Counters).
package benchkit

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/servers"
)

// Pct is the p-th percentile (0..100) of d by the nearest-rank-below method; 0 for no values.
func Pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p/100)]
}

// PctSorted is Pct of values already sorted ascending.
func PctSorted(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[int(float64(len(s)-1)*p/100)]
}

// Median is the middle value of f (the upper one of an even count); 0 for no values.
func Median(f []float64) float64 {
	if len(f) == 0 {
		return 0
	}
	s := slices.Clone(f)
	slices.Sort(s)
	return s[len(s)/2]
}

// Ms is d in milliseconds, rounded to 3 decimals.
func Ms(d time.Duration) float64 { return Round(float64(d)/float64(time.Millisecond), 3) }

// Round rounds f to n decimals.
func Round(f float64, n int) float64 {
	p := math.Pow(10, float64(n))
	return math.Round(f*p) / p
}

// Ratio is a/b with both raised to floor first: values below a measurement's resolution
// (including negative ones, which are noise) are indistinguishable from it. 0 when b is 0.
func Ratio(a, b, floor float64) float64 {
	a, b = max(a, floor), max(b, floor)
	if b <= 0 {
		return 0
	}
	return Round(a/b, 3)
}

// ProcCPU is the CPU time process pid has run, summed over its threads from
// /proc/PID/task/*/schedstat (nanoseconds, finer than the 10 ms ticks of /proc/PID/stat);
// -1 when unreadable.
func ProcCPU(pid int) time.Duration {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return -1
	}
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread ended
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			total += time.Duration(ns)
		}
	}
	return total
}

// RSSBytes is process pid's resident set size (VmRSS), 0 when unreadable.
func RSSBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// ReadPID is the pid of the live process a pid file names, or 0 when the file is missing or
// unreadable or its process is gone. A file written by dev/proc (as scripts/dev-services writes
// them: the pid, then the executable and command line) must name the process it recorded
// (proc.Inspect); a file holding only a pid (written by hand) names whatever process now has it.
func ReadPID(path string) int {
	if found, err := proc.Inspect(path, nil); err == nil && found.State == proc.Running {
		return found.Pid
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || ProcCPU(pid) < 0 {
		return 0
	}
	return pid
}

// LoadAvg is the machine's 1-minute load average from /proc/loadavg (-1 when unreadable): the
// other work competing for the cores while a figure was measured.
func LoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// RaiseOpenFiles raises this process's open-file limit (soft, and hard when allowed) to at least
// want and returns the soft limit in force. Children inherit it.
func RaiseOpenFiles(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read the open-file limit: %w", err)
	}
	if lim.Cur >= want {
		return lim.Cur, nil
	}
	next := lim
	next.Cur = want
	if next.Max < want {
		next.Max = want
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err != nil {
		// Without the privilege to raise the hard limit, go as far as it allows.
		next = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		if err2 := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err2 != nil {
			return lim.Cur, fmt.Errorf("raise the open-file limit to %d: %w", want, err)
		}
	}
	return next.Cur, nil
}

// FreePorts returns n distinct loopback TCP ports free at the time of the call (proc.FreePorts).
// A child given them should be started through proc.OnFreePorts, which starts it again on fresh
// ones when another process took one first.
func FreePorts(n int) ([]int, error) { return proc.FreePorts(n) }

// PrivateClickHouse is a ClickHouse server of this bench's own: the dev build that
// scripts/dev-services installs (dev/servers), on free loopback ports, its data under dir.
type PrivateClickHouse struct {
	srv *servers.ClickHouseServer
	dir string
	log *slog.Logger
}

// StartPrivateClickHouse starts a private server with its data in a new directory under parent
// (the system's temporary directory when empty); root is the repository root, whose .cache holds
// the installed programs. Stop it with Stop, which removes the data.
func StartPrivateClickHouse(ctx context.Context, root, parent string, log *slog.Logger) (*PrivateClickHouse, error) {
	var p *PrivateClickHouse
	_, err := proc.OnFreePorts(ctx, 2, func(ctx context.Context, ports []int) error {
		var err error
		p, err = startPrivateClickHouse(ctx, root, parent, ports[0], ports[1], nil, log)
		return err
	})
	return p, err
}

// StartPrivateShards starts n private servers as the n shards (one replica each) of cluster in
// their remote_servers. Stop each with Stop.
func StartPrivateShards(ctx context.Context, root, parent, cluster string, n int, log *slog.Logger) ([]*PrivateClickHouse, error) {
	var out []*PrivateClickHouse
	// Every shard names every other's native port: a port lost by one is new ports for all.
	_, err := proc.OnFreePorts(ctx, 2*n, func(ctx context.Context, ports []int) error {
		layout := make([][]string, n)
		for i := range n {
			layout[i] = []string{"127.0.0.1:" + strconv.Itoa(ports[2*i])}
		}
		out = nil
		for i := range n {
			p, err := startPrivateClickHouse(ctx, root, parent, ports[2*i], ports[2*i+1], func(c *servers.ClickHouse) {
				c.Clusters = map[string][][]string{cluster: layout}
			}, log)
			if err != nil {
				for _, p := range out {
					p.Stop()
				}
				return err
			}
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func startPrivateClickHouse(ctx context.Context, root, parent string, tcpPort, httpPort int, edit func(*servers.ClickHouse), log *slog.Logger) (*PrivateClickHouse, error) {
	in := servers.InstalledIn(servers.CacheDir(root))
	if err := in.Check(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "servescope-bench-clickhouse-")
	if err != nil {
		return nil, err
	}
	cfg := servers.ClickHouse{
		Launcher: in.Chlaunch, Lib: in.Libchdb, TCPPort: tcpPort, HTTPPort: httpPort,
		DataDir: filepath.Join(dir, "data"), ConfigFile: filepath.Join(dir, "config.xml"),
		EngineLog: filepath.Join(dir, "clickhouse-server.log"), EngineErrorLog: filepath.Join(dir, "clickhouse-server.err.log"),
		LogLevel: "warning", Log: filepath.Join(dir, "clickhouse.log"), DieWithCaller: true,
		ReadyTimeout: 2 * time.Minute,
	}
	if edit != nil {
		edit(&cfg)
	}
	s, err := servers.NewClickHouse(cfg)
	if err == nil {
		err = s.Start(ctx)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("private ClickHouse: %w", err)
	}
	log.Info("private ClickHouse", "addr", s.Addr(), "pid", s.Pid(), "data", dir)
	return &PrivateClickHouse{srv: s, dir: dir, log: log}, nil
}

// Addr is the native-protocol address.
func (p *PrivateClickHouse) Addr() string { return p.srv.Addr() }

// Pid is the server's process id.
func (p *PrivateClickHouse) Pid() int { return p.srv.Pid() }

// Dir is the directory holding the server's data and logs.
func (p *PrivateClickHouse) Dir() string { return p.dir }

// Stop stops the server and removes its data.
func (p *PrivateClickHouse) Stop() {
	if err := p.srv.Stop(context.Background()); err != nil {
		p.log.Warn("stop the private ClickHouse", "err", err)
	}
	if err := os.RemoveAll(p.dir); err != nil {
		p.log.Warn("remove the private ClickHouse's data", "dir", p.dir, "err", err)
	}
}
