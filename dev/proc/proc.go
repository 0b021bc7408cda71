package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults for the zero values of a Spec's durations and tail length.
const (
	// DefaultReadyTimeout bounds the wait for readiness: a server here starts in well under a
	// second; the rest is room for a loaded 2-core machine.
	DefaultReadyTimeout = 60 * time.Second
	// DefaultStopGrace is how long Stop waits after SIGTERM before it sends SIGKILL.
	DefaultStopGrace = 15 * time.Second
	// DefaultTailLines is how many lines of a log an error shows.
	DefaultTailLines = 30
)

const (
	// readyPoll is the pause between two readiness checks.
	readyPoll = 50 * time.Millisecond
	// readyAttempt bounds one readiness check, so a check that hangs is retried.
	readyAttempt = 5 * time.Second
)

// ErrKilledAfterGrace is wrapped by the error Stop returns when the process was still running
// Spec.StopGrace after SIGTERM and had to be killed. The process has exited all the same.
var ErrKilledAfterGrace = errors.New("still running after SIGTERM; sent SIGKILL")

// Spec describes a process to run. Name, Path and Log are required.
type Spec struct {
	// Name names the process in errors and in the lines proc writes to its log, e.g. "nats-server".
	Name string
	// Path is the executable (looked up in PATH when it has no slash); Args its arguments,
	// without the program name.
	Path string
	Args []string
	// Env holds KEY=value entries added to the caller's environment; a key given here wins.
	Env []string
	// ClearEnv gives the process Env alone, without the caller's environment (a test proving
	// that a program takes its settings from what it is given, say).
	ClearEnv bool
	// Dir is the working directory; empty means the caller's.
	Dir string

	// Log receives the process's standard output and error (appended). Its directory is created.
	Log string
	// Rotation bounds Log; the zero value means DefaultRotation.
	Rotation Rotation
	// ExtraLogs are files the process writes itself (e.g. a server's own error log) whose tails
	// errors show after Log's.
	ExtraLogs []string
	// TailLines is how many lines of each log an error shows (DefaultTailLines when 0).
	TailLines int

	// DieWithCaller has the kernel send the process SIGKILL when the caller's process ends, so a
	// test binary killed by its timeout leaves no server behind (a process whose caller may die
	// and that must stop cleanly keeps a pid file instead). It reaches the process alone, not
	// what that process starts. Not for StartDetached.
	DieWithCaller bool

	// PidFile, when set, is written at each start and removed once the process has exited (see
	// WritePidFile). Its directory is created.
	PidFile string

	// Ready reports whether the process serves; it is called every 50 ms, each call bounded to
	// 5 s, until it returns nil. Nil means ready as soon as the process runs.
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds the wait for Ready (DefaultReadyTimeout when 0).
	ReadyTimeout time.Duration
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL (DefaultStopGrace when 0).
	StopGrace time.Duration

	// OnCrash is called, on a goroutine of its own and after Done is closed, with an error naming
	// the process, its exit status and its log's tail, each time the process exits on its own
	// after a successful Start. It may call Start to restart the process.
	OnCrash func(err error)
}

func (s *Spec) check() error {
	switch {
	case s.Name == "":
		return errors.New("proc: Spec.Name is empty")
	case s.Path == "":
		return fmt.Errorf("proc: %s: Spec.Path is empty", s.Name)
	case s.Log == "":
		return fmt.Errorf("proc: %s: Spec.Log is empty", s.Name)
	}
	return nil
}

func (s *Spec) readyTimeout() time.Duration { return orDefault(s.ReadyTimeout, DefaultReadyTimeout) }
func (s *Spec) stopGrace() time.Duration    { return orDefault(s.StopGrace, DefaultStopGrace) }

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// commandLine is the command as a shell would show it, for log lines.
func (s *Spec) commandLine() string {
	return strings.Join(append([]string{s.Path}, s.Args...), " ")
}

// Process is a child process the caller supervises: started, restarted, stopped and watched for
// crashes through one value. The zero value is not usable; make one with New. Its methods are
// safe for concurrent use; Start, Stop, Kill and Restart wait for each other, the others never
// wait.
type Process struct {
	spec Spec

	mu  sync.Mutex          // serializes Start, Stop and Kill
	cur atomic.Pointer[run] // the latest run; nil before the first Start
}

