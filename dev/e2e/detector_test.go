package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/dev/testclock"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/services/detector/service"
)

// TestDetectorThroughPipeline: a normal synthetic baseline with the two incidents of
// docs/measurements.md that no engine metric shows — an embedding model version change that drops
// the top retrieval score and 4 of 32 answers in a wrong script — published as schema events through
// schema/publish to NATS and written by the consumer, makes the detector's built-in rules fire
// when it replays each incident's end (--once --at), while at the end of the normal part alone
// nothing fires or is pending.
func TestDetectorThroughPipeline(t *testing.T) {
	t.Parallel()
	incidents := map[string]synth.Incident{}
	for _, in := range synth.Incidents() {
		incidents[in.Rule] = in
	}
	drift, language := incidents["retrieval_score_drift"], incidents["output_language_errors"]
	if drift.Generate == nil || language.Generate == nil {
		t.Fatalf("synth has no retrieval_score_drift or output_language_errors incident")
	}

	// The evaluation time is hours in the past (rows inside the tables' TTLs, pinned by testclock in
	// scripts/test's runs at several hours). The drift ends three hours before the language
	// incident, after more than the 26 h of normal traffic a full baseline needs; normal traffic,
	// whose rate follows the time of day, runs between and before them. Each incident has its own
	// generator, so it is the same at every hour.
	at := testclock.EvalTime(t, 2*time.Hour)
	driftEnd := at.Add(-3 * time.Hour)
	driftStart := driftEnd.Add(-drift.Duration)
	languageStart := at.Add(-language.Duration)
	start := driftStart.Add(-26*time.Hour - 50*time.Minute)
	g := synth.New(11)
	tr := g.Normal(start, driftStart)
	tr.Add(drift.Generate(synth.New(12), driftStart, driftEnd))
	tr.Add(g.Normal(driftEnd, languageStart))
	tr.Add(language.Generate(synth.New(13), languageStart, at))

	st := startStore(t, pipelineOptions{})
	began := time.Now()
	pub, err := publish.New(testenv.NATS(t), st.NATS.SubjectPrefix, publish.Config{
		SpoolDir: filepath.Join(t.TempDir(), "spool"), QueueSize: 1 << 16, Linger: 2 * time.Millisecond, Logger: discardLog()})
	if err != nil {
		t.Fatalf("publisher: %v", err)
	}
	events := tr.Events()
	for _, e := range events {
		if err := pub.Publish(e); err != nil {
			t.Fatalf("publish %s: %v", e.Kind(), err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pub.Close(ctx); err != nil {
		t.Fatalf("flush the publisher: %v", err)
	}
	if s := pub.Stats(); s.Dropped != 0 {
		t.Fatalf("publisher dropped %d events: %+v", s.Dropped, s)
	}
	published := time.Since(began)

	want := map[string]int{"requests_started": len(tr.Started), "requests": len(tr.Finished), "app_records": len(tr.Apps), "engine_samples": len(tr.Samples)}
	// A bound for a hang: a loaded machine (load average 30) took more than 90 s for these events.
	waitFor(t, 5*time.Minute, fmt.Sprintf("the %d events in ClickHouse", len(events)), func(ctx context.Context) (bool, string, error) {
		got := map[string]int{}
		for table := range want {
			var n uint64
			if err := st.Conn.QueryRow(ctx, "SELECT count() FROM "+table+" FINAL").Scan(&n); err != nil {
				return false, "", fmt.Errorf("count %s: %w", table, err)
			}
			got[table] = int(n)
		}
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("%v of %v", got, want), nil
	})
	t.Logf("%d events published in %s, all in ClickHouse after %s", len(events), published.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))

	defs, err := service.LoadRules("")
	if err != nil {
		t.Fatalf("built-in rules: %v", err)
	}
	d, err := service.New(service.Config{ClickHouse: st.CH, Interval: 30 * time.Second, RepeatInterval: 4 * time.Hour},
		st.Conn, defs, prometheus.NewRegistry(), discardLog())
	if err != nil {
		t.Fatalf("detector: %v", err)
	}
	replay := func(at time.Time) []service.ReplayLine {
		t.Helper()
		var out bytes.Buffer
		if err := d.Replay(t.Context(), at, &out); err != nil {
			t.Fatalf("replay at %s: %v", at.Format(time.RFC3339), err)
		}
		var lines []service.ReplayLine
		dec := json.NewDecoder(&out)
		for dec.More() {
			var l service.ReplayLine
			if err := dec.Decode(&l); err != nil {
				t.Fatalf("replay output: %v", err)
			}
			lines = append(lines, l)
		}
		return lines
	}
	firing := func(lines []service.ReplayLine, rule string) []service.ReplayLine {
		var out []service.ReplayLine
		for _, l := range lines {
			if l.Rule == rule && l.State == "firing" {
				out = append(out, l)
			}
		}
		return out
	}

	t.Run("normal part fires nothing", func(t *testing.T) {
		for _, ts := range []time.Time{driftStart, driftStart.Add(-9*time.Hour - 7*time.Minute)} {
			for _, l := range replay(ts) {
				t.Errorf("at %s (normal traffic only) %s is %s: %v value %v baseline %v: %s",
					ts.Format(time.RFC3339), l.Rule, l.State, l.Labels, deref(l.Value), deref(l.Baseline), l.Summary)
			}
		}
	})
	t.Run("retrieval drift and version change", func(t *testing.T) {
		lines := replay(driftEnd)
		f := firing(lines, "retrieval_score_drift")
		if len(f) != 1 || deref(f[0].Value) > 0.2 || deref(f[0].Baseline) < 0.8 {
			t.Errorf("retrieval_score_drift firing %+v, want one alert with the median top score ≈0.12 against ≈0.88", f)
		}
		vc := firing(lines, "retrieval_version_change")
		if len(vc) != 1 || vc[0].Labels["version"] != "bge-m3@2" {
			t.Errorf("retrieval_version_change firing %+v, want the new embedding model bge-m3@2", vc)
		}
		t.Logf("at %s: %v", driftEnd.Format(time.RFC3339), states(lines))
	})
	t.Run("output language errors", func(t *testing.T) {
		lines := replay(at)
		f := firing(lines, "output_language_errors")
		if len(f) != 1 || deref(f[0].Value) != 4.0/32 {
			t.Errorf("output_language_errors firing %+v, want one alert with 4 of 32 answers", f)
		}
		t.Logf("at %s: %v", at.Format(time.RFC3339), states(lines))
	})
}

func states(lines []service.ReplayLine) []string {
	var s []string
	for _, l := range lines {
		s = append(s, fmt.Sprintf("%s=%s(%.4g)", l.Rule, l.State, deref(l.Value)))
	}
	slices.Sort(s)
	return s
}
