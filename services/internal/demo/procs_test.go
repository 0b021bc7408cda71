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
	"testing"
	"time"
)

// sleeper copies the system's sleep into a fresh bin directory, as the demo's binaries are.
func sleeper(t *testing.T) (binDir string) {
	t.Helper()
	src, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("sleep not found: %v", err)
	}
	binDir = t.TempDir()
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(binDir, "sleep"), raw, 0o755); err != nil {
		t.Fatal(err)
	}
	return binDir
}

func TestProcsStartStop(t *testing.T) {
	bin := sleeper(t)
	ps := &Procs{BinDir: bin, LogDir: t.TempDir(), PidDir: t.TempDir(), Exited: make(chan *Proc, 4)}
	long, err := ps.Start("long", "sleep", []string{"60"}, map[string]string{"X": "1"})
	if err != nil {
		t.Fatal(err)
	}
	short, err := ps.Start("short", "sleep", []string{"0.1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-ps.Exited:
		if p != short {
			t.Errorf("exited %s, want short", p.Name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the short process's exit was not reported")
	}
	if _, err := os.Stat(filepath.Join(ps.PidDir, "long.pid")); err != nil {
		t.Errorf("pid file of a running process: %v", err)
	}
	ps.StopAll(5 * time.Second)
	select {
	case <-long.Done():
	default:
		t.Fatal("StopAll returned with the long process running")
	}
	select {
	case p := <-ps.Exited:
		t.Errorf("%s reported as unexpected after Stop", p.Name)
	default:
	}
	if _, err := os.Stat(filepath.Join(ps.PidDir, "long.pid")); !os.IsNotExist(err) {
		t.Errorf("pid file left after Stop: %v", err)
	}
}

func TestStopStale(t *testing.T) {
	bin := sleeper(t)
	pids := t.TempDir()
	// A process of ours, left by a driver that died.
	cmd := exec.Command(filepath.Join(bin, "sleep"), "60")
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	if err := os.WriteFile(filepath.Join(pids, "svc.pid"), []byte(fmt.Sprintln(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A pid that is not ours (this test) and garbage must be left alone.
	if err := os.WriteFile(filepath.Join(pids, "other.pid"), []byte(fmt.Sprintln(os.Getppid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pids, "junk.pid"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	names, err := StopStale(context.Background(), pids, bin, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "svc" {
		t.Errorf("stopped %v, want [svc]", names)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stale process still runs")
	}
	left, _ := os.ReadDir(pids)
	if len(left) != 0 {
		t.Errorf("pid files left: %v", left)
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
	if got := len(ps.List()); got != 9 {
		t.Errorf("%d ports listed, want 9", got)
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
