package service_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/detector/service"
)

// opTimeout bounds one insert or replay: it catches a hang, not a slow query, so it leaves room for
// a machine loaded by other test runs (a replay evaluates every rule at each tick of its hold time).
const opTimeout = 5 * time.Minute

func insert(t *testing.T, conn driver.Conn, tr *synth.Traffic) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := synth.Insert(ctx, conn, tr); err != nil {
		t.Fatal(err)
	}
}

func testConfig(ch config.ClickHouse) service.Config {
	return service.Config{ClickHouse: ch, Interval: 30 * time.Second, RepeatInterval: 4 * time.Hour}
}

func newDetector(t *testing.T, cfg service.Config, conn driver.Conn, only ...string) *service.Detector {
	t.Helper()
	defs, err := service.LoadRules("")
	if err != nil {
		t.Fatal(err)
	}
	if len(only) > 0 {
		keep := map[string]bool{}
		for _, n := range only {
			keep[n] = true
		}
		var sel []*rules.Definition
		for _, d := range defs {
			if keep[d.Name] {
				sel = append(sel, d)
			}
		}
		defs = sel
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	d, err := service.New(cfg, conn, defs, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimSpace(p)))
	return len(p), nil
}

// replay runs the detector's --at replay and parses its JSON lines.
func replay(t *testing.T, d *service.Detector, at time.Time) []service.ReplayLine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var out bytes.Buffer
	if err := d.Replay(ctx, at, &out); err != nil {
		t.Fatalf("replay at %s: %v", at.Format(time.RFC3339), err)
	}
	var lines []service.ReplayLine
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var l service.ReplayLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("replay output line %q is not JSON: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

// firing returns the replay lines of rule in state firing.
func firing(lines []service.ReplayLine, rule string) []service.ReplayLine {
	var out []service.ReplayLine
	for _, l := range lines {
		if l.Rule == rule && l.State == "firing" {
			out = append(out, l)
		}
	}
	return out
}

func ruleStates(lines []service.ReplayLine) []string {
	var s []string
	for _, l := range lines {
		s = append(s, l.Rule+"="+l.State)
	}
	sort.Strings(s)
	return s
}

func val(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}
