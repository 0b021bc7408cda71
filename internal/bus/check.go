package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/schema"
)

// SetupCommand is what an operator runs to create the streams and the durable consumer.
const SetupCommand = "servescope migrate up"

// ErrNotSetUp is wrapped by the errors of [CheckStream] and [CheckConsumer] when a stream or the
// durable consumer is missing or cannot serve the service; running [SetupCommand] fixes it.
var ErrNotSetUp = errors.New("JetStream resources not set up")

// SetupError says what is missing or wrong, and what to run.
type SetupError struct {
	// What is missing or wrong, e.g. "stream SERVESCOPE (subjects servescope.v1.>) does not exist".
	What string
}

func (e *SetupError) Error() string {
	return e.What + ": run `" + SetupCommand + "` (or `servescope streams up`), which creates the streams, the durable consumer and the lease bucket and owns their settings"
}

// Is makes errors.Is(err, ErrNotSetUp) hold.
func (e *SetupError) Is(target error) bool { return target == ErrNotSetUp }

// Difference is one setting of a stream or durable consumer that differs from what a service (or
// the setup step) is configured with.
type Difference struct {
	// Stream is the stream's name; Consumer the durable consumer's, "" for a stream. Bucket is
	// set instead of both for the lease key-value bucket.
	Stream, Consumer, Bucket string
	// Setting is NATS's name of the setting: max_age, max_bytes, num_replicas, duplicate_window,
	// ack_wait, max_ack_pending, max_deliver, a bucket's ttl and history, ...
	Setting string
	// Server is the value in force on the server; Service the value configured here.
	Server, Service string
}

// CheckStream verifies that t's events stream exists and takes the subject of each kind, and
// returns the limits in which it differs from want (only want's non-zero MaxAge, MaxBytes,
// Replicas and Duplicates are compared; [Topology.Expected] gives them). The stream is never
// changed. A stream missing, sealed, or not taking a subject is a [*SetupError]; other errors are
// NATS's (unreachable, JetStream not enabled, no permission).
func CheckStream(ctx context.Context, js jetstream.JetStream, t Topology, kinds []schema.Kind, want jetstream.StreamConfig) ([]Difference, error) {
	subjects := make([]string, len(kinds))
	for i, k := range kinds {
		subjects[i] = t.Subject(k)
	}
	want.Name = t.Stream()
	return checkStream(ctx, js, want, t.Subjects(), subjects)
}

// CheckConsumer verifies what the consumer needs: the events stream taking every kind's subject,
// the dead-letter stream taking every dead-letter subject, and the durable consumer d on the
// events stream, pulled, with explicit acks and a filter that lets every kind through. It
// returns the durable consumer, ready to consume, and every limit in which the streams differ
// from s's set fields (and the fixed duplicate window and dead-letter age) or the durable
// consumer from d (ack_wait, max_ack_pending), from redelivery without limit (max_deliver) and,
// when s sets Replicas, from the stream's replica count (num_replicas).
// Nothing is changed. Errors are as [CheckStream]'s.
func CheckConsumer(ctx context.Context, js jetstream.JetStream, t Topology, d Durable, s StreamSettings) (jetstream.Consumer, []Difference, error) {
	events, dlq := t.Expected(s)
	kinds := schema.Kinds()
	diffs, err := CheckStream(ctx, js, t, kinds, events)
	if err != nil {
		return nil, nil, err
	}
	dlqSubjects := []string{t.DLQSubject("")}
	for _, k := range kinds {
		dlqSubjects = append(dlqSubjects, t.DLQSubject(t.Subject(k)))
	}
	dlqDiffs, err := checkStream(ctx, js, dlq, t.DLQSubjects(), dlqSubjects)
	if err != nil {
		return nil, nil, err
	}
	diffs = append(diffs, dlqDiffs...)

	want := t.ConsumerConfig(d)
	c, err := js.Consumer(ctx, t.Stream(), d.Name)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, nil, &SetupError{What: fmt.Sprintf("durable consumer %s on stream %s does not exist", d.Name, t.Stream())}
	case errors.Is(err, jetstream.ErrNotPullConsumer):
		return nil, nil, &SetupError{What: fmt.Sprintf("durable consumer %s on stream %s is a push consumer; the consumer reads a pull consumer (remove it with `nats consumer rm %s %s`)", d.Name, t.Stream(), t.Stream(), d.Name)}
	case err != nil:
		return nil, nil, fmt.Errorf("read durable consumer %s on stream %s: %w", d.Name, t.Stream(), err)
	}
	have := c.CachedInfo().Config
	if have.AckPolicy != jetstream.AckExplicitPolicy {
		return nil, nil, &SetupError{What: fmt.Sprintf("durable consumer %s on stream %s has ack_policy %s; the consumer acknowledges each message after its insert and needs %s (remove it with `nats consumer rm %s %s`)",
			d.Name, t.Stream(), have.AckPolicy, jetstream.AckExplicitPolicy, t.Stream(), d.Name)}
	}
	if fs := filters(have); len(fs) > 0 {
		for _, k := range kinds {
			if !anyMatches(fs, t.Subject(k)) {
				return nil, nil, &SetupError{What: fmt.Sprintf("durable consumer %s on stream %s filters %s, so %s events (subject %s) would never reach ClickHouse",
					d.Name, t.Stream(), strings.Join(fs, ","), k, t.Subject(k))}
			}
		}
	}
	diffs = append(diffs, consumerLimitDifferences(t.Stream(), have, want)...)
	return c, append(diffs, consumerReplicaDifferences(t.Stream(), have, s.Replicas)...), nil
}

