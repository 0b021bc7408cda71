package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Private servers for fault tests: each StartNATS/StartClickHouse call runs its own server process on
// ephemeral loopback ports with its own data directory under t.TempDir(), so a test can stop, kill and
// restart it without disturbing the shared servers that other tests use. The binaries are the ones
// scripts/dev-services installs under .cache/ at the repository root.

const (
	// procReadyTimeout bounds how long Start waits for a server to answer; a cold start takes well under
	// a second, the margin is for a loaded 2-core machine.
	procReadyTimeout = 60 * time.Second
	// procStopTimeout bounds how long Stop waits after SIGTERM before it sends SIGKILL.
	procStopTimeout = 15 * time.Second
	// procLogTailLines is how much of a server's log a failure message shows.
	procLogTailLines = 30
)

// NATSServer is a private nats-server process with JetStream enabled, listening on 127.0.0.1.
// Its port and JetStream store directory stay the same across Stop/Kill and Start, so streams and
// acknowledged messages survive a restart. Methods that start or stop the process call t.Fatal on
// failure and must run on the test's goroutine.
type NATSServer struct {
	proc        *serverProcess
	port        int
	monitorPort int
	storeDir    string
}

// StartNATS starts a private nats-server (the .cache/bin/nats-server that scripts/dev-services builds)
// with JetStream, on two free loopback ports (client and monitoring), with its store under t.TempDir().
// It returns once /healthz?js-enabled-only=true answers 200. The server is killed when the test ends.
func StartNATS(t testing.TB) *NATSServer {
	t.Helper()
	root := procRepoRootOrFatal(t)
	bin := filepath.Join(root, ".cache", "bin", "nats-server")
	procRequireFile(t, bin)
	dir := t.TempDir()
	s := &NATSServer{
		port:        procFreePort(t),
		monitorPort: procFreePort(t),
		storeDir:    filepath.Join(dir, "jetstream"),
	}
	s.proc = &serverProcess{
		t:    t,
		name: "nats-server",
		path: bin,
		args: []string{
			"--addr", "127.0.0.1",
			"--port", strconv.Itoa(s.port),
			"--http_port", strconv.Itoa(s.monitorPort),
			"--jetstream",
			"--store_dir", s.storeDir,
			"--server_name", "testenv-" + strconv.Itoa(s.port),
		},
		logPath: filepath.Join(dir, "nats-server.log"),
		ready: func(ctx context.Context) error {
			_, err := procHTTPGet(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz?js-enabled-only=true", s.monitorPort))
			return err
		},
	}
	t.Cleanup(s.proc.cleanup)
	s.proc.start()
	return s
}

// URL is the client URL, nats://127.0.0.1:<port>; it stays valid across restarts.
func (s *NATSServer) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// StoreDir is the JetStream store directory; it survives Stop, Kill and Start.
func (s *NATSServer) StoreDir() string { return s.storeDir }

// Start restarts a stopped server on the same port with the same store and waits until it is healthy.
func (s *NATSServer) Start() { s.proc.t.Helper(); s.proc.start() }

// Stop sends SIGTERM (nats-server then shuts down cleanly) and waits for the process to exit,
// escalating to SIGKILL after 15 s. Stopping a stopped server does nothing.
func (s *NATSServer) Stop() { s.proc.t.Helper(); s.proc.stop(syscall.SIGTERM) }

// Kill sends SIGKILL, as a crash would, and waits for the process to exit.
func (s *NATSServer) Kill() { s.proc.t.Helper(); s.proc.stop(syscall.SIGKILL) }

// ClickHouseServer is a private ClickHouse server process (the engine in libchdb.so, run by
// .cache/bin/chlaunch) listening on 127.0.0.1. Its ports and data path stay the same across Stop/Kill
// and Start, so tables and acknowledged inserts survive a restart. Methods that start or stop the
// process call t.Fatal on failure and must run on the test's goroutine.
type ClickHouseServer struct {
	proc      *serverProcess
	tcpPort   int
	httpPort  int
	dataDir   string
	engineLog string
}

// chEngineLogSize bounds each of the engine's log files; one rotated file of each is kept.
const chEngineLogSize = "10M"

// chEngineConfig is the engine config of a private server: only a <logger> section, because
// without one the engine logs nothing and a crash (its report names the signal, the query and the
// stack) leaves no trace. errorlog gets warnings and worse, log everything at information.
func chEngineConfig(engineLog, errorLog string) string {
	return "<clickhouse>\n  <logger>\n" +
		"    <log>" + engineLog + "</log>\n" +
		"    <errorlog>" + errorLog + "</errorlog>\n" +
		"    <size>" + chEngineLogSize + "</size>\n" +
		"    <count>1</count>\n" +
		"  </logger>\n</clickhouse>\n"
}

// StartClickHouse starts a private ClickHouse server on two free loopback ports (native and HTTP)
// with its data under t.TempDir(). It returns once HTTP `SELECT 1` answers 1. The server is killed when
// the test ends. The engine's own log is [ClickHouseServer.EngineLog]; when the test fails, the tails
// of the launcher's output and of the engine's error log are shown.
func StartClickHouse(t testing.TB) *ClickHouseServer {
	t.Helper()
	root := procRepoRootOrFatal(t)
	bin := filepath.Join(root, ".cache", "bin", "chlaunch")
	lib := filepath.Join(root, ".cache", "chdb", "node_modules", "@chdb", "lib-linux-x64-gnu", "libchdb.so")
	procRequireFile(t, bin)
	procRequireFile(t, lib)
	dir := t.TempDir()
	s := &ClickHouseServer{
		tcpPort:   procFreePort(t),
		httpPort:  procFreePort(t),
		dataDir:   filepath.Join(dir, "data"),
		engineLog: filepath.Join(dir, "clickhouse-server.log"),
	}
	errorLog := filepath.Join(dir, "clickhouse-server.err.log")
	configPath := filepath.Join(dir, "config.xml")
	if err := os.WriteFile(configPath, []byte(chEngineConfig(s.engineLog, errorLog)), 0o600); err != nil {
		t.Fatalf("write ClickHouse config: %v", err)
	}
	s.proc = &serverProcess{
		t:    t,
		name: "clickhouse",
		path: bin,
		args: []string{
			"--lib", lib,
			"--path", s.dataDir,
			"--tcp-port", strconv.Itoa(s.tcpPort),
			"--http-port", strconv.Itoa(s.httpPort),
			"--listen-host", "127.0.0.1",
			"--config", configPath,
			"--log-level", "information",
		},
		logPath:   filepath.Join(dir, "clickhouse.log"),
		extraLogs: []string{errorLog},
		ready: func(ctx context.Context) error {
			body, err := procHTTPGet(ctx, s.HTTPURL()+"/?query=SELECT%201")
			if err != nil {
				return err
			}
			if got := strings.TrimSpace(body); got != "1" {
				return fmt.Errorf("SELECT 1 answered %q", got)
			}
			return nil
		},
	}
	t.Cleanup(s.proc.cleanup)
	s.proc.start()
	return s
}

// Addr is the native protocol address, 127.0.0.1:<port>, for clickhouse-go.
func (s *ClickHouseServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.tcpPort) }

