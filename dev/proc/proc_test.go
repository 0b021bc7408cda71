package proc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The children are sh -c scripts. Nothing here waits for a child by the clock: readiness is a file
// the script creates, a child's exit is seen through Done, and the only durations are upper bounds
// (a timeout that must expire because readiness never comes, a grace a child cannot meet because
// it ignores SIGTERM, a bound on how long a killed process may take to vanish).

// testTimeout bounds each test's context; it is never reached when the test passes.
const testTimeout = 2 * time.Minute

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// script returns a Spec running sh -c body in a fresh directory, with READY (a file the script
// creates when it serves) and DIR in its environment. It is ready once READY exists; the check
// removes the file, so each run must create it anew.
func script(t *testing.T, name, body string) Spec {
	t.Helper()
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	return Spec{
		Name: name,
		Path: "/bin/sh",
		Args: []string{"-c", body},
		Env:  []string{"READY=" + ready, "DIR=" + dir},
		Dir:  dir,
		Log:  filepath.Join(dir, "logs", name+".log"),
		Ready: func(context.Context) error {
			if err := os.Remove(ready); err != nil {
				return errors.New("no ready file yet")
			}
			return nil
		},
	}
}

func newProcess(t *testing.T, spec Spec) *Process {
	t.Helper()
	p, err := New(spec)
	if err != nil {
		t.Fatal(err)
	}
	// A failing test must not leave the child behind.
	t.Cleanup(func() { _ = p.Kill(context.Background()) })
	return p
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, path)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitVanished fails the test unless pid exits within a generous bound (a signalled process that
// is not our child is reaped by init, not by us).
func waitVanished(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still alive", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStartReadyStop(t *testing.T) {
	ctx := testCtx(t)
	spec := script(t, "svc", `
		echo "hello from $(pwd) with GREETING=$GREETING"
		trap 'echo "got TERM"; exit 0' TERM
		sleep 1000 & echo $! > "$DIR/grandchild"
		# Ready once the background job is sleep: a signal dash takes for its trap while the job
		# is still a copy of the shell would be lost.
		until [ "$(cat /proc/$!/comm)" = sleep ]; do :; done
		touch "$READY"
		wait`)
	spec.Env = append(spec.Env, "GREETING=hi")
	spec.PidFile = filepath.Join(spec.Dir, "pids", "svc.pid")
	p := newProcess(t, spec)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !p.Running() {
		t.Fatal("not running after Start")
	}
	if found, err := Inspect(spec.PidFile, nil); err != nil || found.State != Running || found.Pid != p.Pid() {
		t.Fatalf("pid file: %+v, %v; want running pid %d", found, err, p.Pid())
	}
	if err := p.Start(ctx); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second Start: %v, want already running", err)
	}
	grandchild := readPid(t, filepath.Join(spec.Dir, "grandchild"))

	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Stop returned before the process exited")
	}
	if p.Err() != nil || p.ExitCode() != 0 || p.Crashed() {
		t.Fatalf("after Stop: err %v, exit code %d, crashed %v; want a clean exit 0", p.Err(), p.ExitCode(), p.Crashed())
	}
	// SIGTERM went to the whole group: the background sleep got it too.
	waitVanished(t, grandchild)
	if _, err := os.Stat(spec.PidFile); !os.IsNotExist(err) {
		t.Errorf("pid file left after Stop: %v", err)
	}
	log := readFile(t, spec.Log)
	for _, want := range []string{"hello from " + spec.Dir + " with GREETING=hi", "got TERM", "proc: starting svc", "stopping svc"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if err := p.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestClearEnv(t *testing.T) {
	ctx := testCtx(t)
	spec := script(t, "isolated", `env > "$DIR/env"; touch "$READY"; sleep 1000 & wait`)
	spec.Path = "/bin/sh" // no PATH to look it up in
	spec.ClearEnv = true
	t.Setenv("SERVESCOPE_LEAK", "from the caller")
	p := newProcess(t, spec)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	got := readFile(t, filepath.Join(spec.Dir, "env"))
	if strings.Contains(got, "SERVESCOPE_LEAK") || !strings.Contains(got, "READY=") {
		t.Errorf("environment of a ClearEnv process:\n%s", got)
	}
}

func TestStartFailsWhenTheProcessExits(t *testing.T) {
	ctx := testCtx(t)
	spec := script(t, "failing", `echo "Code: 210. DB::Exception: Address already in use" >&2; exit 3`)
	spec.PidFile = filepath.Join(spec.Dir, "failing.pid")
	crashed := make(chan error, 1)
	spec.OnCrash = func(err error) { crashed <- err }
	p := newProcess(t, spec)
	err := p.Start(ctx)
	if err == nil {
		t.Fatal("Start succeeded")
	}
	for _, want := range []string{"start failing", "exited before it was ready", "exit status 3", "Address already in use", spec.Log} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if p.Running() || p.Crashed() {
		t.Errorf("running %v, crashed %v after a failed start", p.Running(), p.Crashed())
	}
	if _, err := os.Stat(spec.PidFile); !os.IsNotExist(err) {
		t.Errorf("pid file left after a failed start: %v", err)
	}
	select {
	case err := <-crashed:
		t.Errorf("a failed start was reported as a crash: %v", err)
	default:
	}
}

func TestStartNotReadyInTime(t *testing.T) {
	ctx := testCtx(t)
	spec := script(t, "slow", `echo "still loading"; exec sleep 1000`)
	spec.Ready = func(context.Context) error { return errors.New("port not open") }
	// Long enough for the shell to start and print on a loaded machine: the error quotes its log.
	spec.ReadyTimeout = 5 * time.Second
	p := newProcess(t, spec)
	err := p.Start(ctx)
	if err == nil {
		t.Fatal("Start succeeded")
	}
	for _, want := range []string{"not ready after 5s", "port not open", "still loading"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if p.Running() || alive(p.Pid()) {
		t.Errorf("the process was left running after a failed start (pid %d)", p.Pid())
	}
}

func TestStartEndsWithItsContext(t *testing.T) {
	spec := script(t, "waiting", `exec sleep 1000`)
	spec.Ready = func(context.Context) error { return errors.New("not yet") }
	p := newProcess(t, spec)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- p.Start(ctx) }()
	cancel()
	err := <-started
	if err == nil {
		t.Fatal("Start succeeded with its context canceled")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not wrap context.Canceled", err)
	}
	if p.Running() {
		t.Error("the process was left running")
	}
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	ctx := testCtx(t)
	// An ignored signal stays ignored across exec: sleep cannot meet any grace.
	spec := script(t, "stubborn", `trap '' TERM; touch "$READY"; exec sleep 1000`)
	spec.StopGrace = 200 * time.Millisecond
	p := newProcess(t, spec)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	err := p.Stop(ctx)
	if !errors.Is(err, ErrKilledAfterGrace) {
		t.Fatalf("Stop: %v, want ErrKilledAfterGrace", err)
	}
	if p.Running() {
		t.Fatal("running after Stop")
	}
	if got := fmt.Sprint(p.Err()); got != "signal: killed" {
		t.Errorf("exit: %s, want signal: killed", got)
	}
	if p.Crashed() {
		t.Error("a stopped process counted as crashed")
	}
	if log := readFile(t, spec.Log); !strings.Contains(log, "still running: SIGKILL") {
		t.Errorf("log does not say SIGKILL was needed:\n%s", log)
	}
}

func TestKillAndRestartKeepTheData(t *testing.T) {
	ctx := testCtx(t)
	spec := script(t, "store", `echo run >> "$DIR/data"; touch "$READY"; exec sleep 1000`)
	p := newProcess(t, spec)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	first := p.Pid()
	if err := p.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.Err()); got != "signal: killed" {
		t.Errorf("exit after Kill: %s", got)
	}
	if p.Crashed() {
		t.Error("a killed process counted as crashed")
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Pid() == first {
		t.Errorf("same pid %d after the restart", first)
	}
	if err := p.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(spec.Dir, "data")); got != "run\nrun\nrun\n" {
		t.Errorf("data after two restarts = %q, want three runs", got)
	}
	if n := strings.Count(readFile(t, spec.Log), "proc: starting store"); n != 3 {
		t.Errorf("log has %d start lines, want 3", n)
	}
}

