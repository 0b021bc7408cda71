package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/proc"
)

// script writes an executable shell script into binDir, as the demo's binaries are built there.
func script(t *testing.T, binDir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(binDir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// healthServer returns the URL of a server answering 200, as a healthy service's /health.
func healthServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestProcs(t *testing.T) {
	ctx := context.Background()
	bin := t.TempDir()
	// No exec: the pid file records sh, which must stay the program of its pid.
	script(t, bin, "svc", `echo "svc $MODE"; sleep 1000 & wait`)
	script(t, bin, "flaky", `echo "flaky starting"; read x < "$TRIGGER"; echo "flaky dies"; exit 2`)
	fifo := filepath.Join(t.TempDir(), "trigger")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ps := &Procs{BinDir: bin, LogDir: t.TempDir(), PidDir: t.TempDir(), Exited: make(chan error, 4)}
	t.Cleanup(func() { _ = ps.StopAll(ctx) })
	health := healthServer(t)
	long, err := ps.Start(ctx, Service{Name: "long", Bin: "svc", Env: map[string]string{"MODE": "steady"}, Health: health}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	flaky, err := ps.Start(ctx, Service{Name: "flaky", Bin: "flaky", Env: map[string]string{"TRIGGER": fifo}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"long", "flaky"} {
		if found, err := proc.Inspect(filepath.Join(ps.PidDir, name+".pid"), nil); err != nil || found.State != proc.Running {
			t.Errorf("pid file of %s: %+v, %v", name, found, err)
		}
	}
	// flaky dies on its own: its exit is reported, with its log.
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	crash := <-ps.Exited
	if msg := crash.Error(); !strings.Contains(msg, "flaky") || !strings.Contains(msg, "exit status 2") || !strings.Contains(msg, "flaky dies") {
		t.Errorf("crash report: %v", crash)
	}
	<-flaky.Done()

	if err := ps.StopAll(ctx); err != nil {
		t.Fatal(err)
	}
	if long.Running() {
		t.Fatal("StopAll returned with the long process running")
	}
	select {
	case err := <-ps.Exited:
		t.Errorf("reported as unexpected after StopAll: %v", err)
	default:
	}
	if log, _ := os.ReadFile(long.Log); !strings.Contains(string(log), "svc steady") {
		t.Errorf("log of long:\n%s", log)
	}
	if left, _ := os.ReadDir(ps.PidDir); len(left) != 0 {
		t.Errorf("pid files left: %v", left)
	}
}

func TestProcsStartFails(t *testing.T) {
	ctx := context.Background()
	bin := t.TempDir()
	script(t, bin, "broken", `echo "listen 127.0.0.1:1: address already in use" >&2; exit 1`)
	ps := &Procs{BinDir: bin, LogDir: t.TempDir(), PidDir: t.TempDir()}
	_, err := ps.Start(ctx, Service{Name: "broken", Bin: "broken", Health: "http://127.0.0.1:1/health"}, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start: %v, want the failure with its log", err)
	}
}

// TestStopStale: a stack whose driver died is stopped from its pid files; pid files naming
// anything else (another program, a dead pid, garbage) are removed without a signal.
func TestStopStale(t *testing.T) {
	ctx := context.Background()
	bin := t.TempDir()
	script(t, bin, "svc", `sleep 1000 & wait`)
	ps := &Procs{BinDir: bin, LogDir: t.TempDir(), PidDir: t.TempDir()}
	left, err := ps.Start(ctx, Service{Name: "svc", Bin: "svc"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = left.Kill(ctx) })
	// Another program, under a pid file that names it with a made-up command line.
	other := exec.Command("sleep", "1000")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", other.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ps.PidDir, "other.pid"), []byte(fmt.Sprintf("%d\n%q\n%q\n", other.Process.Pid, exe, "sleep")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ps.PidDir, "junk.pid"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	names, err := StopStale(ctx, ps.PidDir, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "svc" {
		t.Errorf("stopped %v, want [svc]", names)
	}
	<-left.Done()
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", other.Process.Pid)); err != nil || strings.Contains(string(stat), ") Z ") {
		t.Error("another program was signalled")
	}
	if files, _ := os.ReadDir(ps.PidDir); len(files) != 0 {
		t.Errorf("pid files left: %v", files)
	}
}

// TestRunningDriver: a second demo must see a live driver, and not mistake itself, a dead pid or
// another program reusing the pid for one.
func TestRunningDriver(t *testing.T) {
	pids := t.TempDir()
	if _, ok := RunningDriver(pids); ok {
		t.Error("no pid file, yet a running driver")
	}
	if err := WriteDriverPidFile(pids); err != nil {
		t.Fatal(err)
	}
	if _, ok := RunningDriver(pids); ok {
		t.Error("took itself for another driver")
	}
	driver := exec.Command("sleep", "1000")
	if err := driver.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = driver.Process.Kill(); _ = driver.Wait() })
	path := filepath.Join(pids, DriverPidFile)
	if err := proc.WritePidFile(path, driver.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if pid, ok := RunningDriver(pids); !ok || pid != driver.Process.Pid {
		t.Errorf("live driver not seen: %d %v", pid, ok)
	}
	// The same pid with another recorded command line is not the driver.
	if err := os.WriteFile(path, []byte(fmt.Sprintf("%d\n%q\n%q\n", driver.Process.Pid, "/usr/bin/sleep", "demo")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := RunningDriver(pids); ok {
		t.Error("took a program with another command line for the driver")
	}
	_ = driver.Process.Kill()
	_ = driver.Wait()
	if err := os.WriteFile(path, []byte(fmt.Sprintln(driver.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := RunningDriver(pids); ok {
		t.Error("took a dead pid for the driver")
	}
}

func TestPortsCheckFree(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	ps := PortsFrom(taken - 3) // the webhook port is base+3
	err = ps.CheckFree()
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("port %d (webhook receiver", taken)) {
		t.Errorf("CheckFree with port %d taken: %v", taken, err)
	}
	if got := len(ps.List()); got != 10 {
		t.Errorf("%d ports listed, want 10", got)
	}
}

func TestDrainingClient(t *testing.T) {
	// The server notices a client that closes before the body's end: the write of the tail fails.
	finished := make(chan bool, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fl := w.(http.Flusher)
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		fl.Flush()
		// The server cancels the request's context when its client closes the connection.
		time.Sleep(200 * time.Millisecond)
		finished <- r.Context().Err() == nil
		_, _ = io.WriteString(w, "\n")
	}))
	defer srv.Close()
	resp, err := LoadClient().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 14)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatal(err)
	}
	if ok := <-finished; !ok {
		t.Error("the server saw the client leave before the response ended")
	}
}