// New returns a Process for spec, not started yet.
func New(spec Spec) (*Process, error) {
	if err := spec.check(); err != nil {
		return nil, err
	}
	spec.Args = append([]string(nil), spec.Args...)
	spec.Env = append([]string(nil), spec.Env...)
	return &Process{spec: spec}, nil
}

// Spec returns the process's description.
func (p *Process) Spec() Spec { return p.spec }

// run is one start of a process, from fork to reaping.
type run struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed once the process has been reaped and the fields below are final
	// logStart is the size of the log before this run wrote to it: what follows is this run's.
	logStart int64

	mu       sync.Mutex
	live     bool // Start succeeded: from now on an unannounced exit is a crash
	intended bool // Stop, Kill or ExpectExit announced the exit
	exited   bool
	crashed  bool
	err      error // what Wait returned
}

func (r *run) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (r *run) announce() {
	r.mu.Lock()
	r.intended = true
	r.mu.Unlock()
}

// Start starts the process and waits until it is ready. It fails when the process is running
// already, or when Spec.PidFile names a process of an earlier run that still runs (see
// StopPidFile). On failure the process has been killed and reaped, and the error carries its log's
// tail. Start can be called again after an exit of any kind: the process comes back with the
// same Spec (same ports, same data).
func (p *Process) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.cur.Load(); r != nil && !r.finished() {
		return fmt.Errorf("start %s: already running (pid %d)", p.spec.Name, r.pid)
	}
	if p.spec.PidFile != "" {
		// A process of an earlier run would lose its pid file to this one.
		if found, err := Inspect(p.spec.PidFile, nil); err != nil {
			return fmt.Errorf("start %s: %w", p.spec.Name, err)
		} else if found.State == Running {
			return fmt.Errorf("start %s: pid %d of an earlier run still runs (pid file %s); stop it first", p.spec.Name, found.Pid, p.spec.PidFile)
		}
	}
	type launched struct {
		r   *run
		err error
	}
	started := make(chan launched, 1)
	go func() {
		if p.spec.DieWithCaller {
			// The kernel sends Pdeathsig when the thread that forked ends, not the process:
			// fork on a thread kept for this goroutine alone until the child has been reaped
			// (a goroutine that ends locked takes its thread with it, after the child).
			runtime.LockOSThread()
		}
		r, err := launch(&p.spec, false)
		started <- launched{r, err}
		if err == nil {
			p.reap(r)
		}
	}()
	l := <-started
	if l.err != nil {
		return l.err
	}
	r := l.r
	p.cur.Store(r)
	if err := waitReady(ctx, &p.spec, r.pid, r.exitErr); err != nil {
		killGroup(r.pid)
		<-r.done
		return fmt.Errorf("start %s: %w", p.spec.Name, bindError(&p.spec, r, err))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// Ready may have been answered by another process on the same port while this one failed.
	if r.exited && p.spec.Ready != nil {
		return fmt.Errorf("start %s: %w", p.spec.Name, bindError(&p.spec, r, startExitErr(&p.spec, r)))
	}
	r.live = true
	return nil
}

// reap waits for r's process, removes the pid file, settles whether the exit was a crash and
// reports it.
func (p *Process) reap(r *run) {
	err := r.cmd.Wait()
	if p.spec.PidFile != "" {
		removePidFile(p.spec.PidFile, r.pid)
	}
	r.mu.Lock()
	r.exited, r.err = true, err
	r.crashed = r.live && !r.intended
	crashed := r.crashed
	r.mu.Unlock()
	if crashed {
		appendNote(p.spec.Log, fmt.Sprintf("%s (pid %d) exited on its own: %v", p.spec.Name, r.pid, err))
	}
	close(r.done)
	if crashed && p.spec.OnCrash != nil {
		p.spec.OnCrash(fmt.Errorf("%s (pid %d) exited unexpectedly (%v); %s", p.spec.Name, r.pid, exitText(err), tails(&p.spec)))
	}
}