// HTTPURL is the HTTP interface's base URL, http://127.0.0.1:<port>, without a trailing slash.
func (s *ClickHouseServer) HTTPURL() string { return "http://127.0.0.1:" + strconv.Itoa(s.httpPort) }

// DataDir is the server's data path; it survives Stop, Kill and Start.
func (s *ClickHouseServer) DataDir() string { return s.dataDir }

// EngineLog is the engine's own log at level information (rotated at 10 MB), beside the data
// path; a crash report (signal, query, stack) lands here and in the error log next to it.
func (s *ClickHouseServer) EngineLog() string { return s.engineLog }

// Start restarts a stopped server on the same ports and data path and waits until `SELECT 1` answers.
func (s *ClickHouseServer) Start() { s.proc.t.Helper(); s.proc.start() }

// Stop sends SIGTERM and waits for the process to exit. The launcher exits at once on SIGTERM without
// the engine's graceful cancel; acknowledged inserts are already on disk. Stopping a stopped server does
// nothing.
func (s *ClickHouseServer) Stop() { s.proc.t.Helper(); s.proc.stop(syscall.SIGTERM) }

// Kill sends SIGKILL, as a crash would, and waits for the process to exit.
func (s *ClickHouseServer) Kill() { s.proc.t.Helper(); s.proc.stop(syscall.SIGKILL) }

// serverProcess runs one server binary in its own process group with output appended to logPath.
// Failure messages show the tail of logPath and of each of extraLogs (files the server itself
// writes) that exists.
type serverProcess struct {
	t         testing.TB
	name      string
	path      string
	args      []string
	logPath   string
	extraLogs []string
	ready     func(ctx context.Context) error

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait returned; nil while no process was started
}

