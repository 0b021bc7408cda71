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
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/internal/retry"
)

// Delivery is one attempt to POST one message to one receiver.
type Delivery struct {
	TS       time.Time
	Receiver string
	GroupKey string
	// Status is the message's status (firing or resolved).
	Status  string
	Attempt int
	OK      bool
	// HTTPStatus is the receiver's answer (0 when none arrived).
	HTTPStatus   int
	Error        string
	Duration     time.Duration
	Fingerprints []string
	// Statuses and StartsAt are, parallel to Fingerprints, each alert's own status and startsAt:
	// with the fingerprint they are the [Key] of the state change the message carried.
	Statuses []string
	StartsAt []time.Time
}

// Key identifies one state change of one alert at one receiver: fingerprint, status and startsAt
// are what an Alertmanager receiver de-duplicates by. StartsAt is in UTC at microsecond precision,
// as alert_deliveries stores it.
type Key struct {
	Receiver, Fingerprint, Status string
	StartsAt                      time.Time
}

// KeyOf returns the key of a's state change at receiver.
func KeyOf(receiver string, a Alert) Key {
	return Key{Receiver: receiver, Fingerprint: a.Fingerprint, Status: a.Status, StartsAt: a.StartsAt.UTC().Truncate(time.Microsecond)}
}

// Recorder stores delivery attempts (see [CHRecorder]).
type Recorder interface {
	RecordDelivery(ctx context.Context, d Delivery) error
}

// Options configure a [Notifier].
type Options struct {
	// URLs are the webhook receivers; each gets every alert.
	URLs []string
	// Secret, when not empty, signs each body (SignatureHeader).
	Secret []byte
	// ExternalURL is the message's externalURL (where the detector is reachable).
	ExternalURL string
	// QueueCapacity bounds each receiver's queue (default 1000); when full the oldest alert is dropped.
	// A queued alert is replaced when a later state change of the same alert (same fingerprint and
	// startsAt) is queued, so a receiver never gets a stale firing after its resolution.
	QueueCapacity int
	// MaxBatch is the most alerts taken from a queue for one round of sends (default 64).
	MaxBatch int
	// BackoffBase and BackoffMax bound the wait between attempts (defaults 500 ms and 30 s); each wait
	// is drawn uniformly from [b/2, b] where b doubles per attempt up to BackoffMax.
	BackoffBase, BackoffMax time.Duration
	// GiveUpAfter stops retrying a message once another attempt would start this long after its
	// first attempt (default 24 h).
	GiveUpAfter time.Duration
	// Timeout bounds one POST (default 10 s).
	Timeout time.Duration
	Client  *http.Client
	// Recorder, Registerer and Log are optional.
	Recorder   Recorder
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

// Notifier fans alerts out to its receivers.
type Notifier struct {
	receivers []*receiver
	metrics   *metrics
}

// New validates the receivers' URLs and prepares the notifier; call Run to start delivering.
func New(opts Options) (*Notifier, error) {
	if opts.QueueCapacity <= 0 {
		opts.QueueCapacity = 1000
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 64
	}
	if opts.BackoffBase <= 0 {
		opts.BackoffBase = 500 * time.Millisecond
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = 30 * time.Second
	}
	if opts.GiveUpAfter <= 0 {
		opts.GiveUpAfter = 24 * time.Hour
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
	n := &Notifier{metrics: newMetrics(opts.Registerer)}
	names := map[string]bool{}
	for _, raw := range opts.URLs {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("webhook URL %q: want an absolute http(s) URL", redact(raw))
		}
		// Deliveries are recorded under the redacted URL; two receivers sharing it would share
		// their delivered state, and one could miss a notification after a restart.
		if names[redact(raw)] {
			return nil, fmt.Errorf("webhook URL %q: listed twice, or differs from another only in credentials or query", redact(raw))
		}
		names[redact(raw)] = true
		n.receivers = append(n.receivers, &receiver{
			name: redact(raw), url: raw, opts: opts, metrics: n.metrics, wake: make(chan struct{}, 1),
		})
	}
	return n, nil
}

// redact drops credentials and the query from a URL, for logs, metrics and the receiver name.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "invalid-url"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// Send enqueues alerts for every receiver. It never blocks on a receiver.
func (n *Notifier) Send(alerts ...Alert) {
	for _, r := range n.receivers {
		r.enqueue(alerts)
	}
}

// Receivers returns the receivers' names (their URLs without credentials or query), as recorded
// in Delivery.Receiver.
func (n *Notifier) Receivers() []string {
	out := make([]string, len(n.receivers))
	for i, r := range n.receivers {
		out[i] = r.name
	}
	return out
}

// SendTo enqueues alerts for the receiver named receiver only (one of Receivers), e.g. to deliver
// after a restart what that receiver never accepted. It never blocks on the receiver.
func (n *Notifier) SendTo(receiver string, alerts ...Alert) error {
	for _, r := range n.receivers {
		if r.name == receiver {
			r.enqueue(alerts)
			return nil
		}
	}
	return fmt.Errorf("send to webhook receiver %s: not configured", receiver)
}

// Pending returns how many alerts are queued or being delivered, over all receivers.
func (n *Notifier) Pending() int {
	total := 0
	for _, r := range n.receivers {
		r.mu.Lock()
		total += len(r.queue) + r.inflight
		r.mu.Unlock()
	}
	return total
}

// Run delivers until ctx ends.
func (n *Notifier) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, r := range n.receivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.run(ctx)
		}()
	}
	wg.Wait()
}

