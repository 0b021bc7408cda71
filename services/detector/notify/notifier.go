package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	QueueCapacity int
	// MaxBatch is the most alerts taken from a queue for one round of sends (default 64).
	MaxBatch int
	// BackoffBase and BackoffMax bound the wait between attempts (defaults 500 ms and 30 s); each wait
	// is drawn uniformly from [b/2, b] where b doubles per attempt up to BackoffMax.
	BackoffBase, BackoffMax time.Duration
	// GiveUpAfter stops retrying a message this long after its first attempt (default 24 h).
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
	for _, raw := range opts.URLs {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("webhook URL %q: want an absolute http(s) URL", redact(raw))
		}
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
	wake  chan struct{}
}

func (r *receiver) enqueue(alerts []Alert) {
	r.mu.Lock()
	r.queue = append(r.queue, alerts...)
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
	r.metrics.queueLength.WithLabelValues(r.name).Set(float64(len(r.queue)))
	return batch
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
			err := r.deliver(ctx, NewMessage(r.name, r.opts.ExternalURL, group))
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

// deliver POSTs m until the receiver accepts it, it refuses it for good (4xx other than 408/429),
// GiveUpAfter passes, or ctx ends.
func (r *receiver) deliver(ctx context.Context, m Message) error {
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode webhook message: %w", err)
	}
	fps := make([]string, len(m.Alerts))
	for i, a := range m.Alerts {
		fps[i] = a.Fingerprint
	}
	first := time.Now()
	backoff := r.opts.BackoffBase
	for attempt := 1; ; attempt++ {
		start := time.Now()
		code, err := r.post(ctx, body)
		d := Delivery{TS: start, Receiver: r.name, GroupKey: m.GroupKey, Status: m.Status, Attempt: attempt,
			OK: err == nil, HTTPStatus: code, Duration: time.Since(start), Fingerprints: fps}
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
			return fmt.Errorf("receiver refused the message: %w", err)
		}
		if time.Since(first) >= r.opts.GiveUpAfter {
			return fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		r.opts.Log.Warn("webhook attempt failed", "receiver", r.name, "attempt", attempt, "err", err)
		wait := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		backoff = min(backoff*2, r.opts.BackoffMax)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
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
