package service_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/servescope/servescope/internal/service"
)

// TestMain lets tests run a real process built on the package: with SERVESCOPE_SERVICE_TEST_CHILD
// set, the test binary runs that child program instead of the tests.
func TestMain(m *testing.M) {
	switch os.Getenv("SERVESCOPE_SERVICE_TEST_CHILD") {
	case "":
		os.Exit(m.Run())
	case "ordered":
		orderedChild()
	case "stuck":
		stuckChild()
	}
}

// orderedChild is a service of three parts that says when it is up and when each part stopped.
func orderedChild() {
	c := service.NewCommand("ordered", "")
	c.Run = func(ctx context.Context, log *slog.Logger, _ []string) error {
		g := service.NewGroup(log)
		g.AddContext("intake", func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(50 * time.Millisecond) // a drain that takes a while
			fmt.Println("stopped intake")
			return nil
		})
		g.AddStop("publisher", func() { fmt.Println("stopped publisher") })
		g.AddStop("nats", func() { fmt.Println("stopped nats") })
		fmt.Println("up")
		return g.Run(ctx)
	}
	c.Main()
}

// stuckChild is a service whose stop never ends.
func stuckChild() {
	c := service.NewCommand("stuck", "")
	c.Run = func(ctx context.Context, log *slog.Logger, _ []string) error {
		g := service.NewGroup(log)
		g.AddStop("stuck", func() {
			fmt.Println("stopping")
			select {}
		})
		fmt.Println("up")
		return g.Run(ctx)
	}
	c.Main()
}

// startChild runs the test binary as child program name and returns it once it printed "up".
func startChild(t *testing.T, name string) (*exec.Cmd, *bufio.Scanner, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0]) // no arguments: the child parses its own flags
	cmd.Env = append(os.Environ(), "SERVESCOPE_SERVICE_TEST_CHILD="+name, "SERVESCOPE_LOG_FORMAT=json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "up" {
		t.Fatalf("child %s did not start: %q\n%s", name, sc.Text(), stderr.String())
	}
	return cmd, sc, &stderr
}

// SIGTERM stops a service's parts in their order and exits 0, the log saying why.
func TestSignalStopsInOrder(t *testing.T) {
	cmd, sc, stderr := startChild(t, "ordered")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	err := cmd.Wait()
	if err != nil {
		t.Fatalf("child after SIGTERM: %v\n%s", err, stderr)
	}
	if got := strings.Join(lines, ","); got != "stopped intake,stopped publisher,stopped nats" {
		t.Fatalf("stop order %q", got)
	}
	if !strings.Contains(stderr.String(), `"msg":"stopping","reason":"terminated signal received"`) {
		t.Fatalf("log does not say why it stopped:\n%s", stderr)
	}
}

// A second signal ends a stop that takes too long.
func TestSecondSignalEndsTheProcess(t *testing.T) {
	cmd, sc, stderr := startChild(t, "stuck")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !sc.Scan() || sc.Text() != "stopping" {
		t.Fatalf("child did not begin stopping: %q\n%s", sc.Text(), stderr)
	}
	// Signal handling is restored right after the first signal's cancellation: retry until the
	// default action ends the process.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
				t.Fatalf("child ended with %v, want killed by SIGTERM", err)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func newCommand(run func(ctx context.Context, log *slog.Logger, args []string) error) (*service.Command, *bytes.Buffer, *bytes.Buffer) {
	c := service.NewCommand("tool", "Usage: tool [flags] ARG")
	c.Flags.Bool("dry-run", false, "only say what would be done")
	c.Run = run
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	return c, &stdout, &stderr
}

func TestCommandVersionAndHelp(t *testing.T) {
	c, stdout, stderr := newCommand(func(context.Context, *slog.Logger, []string) error {
		return errors.New("ran")
	})
	if code := c.Execute(context.Background(), []string{"--version"}); code != 0 ||
		!strings.HasPrefix(stdout.String(), "tool, version ") || !strings.Contains(stdout.String(), "go version:") {
		t.Fatalf("--version: %d %q", code, stdout)
	}
	c, _, stderr = newCommand(nil)
	if code := c.Execute(context.Background(), []string{"--help"}); code != 0 {
		t.Fatalf("--help: exit status %d", code)
	}
	for _, want := range []string{"Usage: tool [flags] ARG", "-log.level", "-log.format", "-version", "-dry-run", service.EnvLogLevel} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, stderr)
		}
	}
}

// The exit status follows the run's error; usage errors point to --help.
func TestCommandExitStatus(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		err    error
		code   int
		stderr string
	}{
		{nil, nil, 0, ""},
		{nil, errors.New("connect to NATS: refused"), 1, "connect to NATS: refused"},
		{nil, service.Exit(130, nil), 130, ""},
		{nil, service.UsageError(errors.New("--at needs --once")), 2, "tool: --at needs --once\nRun 'tool --help' for usage.\n"},
		{[]string{"--bogus"}, nil, 2, "flag provided but not defined: -bogus"},
		{[]string{"--log.level", "verbose"}, nil, 2, `tool: --log.level (SERVESCOPE_LOG_LEVEL): "verbose": want debug, info, warn or error`},
		{[]string{"--log.format", "xml"}, nil, 2, `--log.format (SERVESCOPE_LOG_FORMAT): "xml"`},
	} {
		c, _, stderr := newCommand(func(context.Context, *slog.Logger, []string) error { return tc.err })
		code := c.Execute(context.Background(), tc.args)
		if code != tc.code || !strings.Contains(stderr.String(), tc.stderr) || (tc.stderr == "" && stderr.Len() > 0) {
			t.Errorf("%v with %v: exit status %d, stderr %q; want %d, %q", tc.args, tc.err, code, stderr, tc.code, tc.stderr)
		}
	}
}

