// Package bus names servescope's JetStream streams and subjects, sets them up, and checks them.
//
// One subject prefix (default "servescope") derives everything:
//
//	stream SERVESCOPE      subjects servescope.v1.>   the events, one subject per kind
//	stream SERVESCOPE_DLQ  subjects servescope.dlq.>  events the consumer could not take, with the reason
//	durable consumer servescope-writer on SERVESCOPE  the consumer's, filtered on servescope.v1.>
//	key-value bucket SERVESCOPE_LEASES  leases: which instance does a job one instance at a time does
//
// Each resource has one owner: the setup step ([Setup], run by `servescope migrate up` and
// `servescope streams up`) creates them and is the only code that changes them. The services
// check rather than change ([CheckStream], [CheckConsumer]): a resource missing, or unable to
// serve the service (a subject it publishes not taken, the consumer's filter too narrow), is an
// error wrapping [ErrNotSetUp]; one whose limits differ from the service's own settings is used
// as it is and the differences are logged ([LogDifferences]).
//
// Tests use their own prefix so they never see each other's messages.
package bus

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/schema"
)

// Headers set on dead-lettered messages.
const (
	// HeaderDLQReason is the reason the consumer refused the message.
	HeaderDLQReason = "Servescope-Dlq-Reason"
	// HeaderDLQSubject is the subject the message was first published on.
	HeaderDLQSubject = "Servescope-Original-Subject"
	// HeaderDLQStreamSeq is the message's sequence in the events stream.
	HeaderDLQStreamSeq = "Servescope-Original-Seq"
	// HeaderDLQPayloadTruncated is set, to the original payload's length in bytes, on the rare
	// dead letter whose payload had to be cut to fit the server's max_payload with these
	// headers; the ingest_errors row keeps the whole payload.
	HeaderDLQPayloadTruncated = "Servescope-Dlq-Payload-Truncated"
)

// Topology derives stream and subject names from a subject prefix.
type Topology struct {
	// Prefix is the first subject token, e.g. "servescope".
	Prefix string
}

// Default is the topology of a default deployment.
func Default() Topology { return Topology{Prefix: schema.DefaultPrefix} }

// Stream is the events stream's name: the prefix upper-cased, '-' and '.' as '_' ("SERVESCOPE").
func (t Topology) Stream() string {
	return strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(t.Prefix))
}

// DLQStream is the dead-letter stream's name ("SERVESCOPE_DLQ").
func (t Topology) DLQStream() string { return t.Stream() + "_DLQ" }

// Subjects is the events stream's subject filter ("servescope.v1.>").
func (t Topology) Subjects() string { return t.Prefix + "." + schema.Version + ".>" }

// Subject is the subject of kind k ("servescope.v1.request.finished").
func (t Topology) Subject(k schema.Kind) string { return schema.SubjectWithPrefix(t.Prefix, k) }

// DLQSubjects is the dead-letter stream's subject filter ("servescope.dlq.>").
func (t Topology) DLQSubjects() string { return t.Prefix + ".dlq.>" }

// DLQSubject is where a message refused from originalSubject goes: the original subject with the
// version token replaced by "dlq" ("servescope.dlq.v1.request.finished"), or
// "<prefix>.dlq.unknown" when the subject is not one of ours.
func (t Topology) DLQSubject(originalSubject string) string {
	if rest, ok := strings.CutPrefix(originalSubject, t.Prefix+"."); ok && rest != "" {
		return t.Prefix + ".dlq." + rest
	}
	return t.Prefix + ".dlq.unknown"
}

// StreamSettings are the events stream's limits. A zero field is unset: [Setup] applies
// [DefaultStreamSettings]' value, a check does not compare it.
type StreamSettings struct {
	// MaxAge is how long messages are kept.
	MaxAge time.Duration
	// MaxBytes caps the stream's size; the oldest messages are discarded first.
	MaxBytes int64
	// Replicas is 1, or 3 on a NATS cluster (the lease bucket's too).
	Replicas int
	// LeaseTTL is the lease bucket's TTL: how long a lease outlives its holder's last renewal.
	LeaseTTL time.Duration
}

// DefaultStreamSettings are the limits the setup step gives the events stream when none are
// configured: 7 days, 10 GiB, one replica, leases expiring after [DefaultLeaseTTL].
var DefaultStreamSettings = StreamSettings{MaxAge: 7 * 24 * time.Hour, MaxBytes: 10 << 30, Replicas: 1, LeaseTTL: DefaultLeaseTTL}

