package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/sim/loadgen/load"
	"github.com/servescope/servescope/sim/vllmsim/vllmlog"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// TestMain lets tests run the real vllmsim binary: the test binary re-executes itself with
// VLLMSIM_TEST_MAIN=1 and runs main's run() instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("VLLMSIM_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func startBinary(t *testing.T, logFile string, args ...string) (*proc.Process, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The start-up line names the address it listens on.
	re := regexp.MustCompile(`Starting vLLM API server 0 on (http://\S+)`)
	var url string
	p, err := proc.New(proc.Spec{
		Name: "vllmsim",
		Path: self,
		Args: append([]string{"--listen", "127.0.0.1:0", "--log-file", logFile}, args...),
		Env:  []string{"VLLMSIM_TEST_MAIN=1"},
		Log:  filepath.Join(t.TempDir(), "vllmsim.out"),
		// A test binary killed by its timeout leaves no simulator behind.
		DieWithCaller: true,
		Ready: func(context.Context) error {
			b, _ := os.ReadFile(logFile)
			m := re.FindSubmatch(b)
			if m == nil {
				return errors.New("no start-up line in the log yet")
			}
			url = string(m[1])
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Kill(context.Background())
		if t.Failed() {
			t.Logf("vllmsim output: %s", p.LogTail())
		}
	})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p, url
}