// The logging flags and their variables: a flag wins over its variable, text is logfmt, and the
// level filters.
func TestCommandLogging(t *testing.T) {
	logAll := func(_ context.Context, log *slog.Logger, args []string) error {
		log.Debug("debug line", "args", len(args))
		log.Info("info line", "retry_in", 1500*time.Millisecond)
		log.Warn("warn line")
		return nil
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		json bool
		want []string
	}{
		{nil, nil, false, []string{"info line", "warn line"}},
		{nil, []string{"--log.level", "debug"}, false, []string{"debug line", "info line", "warn line"}},
		{map[string]string{service.EnvLogLevel: "warn"}, nil, false, []string{"warn line"}},
		{map[string]string{service.EnvLogLevel: "warn"}, []string{"--log.level=info"}, false, []string{"info line", "warn line"}},
		{map[string]string{service.EnvLogFormat: "json"}, nil, true, []string{"info line", "warn line"}},
		{map[string]string{service.EnvLogFormat: "json"}, []string{"--log.format", "text"}, false, []string{"info line", "warn line"}},
		{map[string]string{service.EnvLogLevel: "ERROR", service.EnvLogFormat: "JSON"}, nil, true, nil},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		c, _, stderr := newCommand(logAll)
		if code := c.Execute(context.Background(), tc.args); code != 0 {
			t.Fatalf("env %v args %v: exit status %d: %s", tc.env, tc.args, code, stderr)
		}
		var msgs []string
		for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
			if line == "" {
				continue
			}
			if tc.json {
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatalf("env %v args %v: line %q is not JSON", tc.env, tc.args, line)
				}
				if m["msg"] == "info line" && m["retry_in"] != "1.5s" {
					t.Errorf("duration logged as %v, want 1.5s", m["retry_in"])
				}
				msgs = append(msgs, m["msg"].(string))
				continue
			}
			if !strings.HasPrefix(line, "time=") || !strings.Contains(line, " level=") || !strings.Contains(line, " source=") {
				t.Errorf("env %v args %v: line %q is not logfmt with time, level and source", tc.env, tc.args, line)
			}
			_, msg, _ := strings.Cut(line, `msg="`)
			msg, _, _ = strings.Cut(msg, `"`)
			msgs = append(msgs, msg)
		}
		if strings.Join(msgs, ",") != strings.Join(tc.want, ",") {
			t.Errorf("env %v args %v: logged %q, want %q", tc.env, tc.args, msgs, tc.want)
		}
		for k := range tc.env {
			t.Setenv(k, "")
		}
	}
}

func newCobra(args cobra.PositionalArgs, run func(*service.Cobra) error) (*service.Cobra, *bytes.Buffer, *bytes.Buffer) {
	root := &cobra.Command{Use: "cli"}
	var cli *service.Cobra
	root.AddCommand(&cobra.Command{Use: "do ARG", Args: args, RunE: func(*cobra.Command, []string) error { return run(cli) }})
	cli = service.NewCobra("cli", root)
	var stdout, stderr bytes.Buffer
	cli.Stdout, cli.Stderr = &stdout, &stderr
	return cli, &stdout, &stderr
}

func TestCobra(t *testing.T) {
	ok := func(cli *service.Cobra) error {
		cli.Logger().Debug("debug line")
		return nil
	}
	cli, stdout, _ := newCobra(cobra.ExactArgs(1), ok)
	if code := cli.Execute(context.Background(), []string{"--version"}); code != 0 || !strings.HasPrefix(stdout.String(), "cli, version ") {
		t.Fatalf("--version: %d %q", code, stdout)
	}
	cli, stdout, _ = newCobra(cobra.ExactArgs(1), ok)
	if code := cli.Execute(context.Background(), []string{"do", "--help"}); code != 0 || !strings.Contains(stdout.String(), "--log.level") {
		t.Fatalf("do --help: %d %q", code, stdout)
	}
	cli, _, stderr := newCobra(cobra.ExactArgs(1), ok)
	if code := cli.Execute(context.Background(), []string{"do", "x", "--log.level", "debug"}); code != 0 || !strings.Contains(stderr.String(), `msg="debug line"`) {
		t.Fatalf("do x --log.level debug: %d %q", code, stderr)
	}
	for _, tc := range []struct {
		args []string
		run  func(*service.Cobra) error
		code int
		want string
	}{
		{[]string{"do"}, ok, 2, "cli: accepts 1 arg(s), received 0\nRun 'cli do --help' for usage."},
		{[]string{"undo"}, ok, 2, `cli: unknown command "undo" for "cli"`},
		{[]string{"do", "x", "--bogus"}, ok, 2, "cli: unknown flag: --bogus"},
		{[]string{"do", "x", "--log.format", "xml"}, ok, 2, `--log.format (SERVESCOPE_LOG_FORMAT): "xml"`},
		{[]string{"do", "x"}, func(*service.Cobra) error { return errors.New("migrate: dirty") }, 1, "cli: migrate: dirty\n"},
		{[]string{"do", "x"}, func(*service.Cobra) error { return service.Exit(2, errors.New("no rows")) }, 2, "cli: no rows\n"},
	} {
		cli, _, stderr := newCobra(cobra.ExactArgs(1), tc.run)
		if code := cli.Execute(context.Background(), tc.args); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit status %d, stderr %q; want %d, %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
	cli, _, _ = newCobra(cobra.ExactArgs(1), ok)
	cli.UsageCode = 1
	if code := cli.Execute(context.Background(), []string{"do"}); code != 1 {
		t.Errorf("usage error with UsageCode 1: exit status %d", code)
	}
}
