package service

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Healthy serves /healthz: 200 "ok" while the process serves HTTP. It never asks a dependency,
// so that an outage of NATS or ClickHouse does not get a service restarted that waits for it
// and recovers by itself.
func Healthy() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
}

// CheckTimeout bounds each readiness check.
const CheckTimeout = 2 * time.Second

// Readiness serves /readyz: whether the service is started and its dependencies answer.
//
// It answers 503 while the service starts (Starting names what it waits for), while it stops
// (Stopping), or when a check fails; otherwise 200. The body is one JSON object:
//
//	{"ready":false,"reason":"clickhouse: dial tcp 127.0.0.1:9000: connect: connection refused",
//	 "checks":{"clickhouse":"dial tcp ...","nats":"ok"}, ...details}
//
// where "checks" holds every check's answer ("ok" or its error) and the details, when set, add
// their keys (a service's state worth showing that does not decide readiness). Checks run
// concurrently, each bounded by CheckTimeout. A Readiness is safe for concurrent use.
type Readiness struct {
	mu      sync.Mutex
	state   string // "" once started; else why not ready: "starting: ...", "stopping"
	checks  []check
	details func() map[string]any
}

type check struct {
	name string
	f    func(context.Context) error
}

// NewReadiness returns a readiness that is starting.
func NewReadiness() *Readiness {
	return &Readiness{state: "starting"}
}

// Starting says the service is starting and waits for what.
func (r *Readiness) Starting(what string) { r.set("starting: " + what) }

// Started says the service is started: from now on the checks decide.
func (r *Readiness) Started() { r.set("") }

// Stopping says the service is stopping: not ready from now on.
func (r *Readiness) Stopping() { r.set("stopping") }

func (r *Readiness) set(state string) {
	r.mu.Lock()
	r.state = state
	r.mu.Unlock()
}

// Check adds a check: nil when the dependency answers, else why it does not. A check should be
// cheap (a ping, a connection state).
func (r *Readiness) Check(name string, f func(ctx context.Context) error) {
	r.mu.Lock()
	r.checks = append(r.checks, check{name, f})
	r.mu.Unlock()
}

// Details sets the function whose keys are added to the body.
func (r *Readiness) Details(f func() map[string]any) {
	r.mu.Lock()
	r.details = f
	r.mu.Unlock()
}

// Status runs the checks and returns whether the service is ready, and the body /readyz sends.
func (r *Readiness) Status(ctx context.Context) (bool, map[string]any) {
	r.mu.Lock()
	state, checks, details := r.state, r.checks, r.details
	r.mu.Unlock()
	body := map[string]any{}
	if details != nil {
		maps.Copy(body, details())
	}
	answers := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
			defer cancel()
			answers[i] = c.f(cctx)
		})
	}
	wg.Wait()
	results := map[string]string{}
	reason := state
	for i, c := range checks {
		if answers[i] == nil {
			results[c.name] = "ok"
			continue
		}
		results[c.name] = answers[i].Error()
		if reason == "" {
			reason = fmt.Sprintf("%s: %v", c.name, answers[i])
		}
	}
	body["ready"] = reason == ""
	if reason != "" {
		body["reason"] = reason
	}
	if len(checks) > 0 {
		body["checks"] = results
	}
	return reason == "", body
}

// ServeHTTP implements http.Handler.
func (r *Readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ready, body := r.Status(req.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(body)
}

// Handle registers /metrics (reg), /healthz (Healthy) and /readyz (ready) on mux.
func Handle(mux *http.ServeMux, reg *prometheus.Registry, ready *Readiness) {
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle("/healthz", Healthy())
	mux.Handle("/readyz", ready)
}

// NewMux returns a mux serving /metrics, /healthz and /readyz (see Handle).
func NewMux(reg *prometheus.Registry, ready *Readiness) *http.ServeMux {
	mux := http.NewServeMux()
	Handle(mux, reg, ready)
	return mux
}
