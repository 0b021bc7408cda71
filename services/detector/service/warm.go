package service

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/internal/diagnose"
)

// warmer keeps diagnose_hourly ready for `servescope diagnose` (diagnose.Warm): the detector is
// the process that already reads windows of the landing tables on a clock, and under a lease only
// one of several does.
type warmer struct {
	hours, failures prometheus.Counter
	lastSuccess     prometheus.Gauge
}

func newWarmer(reg prometheus.Registerer) *warmer {
	w := &warmer{
		hours: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "servescope_detector_diagnose_hours_computed_total",
			Help: "Hours of diagnose's default baseline computed into diagnose_hourly (missing, or outdated by rows landed since).",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "servescope_detector_diagnose_warm_failures_total",
			Help: "Runs that failed to bring diagnose_hourly up to date (diagnose then computes or reads its baseline itself).",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "servescope_detector_diagnose_warm_last_success_timestamp_seconds",
			Help: "When diagnose_hourly was last brought up to date, Unix time in seconds.",
		}),
	}
	reg.MustRegister(w.hours, w.failures, w.lastSuccess)
	return w
}

// warmDiagnose runs diagnose.Warm at once and every DiagnoseWarmInterval until ctx ends.
func (d *Detector) warmDiagnose(ctx context.Context) {
	t := time.NewTicker(d.cfg.DiagnoseWarmInterval)
	defer t.Stop()
	for {
		n, err := diagnose.Warm(ctx, d.conn, time.Now(), diagnose.DefaultWarmBaseline, d.log)
		d.warm.hours.Add(float64(n))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			d.warm.failures.Inc()
			d.log.Warn("diagnose_hourly not brought up to date; diagnose computes or reads its baseline itself", "hours_computed", n, "err", diagnose.HourlyError(err))
		default:
			d.warm.lastSuccess.SetToCurrentTime()
			if n > 0 {
				d.log.Info("diagnose_hourly brought up to date", "hours_computed", n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
