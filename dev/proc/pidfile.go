package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A pid file holds the pid on its first line, then the executable and the command line as the
// kernel showed them when the file was written (/proc/PID/exe, then each argument of
// /proc/PID/cmdline), one Go-quoted string a line:
//
//	4242
//	"/repo/.cache/bin/nats-server"
//	"/repo/.cache/bin/nats-server"
//	"--port"
//	"4222"
//
// A file holding only a pid (as older scripts wrote) is understood too; see Inspect. The record is
// taken right after the start: a program that then replaces itself by exec (sh -c '... exec x')
// no longer matches it, and is left alone.

// record is what a pid file says.
type record struct {
	pid  int
	exe  string   // empty in a pid-only file
	argv []string // argv[0] included; nil in a pid-only file
}

// WritePidFile records pid, with the executable and command line /proc shows for it, in path
// (written whole or not at all). It works for the calling process too (os.Getpid()).
func WritePidFile(path string, pid int) error {
	exe, argv, err := observeSettled(pid)
	if err == nil && argv == nil {
		err = fmt.Errorf("pid %d shows no command line", pid)
	}
	if err != nil {
		return fmt.Errorf("write pid file %s: %w", path, err)
	}
	return writeRecord(path, record{pid: pid, exe: exe, argv: argv})
}

// writeChildPidFile records a child just started by cmd: as /proc shows it, or, when it has
// exited already, as cmd describes it (the file is removed when its exit is seen).
func writeChildPidFile(path string, cmd *exec.Cmd) error {
	pid := cmd.Process.Pid
	exe, argv, err := observeSettled(pid)
	if err != nil || argv == nil {
		exe, argv = cmd.Path, cmd.Args
	}
	return writeRecord(path, record{pid: pid, exe: exe, argv: argv})
}

func writeRecord(path string, rec record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d\n", rec.pid)
	if rec.exe != "" {
		fmt.Fprintf(&b, "%s\n", strconv.Quote(rec.exe))
		for _, a := range rec.argv {
			fmt.Fprintf(&b, "%s\n", strconv.Quote(a))
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write pid file %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write pid file %s: %w", path, err)
	}
	return nil
}

func readRecord(path string) (record, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return record{}, err
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 {
		return record{}, fmt.Errorf("pid file %s: first line %q is not a pid", path, lines[0])
	}
	rec := record{pid: pid}
	if len(lines) == 1 {
		return rec, nil
	}
	if len(lines) < 3 {
		return record{}, fmt.Errorf("pid file %s: an executable without a command line", path)
	}
	for i, l := range lines[1:] {
		s, err := strconv.Unquote(l)
		if err != nil {
			return record{}, fmt.Errorf("pid file %s: line %d: %w", path, i+2, err)
		}
		if i == 0 {
			rec.exe = s
		} else {
			rec.argv = append(rec.argv, s)
		}
	}
	return rec, nil
}

// observeSettled is observe for a process that may have just been started: the parent of a
// vfork-style exec (os/exec's) resumes before the kernel has laid out the new program's arguments,
// so for a moment /proc shows the new executable with an empty command line (nil argv). It waits
// for the arguments up to about a second.
func observeSettled(pid int) (exe string, argv []string, err error) {
	exe, argv, err = observe(pid)
	for wait := time.Millisecond; err == nil && argv == nil && wait < time.Second; wait *= 2 {
		time.Sleep(wait)
		exe, argv, err = observe(pid)
	}
	return exe, argv, err
}

// observe returns the executable and command line /proc shows for a live pid. An executable
// replaced or removed since the process started shows as "PATH (deleted)": deleted says so and
// exe is PATH.
func observe(pid int) (exe string, argv []string, err error) {
	exe, _, argv, err = observeFull(pid)
	return exe, argv, err
}

func observeFull(pid int) (exe string, deleted bool, argv []string, err error) {
	link, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return "", false, nil, fmt.Errorf("read the executable of pid %d: %w", pid, err)
	}
	exe, deleted = strings.CutSuffix(link, " (deleted)")
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "", false, nil, fmt.Errorf("read the command line of pid %d: %w", pid, err)
	}
	// An empty command line (nil argv) belongs to a process between exec and its first
	// instruction, a zombie or a kernel thread.
	if len(raw) > 0 {
		for a := range bytes.SplitSeq(bytes.TrimSuffix(raw, []byte{0}), []byte{0}) {
			argv = append(argv, string(a))
		}
	}
	return exe, deleted, argv, nil
}

// alive reports whether pid is a process that has not exited. A zombie has exited; its parent
// has not reaped it yet.
func alive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}

// State is what a pid file says about its process.
type State int

const (
	// NoPidFile: there is no pid file.
	NoPidFile State = iota
	// Running: the process the pid file names is alive and runs the recorded executable and
	// command line.
	Running
	// NotRunning: the pid file is there, but its process has exited, or its pid now belongs to
	// another program, or the file cannot be matched to a process at all.
	NotRunning
)

