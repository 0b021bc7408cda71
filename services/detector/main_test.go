package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/services/detector/synth"
	"github.com/servescope/servescope/services/internal/testenv"
)

// `detector --once --at T` prints exactly one JSON object per pending/firing alert, as of T.
func TestOnceAtPrintsAlertsAsJSONLines(t *testing.T) {
	conn, ch := testenv.ClickHouse(t)
	at := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
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
	if err := run([]string{"--once", "--at", at.Format(time.RFC3339)}, &stdout, log); err != nil {
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
		if err := run(args, io.Discard, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("run %v: no error", args)
		}
	}
}