// checkStream verifies that the stream want.Name exists, is not sealed and takes each subject,
// and returns its limits that differ from want's non-zero ones. filter is what the setup step
// gives the stream, for the error message.
func checkStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, filter string, subjects []string) ([]Difference, error) {
	st, err := js.Stream(ctx, want.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, &SetupError{What: fmt.Sprintf("stream %s (subjects %s) does not exist", want.Name, filter)}
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		return nil, fmt.Errorf("read stream %s: JetStream is not enabled on the server (start nats-server with -js): %w", want.Name, err)
	case err != nil:
		return nil, fmt.Errorf("read stream %s: %w", want.Name, err)
	}
	have := st.CachedInfo().Config
	if have.Sealed {
		return nil, &SetupError{What: fmt.Sprintf("stream %s is sealed and takes no messages", want.Name)}
	}
	for _, s := range subjects {
		if !anyMatches(have.Subjects, s) {
			return nil, &SetupError{What: fmt.Sprintf("stream %s takes subjects %s, not %s", want.Name, strings.Join(have.Subjects, ","), s)}
		}
	}
	return limitDifferences(have, want), nil
}

// anyMatches reports whether one of the NATS subject filters matches the literal subject.
func anyMatches(filters []string, subject string) bool {
	for _, f := range filters {
		if subjectMatches(f, subject) {
			return true
		}
	}
	return false
}

// subjectMatches reports whether the NATS subject filter f matches the literal subject s: '*'
// matches one token, a final '>' one or more.
func subjectMatches(f, s string) bool {
	ft, st := strings.Split(f, "."), strings.Split(s, ".")
	for i, tok := range ft {
		if tok == ">" && i == len(ft)-1 {
			return len(st) > i
		}
		if i >= len(st) || (tok != "*" && tok != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}

// LogDifferences logs diffs as one warning per stream or durable consumer, naming each setting
// with the server's value and this service's, e.g.
//
//	level=WARN msg="JetStream stream differs from this service's settings; using it as it is" stream=SERVESCOPE max_age.server=168h0m0s max_age.service=24h0m0s setup="servescope migrate up"
//
// The setup step owns the resources: a service uses them as they are, and only `servescope
// migrate up` run with the service's settings would change them.
func LogDifferences(log *slog.Logger, diffs []Difference) {
	type resource struct{ stream, consumer, bucket string }
	var order []resource
	groups := map[resource][]any{}
	for _, d := range diffs {
		r := resource{d.Stream, d.Consumer, d.Bucket}
		if _, ok := groups[r]; !ok {
			order = append(order, r)
		}
		groups[r] = append(groups[r], slog.Group(d.Setting, slog.String("server", d.Server), slog.String("service", d.Service)))
	}
	for _, r := range order {
		msg := "JetStream stream differs from this service's settings; using it as it is"
		args := []any{slog.String("stream", r.stream)}
		if r.bucket != "" {
			msg = "JetStream key-value bucket differs from this service's settings; using it as it is"
			args = []any{slog.String("bucket", r.bucket)}
		}
		if r.consumer != "" {
			msg = "JetStream durable consumer differs from this service's settings; using it as it is"
			args = append(args, slog.String("consumer", r.consumer))
		}
		args = append(args, groups[r]...)
		args = append(args, slog.String("setup", SetupCommand))
		log.Warn(msg, args...)
	}
}
