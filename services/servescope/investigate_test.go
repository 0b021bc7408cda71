package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/postmortem"
)

const crashLog = "../../internal/postmortem/testdata/v0_10_type_one.log"

// run executes the CLI with args and returns its output and exit code as main would set them,
// and what it printed on standard error as an error (nil when it printed nothing).
func run(t *testing.T, args ...string) (string, int, error) {
	t.Helper()
	cli := newCLI()
	var out, stderr bytes.Buffer
	cli.Stdout, cli.Stderr = &out, &stderr
	code := cli.Execute(context.Background(), args)
	var err error
	if stderr.Len() > 0 {
		err = errors.New(stderr.String())
	}
	return out.String(), code, err
}

// TestInvestigationCommands runs diagnose and postmortem as the on-call engineer would, against a
// fresh database: first empty (exit 2, a clear message), then holding a vLLM 0.10 crash
// (docs/measurements.md, The crash).
// It sets the process environment, so it does not run in parallel.
func TestInvestigationCommands(t *testing.T) {
	conn, cfg := testenv.ClickHouse(t)
	t.Setenv("SERVESCOPE_CLICKHOUSE_DATABASE", cfg.Database)
	t.Setenv("SERVESCOPE_CLICKHOUSE_ADDR", strings.Join(cfg.Addr, ","))

	if _, code, err := run(t, "diagnose", "--since", "15m"); code != 2 || !strings.Contains(err.Error(), "every servescope table is empty") {
		t.Errorf("diagnose on empty tables: exit %d, %v", code, err)
	}
	if _, code, err := run(t, "postmortem"); code != 2 || !strings.Contains(err.Error(), "engine_logs is empty") {
		t.Errorf("postmortem on empty tables: exit %d, %v", code, err)
	}
	if _, code, err := run(t, "diagnose"); code != 1 || !strings.Contains(err.Error(), "give the window") {
		t.Errorf("diagnose without a window: exit %d, %v", code, err)
	}

	// The crash, shipped into engine_logs five minutes ago.
	f, err := os.Open(crashLog)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := postmortem.ReadLog(f, "vllm-0", "vllm.log", time.Date(2026, 9, 12, 0, 0, 0, 0, time.UTC), time.UTC)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := conn.PrepareBatch(ctx, "INSERT INTO engine_logs (event_id, ts, engine, offset, line, level, process, message, running, waiting, kv_cache_usage_perc, exception_type, oom_bytes_requested, oom_total_capacity_bytes, oom_free_bytes, frames)")
	if err != nil {
		t.Fatal(err)
	}
	shift := time.Now().UTC().Add(-5 * time.Minute).Sub(lines[0].TS)
	for i, l := range lines {
		frames := l.Frames
		if frames == nil {
			frames = []string{}
		}
		if err := b.Append(fmt.Sprint("ev", i), l.TS.Add(shift), l.Engine, l.Offset, l.Line, l.Level, l.Process, l.Message, l.Running, l.Waiting,
			l.KVCacheUsagePerc, l.ExceptionType, l.OOMBytesRequested, l.OOMTotalCapacityBytes, l.OOMFreeBytes, frames); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}

	out, code, err := run(t, "diagnose", "--since", "15m", "--json")
	if code != 0 {
		t.Fatalf("diagnose: exit %d, %v", code, err)
	}
	var rep struct {
		Findings []string `json:"findings"`
		Branches []struct {
			ID     string `json:"id"`
			Action string `json:"action"`
		} `json:"branches"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("diagnose --json: %v\n%s", err, out)
	}
	if !slices.Equal(rep.Findings, []string{"engine_crash"}) {
		t.Errorf("findings = %v, want engine_crash", rep.Findings)
	}
	for _, br := range rep.Branches {
		if br.ID == "engine_crash" && !strings.HasPrefix(br.Action, "servescope postmortem --engine vllm-0 --at ") {
			t.Errorf("crash action = %q", br.Action)
		}
	}

	for _, args := range [][]string{{"postmortem"}, {"postmortem", "--engine", "vllm-0"}, {"postmortem", "--log", crashLog}} {
		out, code, err := run(t, args...)
		if code != 0 || !strings.Contains(out, "verdict: activation-sized temporary (type one limit)") ||
			!strings.Contains(out, "193 running × 152,064 vocabulary") {
			t.Errorf("%v: exit %d, %v\n%s", args, code, err, out)
		}
	}
	out, code, err = run(t, "postmortem", "--log", crashLog, "--vocab-size", "128256", "--json")
	var pm struct {
		Verdict    string `json:"verdict"`
		Arithmetic struct {
			Vocab int `json:"vocab_size"`
		} `json:"arithmetic"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &pm) != nil || pm.Verdict != postmortem.VerdictUnexplained || pm.Arithmetic.Vocab != 128256 {
		t.Errorf("postmortem --vocab-size 128256: exit %d, %v, %+v", code, err, pm)
	}
}