func (s State) String() string {
	switch s {
	case NoPidFile:
		return "no pid file"
	case Running:
		return "running"
	case NotRunning:
		return "not running"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Found is the result of Inspect.
type Found struct {
	State State
	// Pid is the pid the file holds (0 when there is none or it is not a number).
	Pid int
	// ExeDeleted: the running process's executable has been replaced or removed since it
	// started (e.g. rebuilt); a restart runs the new one.
	ExeDeleted bool
}

// Inspect reads a pid file and checks its process against /proc: Running only when the pid is
// alive and runs the executable and command line the file records. A file holding only a pid is
// checked against legacy instead (the executable legacy.Path resolves to, and the command line
// legacy.Path followed by legacy.Args); with legacy nil, such a file is never Running. A file
// that is not a pid file is NotRunning; only a file that cannot be read is an error.
func Inspect(pidFile string, legacy *Spec) (Found, error) {
	rec, err := readRecord(pidFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Found{State: NoPidFile}, nil
	case errors.Is(err, fs.ErrPermission):
		return Found{}, fmt.Errorf("read pid file %s: %w", pidFile, err)
	case err != nil:
		return Found{State: NotRunning}, nil
	}
	if rec.exe == "" && legacy != nil {
		rec.exe, rec.argv = legacyIdentity(legacy)
	}
	deleted, ok := matches(rec)
	if !ok {
		return Found{State: NotRunning, Pid: rec.pid}, nil
	}
	return Found{State: Running, Pid: rec.pid, ExeDeleted: deleted}, nil
}

// legacyIdentity is the executable and command line a process started from spec shows in /proc.
func legacyIdentity(spec *Spec) (exe string, argv []string) {
	exe = spec.Path
	if !strings.Contains(exe, "/") {
		if p, err := exec.LookPath(exe); err == nil {
			exe = p
		}
	}
	if p, err := filepath.EvalSymlinks(exe); err == nil {
		exe = p
	}
	if p, err := filepath.Abs(exe); err == nil {
		exe = p
	}
	return exe, append([]string{spec.Path}, spec.Args...)
}

// matches reports whether rec's pid is alive and runs rec's executable and command line.
func matches(rec record) (exeDeleted, ok bool) {
	if rec.exe == "" || !alive(rec.pid) {
		return false, false
	}
	exe, deleted, argv, err := observeFull(rec.pid)
	if err != nil || argv == nil || exe != rec.exe || !slices.Equal(argv, rec.argv) {
		return false, false
	}
	return deleted, true
}

// StopPidFile stops the process a pid file names when Inspect finds it Running: SIGTERM, then
// SIGKILL after grace (or when ctx ends), to its process group when it leads one (every process
// this package starts does), else to it alone; the identity is checked again before each signal.
// It then removes the pid file, unless the file meanwhile names another process. It returns
// what Inspect found; the error says what could not be done, or wraps ErrKilledAfterGrace when
// the process is gone but needed SIGKILL.
func StopPidFile(ctx context.Context, pidFile string, legacy *Spec, grace time.Duration) (Found, error) {
	found, err := Inspect(pidFile, legacy)
	if err != nil || found.State == NoPidFile {
		return found, err
	}
	if found.State == Running {
		rec, _ := readRecord(pidFile)
		if rec.exe == "" && legacy != nil {
			rec.exe, rec.argv = legacyIdentity(legacy)
		}
		if err := stopRecorded(ctx, rec, grace); err != nil {
			if !errors.Is(err, ErrKilledAfterGrace) {
				return found, fmt.Errorf("stop pid %d of %s: %w", found.Pid, pidFile, err)
			}
			removePidFile(pidFile, found.Pid)
			return found, fmt.Errorf("stop pid %d of %s: %w", found.Pid, pidFile, err)
		}
	}
	removePidFile(pidFile, found.Pid)
	return found, nil
}

// killWait bounds the wait for a process to vanish after SIGKILL.
const killWait = 10 * time.Second

func stopRecorded(ctx context.Context, rec record, grace time.Duration) error {
	if _, ok := matches(rec); !ok {
		return nil
	}
	signalLeader(rec.pid, syscall.SIGTERM)
	if waitGone(ctx, rec, grace) {
		return nil
	}
	if _, ok := matches(rec); !ok {
		return nil
	}
	signalLeader(rec.pid, syscall.SIGKILL)
	if waitGone(context.WithoutCancel(ctx), rec, killWait) {
		if ctx.Err() != nil {
			return fmt.Errorf("%w before it exited; killed it", ctx.Err())
		}
		return fmt.Errorf("%w after %s", ErrKilledAfterGrace, grace)
	}
	return fmt.Errorf("still running %s after SIGKILL", killWait)
}

// waitGone polls until rec's process has exited (or its pid runs another program), for at most
// d or until ctx ends; it reports whether the process is gone.
func waitGone(ctx context.Context, rec record, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		if _, ok := matches(rec); !ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
}

// signalLeader signals pid's process group when pid leads it, else pid alone.
func signalLeader(pid int, sig syscall.Signal) {
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
		_ = syscall.Kill(-pid, sig)
		return
	}
	_ = syscall.Kill(pid, sig)
}

// removePidFile removes path unless it names a pid other than pid (pid 0: whatever it names), so
// that a file a newer start wrote survives.
func removePidFile(path string, pid int) {
	rec, err := readRecord(path)
	if err == nil && pid != 0 && rec.pid != pid {
		return
	}
	_ = os.Remove(path)
}
