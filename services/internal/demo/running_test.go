package demo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestRunningDriver: a second demo must see a live driver started from the demo's bin directory,
// and not mistake itself, a dead pid or another program for one.
func TestRunningDriver(t *testing.T) {
	dir := t.TempDir()
	pids, bin := filepath.Join(dir, "pids"), filepath.Join(dir, "bin")
	for _, d := range []string{pids, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(pid int) {
		if err := os.WriteFile(filepath.Join(pids, DriverPidFile), []byte(fmt.Sprintln(pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	start := func(path string) *exec.Cmd {
		cmd := exec.Command(path, "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := RunningDriver(pids, bin); ok {
		t.Error("no pid file, yet a running driver")
	}
	write(os.Getpid())
	if _, ok := RunningDriver(pids, bin); ok {
		t.Error("took itself for another driver")
	}
	write(start(sleep).Process.Pid)
	if _, ok := RunningDriver(pids, bin); ok {
		t.Error("took a program outside the bin directory for the driver")
	}
	raw, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(bin, "demo")
	if err := os.WriteFile(copied, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	driver := start(copied)
	write(driver.Process.Pid)
	if pid, ok := RunningDriver(pids, bin); !ok || pid != driver.Process.Pid {
		t.Errorf("live driver not seen: %d %v", pid, ok)
	}
}
