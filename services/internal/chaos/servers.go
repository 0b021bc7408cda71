package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Server is one private broker or database process of the chaos run (nats-server or the
// ClickHouse launcher) on fixed loopback ports with its data under the run's directory. Its ports
// and data survive Stop and Start, so the run can take it away and bring it back as an outage
// would, without touching the shared dev servers.
type Server struct {
	Name    string
	Path    string
	Args    []string
	Log     string
	Ready   func(ctx context.Context) error
	Timeout time.Duration // how long Start waits for Ready

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	down   bool // stopped on purpose (Stop or Kill) and not started since
}

// Crashed reports whether the server's process has exited although nobody stopped it.
func (s *Server) Crashed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exited != nil && !s.down && !s.runningLocked()
}

// NATSServer returns a nats-server with JetStream on 127.0.0.1:port (monitoring on
// monitorPort), its store under dir. The server allows payloads up to maxPayloadBytes, so
// oversize events reach the consumer (which refuses them) instead of being refused by the
// broker at the publisher.
func NATSServer(bin, dir string, port, monitorPort int, maxPayloadBytes int) (*Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create NATS directory: %w", err)
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("max_payload: %d\n", maxPayloadBytes)), 0o644); err != nil {
		return nil, fmt.Errorf("write NATS config: %w", err)
	}
	return &Server{
		Name: "nats-server", Path: bin, Log: filepath.Join(dir, "nats-server.log"), Timeout: 60 * time.Second,
		Args: []string{"-c", conf, "--addr", "127.0.0.1", "--port", strconv.Itoa(port),
			"--http_port", strconv.Itoa(monitorPort), "--jetstream", "--store_dir", filepath.Join(dir, "jetstream"),
			"--server_name", "chaos-" + strconv.Itoa(port)},
		Ready: func(ctx context.Context) error {
			_, err := httpGet(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz?js-enabled-only=true", monitorPort))
			return err
		},
	}, nil
}

// ClickHouseServer returns the ClickHouse engine of libchdb run by the chlaunch launcher on
// 127.0.0.1:tcpPort (native) and httpPort, its data under dir.
func ClickHouseServer(launcher, lib, dir string, tcpPort, httpPort int) (*Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create ClickHouse directory: %w", err)
	}
	// Without a <logger> section the engine logs nothing, and a crash (its fatal-signal report
	// names the signal, the query and the stack) would leave no trace.
	conf := filepath.Join(dir, "config.xml")
	xml := fmt.Sprintf("<clickhouse>\n    <logger>\n        <log>%s</log>\n        <errorlog>%s</errorlog>\n        <size>20M</size>\n        <count>2</count>\n    </logger>\n</clickhouse>\n",
		filepath.Join(dir, "clickhouse-server.log"), filepath.Join(dir, "clickhouse-server.err.log"))
	if err := os.WriteFile(conf, []byte(xml), 0o644); err != nil {
		return nil, fmt.Errorf("write ClickHouse config: %w", err)
	}
	return &Server{
		Name: "clickhouse", Path: launcher, Log: filepath.Join(dir, "clickhouse.log"), Timeout: 60 * time.Second,
		Args: []string{"--lib", lib, "--path", filepath.Join(dir, "data"), "--tcp-port", strconv.Itoa(tcpPort),
			"--http-port", strconv.Itoa(httpPort), "--listen-host", "127.0.0.1", "--config", conf, "--log-level", "warning"},
		Ready: func(ctx context.Context) error {
			body, err := httpGet(ctx, fmt.Sprintf("http://127.0.0.1:%d/?query=SELECT%%201", httpPort))
			if err != nil {
				return err
			}
			if got := strings.TrimSpace(body); got != "1" {
				return fmt.Errorf("SELECT 1 answered %q", got)
			}
			return nil
		},
	}, nil
}

// Start runs the server in its own process group and waits until Ready answers; it fails with
// the log's tail when the process exits first or is not ready within Timeout.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runningLocked() {
		return fmt.Errorf("start %s: already running (pid %d)", s.Name, s.cmd.Process.Pid)
	}
	f, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", s.Name, err)
	}
	fmt.Fprintf(f, "=== chaos start %s\n", time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	f.Close()
	if err != nil {
		return fmt.Errorf("start %s: %w", s.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited, s.down = cmd, exited, false
	deadline := time.Now().Add(s.Timeout)
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := s.Ready(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("start %s: exited before it was ready (%s); its log %s ends:\n%s", s.Name, cmd.ProcessState, s.Log, tail(s.Log, 20))
		case <-ctx.Done():
			s.killLocked()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.killLocked()
			return fmt.Errorf("start %s: not ready after %s: %v; its log %s ends:\n%s", s.Name, s.Timeout, err, s.Log, tail(s.Log, 20))
		}
	}
}

// Stop sends SIGTERM to the server's process group and waits for it to exit, with SIGKILL after
// 15 s. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = true
	if !s.runningLocked() {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		s.killLocked()
	}
}

// Kill ends the server with SIGKILL and waits for it.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = true
	if s.runningLocked() {
		s.killLocked()
	}
}

func (s *Server) killLocked() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
}

func (s *Server) runningLocked() bool {
	if s.exited == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

func httpGet(ctx context.Context, rawURL string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return "", err
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(resp.Status + ": " + strings.TrimSpace(string(body)))
	}
	return string(body), nil
}

// tail returns the last n lines of the file at path, indented.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "    (" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}
