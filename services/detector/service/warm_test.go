package service_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/service"
)

// TestRunKeepsDiagnoseHourlyComputed: a running detector computes the hours of diagnose's default
// baseline into diagnose_hourly at once (DETECTOR_DIAGNOSE_WARM_INTERVAL), counting them, and a
// replay (--once) computes none.
func TestRunKeepsDiagnoseHourlyComputed(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	// 120,000 requests over the 6 whole hours ending 2 hours ago: over diagnose's bound.
	from := time.Now().UTC().Truncate(time.Hour).Add(-8 * time.Hour)
	if err := conn.Exec(ctx, `INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, status_code, e2e_s)
		SELECT concat('e-', toString(number)), concat('r-', toString(number)), arrival, arrival, arrival, 'm', '/v1/chat/completions', 200, 1.0
		FROM (SELECT number, toDateTime64(?, 6, 'UTC') + toIntervalMicrosecond(number * 180000) AS arrival FROM numbers(120000))`,
		from.Format("2006-01-02 15:04:05")); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(ch)
	cfg.DiagnoseWarmInterval = time.Hour
	reg := prometheus.NewRegistry()
	d, err := service.New(cfg, conn, nil, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Replay(ctx, time.Now(), io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := counterValue(t, reg, "servescope_detector_diagnose_hours_computed_total"); got != 0 {
		t.Fatalf("a replay computed %v hours, want none", got)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.Run(runCtx) }()
	defer func() { stop(); <-done }()
	for counterValue(t, reg, "servescope_detector_diagnose_warm_last_success_timestamp_seconds") == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the detector did not bring diagnose_hourly up to date")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if got := counterValue(t, reg, "servescope_detector_diagnose_hours_computed_total"); got != 6 {
		t.Errorf("%v hours computed, want the 6 holding requests", got)
	}
	if got := counterValue(t, reg, "servescope_detector_diagnose_warm_failures_total"); got != 0 {
		t.Errorf("%v failed runs", got)
	}
	var rows uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM diagnose_hourly FINAL WHERE model = ''").Scan(&rows); err != nil || rows != 6 {
		t.Errorf("diagnose_hourly holds %d rows (%v), want 6", rows, err)
	}
}

// counterValue is the value of the registry's metric name (a counter or gauge without labels), 0
// when it is absent.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return 0
}