func TestCrashIsReported(t *testing.T) {
	ctx := testCtx(t)
	spec := script(t, "fragile", `echo "serving"; touch "$READY"; exec sleep 1000`)
	spec.PidFile = filepath.Join(spec.Dir, "fragile.pid")
	crashes := make(chan error, 2)
	spec.OnCrash = func(err error) { crashes <- err }
	p := newProcess(t, spec)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	// Someone else kills it: an exit nobody announced.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-crashes
	for _, want := range []string{fmt.Sprintf("fragile (pid %d) exited unexpectedly", pid), "signal: killed", "serving"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("crash error lacks %q: %v", want, err)
		}
	}
	if !p.Crashed() || p.Running() {
		t.Errorf("crashed %v, running %v; want a crash", p.Crashed(), p.Running())
	}
	if _, err := os.Stat(spec.PidFile); !os.IsNotExist(err) {
		t.Errorf("pid file left after the crash: %v", err)
	}
	// It comes back on the same Spec.
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Crashed() {
		t.Error("Crashed still true after a restart")
	}
}

func TestExpectedExitIsNoCrash(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "trigger")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	spec := script(t, "engine", `read line < "$TRIGGER"; echo "dying: $line"; exit 7`)
	spec.Env = append(spec.Env, "TRIGGER="+fifo)
	spec.Ready = nil
	crashes := make(chan error, 1)
	spec.OnCrash = func(err error) { crashes <- err }
	p := newProcess(t, spec)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p.ExpectExit()
	// Opening the fifo waits for the child to open its end.
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(w, "out of memory")
	w.Close()
	<-p.Done()
	if got := fmt.Sprint(p.Err()); got != "exit status 7" || p.ExitCode() != 7 {
		t.Errorf("exit: %s (code %d), want exit status 7", got, p.ExitCode())
	}
	// The crash decision is settled before Done is closed.
	if p.Crashed() {
		t.Error("an announced exit counted as a crash")
	}
	select {
	case err := <-crashes:
		t.Errorf("OnCrash called: %v", err)
	default:
	}
	if log := readFile(t, spec.Log); !strings.Contains(log, "dying: out of memory") {
		t.Errorf("log:\n%s", log)
	}
}

