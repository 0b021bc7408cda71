// Package bus names servescope's JetStream streams and subjects and provisions them.
//
// One subject prefix (default "servescope") derives everything:
//
//	stream SERVESCOPE      subjects servescope.v1.>   the events, one subject per kind
//	stream SERVESCOPE_DLQ  subjects servescope.dlq.>  events the consumer could not take, with the reason
//
// Tests use their own prefix so they never see each other's messages.
package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/internal/config"
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

// StreamSettings are the events stream's limits.
type StreamSettings struct {
	// MaxAge is how long messages are kept.
	MaxAge time.Duration
	// MaxBytes caps the stream's size; the oldest messages are discarded first.
	MaxBytes int64
	// Replicas is 1, or 3 on a NATS cluster.
	Replicas int
}

// DuplicateWindow is how long JetStream remembers Nats-Msg-Id values to drop a re-published event.
const DuplicateWindow = 2 * time.Minute

// DLQMaxAge is how long dead letters are kept for inspection.
const DLQMaxAge = 30 * 24 * time.Hour

// StreamConfigs returns the configurations of the events stream and the dead-letter stream.
func (t Topology) StreamConfigs(s StreamSettings) (events, dlq jetstream.StreamConfig) {
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
	dlqBytes := s.MaxBytes / 10
	if dlqBytes < 64<<20 {
		dlqBytes = 64 << 20
	}
	dlq = jetstream.StreamConfig{
		Name:        t.DLQStream(),
		Description: "servescope events refused by the consumer, with the reason in " + HeaderDLQReason,
		Subjects:    []string{t.DLQSubjects()},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      DLQMaxAge,
		MaxBytes:    dlqBytes,
		Replicas:    s.Replicas,
		Duplicates:  DuplicateWindow,
	}
	return events, dlq
}

// Provision creates the events and dead-letter streams, or updates them to these settings when
// they exist. It is idempotent and safe to run from every service at start.
func Provision(ctx context.Context, js jetstream.JetStream, t Topology, s StreamSettings) error {
	events, dlq := t.StreamConfigs(s)
	for _, cfg := range []jetstream.StreamConfig{events, dlq} {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			if errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
				return fmt.Errorf("provision stream %s: JetStream is not enabled on the server (start nats-server with -js): %w", cfg.Name, err)
			}
			return fmt.Errorf("provision stream %s on %s: %w", cfg.Name, cfg.Subjects[0], err)
		}
	}
	return nil
}

// Settings returns the stream limits configured in n.
func Settings(n *config.NATS) StreamSettings {
	return StreamSettings{MaxAge: n.StreamMaxAge, MaxBytes: n.StreamMaxBytes, Replicas: n.StreamReplicas}
}

// FromConfig returns the topology configured in n.
func FromConfig(n *config.NATS) Topology { return Topology{Prefix: n.SubjectPrefix} }
