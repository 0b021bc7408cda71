package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// AlertmanagerPath is where Alertmanager takes alerts (its API v2), below its base URL.
const AlertmanagerPath = "/api/v2/alerts"

// PostableAlert is one alert of the JSON array POSTed to Alertmanager's /api/v2/alerts (its
// models.PostableAlert). A firing alert carries an EndsAt in the future, renewed by each send:
// Alertmanager resolves it on its own if no send arrives by then (the detector died). A resolved
// alert carries the time it resolved.
type PostableAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	StartsAt     time.Time         `json:"startsAt,omitzero"`
	EndsAt       time.Time         `json:"endsAt,omitzero"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
	// Fingerprint identifies the alert in the queue (a later state replaces a queued earlier
	// one); Alertmanager computes its own from Labels.
	Fingerprint string `json:"-"`
	// Status is the alert's state, firing or resolved, for the record of deliveries (Alertmanager
	// reads it from EndsAt).
	Status string `json:"-"`
}

// AlertmanagerOptions configure [Alertmanagers].
type AlertmanagerOptions struct {
	// URLs are the Alertmanagers' base URLs (e.g. http://alertmanager:9093, or with the path
	// prefix of --web.route-prefix); every alert goes to each of them, as Prometheus sends to
	// every Alertmanager of a cluster, which de-duplicates its notifications.
	URLs []string
	// QueueCapacity bounds the queue (default 10000, Prometheus's); when full the oldest alerts
	// are dropped. A queued alert is replaced by a later state of the same alert (fingerprint).
	QueueCapacity int
	// MaxBatch is the most alerts in one POST (default 256).
	MaxBatch int
	// Timeout bounds one POST (default 10 s).
	Timeout time.Duration
	Client  *http.Client
	// Recorder, when set, gets one Delivery per state change (fingerprint, status, startsAt) and
	// Alertmanager, when that Alertmanager first takes it: not every resend, and not the failed
	// POSTs, which the next evaluation repeats (they are counted in the errors metric and logged).
	// After a restart each current state change is recorded once more.
	Recorder Recorder
	// Registerer and Log are optional.
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

// Alertmanagers sends alerts to Alertmanager the way Prometheus's notifier does: a queue drained
// in batches, each batch POSTed to every Alertmanager at once, with no retry. The detector hands
// over every firing and recently resolved alert at every evaluation (see alerting.Group.Resend),
// so an alert lost to a failed POST is in the next evaluation's batch.
type Alertmanagers struct {
	opts    AlertmanagerOptions
	targets []amTarget
	metrics *amMetrics

	mu    sync.Mutex
	queue []PostableAlert
	wake  chan struct{}

	// recorded holds, per Alertmanager name and fingerprint, the state change last recorded.
	recMu    sync.Mutex
	recorded map[string]map[string]Key
}

type amTarget struct {
	name, url string // name: the base URL without credentials or query
}

// NewAlertmanagers validates the URLs and prepares the sender; call Run to start sending.
func NewAlertmanagers(opts AlertmanagerOptions) (*Alertmanagers, error) {
	if opts.QueueCapacity <= 0 {
		opts.QueueCapacity = 10000
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	m := &Alertmanagers{opts: opts, metrics: newAMMetrics(opts.Registerer), wake: make(chan struct{}, 1),
		recorded: map[string]map[string]Key{}}
	seen := map[string]bool{}
	for _, raw := range opts.URLs {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("alertmanager URL %q: want an absolute http(s) URL", redact(raw))
		}
		name := redact(raw)
		if seen[name] {
			return nil, fmt.Errorf("alertmanager URL %q: listed twice", name)
		}
		seen[name] = true
		u.Path = strings.TrimSuffix(u.Path, "/") + AlertmanagerPath
		m.targets = append(m.targets, amTarget{name: name, url: u.String()})
	}
	return m, nil
}

// Send enqueues alerts for every Alertmanager. It never blocks on one.
func (m *Alertmanagers) Send(alerts ...PostableAlert) {
	if len(m.targets) == 0 || len(alerts) == 0 {
		return
	}
	m.mu.Lock()
	for _, a := range alerts {
		if a.Fingerprint != "" {
			m.queue = slices.DeleteFunc(m.queue, func(q PostableAlert) bool { return q.Fingerprint == a.Fingerprint })
		}
		m.queue = append(m.queue, a)
	}
	if over := len(m.queue) - m.opts.QueueCapacity; over > 0 {
		m.queue = m.queue[over:]
		m.metrics.dropped.Add(float64(over))
		m.opts.Log.Warn("alertmanager queue full, oldest alerts dropped", "dropped", over)
	}
	m.metrics.queueLength.Set(float64(len(m.queue)))
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Pending returns how many alerts wait in the queue.
func (m *Alertmanagers) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue)
}

func (m *Alertmanagers) take() []PostableAlert {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := min(len(m.queue), m.opts.MaxBatch)
	batch := slices.Clone(m.queue[:n])
	m.queue = m.queue[n:]
	m.metrics.queueLength.Set(float64(len(m.queue)))
	return batch
}

// Run sends queued alerts until ctx ends.
func (m *Alertmanagers) Run(ctx context.Context) {
	for {
		batch := m.take()
		if len(batch) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-m.wake:
				continue
			}
		}
		if err := m.SendNow(ctx, batch); err != nil && ctx.Err() == nil {
			m.opts.Log.Error("no alertmanager took the alerts", "alerts", len(batch), "err", err)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// SendNow POSTs alerts to every Alertmanager at once and waits for their answers. It fails when
// none took them (the error joins each one's), and logs and counts each failure.
func (m *Alertmanagers) SendNow(ctx context.Context, alerts []PostableAlert) error {
	body, err := json.Marshal(alerts)
	if err != nil {
		return fmt.Errorf("encode alerts for alertmanager: %w", err)
	}
	errs := make([]error, len(m.targets))
	var wg sync.WaitGroup
	for i, t := range m.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			code, err := m.post(ctx, t, body)
			m.metrics.latency.WithLabelValues(t.name).Observe(time.Since(start).Seconds())
			if err != nil {
				m.metrics.errors.WithLabelValues(t.name).Add(float64(len(alerts)))
				m.opts.Log.Warn("alertmanager POST failed", "alertmanager", t.name, "alerts", len(alerts), "err", err)
				errs[i] = err
				return
			}
			m.metrics.sent.WithLabelValues(t.name).Add(float64(len(alerts)))
			m.record(ctx, t.name, alerts, Delivery{TS: start, Receiver: t.name, GroupKey: AlertmanagerPath,
				Attempt: 1, OK: true, HTTPStatus: code, Duration: time.Since(start)})
		}()
	}
	wg.Wait()
	if slices.Contains(errs, nil) {
		return nil
	}
	return errors.Join(errs...)
}

// record writes one Delivery to the Recorder for the state changes among alerts that name has
// not taken before (d carries the POST's outcome), and remembers them.
func (m *Alertmanagers) record(ctx context.Context, name string, alerts []PostableAlert, d Delivery) {
	if m.opts.Recorder == nil {
		return
	}
	m.recMu.Lock()
	seen := m.recorded[name]
	if seen == nil {
		seen = map[string]Key{}
		m.recorded[name] = seen
	}
	var fresh []Key
	for _, a := range alerts {
		if a.Fingerprint == "" {
			continue
		}
		k := Key{Receiver: name, Fingerprint: a.Fingerprint, Status: a.Status, StartsAt: a.StartsAt.UTC().Truncate(time.Microsecond)}
		if seen[a.Fingerprint] != k {
			seen[a.Fingerprint] = k
			fresh = append(fresh, k)
		}
	}
	m.recMu.Unlock()
	if len(fresh) == 0 {
		return
	}
	d.Status = "resolved"
	for _, k := range fresh {
		d.Fingerprints, d.Statuses, d.StartsAt = append(d.Fingerprints, k.Fingerprint), append(d.Statuses, k.Status), append(d.StartsAt, k.StartsAt)
		if k.Status == "firing" {
			d.Status = "firing"
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := m.opts.Recorder.RecordDelivery(rctx, d); err != nil {
		// Forget them, so the next send records them again.
		m.recMu.Lock()
		for _, k := range fresh {
			if seen[k.Fingerprint] == k {
				delete(seen, k.Fingerprint)
			}
		}
		m.recMu.Unlock()
		m.metrics.recordFailures.WithLabelValues(name).Inc()
		m.opts.Log.Error("record alertmanager delivery", "alertmanager", name, "err", err)
	}
}

func (m *Alertmanagers) post(ctx context.Context, t amTarget, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, m.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "servescope-detector")
	resp, err := m.opts.Client.Do(req)
	if err != nil {
		// The URL may hold credentials; name the redacted one only.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return 0, fmt.Errorf("POST %s%s: %w", t.name, AlertmanagerPath, err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("POST %s%s: HTTP %d: %s", t.name, AlertmanagerPath, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return resp.StatusCode, nil
}

type amMetrics struct {
	sent, errors   *prometheus.CounterVec
	recordFailures *prometheus.CounterVec
	dropped        prometheus.Counter
	queueLength    prometheus.Gauge
	latency        *prometheus.HistogramVec
}

func newAMMetrics(reg prometheus.Registerer) *amMetrics {
	m := &amMetrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_detector_alertmanager_alerts_sent_total",
			Help: "Alerts an Alertmanager took (2xx answer to the POST that carried them).",
		}, []string{"alertmanager"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_detector_alertmanager_alerts_errors_total",
			Help: "Alerts in POSTs to an Alertmanager that failed (no answer or not 2xx); the next evaluation sends them again.",
		}, []string{"alertmanager"}),
		recordFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_detector_alertmanager_record_failures_total",
			Help: "State changes an Alertmanager took that could not be written to alert_deliveries.",
		}, []string{"alertmanager"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "servescope_detector_alertmanager_alerts_dropped_total",
			Help: "Alerts dropped from the full Alertmanager queue.",
		}),
		queueLength: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "servescope_detector_alertmanager_queue_length",
			Help: "Alerts waiting to be sent to the Alertmanagers.",
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "servescope_detector_alertmanager_latency_seconds",
			Help:    "Duration of one POST to an Alertmanager, in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 8),
		}, []string{"alertmanager"}),
	}
	if reg != nil {
		reg.MustRegister(m.sent, m.errors, m.recordFailures, m.dropped, m.queueLength, m.latency)
	}
	return m
}
