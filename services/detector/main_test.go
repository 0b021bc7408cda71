package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
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
	c := command(&stdout)
	c.Stderr = &stderr
	if code := c.Execute(context.Background(), []string{"--once", "--at", at.Format(time.RFC3339)}); code != 0 {
		t.Fatalf("detector --once --at: exit status %d\nstderr: %s", code, stderr.String())
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

// Bad usage exits 2 before anything is read or connected, saying what is wrong.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--at", "2026-11-30T09:00:00Z"}, "--at needs --once"},
		{[]string{"--once", "--at", "yesterday"}, "want an RFC 3339 time"},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"--once", "extra"}, "unexpected arguments"},
		{[]string{"--log.level", "loud"}, "--log.level (SERVESCOPE_LOG_LEVEL)"},
	} {
		var stderr bytes.Buffer
		c := command(io.Discard)
		c.Stderr = &stderr
		if code := c.Execute(context.Background(), tc.args); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("detector %v: exit status %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestStartsWhileClickHouseIsDown is the reproducer of a detector that exited at start during a
// ClickHouse outage (and so stayed down): it must wait for the server, then serve and evaluate.
// Meanwhile it is alive (/healthz 200: a supervisor must not restart it) and not ready
// (/readyz 503); once ClickHouse is back it is ready, and SIGTERM (here the context) stops it
// with status 0.
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
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() {
		c := command(io.Discard)
		c.Stderr = &stderr
		done <- c.Execute(ctx, nil)
	}()
	// Alive and not ready, and still running, while ClickHouse is down.
	waitStatus(t, done, &stderr, "http://"+metrics+"/healthz", http.StatusOK, "ok")
	waitStatus(t, done, &stderr, "http://"+metrics+"/readyz", http.StatusServiceUnavailable, `"reason":"starting: connect to ClickHouse"`)
	ch.Start()
	waitStatus(t, done, &stderr, "http://"+metrics+"/readyz", http.StatusOK, `"clickhouse":"ok"`)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("detector after shutdown: exit status %d\n%s", code, stderr.String())
	}
}

// waitStatus polls url until it answers status with a body containing want, failing the test
// after 60 s or when the detector exits.
func waitStatus(t *testing.T, done chan int, stderr *syncBuffer, url string, status int, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		select {
		case code := <-done:
			t.Fatalf("detector exited with status %d while waiting for %s:\n%s", code, url, stderr.String())
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == status && strings.Contains(string(b), want) {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: last answer %s, want %d with %q", url, last, status, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for the detector's log and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
