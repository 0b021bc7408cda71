package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Procs starts the demo's services as child processes, each in its own process group with its
// output in <LogDir>/<name>.log and its pid in <PidDir>/<name>.pid, and stops exactly those.
// The pid files let `demo down` stop a stack whose driver was killed.
type Procs struct {
	BinDir, LogDir, PidDir string

	// Exited receives every process that ends without Stop having been called on it.
	Exited chan *Proc

	mu    sync.Mutex
	procs []*Proc
}

// Proc is one started service.
type Proc struct {
	Name    string
	Cmd     *exec.Cmd
	Log     string
	done    chan struct{}
	err     error
	stopped atomic.Bool
}

// Expect marks p's coming exit as intended (the engine crash), so it is not reported on Exited.
func (p *Proc) Expect() { p.stopped.Store(true) }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit error, valid after Done.
func (p *Proc) Err() error { return p.err }

// Start runs BinDir/bin with args and env (added to the driver's environment) under name.
func (ps *Procs) Start(name, bin string, args []string, env map[string]string) (*Proc, error) {
	logPath := filepath.Join(ps.LogDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	cmd := exec.Command(filepath.Join(ps.BinDir, bin), args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group: a Ctrl-C in the terminal reaches the driver only, which then stops each
	// service in order (the consumer last among writers, so nothing published is lost).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
		if !p.stopped.Load() && ps.Exited != nil {
			select {
			case ps.Exited <- p:
			default:
			}
		}
	}()
	pidFile := filepath.Join(ps.PidDir, name+".pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return nil, fmt.Errorf("write pid file of %s: %w", name, err)
	}
	ps.mu.Lock()
	ps.procs = append(ps.procs, p)
	ps.mu.Unlock()
	return p, nil
}

// Stop ends p's process group: SIGTERM, then SIGKILL after grace. It removes the pid file.
func (ps *Procs) Stop(p *Proc, grace time.Duration) {
	p.stopped.Store(true)
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	_ = os.Remove(filepath.Join(ps.PidDir, p.Name+".pid"))
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for i, q := range ps.procs {
		if q == p {
			ps.procs = append(ps.procs[:i], ps.procs[i+1:]...)
			break
		}
	}
}

// StopAll stops every process still running, the last started first.
func (ps *Procs) StopAll(grace time.Duration) {
	for {
		ps.mu.Lock()
		n := len(ps.procs)
		var p *Proc
		if n > 0 {
			p = ps.procs[n-1]
		}
		ps.mu.Unlock()
		if p == nil {
			return
		}
		ps.Stop(p, grace)
	}
}

// DriverPidFile is the pid file of the demo driver itself, in the pid directory.
const DriverPidFile = "driver.pid"

// RunningDriver reports the pid of another demo driver still alive, from its pid file: a second
// demo must not tear down the first one's stack under it.
func RunningDriver(pidDir, binDir string) (int, bool) {
	raw, err := os.ReadFile(filepath.Join(pidDir, DriverPidFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 1 || pid == os.Getpid() {
		return 0, false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || !strings.HasPrefix(exe, binDir+string(os.PathSeparator)) {
		return 0, false
	}
	return pid, true
}

// StopStale stops the processes named by pid files left in pidDir, but only those whose
// executable lies in binDir (a reused pid belongs to someone else). A running driver
// (DriverPidFile) is asked first, with SIGTERM, to tear its stack down itself; services are then
// stopped by process group. It returns the names it stopped.
func StopStale(ctx context.Context, pidDir, binDir string, grace time.Duration) ([]string, error) {
	entries, err := os.ReadDir(pidDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pid directory: %w", err)
	}
	names := []string{DriverPidFile}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".pid") && e.Name() != DriverPidFile {
			names = append(names, e.Name())
		}
	}
	var stopped []string
	for _, name := range names {
		path := filepath.Join(pidDir, name)
		raw, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || pid <= 1 || pid == os.Getpid() {
			_ = os.Remove(path)
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err == nil && strings.HasPrefix(exe, binDir+string(os.PathSeparator)) {
			target, wait := -pid, grace
			if name == DriverPidFile {
				// The driver shares the terminal's process group: signal it alone, and give it
				// time to stop every service in order.
				target, wait = pid, 3*grace
			}
			_ = syscall.Kill(target, syscall.SIGTERM)
			deadline := time.Now().Add(wait)
			for alive(pid) && time.Now().Before(deadline) && ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond)
			}
			if alive(pid) {
				_ = syscall.Kill(target, syscall.SIGKILL)
			}
			stopped = append(stopped, strings.TrimSuffix(name, ".pid"))
		}
		_ = os.Remove(path)
	}
	return stopped, nil
}

func alive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie (state Z) has exited; its parent has not reaped it yet.
	s := string(raw)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