func TestLogRotatesAtStart(t *testing.T) {
	ctx := testCtx(t)
	// Each run prints its number and 2,000 bytes, more than MaxBytes, then exits.
	spec := script(t, "chatty", `
		n=$(cat "$DIR/count" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$DIR/count"
		echo "run $n"; head -c 2000 /dev/zero | tr '\0' x; echo`)
	spec.Ready = nil
	spec.Rotation = Rotation{MaxBytes: 1000, Backups: 2}
	p := newProcess(t, spec)
	for range 4 {
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		<-p.Done()
	}
	for path, want := range map[string]string{spec.Log: "run 4", spec.Log + ".1": "run 3", spec.Log + ".2": "run 2"} {
		got := readFile(t, path)
		if !strings.Contains(got, "\n"+want+"\n") || strings.Count(got, "\nrun ") != 1 {
			t.Errorf("%s holds %q, want only %q", path, firstLines(got), want)
		}
	}
	if _, err := os.Stat(spec.Log + ".3"); !os.IsNotExist(err) {
		t.Errorf("a third rotated file exists with Backups 2: %v", err)
	}
}

func firstLines(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

func TestDetached(t *testing.T) {
	ctx := testCtx(t)
	// No exec: the pid file records sh, which must stay the program of that pid.
	spec := script(t, "devserver", `echo "serving"; touch "$READY"; sleep 1000 & wait`)
	spec.PidFile = filepath.Join(spec.Dir, "devserver.pid")
	t.Cleanup(func() { _, _ = StopPidFile(context.Background(), spec.PidFile, nil, time.Second) })
	pid, err := StartDetached(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if sid, err := unix.Getsid(pid); err != nil || sid != pid {
		t.Errorf("session of pid %d = %d, %v; want a session of its own", pid, sid, err)
	}
	found, err := Inspect(spec.PidFile, nil)
	if err != nil || found.State != Running || found.Pid != pid {
		t.Fatalf("Inspect: %+v, %v; want running pid %d", found, err, pid)
	}
	if _, err := StartDetached(ctx, spec); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second StartDetached: %v, want already running", err)
	}
	found, err = StopPidFile(ctx, spec.PidFile, nil, 10*time.Second)
	if err != nil || found.State != Running {
		t.Fatalf("StopPidFile: %+v, %v", found, err)
	}
	waitVanished(t, pid)
	if _, err := os.Stat(spec.PidFile); !os.IsNotExist(err) {
		t.Errorf("pid file left after StopPidFile: %v", err)
	}
	if log := readFile(t, spec.Log); !strings.Contains(log, "serving") {
		t.Errorf("log:\n%s", log)
	}
}

func TestDetachedCrashLeavesItsPidFile(t *testing.T) {
	ctx := testCtx(t)
	spec := script(t, "devserver", `touch "$READY"; sleep 1000 & wait`)
	spec.PidFile = filepath.Join(spec.Dir, "devserver.pid")
	pid, err := StartDetached(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	// The whole group, as a crash of the server would take what it started.
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitVanished(t, pid)
	found, err := Inspect(spec.PidFile, nil)
	if err != nil || found.State != NotRunning || found.Pid != pid {
		t.Fatalf("Inspect after the crash: %+v, %v; want not running, pid %d", found, err, pid)
	}
}

func TestDetachedStartFailure(t *testing.T) {
	ctx := testCtx(t)
	spec := script(t, "devserver", `echo "Cannot lock file status" >&2; exit 76`)
	spec.PidFile = filepath.Join(spec.Dir, "devserver.pid")
	_, err := StartDetached(ctx, spec)
	if err == nil || !strings.Contains(err.Error(), "exit status 76") || !strings.Contains(err.Error(), "Cannot lock file") {
		t.Fatalf("StartDetached: %v", err)
	}
	if _, err := os.Stat(spec.PidFile); !os.IsNotExist(err) {
		t.Errorf("pid file left after a failed start: %v", err)
	}
}

// sleeper starts `sleep 1000` (argv as given) in its own process group, as an earlier run would
// have, and reaps it in the background.
func sleeper(t *testing.T, arg string) (pid int, done <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("sleep", arg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := make(chan struct{})
	go func() { _ = cmd.Wait(); close(c) }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-c })
	return cmd.Process.Pid, c
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestLeftovers(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}

	t.Run("recorded and running: stopped", func(t *testing.T) {
		pid, done := sleeper(t, "1000")
		path := filepath.Join(dir, "ours.pid")
		if err := WritePidFile(path, pid); err != nil {
			t.Fatal(err)
		}
		found, err := StopPidFile(ctx, path, nil, 10*time.Second)
		if err != nil || found.State != Running || found.Pid != pid {
			t.Fatalf("StopPidFile: %+v, %v", found, err)
		}
		<-done
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("pid file left: %v", err)
		}
	})

	t.Run("another command line: untouched", func(t *testing.T) {
		pid, done := sleeper(t, "1000")
		exe, _, err := observe(pid)
		if err != nil {
			t.Fatal(err)
		}
		// Same executable, another command line: a pid the kernel gave to another run.
		path := write("other-args.pid", fmt.Sprintf("%d\n%q\n%q\n%q\n", pid, exe, "sleep", "999"))
		found, err := StopPidFile(ctx, path, nil, 10*time.Second)
		if err != nil || found.State != NotRunning {
			t.Fatalf("StopPidFile: %+v, %v; want not running", found, err)
		}
		if isDone(done) || !alive(pid) {
			t.Fatal("a process with another command line was signalled")
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("stale pid file left: %v", err)
		}
	})

	t.Run("another executable: untouched", func(t *testing.T) {
		pid, done := sleeper(t, "1000")
		path := write("other-exe.pid", fmt.Sprintf("%d\n%q\n%q\n%q\n", pid, "/usr/bin/true", "sleep", "1000"))
		if found, _ := Inspect(path, nil); found.State != NotRunning {
			t.Fatalf("Inspect: %+v, want not running", found)
		}
		if _, err := StopPidFile(ctx, path, nil, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if isDone(done) {
			t.Fatal("a process running another executable was signalled")
		}
	})

	t.Run("pid only, as older scripts wrote", func(t *testing.T) {
		pid, done := sleeper(t, "1000")
		path := write("legacy.pid", fmt.Sprintf("%d\n", pid))
		if found, _ := Inspect(path, nil); found.State != NotRunning {
			t.Errorf("pid-only file without a legacy spec: %+v, want not running", found)
		}
		if found, _ := Inspect(path, &Spec{Path: "sleep", Args: []string{"999"}}); found.State != NotRunning {
			t.Errorf("pid-only file against another command line: %+v, want not running", found)
		}
		found, err := StopPidFile(ctx, path, &Spec{Path: "sleep", Args: []string{"1000"}}, 10*time.Second)
		if err != nil || found.State != Running {
			t.Fatalf("StopPidFile with the matching legacy spec: %+v, %v", found, err)
		}
		<-done
	})

	t.Run("dead pid and garbage", func(t *testing.T) {
		cmd := exec.Command("true")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		dead := write("dead.pid", fmt.Sprintf("%d\n", cmd.Process.Pid))
		junk := write("junk.pid", "x\n")
		for _, path := range []string{dead, junk} {
			found, err := StopPidFile(ctx, path, &Spec{Path: "true"}, time.Second)
			if err != nil || found.State != NotRunning {
				t.Errorf("%s: %+v, %v; want not running", path, found, err)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("%s left: %v", path, err)
			}
		}
		if found, err := Inspect(filepath.Join(dir, "absent.pid"), nil); err != nil || found.State != NoPidFile {
			t.Errorf("absent pid file: %+v, %v", found, err)
		}
	})

	t.Run("the caller itself", func(t *testing.T) {
		path := filepath.Join(dir, "self.pid")
		if err := WritePidFile(path, os.Getpid()); err != nil {
			t.Fatal(err)
		}
		if found, err := Inspect(path, nil); err != nil || found.State != Running || found.Pid != os.Getpid() {
			t.Errorf("Inspect of our own pid file: %+v, %v", found, err)
		}
	})
}

func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Tail(path, 3); got != "line 98\nline 99\nline 100" {
		t.Errorf("Tail = %q", got)
	}
	if got := Tail(filepath.Join(t.TempDir(), "absent"), 3); !strings.Contains(got, "no such file") {
		t.Errorf("Tail of a missing file = %q", got)
	}
}