// TestCrashUnderLoad drives the overload scenario into a simulator that dies when running exceeds
// 192: the log must hold vLLM's stats lines, the sampler traceback and torch's OOM line whose size
// is running × vocabulary × 4 bytes as torch rounds and prints it, and the process must exit
// non-zero.
func TestCrashUnderLoad(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "vllm.log")
	p, url := startBinary(t, logFile, "--time-scale", "10", "--crash-at-running", "192")
	p.ExpectExit()
	rep, err := load.Run(context.Background(), load.Config{Target: url, Scenario: "overload", TimeScale: 10, RequestTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed == 0 {
		t.Fatalf("no request failed although the engine died: %+v", rep.Errors)
	}
	select {
	case <-p.Done():
		if p.ExitCode() == 0 {
			t.Fatalf("vllmsim exited 0 after the crash (%v)", p.Err())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("vllmsim still running after the crash")
	}
	t.Logf("errors counted by loadgen: %v", rep.Errors)

	f, err := os.Open(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	statsRE := regexp.MustCompile(`^\(APIServer pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[loggers\.py:\d+\] Engine 000: Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput: [\d.]+ tokens/s, Running: (\d+) reqs, Waiting: (\d+) reqs, (?:Preemptions: \d+, )?GPU KV cache usage: ([\d.]+)%, Prefix cache hit rate: [\d.]+%$`)
	oomRE := regexp.MustCompile(`^\(EngineCore_DP0 pid=\d+\) ERROR \d\d-\d\d \d\d:\d\d:\d\d \[core\.py:\d+\] torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate ([\d.]+ MiB)\. GPU 0 has a total capacity of 11\.63 GiB of which 84\.88 MiB is free\.`)
	var lastRunning, stats int
	var oom string
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if m := statsRE.FindStringSubmatch(line); m != nil && oom == "" {
			stats++
			lastRunning, _ = strconv.Atoi(m[1])
		}
		if m := oomRE.FindStringSubmatch(line); m != nil {
			oom = m[1]
		}
	}
	if stats < 2 {
		t.Fatalf("%d stats lines before the crash:\n%s", stats, strings.Join(lines, "\n"))
	}
	if oom == "" {
		t.Fatalf("no OOM line:\n%s", strings.Join(lines, "\n"))
	}
	if lastRunning != 193 {
		t.Errorf("last stats line before the crash shows %d running, want 193", lastRunning)
	}
	want := vllmlog.FormatSize(vllmlog.AllocationSize(int64(lastRunning) * 152064 * 4))
	if oom != want || oom != "112.00 MiB" {
		t.Errorf("OOM allocates %s, want %s for %d running × 152064 × 4 bytes", oom, want, lastRunning)
	}
	text := strings.Join(lines, "\n")
	for _, s := range []string{
		`vllm/model_executor/layers/utils.py", line 94, in apply_penalties`,
		"Dumping scheduler stats: SchedulerStats(num_running_reqs=193,",
		"    logits -= frequency_penalties.unsqueeze(dim=1) * output_bin_counts",
		"EngineCore encountered a fatal error.",
		"vllm.v1.engine.exceptions.EngineDeadError",
	} {
		if !strings.Contains(text, s) {
			t.Errorf("log lacks %q", s)
		}
	}
	fmt.Fprintln(os.Stderr, "crash log tail:")
	for _, l := range lines[max(0, len(lines)-4):] {
		fmt.Fprintln(os.Stderr, "  ", l)
	}
}

// loadConfig is what the command does before it serves: the environment, then the flags in
// args, then validate.
func loadConfig(args []string) (config, error) {
	fs := flag.NewFlagSet("vllmsim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c, err := newConfig(fs)
	if err != nil {
		return *c, err
	}
	if err := fs.Parse(args); err != nil {
		return *c, err
	}
	return *c, c.validate()
}

func TestConfigFromEnvAndFlags(t *testing.T) {
	t.Setenv("VLLMSIM_MAX_NUM_SEQS", "128")
	t.Setenv("VLLMSIM_MODEL", "env/model")
	c, err := loadConfig([]string{"--model", "flag/model", "--time-scale", "3"})
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxNumSeqs != 128 || c.Model != "flag/model" || c.TimeScale != 3 || c.Listen != ":8000" || c.VocabSize != 152064 || c.MaxModelLen != 4096 {
		t.Fatalf("config %+v", c)
	}
	if _, err := loadConfig([]string{"--time-scale", "0"}); err == nil {
		t.Fatal("time scale 0 accepted")
	}
	t.Setenv("VLLMSIM_MAX_NUM_SEQS", "many")
	if _, err := loadConfig(nil); err == nil {
		t.Fatal("bad env value accepted")
	}
}

func TestVersionFlags(t *testing.T) {
	c, err := loadConfig([]string{"--vllm-version", "0.8", "--enable-prompt-tokens-details", "--enable-request-id-headers"})
	if err != nil || c.version != vllmversion.V0_8 || !c.PromptTokensDetails || !c.RequestIDHeaders {
		t.Fatalf("config %+v, %v", c, err)
	}
	if c, err := loadConfig(nil); err != nil || c.version != vllmversion.Main {
		t.Fatalf("default version %v, %v", c.version, err)
	}
	for _, args := range [][]string{
		{"--vllm-version", "0.9"},
		{"--vllm-version", "0.10", "--enable-per-request-metrics"},
		{"--vllm-version", "0.8", "--enable-force-include-usage"},
		{"--embedding-dim", "0"},
	} {
		if _, err := loadConfig(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	t.Setenv("VLLMSIM_VLLM_VERSION", "0.10")
	if c, err := loadConfig(nil); err != nil || c.version != vllmversion.V0_10 {
		t.Fatalf("VLLMSIM_VLLM_VERSION: %v, %v", c.version, err)
	}
}

// TestEveryVariableHasAFlag keeps --help complete: every VLLMSIM_<NAME> setting is a documented
// --<name> flag.
func TestEveryVariableHasAFlag(t *testing.T) {
	var c config
	fs := flag.NewFlagSet("vllmsim", flag.ContinueOnError)
	defineFlags(fs, &c)
	typ := reflect.TypeOf(c)
	for i := 0; i < typ.NumField(); i++ {
		name, ok := typ.Field(i).Tag.Lookup("env")
		if !ok {
			continue
		}
		f := fs.Lookup(strings.ToLower(strings.ReplaceAll(name, "_", "-")))
		if f == nil || f.Usage == "" {
			t.Errorf("VLLMSIM_%s has no documented flag", name)
		}
	}
}