// Stop ends the process: SIGTERM to its process group, SIGKILL after Spec.StopGrace (or at once
// when ctx ends first). It returns once the process has exited; the error wraps
// ErrKilledAfterGrace when SIGTERM was not enough. Stopping a process that is not running does
// nothing.
func (p *Process) Stop(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.endLocked("stopping", syscall.SIGTERM)
	if r == nil {
		return nil
	}
	grace := time.NewTimer(p.spec.stopGrace())
	defer grace.Stop()
	select {
	case <-r.done:
		return nil
	case <-grace.C:
	case <-ctx.Done():
	}
	appendNote(p.spec.Log, fmt.Sprintf("%s (pid %d) still running: SIGKILL", p.spec.Name, r.pid))
	killGroup(r.pid)
	<-r.done
	if ctx.Err() != nil {
		return fmt.Errorf("stop %s (pid %d): %w before it exited; killed it", p.spec.Name, r.pid, ctx.Err())
	}
	return fmt.Errorf("stop %s (pid %d): %w after %s", p.spec.Name, r.pid, ErrKilledAfterGrace, p.spec.stopGrace())
}

// Kill ends the process group with SIGKILL, as a crash would, and returns once the process has
// exited. Killing a process that is not running does nothing.
func (p *Process) Kill(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.endLocked("killing", syscall.SIGKILL)
	if r == nil {
		return nil
	}
	// SIGKILL cannot be caught: the wait ends unless the process is stuck in the kernel.
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kill %s (pid %d): %w before it exited", p.spec.Name, r.pid, ctx.Err())
	}
}

// endLocked announces the exit of the running process, notes in its log what is done to it
// (doing: "stopping", "killing") and sends sig to its process group. It returns the run, or nil
// when no process runs. p.mu must be held.
func (p *Process) endLocked(doing string, sig syscall.Signal) *run {
	r := p.cur.Load()
	if r == nil || r.finished() {
		return nil
	}
	r.announce()
	appendNote(p.spec.Log, fmt.Sprintf("%s %s (pid %d): %s", doing, p.spec.Name, r.pid, unix.SignalName(sig)))
	signalGroup(r.pid, sig)
	return r
}

// Restart stops the process (as Stop) and starts it again with the same Spec.
func (p *Process) Restart(ctx context.Context) error {
	if err := p.Stop(ctx); err != nil && !errors.Is(err, ErrKilledAfterGrace) {
		return err
	}
	return p.Start(ctx)
}

// ExpectExit announces that the running process is about to exit on its own (a crash the
// caller provokes), so the exit is not reported as a crash.
func (p *Process) ExpectExit() {
	if r := p.cur.Load(); r != nil {
		r.announce()
	}
}

// Pid is the pid of the latest run (0 before the first Start); it stays set after the exit.
func (p *Process) Pid() int {
	if r := p.latest(); r != nil {
		return r.pid
	}
	return 0
}

// Running reports whether the latest run's process has not exited yet.
func (p *Process) Running() bool {
	r := p.latest()
	return r != nil && !r.finished()
}

// Done is closed when the latest run's process has exited and been reaped. It belongs to that
// run: after a restart, call Done again. Before the first Start it is a closed channel.
func (p *Process) Done() <-chan struct{} {
	if r := p.latest(); r != nil {
		return r.done
	}
	c := make(chan struct{})
	close(c)
	return c
}

// Err is the latest run's exit error as exec.Cmd.Wait returned it (nil for exit status 0),
// valid once Done is closed.
func (p *Process) Err() error {
	if r := p.latest(); r != nil && r.finished() {
		return r.err
	}
	return nil
}

// ExitCode is the latest run's exit code once it has exited; -1 while it runs, before the first
// Start, or when a signal ended it.
func (p *Process) ExitCode() int {
	r := p.latest()
	if r == nil || !r.finished() {
		return -1
	}
	return r.cmd.ProcessState.ExitCode()
}

// Crashed reports whether the latest run ended on its own after a successful Start.
func (p *Process) Crashed() bool {
	r := p.latest()
	if r == nil || !r.finished() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.crashed
}

// LogTail is the tail of the process's log and extra logs, as errors show it.
func (p *Process) LogTail() string { return tails(&p.spec) }

func (p *Process) latest() *run { return p.cur.Load() }