func TestNewChecksTheSpec(t *testing.T) {
	for _, spec := range []Spec{{Path: "x", Log: "l"}, {Name: "n", Log: "l"}, {Name: "n", Path: "x"}} {
		if _, err := New(spec); err == nil {
			t.Errorf("New(%+v) accepted an incomplete spec", spec)
		}
	}
}

func TestStopPidFileEscalatesToSIGKILL(t *testing.T) {
	ctx := testCtx(t)
	spec := script(t, "stubborn", `trap '' TERM; touch "$READY"; while :; do sleep 1; done`)
	spec.PidFile = filepath.Join(spec.Dir, "stubborn.pid")
	pid, err := StartDetached(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	found, err := StopPidFile(ctx, spec.PidFile, nil, 200*time.Millisecond)
	if found.State != Running || !errors.Is(err, ErrKilledAfterGrace) {
		t.Fatalf("StopPidFile: %+v, %v; want running, killed after the grace", found, err)
	}
	waitVanished(t, pid)
	if _, err := os.Stat(spec.PidFile); !os.IsNotExist(err) {
		t.Errorf("pid file left: %v", err)
	}
}

func TestAwaitReady(t *testing.T) {
	ctx := testCtx(t)
	spec := script(t, "devserver", `touch "$READY"; sleep 1000 & wait`)
	spec.PidFile = filepath.Join(spec.Dir, "devserver.pid")
	if err := AwaitReady(ctx, spec); err == nil || !strings.Contains(err.Error(), "no pid file") {
		t.Errorf("AwaitReady without a process: %v", err)
	}
	started := spec
	started.Ready = nil // leaves the ready file for AwaitReady
	pid, err := StartDetached(ctx, started)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = StopPidFile(context.Background(), spec.PidFile, nil, time.Second) })
	if err := AwaitReady(ctx, spec); err != nil {
		t.Fatalf("AwaitReady of a ready process: %v", err)
	}
	// Not ready any more, then gone while being checked: AwaitReady says it exited.
	asked := make(chan struct{})
	spec.Ready = func(context.Context) error {
		select {
		case <-asked:
		default:
			close(asked)
		}
		return errors.New("not ready")
	}
	checked := make(chan error, 1)
	go func() { checked <- AwaitReady(ctx, spec) }()
	<-asked
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-checked; err == nil || !strings.Contains(err.Error(), "exited while being checked") {
		t.Errorf("AwaitReady of a process that dies: %v", err)
	}
}

