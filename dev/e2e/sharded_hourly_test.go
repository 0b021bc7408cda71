package e2e

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"math"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/dev/history"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/diagnose"
)

// The same generated history on one server and on a 2-shard cluster: diagnose_hourly's hours
// (migrations/000017) computed on each, through the Distributed tables and the parameterized
// views' wrappers on the cluster, give the same baseline — exact counts, means and shares within
// float rounding, quantiles within the t-digest's error (two shards' digests merged are not one
// pass's). The traffic is flat (no daily swing) at 25,000 requests an hour, so the 6 h baseline
// is over diagnose.HourlyMinRequests whatever hour the test runs at.
func TestShardedHourlyBaselineAnswersAsOneServer(t *testing.T) {
	_, _, sharded := startSharded(t)
	single, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	at := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	spec := history.Normal(at.Add(30*time.Minute), 6*time.Hour+30*time.Minute, 162_500)
	spec.Amplitude, spec.Engines = 0, 2
	spec.SampleInterval, spec.StatsLogInterval = time.Minute, time.Minute
	base := diagnose.Range{From: at.Add(-6 * time.Hour), To: at}
	window := diagnose.Range{From: at, To: at.Add(30 * time.Minute)}

	var reps [2]diagnose.Report
	for i, conn := range []driver.Conn{single, sharded} {
		if _, err := spec.Generate(ctx, conn, history.Options{}); err != nil {
			t.Fatalf("generate the history: %v", err)
		}
		n, err := diagnose.Warm(ctx, conn, at.Add(10*time.Minute), 6*time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil || n != 6 {
			t.Fatalf("Warm computed %d hours (%v), want 6", n, err)
		}
		if reps[i], err = diagnose.Run(ctx, conn, diagnose.Options{Window: window, Baseline: base}); err != nil {
			t.Fatal(err)
		}
		if reps[i].BaselineSource != diagnose.BaselineHourly {
			t.Fatalf("baseline read %q (notes %q), want from diagnose_hourly", reps[i].BaselineSource, reps[i].Notes)
		}
	}
	one, two := reps[0].Base, reps[1].Base
	t.Logf("baseline: %d requests, e2e mean %.4f s p95 %.4f s (one server) / %.4f s (sharded)", one.Requests,
		deref(one.E2EMean), deref(one.E2EP95), deref(two.E2EP95))
	if one.Requests < diagnose.HourlyMinRequests || one.Requests != two.Requests || !maps.Equal(one.StatusCodes, two.StatusCodes) ||
		one.RetrievalN != two.RetrievalN || one.ScriptChecked != two.ScriptChecked {
		t.Errorf("counts differ: requests %d / %d, status %v / %v, retrieval %d / %d, script checks %d / %d",
			one.Requests, two.Requests, one.StatusCodes, two.StatusCodes, one.RetrievalN, two.RetrievalN, one.ScriptChecked, two.ScriptChecked)
	}
	for kind, values := range one.Versions {
		if !maps.Equal(values, two.Versions[kind]) {
			t.Errorf("%s: %v on one server, %v sharded", kind, values, two.Versions[kind])
		}
	}
	for _, q := range []struct {
		name      string
		a, b      *float64
		tolerance float64
	}{
		{"tokens in mean", one.PromptTokensMean, two.PromptTokensMean, 1e-9},
		{"queue mean", one.QueueMean, two.QueueMean, 1e-9},
		{"prefill mean", one.PrefillMean, two.PrefillMean, 1e-9},
		{"ttft mean", one.TTFTMean, two.TTFTMean, 1e-9},
		{"e2e mean", one.E2EMean, two.E2EMean, 1e-9},
		{"length share", one.LengthShare, two.LengthShare, 1e-9},
		{"5xx share", one.Share5xx, two.Share5xx, 1e-9},
		{"wrong script share", one.WrongScriptShare, two.WrongScriptShare, 1e-9},
		{"ttft p50", one.TTFTP50, two.TTFTP50, 2e-2},
		{"ttft p95", one.TTFTP95, two.TTFTP95, 2e-2},
		{"e2e p50", one.E2EP50, two.E2EP50, 2e-2},
		{"e2e p95", one.E2EP95, two.E2EP95, 2e-2},
		{"top retrieval score p50", one.RetrievalTopP50, two.RetrievalTopP50, 2e-2},
	} {
		if q.a == nil || q.b == nil || math.Abs(*q.a-*q.b) > q.tolerance*math.Abs(*q.a) {
			t.Errorf("%s: %v on one server, %v sharded (relative tolerance %g)", q.name, deref(q.a), deref(q.b), q.tolerance)
		}
	}
}