// launch rotates the log, forks and execs the process in a new process group (a new session
// when detached) with its output appended to the log, and writes the pid file.
func launch(spec *Spec, detached bool) (*run, error) {
	for _, f := range []string{spec.Log, spec.PidFile} {
		if f == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return nil, fmt.Errorf("start %s: %w", spec.Name, err)
		}
	}
	if err := rotate(spec.Log, spec.Rotation.orDefault()); err != nil {
		return nil, fmt.Errorf("start %s: rotate its log: %w", spec.Name, err)
	}
	logFile, err := os.OpenFile(spec.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: open its log: %w", spec.Name, err)
	}
	// The child holds its own copy of the descriptor.
	defer logFile.Close()
	var logStart int64
	if fi, err := logFile.Stat(); err == nil {
		logStart = fi.Size()
	}
	fmt.Fprintf(logFile, "=== %s proc: starting %s: %s\n", stamp(), spec.Name, spec.commandLine())

	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = spec.Env
	if !spec.ClearEnv {
		cmd.Env = append(os.Environ(), spec.Env...)
	}
	if cmd.Env == nil {
		// nil would mean the caller's environment to os/exec.
		cmd.Env = []string{}
	}
	cmd.Dir = spec.Dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if detached {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if spec.DieWithCaller && !detached {
		// Sent when the thread that forks ends: Start forks on a thread of its own (see there).
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(logFile, "=== %s proc: start failed: %v\n", stamp(), err)
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	r := &run{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{}), logStart: logStart}
	if spec.PidFile != "" {
		if err := writeChildPidFile(spec.PidFile, cmd); err != nil {
			killGroup(r.pid)
			_ = cmd.Wait()
			return nil, fmt.Errorf("start %s: %w", spec.Name, err)
		}
	}
	return r, nil
}

// exitErr describes the process's exit during its start, or is nil while it runs.
func (r *run) exitErr() error {
	if !r.finished() {
		return nil
	}
	return startExitErr(nil, r)
}

// waitReady polls spec.Ready until it answers nil, the process exits (exited returns an error
// saying so), the ready timeout passes or ctx ends.
func waitReady(ctx context.Context, spec *Spec, pid int, exited func() error) error {
	if spec.Ready == nil {
		return nil
	}
	timeout := spec.readyTimeout()
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, errNotReady)
	defer cancel()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, readyAttempt)
		err := spec.Ready(attempt)
		cancelAttempt()
		if err == nil {
			return nil
		}
		if exitErr := exited(); exitErr != nil {
			return fmt.Errorf("%w; %s", exitErr, tails(spec))
		}
		select {
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), errNotReady) {
				return fmt.Errorf("%s (pid %d) not ready after %s: %v; %s", spec.Name, pid, timeout, err, tails(spec))
			}
			return fmt.Errorf("%s (pid %d): %w while waiting for it to be ready (last check: %v)", spec.Name, pid, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

var errNotReady = errors.New("ready timeout")

// startExitErr describes a process that exited during its start, with the tails of spec's logs
// (none when spec is nil); r.done must be closed.
func startExitErr(spec *Spec, r *run) error {
	err := fmt.Errorf("pid %d exited before it was ready (%s)", r.pid, exitText(r.cmd.ProcessState))
	if spec != nil {
		return fmt.Errorf("%w; %s", err, tails(spec))
	}
	return err
}

func exitText(v any) string {
	switch v := v.(type) {
	case nil:
		return "exit status 0"
	case *os.ProcessState:
		if v == nil {
			return "not started"
		}
		return v.String()
	case error:
		return v.Error()
	}
	return fmt.Sprint(v)
}

// signalGroup sends sig to the process group led by pid. A group that is gone is not an error:
// the process exited on its own meanwhile.
func signalGroup(pid int, sig syscall.Signal) {
	_ = syscall.Kill(-pid, sig)
}

func killGroup(pid int) { signalGroup(pid, syscall.SIGKILL) }

func stamp() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// appendNote adds a "=== time proc: note" line to a log, so the log tells which lines belong to
// which run and why a run ended. Best effort: a log that cannot be opened loses the note only.
func appendNote(path, note string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "=== %s proc: %s\n", stamp(), note)
}