func (s StreamSettings) withDefaults() StreamSettings {
	if s.MaxAge <= 0 {
		s.MaxAge = DefaultStreamSettings.MaxAge
	}
	if s.MaxBytes <= 0 {
		s.MaxBytes = DefaultStreamSettings.MaxBytes
	}
	if s.Replicas <= 0 {
		s.Replicas = DefaultStreamSettings.Replicas
	}
	if s.LeaseTTL <= 0 {
		s.LeaseTTL = DefaultStreamSettings.LeaseTTL
	}
	return s
}

// DuplicateWindow is how long JetStream remembers Nats-Msg-Id values to drop a re-published event.
const DuplicateWindow = 2 * time.Minute

// DLQMaxAge is how long dead letters are kept for inspection.
const DLQMaxAge = 30 * 24 * time.Hour

// dlqMaxBytes is the dead-letter stream's cap for an events stream of maxBytes: a tenth, at
// least 64 MiB.
func dlqMaxBytes(maxBytes int64) int64 { return max(maxBytes/10, 64<<20) }

// StreamConfigs returns the configurations of the events stream and the dead-letter stream with
// limits s (zero fields take DefaultStreamSettings').
func (t Topology) StreamConfigs(s StreamSettings) (events, dlq jetstream.StreamConfig) {
	s = s.withDefaults()
	events = jetstream.StreamConfig{
		Name:        t.Stream(),
		Description: "servescope events (schema " + schema.Version + ")",
		Subjects:    []string{t.Subjects()},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      s.MaxAge,
		MaxBytes:    s.MaxBytes,
		Replicas:    s.Replicas,
		Duplicates:  DuplicateWindow,
	}
	dlq = jetstream.StreamConfig{
		Name:        t.DLQStream(),
		Description: "servescope events refused by the consumer, with the reason in " + HeaderDLQReason,
		Subjects:    []string{t.DLQSubjects()},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      DLQMaxAge,
		MaxBytes:    dlqMaxBytes(s.MaxBytes),
		Replicas:    s.Replicas,
		Duplicates:  DuplicateWindow,
	}
	return events, dlq
}

// Expected returns what a service configured with s expects of the events and dead-letter
// streams' limits, for [CheckStream] and [CheckConsumer]: the limits set in s, the fixed
// duplicate window and dead-letter age, and zero (not compared) for what s leaves unset.
func (t Topology) Expected(s StreamSettings) (events, dlq jetstream.StreamConfig) {
	events = jetstream.StreamConfig{Name: t.Stream(), MaxAge: s.MaxAge, MaxBytes: s.MaxBytes, Replicas: s.Replicas, Duplicates: DuplicateWindow}
	dlq = jetstream.StreamConfig{Name: t.DLQStream(), MaxAge: DLQMaxAge, Replicas: s.Replicas, Duplicates: DuplicateWindow}
	if s.MaxBytes > 0 {
		dlq.MaxBytes = dlqMaxBytes(s.MaxBytes)
	}
	return events, dlq
}

// Durable is the consumer's durable pull consumer on the events stream.
type Durable struct {
	// Name is the durable name (CONSUMER_DURABLE), shared by every consumer instance.
	Name string
	// AckWait is how long the server waits for an acknowledgement before it redelivers.
	AckWait time.Duration
	// MaxAckPending caps the messages delivered and not yet acknowledged.
	MaxAckPending int
}

// DurableFor sizes the durable consumer named name for a consumer that inserts batches of
// batchRows rows at least every flushInterval: AckWait = max(30 s, 10 × flushInterval) and
// MaxAckPending = 4 × batchRows + min(batchRows, 1000), the second term being the consumer's
// pull buffer. Package services/consumer/pipeline documents why.
func DurableFor(name string, batchRows int, flushInterval time.Duration) Durable {
	return Durable{
		Name:          name,
		AckWait:       max(30*time.Second, 10*flushInterval),
		MaxAckPending: 4*batchRows + min(batchRows, 1000),
	}
}

// ConsumerConfig is d on t's events stream: a pull consumer of every event subject from the
// stream's start, explicit acks, redelivered without limit (the consumer gives up on a message
// only by terminating it after dead-lettering).
func (t Topology) ConsumerConfig(d Durable) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       d.Name,
		Description:   "servescope consumer: events into ClickHouse, acknowledged after the insert",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: d.MaxAckPending,
		FilterSubject: t.Subjects(),
	}
}