// TestDieWithCaller: a child started with DieWithCaller is killed by the kernel when the process
// that started it ends. The caller here is a copy of this test binary, which starts the child,
// prints its pid and is then killed.
func TestDieWithCaller(t *testing.T) {
	if os.Getenv("PROC_TEST_CALLER") == "1" {
		// exec: Pdeathsig reaches the child alone, not what it starts.
		spec := script(t, "orphan", `touch "$READY"; exec sleep 1000`)
		spec.DieWithCaller = true
		p, err := New(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("child pid %d\n", p.Pid())
		select {} // until killed
	}
	ctx := testCtx(t)
	caller := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDieWithCaller$")
	caller.Env = append(os.Environ(), "PROC_TEST_CALLER=1")
	out, err := caller.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := caller.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Fscanf(out, "child pid %d\n", &pid); err != nil {
		_ = caller.Process.Kill()
		t.Fatalf("read the child's pid: %v", err)
	}
	if !alive(pid) {
		t.Fatalf("child %d not running while its caller runs", pid)
	}
	_ = caller.Process.Kill()
	_ = caller.Wait()
	waitVanished(t, pid)
}

// listenerEnv names the ports a copy of this test binary listens on when it runs as
// TestStartOnFreePortsWhenAPortIsTaken's child.
const listenerEnv = "PROC_TEST_LISTEN"

// listen is the child's part: bind every port of $PROC_TEST_LISTEN (a bind that fails ends it
// with Go's error, "… bind: address already in use"), then answer 200 on the first until killed.
func listen(t *testing.T, ports string) {
	var lns []net.Listener
	for _, p := range strings.Split(ports, ",") {
		l, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		lns = append(lns, l)
	}
	fmt.Println("listening on", ports)
	t.Fatal(http.Serve(lns[0], http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
}

// listenerSpec runs a copy of this test binary as a child that listens on ports, ready once the
// first answers.
func listenerSpec(dir string, ports []int) Spec {
	list := make([]string, len(ports))
	for i, p := range ports {
		list[i] = strconv.Itoa(p)
	}
	return Spec{
		Name: "listener", Path: os.Args[0], Args: []string{"-test.run=^TestStartOnFreePortsWhenAPortIsTaken$"},
		Env: []string{listenerEnv + "=" + strings.Join(list, ",")}, Log: filepath.Join(dir, "listener.log"),
		Ready: HTTPReady(fmt.Sprintf("http://127.0.0.1:%d/", ports[0])), DieWithCaller: true,
	}
}

// TestStartOnFreePortsWhenAPortIsTaken: another process binds one of the ports picked for a
// child between the pick and the child's start (as a busy machine's outgoing connections or
// another test's servers do); the child's failed bind is recognised (ErrAddrInUse, from its
// log) and it comes up on fresh ports.
func TestStartOnFreePortsWhenAPortIsTaken(t *testing.T) {
	if ports := os.Getenv(listenerEnv); ports != "" {
		listen(t, ports)
		return
	}
	ctx := testCtx(t)
	dir := t.TempDir()
	var taken net.Listener
	var takenPort int
	attempts := 0
	p, ports, err := StartOnFreePorts(ctx, 2, func(ports []int) (Spec, error) {
		attempts++
		if taken == nil {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ports[1]))
			if err != nil {
				// Taken already by someone else: the child fails on it all the same.
				return listenerSpec(dir, ports), nil
			}
			taken, takenPort = l, ports[1]
			t.Cleanup(func() { _ = l.Close() })
		}
		return listenerSpec(dir, ports), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill(context.Background()) })
	if attempts < 2 || slices.Contains(ports, takenPort) {
		t.Errorf("started on ports %v after %d attempts; want a second attempt without the taken port %d", ports, attempts, takenPort)
	}
	if err := HTTPReady(fmt.Sprintf("http://127.0.0.1:%d/", ports[0]))(ctx); err != nil || !p.Running() {
		t.Errorf("the child on its fresh ports: running %t, %v", p.Running(), err)
	}
	if log := readFile(t, filepath.Join(dir, "listener.log")); !strings.Contains(log, "address already in use") {
		t.Errorf("the first child's failure is not in its log:\n%s", log)
	}

	// Start alone says what happened; a child failing for another reason is not mistaken for it.
	q := newProcess(t, listenerSpec(t.TempDir(), []int{takenPort}))
	if err := q.Start(ctx); !errors.Is(err, ErrAddrInUse) {
		t.Errorf("start on a taken port: %v, want ErrAddrInUse", err)
	}
	other := script(t, "fails", `echo "no config"; exit 3`)
	other.Ready = func(context.Context) error { return errors.New("not ready") }
	if err := newProcess(t, other).Start(ctx); err == nil || errors.Is(err, ErrAddrInUse) {
		t.Errorf("start of a child that fails otherwise: %v, want an error that is not ErrAddrInUse", err)
	}
}
