package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/dev/testclock"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
)

// `detector --once --at T` prints exactly one JSON object per pending/firing alert, as of T.
func TestOnceAtPrintsAlertsAsJSONLines(t *testing.T) {
	conn, ch := testenv.ClickHouse(t)
	at := testclock.EvalTime(t, 2*time.Hour)
	g := synth.New(3)
	tr := g.Requests(at.Add(-26*time.Hour), at.Add(-16*time.Minute), synth.Constant(0.05), synth.NormalShape())
	incident := synth.LanguageErrors(4, 32)(g, at.Add(-15*time.Minute), at)
	if err := synth.Insert(context.Background(), conn, tr.Add(incident)); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SERVESCOPE_CLICKHOUSE_DATABASE", ch.Database)
	t.Setenv("DETECTOR_WEBHOOK_URLS", "http://127.0.0.1:1/never-called")
	var stdout, stderr bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&stderr, nil))
	if err := run(context.Background(), []string{"--once", "--at", at.Format(time.RFC3339)}, &stdout, log); err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, stderr.String())
	}
	sc := bufio.NewScanner(&stdout)
	var rules []string
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("stdout line %q is not a JSON object: %v", sc.Text(), err)
		}
		for _, k := range []string{"rule", "state", "labels", "value", "baseline", "threshold", "summary"} {
			if _, ok := line[k]; !ok {
				t.Errorf("line %s lacks %q", sc.Text(), k)
			}
		}
		rules = append(rules, line["rule"].(string)+"="+line["state"].(string))
		if line["rule"] == "output_language_errors" && line["value"].(float64) != 0.125 {
			t.Errorf("output_language_errors value %v, want 4/32", line["value"])
		}
	}
	if strings.Join(rules, ",") != "output_language_errors=firing" {
		t.Fatalf("alerts %v, want exactly output_language_errors=firing", rules)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"--at", "2026-11-30T09:00:00Z"}, {"--once", "--at", "yesterday"}, {"--bogus"}} {
		if err := run(context.Background(), args, io.Discard, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("run %v: no error", args)
		}
	}
}

// TestStartsWhileClickHouseIsDown is the reproducer of a detector that exited at start during a
// ClickHouse outage (and so stayed down): it must wait for the server, then serve and evaluate.
func TestStartsWhileClickHouseIsDown(t *testing.T) {
	ch := testenv.StartClickHouse(t)
	cfg := testenv.ClickHouseConfig(t)
	cfg.Addr = []string{ch.Addr()}
	cfg.Database = "detector_start"
	if err := chstore.Migrate(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	ch.Stop()
	metrics := freeAddr(t)
	t.Setenv("SERVESCOPE_CLICKHOUSE_ADDR", ch.Addr())
	t.Setenv("SERVESCOPE_CLICKHOUSE_DATABASE", cfg.Database)
	t.Setenv("DETECTOR_METRICS_ADDR", metrics)
	t.Setenv("DETECTOR_INTERVAL", "1s")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, io.Discard, slog.New(slog.DiscardHandler)) }()
	select {
	case err := <-done:
		t.Fatalf("detector stopped while ClickHouse was down: %v", err)
	case <-time.After(2 * time.Second):
	}
	ch.Start()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + metrics + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("detector did not serve /healthz after ClickHouse came back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("detector after shutdown: %v", err)
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