type receiver struct {
	name, url string
	opts      Options
	metrics   *metrics

	mu    sync.Mutex
	queue []Alert
	// inflight is the number of alerts taken from the queue and not yet delivered or abandoned.
	inflight int
	wake     chan struct{}
}

// sameEpisode reports whether a and b are states of the same alert since the same start: b, queued
// later, supersedes a (a resolution its firing, a reminder the firing it repeats).
func sameEpisode(a, b Alert) bool {
	return a.Fingerprint == b.Fingerprint && a.StartsAt.Equal(b.StartsAt)
}

func (r *receiver) enqueue(alerts []Alert) {
	r.mu.Lock()
	for _, a := range alerts {
		r.queue = slices.DeleteFunc(r.queue, func(q Alert) bool { return sameEpisode(q, a) })
		r.queue = append(r.queue, a)
	}
	if over := len(r.queue) - r.opts.QueueCapacity; over > 0 {
		r.queue = r.queue[over:]
		r.metrics.dropped.WithLabelValues(r.name, "queue_full").Add(float64(over))
		r.opts.Log.Warn("webhook queue full, oldest alerts dropped", "receiver", r.name, "dropped", over)
	}
	r.metrics.queueLength.WithLabelValues(r.name).Set(float64(len(r.queue)))
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// take removes up to MaxBatch alerts from the queue, stopping before a fingerprint already taken
// so that a firing and its later resolution go out in order, in separate messages.
func (r *receiver) take() []Alert {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	n := 0
	for n < len(r.queue) && n < r.opts.MaxBatch && !seen[r.queue[n].Fingerprint] {
		seen[r.queue[n].Fingerprint] = true
		n++
	}
	batch := append([]Alert(nil), r.queue[:n]...)
	r.queue = r.queue[n:]
	r.inflight += n
	r.metrics.queueLength.WithLabelValues(r.name).Set(float64(len(r.queue)))
	return batch
}

// done marks n taken alerts as delivered or abandoned.
func (r *receiver) done(n int) {
	r.mu.Lock()
	r.inflight -= n
	r.mu.Unlock()
}

// current drops from alerts those superseded by a state change queued since they were taken.
func (r *receiver) current(alerts []Alert) []Alert {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(alerts), func(a Alert) bool {
		return slices.ContainsFunc(r.queue, func(q Alert) bool { return sameEpisode(a, q) })
	})
}

func (r *receiver) run(ctx context.Context) {
	for {
		batch := r.take()
		if len(batch) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
				continue
			}
		}
		for _, group := range groupByName(batch) {
			err := r.deliver(ctx, group)
			r.done(len(group))
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				r.metrics.dropped.WithLabelValues(r.name, "gave_up").Add(float64(len(group)))
				r.opts.Log.Error("webhook delivery abandoned", "receiver", r.name, "alerts", len(group), "err", err)
			}
		}
	}
}