func (p *serverProcess) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runningLocked() {
		p.t.Fatalf("start %s: already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatalf("start %s: open log: %v", p.name, err)
	}
	fmt.Fprintf(logFile, "=== testenv start %s\n", time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Own process group: signals go to the server alone, never to `go test`, and the whole group can be
	// signalled.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	// The child holds its own copy of the descriptor.
	logFile.Close()
	if err != nil {
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	exited := make(chan struct{})
	go func() {
		// The exit status is not interesting: a stopped server exits by signal, and a server that failed
		// to start is reported with its log below.
		_ = cmd.Wait()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited

	ctx, cancel := context.WithTimeout(context.Background(), procReadyTimeout)
	defer cancel()
	var lastErr error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		lastErr = p.ready(attempt)
		cancelAttempt()
		if lastErr == nil {
			return
		}
		select {
		case <-exited:
			p.t.Fatalf("start %s: exited before it was ready (%s)\n%s", p.name, cmd.ProcessState, p.logTail())
		case <-ctx.Done():
			p.signalLocked(syscall.SIGKILL)
			<-exited
			p.t.Fatalf("start %s: not ready after %s: %v\n%s", p.name, procReadyTimeout, lastErr, p.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *serverProcess) stop(sig syscall.Signal) {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return
	}
	p.signalLocked(sig)
	select {
	case <-p.exited:
		return
	case <-time.After(procStopTimeout):
	}
	p.signalLocked(syscall.SIGKILL)
	select {
	case <-p.exited:
		p.t.Errorf("stop %s: ignored %s for %s, killed it", p.name, sig, procStopTimeout)
	case <-time.After(procStopTimeout):
		p.t.Fatalf("stop %s: pid %d still running %s after SIGKILL", p.name, p.cmd.Process.Pid, procStopTimeout)
	}
}

// cleanup kills the server at the end of the test (a clean shutdown is no use to a discarded
// TempDir) and shows the log tail when the test failed.
func (p *serverProcess) cleanup() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runningLocked() {
		p.signalLocked(syscall.SIGKILL)
		<-p.exited
	}
	if p.t.Failed() && p.exited != nil {
		p.t.Logf("%s log (%s):\n%s", p.name, p.logPath, p.logTail())
	}
}

func (p *serverProcess) runningLocked() bool {
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *serverProcess) signalLocked(sig syscall.Signal) {
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.t.Errorf("signal %s process group %d with %s: %v", p.name, pid, sig, err)
	}
}

func (p *serverProcess) logTail() string {
	tail := fileTail(p.logPath)
	for _, path := range p.extraLogs {
		if _, err := os.Stat(path); err != nil {
			continue
		}
		tail += fmt.Sprintf("\n--- %s:\n%s", path, fileTail(path))
	}
	return tail
}

// fileTail returns the last procLogTailLines lines of path, or why it could not be read.
func fileTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > procLogTailLines {
		lines = lines[len(lines)-procLogTailLines:]
	}
	return strings.Join(lines, "\n")
}

// repoRoot returns the directory holding the module's go.mod, found by walking up from the working
// directory (go test runs each package in its own directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.mod above the working directory")
		}
		dir = parent
	}
}

func procRepoRootOrFatal(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// procRequireFile ends the test through Unavailable when a server binary is missing, like an
// unreachable shared server: a failure under SERVESCOPE_REQUIRE_INTEGRATION=1, a skip otherwise.
func procRequireFile(t testing.TB, path string) {
	t.Helper()
	_, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		Unavailable(t, "%s is missing", path)
	case err != nil:
		Unavailable(t, "%v", err)
	}
}

// procFreePort returns a loopback TCP port that was free a moment ago. The kernel does not hand the
// same ephemeral port out again soon, which is what makes the short gap before the server binds safe
// in practice.
func procFreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// procHTTPGet returns the body of a 200 answer to a GET of rawURL.
func procHTTPGet(ctx context.Context, rawURL string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return "", fmt.Errorf("build request for %s: %w", rawURL, err)
	}
	// No keep-alive: a pooled connection to a server that was since killed would fail the next poll.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("read answer of GET %s: %w", rawURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", rawURL, resp.Status, bytes.TrimSpace(body))
	}
	return string(body), nil
}
