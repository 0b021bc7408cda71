package proxy

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's own Prometheus metrics.
type Metrics struct {
	requests        *prometheus.CounterVec
	upstreamLatency *prometheus.HistogramVec
	inflight        prometheus.Gauge
	recordErrors    prometheus.Counter
}

// NewMetrics creates the proxy metrics and registers them with reg:
// servescope_gateway_requests_total{route,status}, servescope_gateway_upstream_latency_seconds{route}
// (request sent to response headers received), servescope_gateway_requests_in_flight and
// servescope_gateway_record_errors_total.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_gateway_requests_total",
			Help: "Requests answered by the gateway, by route and HTTP status (499: the client went away).",
		}, []string{"route", "status"}),
		upstreamLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "servescope_gateway_upstream_latency_seconds",
			Help:    "Time from sending a request to the engine to receiving its response headers, in seconds.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"route"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "servescope_gateway_requests_in_flight",
			Help: "Requests being proxied now.",
		}),
		recordErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "servescope_gateway_record_errors_total",
			Help: "Records the gateway built but could not publish because they were invalid.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.upstreamLatency, m.inflight, m.recordErrors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register gateway metrics: %w", err)
		}
	}
	return m, nil
}

// Route returns a middleware that counts another handler's answers in
// servescope_gateway_requests_total under the given route label.
func (m *Metrics) Route(route string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, r)
			m.requests.WithLabelValues(route, strconv.Itoa(sw.status)).Inc()
		})
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// statusLabel is strconv.Itoa for the status label, without allocating for the common codes.
func statusLabel(code int) string {
	switch code {
	case 200:
		return "200"
	case 400:
		return "400"
	case 499:
		return "499"
	case 502:
		return "502"
	}
	return strconv.Itoa(code)
}
