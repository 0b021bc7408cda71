package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the consumer's own Prometheus metrics. Create them with [NewMetrics].
type Metrics struct {
	// Pending is the consumer lag: messages in the stream not yet delivered to the durable
	// consumer (JetStream's num_pending), polled from the consumer info.
	Pending prometheus.Gauge
	// AckPending is delivered messages not yet acknowledged (num_ack_pending), polled likewise.
	AckPending prometheus.Gauge
	// BatchRows is the row count of each insert, by table.
	BatchRows *prometheus.HistogramVec
	// FlushSeconds is how long one successful flush took (insert plus acks), by table.
	FlushSeconds *prometheus.HistogramVec
	// InsertErrors counts failed insert attempts, by table and class (retry, split, refuse,
	// unknown: see package sink).
	InsertErrors *prometheus.CounterVec
	// BatchSplits counts batches (or parts of them) halved because ClickHouse refused them for
	// their shape or for a row it did not name, by table.
	BatchSplits *prometheus.CounterVec
	// RowsInserted counts rows ClickHouse accepted, by table.
	RowsInserted *prometheus.CounterVec
	// DeadLettered counts messages sent to the dead-letter stream, by refusal reason: the
	// decoder's ("invalid_json", "invalid", ...) or "clickhouse" for rows ClickHouse refused.
	DeadLettered *prometheus.CounterVec
	// Acked counts messages acknowledged (or terminated, for dead letters) after their insert.
	Acked prometheus.Counter
	// AckErrors counts acks that could not be sent; those messages are redelivered and
	// de-duplicated.
	AckErrors prometheus.Counter
	// ConsumeErrors counts errors reported while consuming from JetStream (missed heartbeats,
	// the durable consumer gone, consuming stopped and restarted).
	ConsumeErrors prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "servescope_consumer_pending_messages",
			Help: "Consumer lag: messages in the events stream not yet delivered to the durable consumer (JetStream num_pending).",
		}),
		AckPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "servescope_consumer_ack_pending_messages",
			Help: "Messages delivered to the durable consumer and not yet acknowledged (JetStream num_ack_pending).",
		}),
		BatchRows: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "servescope_consumer_batch_rows",
			Help:    "Rows per insert into ClickHouse.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9),
		}, []string{"table"}),
		FlushSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "servescope_consumer_flush_duration_seconds",
			Help:    "Time of one successful flush: the ClickHouse insert and the acknowledgements, in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"table"}),
		InsertErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_consumer_insert_errors_total",
			Help: "Failed insert attempts into ClickHouse, by class: retry (the batch is retried), split (halved), refuse (rows dead-lettered), unknown (retried a bounded number of times).",
		}, []string{"table", "class"}),
		BatchSplits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_consumer_batch_splits_total",
			Help: "Batches or parts of batches halved because ClickHouse refused them for their shape or for a row it did not name.",
		}, []string{"table"}),
		RowsInserted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_consumer_rows_inserted_total",
			Help: "Rows accepted by ClickHouse.",
		}, []string{"table"}),
		DeadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_consumer_dead_lettered_total",
			Help: "Messages refused (undecodable, invalid, or refused by ClickHouse), sent to the dead-letter stream and recorded in ingest_errors.",
		}, []string{"reason"}),
		Acked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "servescope_consumer_acked_messages_total",
			Help: "Messages acknowledged (or terminated, for dead letters) after ClickHouse accepted their insert.",
		}),
		AckErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "servescope_consumer_ack_errors_total",
			Help: "Acknowledgements that could not be sent; the messages are redelivered and de-duplicated.",
		}),
		ConsumeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "servescope_consumer_consume_errors_total",
			Help: "Errors reported while consuming from JetStream (missed heartbeats, consumer gone); consuming recovers or is restarted with backoff.",
		}),
	}
	reg.MustRegister(m.Pending, m.AckPending, m.BatchRows, m.FlushSeconds, m.InsertErrors, m.BatchSplits,
		m.RowsInserted, m.DeadLettered, m.Acked, m.AckErrors, m.ConsumeErrors)
	return m
}