// deliver POSTs the message of alerts (one group) until the receiver accepts it, it refuses it for
// good (4xx other than 408/429), GiveUpAfter passes, or ctx ends, waiting between attempts as
// Options says. Before each retry it drops the alerts superseded by a newer queued state change
// (which will go out in their place), and stops when none is left.
func (r *receiver) deliver(ctx context.Context, alerts []Alert) error {
	first := time.Now()
	attempt := 0
	policy := retry.Policy{Min: r.opts.BackoffBase, Max: r.opts.BackoffMax, GiveUpAfter: r.opts.GiveUpAfter}
	return retry.Do(ctx, policy, func(ctx context.Context) error {
		attempt++
		if attempt > 1 {
			if alerts = r.current(alerts); len(alerts) == 0 {
				r.opts.Log.Info("webhook message superseded by a newer state of its alerts", "receiver", r.name)
				return nil
			}
		}
		m := NewMessage(r.name, r.opts.ExternalURL, alerts)
		body, err := json.Marshal(m)
		if err != nil {
			return retry.Permanent(fmt.Errorf("encode webhook message: %w", err))
		}
		fps, statuses, starts := make([]string, len(alerts)), make([]string, len(alerts)), make([]time.Time, len(alerts))
		for i, a := range alerts {
			fps[i], statuses[i], starts[i] = a.Fingerprint, a.Status, a.StartsAt
		}
		start := time.Now()
		code, err := r.post(ctx, body)
		d := Delivery{TS: start, Receiver: r.name, GroupKey: m.GroupKey, Status: m.Status, Attempt: attempt,
			OK: err == nil, HTTPStatus: code, Duration: time.Since(start), Fingerprints: fps,
			Statuses: statuses, StartsAt: starts}
		if err != nil {
			d.Error = err.Error()
		}
		r.record(ctx, d)
		if err == nil {
			r.metrics.sent.WithLabelValues(r.name).Add(float64(len(m.Alerts)))
			r.metrics.latency.WithLabelValues(r.name).Observe(time.Since(first).Seconds())
			r.opts.Log.Info("webhook delivered", "receiver", r.name, "group_key", m.GroupKey, "status", m.Status,
				"alerts", len(m.Alerts), "attempt", attempt)
			return nil
		}
		if code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests {
			return retry.Permanent(fmt.Errorf("receiver refused the message: %w", err))
		}
		return err
	}, func(attempt int, err error, wait time.Duration) {
		r.opts.Log.Warn("webhook attempt failed", "receiver", r.name, "attempt", attempt, "retry_in", wait, "err", err)
	})
}

func (r *receiver) post(ctx context.Context, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "servescope-detector")
	if len(r.opts.Secret) > 0 {
		req.Header.Set(SignatureHeader, Sign(r.opts.Secret, body))
	}
	resp, err := r.opts.Client.Do(req)
	if err != nil {
		r.metrics.attempts.WithLabelValues(r.name, "error").Inc()
		// The URL may hold a token; report the redacted receiver name only.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return 0, fmt.Errorf("POST %s: %w", r.name, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		r.metrics.attempts.WithLabelValues(r.name, "http_"+fmt.Sprint(resp.StatusCode/100)+"xx").Inc()
		return resp.StatusCode, fmt.Errorf("POST %s: HTTP %d", r.name, resp.StatusCode)
	}
	r.metrics.attempts.WithLabelValues(r.name, "ok").Inc()
	return resp.StatusCode, nil
}

func (r *receiver) record(ctx context.Context, d Delivery) {
	if r.opts.Recorder == nil {
		return
	}
	// Recording must not stop a delivery: a failure is logged and counted.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.opts.Recorder.RecordDelivery(rctx, d); err != nil {
		r.metrics.recordFailures.WithLabelValues(r.name).Inc()
		r.opts.Log.Error("record webhook delivery", "receiver", r.name, "err", err)
	}
}

type metrics struct {
	sent, recordFailures *prometheus.CounterVec
	attempts, dropped    *prometheus.CounterVec
	latency              *prometheus.HistogramVec
	queueLength          *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_detector_notifications_sent_total",
			Help: "Alerts delivered to a webhook receiver.",
		}, []string{"receiver"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_detector_notification_attempts_total",
			Help: "POSTs to a webhook receiver by result (ok, error, http_4xx, http_5xx).",
		}, []string{"receiver", "result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_detector_notifications_dropped_total",
			Help: "Alerts never delivered to a receiver, by reason (queue_full, gave_up).",
		}, []string{"receiver", "reason"}),
		recordFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_detector_delivery_record_failures_total",
			Help: "Delivery attempts that could not be written to alert_deliveries.",
		}, []string{"receiver"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "servescope_detector_notification_latency_seconds",
			Help:    "Time from a message's first attempt to its successful delivery, in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10),
		}, []string{"receiver"}),
		queueLength: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "servescope_detector_notification_queue_length",
			Help: "Alerts waiting to be sent to a receiver.",
		}, []string{"receiver"}),
	}
	if reg != nil {
		reg.MustRegister(m.sent, m.attempts, m.dropped, m.recordFailures, m.latency, m.queueLength)
	}
	return m
}
