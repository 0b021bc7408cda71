package alerting

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the detector's evaluation metrics. A nil *Metrics records nothing.
type Metrics struct {
	evalDuration *prometheus.HistogramVec
	evalFailures *prometheus.CounterVec
	alerts       *prometheus.GaugeVec
	// groupDuration and groupMissed follow Prometheus's prometheus_rule_group_last_duration_seconds
	// and prometheus_rule_group_iterations_missed_total; a group is named by its interval.
	groupDuration *prometheus.GaugeVec
	groupMissed   *prometheus.CounterVec
}

// NewMetrics registers the evaluation metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		evalDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "servescope_detector_rule_evaluation_duration_seconds",
			Help:    "Time to evaluate one rule (query and state update), in seconds.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"rule"}),
		evalFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_detector_rule_evaluation_failures_total",
			Help: "Rule evaluations that failed (query error or bad result).",
		}, []string{"rule"}),
		alerts: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "servescope_detector_alerts",
			Help: "Alerts held in memory by rule and state (pending, firing, resolved).",
		}, []string{"rule", "state"}),
	}
	m.groupDuration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "servescope_detector_group_last_duration_seconds",
		Help: "Time the last evaluation of a rule group took, all its rules, in seconds; a group is the rules sharing an evaluation interval.",
	}, []string{"interval"})
	m.groupMissed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "servescope_detector_group_iterations_missed_total",
		Help: "Evaluation ticks of a rule group skipped because the previous evaluation was still running: alerts come that much later.",
	}, []string{"interval"})
	reg.MustRegister(m.evalDuration, m.evalFailures, m.alerts, m.groupDuration, m.groupMissed)
	return m
}

func (m *Metrics) observeEval(rule string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.evalDuration.WithLabelValues(rule).Observe(d.Seconds())
	if err != nil {
		m.evalFailures.WithLabelValues(rule).Inc()
	} else {
		m.evalFailures.WithLabelValues(rule).Add(0)
	}
}

func (m *Metrics) observeGroup(interval, d time.Duration) {
	if m == nil {
		return
	}
	m.groupDuration.WithLabelValues(interval.String()).Set(d.Seconds())
	m.groupMissed.WithLabelValues(interval.String()).Add(0)
}

func (m *Metrics) missedIterations(interval time.Duration, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.groupMissed.WithLabelValues(interval.String()).Add(float64(n))
}

// Forget drops the series of a rule that a reload removed.
func (m *Metrics) Forget(rule string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"rule": rule}
	m.evalDuration.DeletePartialMatch(l)
	m.evalFailures.DeletePartialMatch(l)
	m.alerts.DeletePartialMatch(l)
}

func (m *Metrics) setAlerts(rs []*Rule) {
	if m == nil {
		return
	}
	for _, r := range rs {
		counts := map[string]float64{"pending": 0, "firing": 0, "resolved": 0}
		for _, a := range r.Alerts() {
			counts[a.StateName()]++
		}
		for state, n := range counts {
			m.alerts.WithLabelValues(r.Name(), state).Set(n)
		}
	}
}
