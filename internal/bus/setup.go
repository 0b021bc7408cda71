package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Action is what [Setup] did to one resource.
type Action string

// The actions of [Setup].
const (
	Created   Action = "created"
	Updated   Action = "updated"
	Unchanged Action = "unchanged"
)

// Applied is one resource as [Setup] left it.
type Applied struct {
	// Stream is the stream's name; Consumer the durable consumer's, "" for a stream. Bucket is
	// set instead of both for the lease key-value bucket.
	Stream, Consumer, Bucket string
	Action                   Action
	// Settings are the managed settings now in force, e.g. "max_age 168h0m0s".
	Settings []string
	// Changes are the settings an update changed: Server is the old value, Service the new.
	Changes []Difference
}

// String is one line for an operator: "stream SERVESCOPE: created (subjects servescope.v1.>,
// max_age 168h0m0s, ...)", "durable consumer servescope-writer on SERVESCOPE: updated
// (ack_wait 30s → 1m0s)", "stream SERVESCOPE_DLQ: unchanged".
func (a Applied) String() string {
	what := "stream " + a.Stream
	switch {
	case a.Bucket != "":
		what = "key-value bucket " + a.Bucket
	case a.Consumer != "":
		what = "durable consumer " + a.Consumer + " on " + a.Stream
	}
	switch a.Action {
	case Created:
		return what + ": created (" + strings.Join(a.Settings, ", ") + ")"
	case Updated:
		return what + ": updated (" + changeList(a.Changes) + ")"
	}
	return what + ": " + string(a.Action) + " (" + strings.Join(a.Settings, ", ") + ")"
}

// Setup makes t's events and dead-letter streams, each durable consumer of ds on the events
// stream, and the lease key-value bucket ([Topology.LeaseBucketConfig]), as configured: it
// creates what is missing and updates what differs, and leaves alone what is already right, so
// running it again changes nothing. It is the one owner of these resources; the services only
// check them.
//
// A limit s leaves unset (zero: MaxAge, MaxBytes, Replicas, LeaseTTL) takes
// [DefaultStreamSettings]' value when a resource is created and keeps the value in force on one
// that exists: a default never undoes what an operator set before (an R3 stream on a cluster
// is not scaled back to one replica, a 30-day max_age is not cut to 7 days, dropping messages,
// by a setup run without the setting). A limit given is applied, also when it scales a stream
// down, which the update's line says.
//
// An update keeps the settings Setup does not manage (placement, compression, metadata an
// operator added) and changes only the ones it does: for a stream its subjects, storage,
// retention, discard policy, limits (max_age, max_bytes, num_replicas) and duplicate window; for
// a durable consumer its ack policy, ack_wait, max_deliver, max_ack_pending and filter, and a
// replica count set apart from its stream's, which it puts back to the stream's. A change
// NATS refuses (a stream's storage type, a consumer's ack policy) is returned as an error naming
// the setting; the resource has to be removed by hand (`nats stream rm`, `nats consumer rm`) to
// be created anew, which Setup never does by itself because it would drop messages or a
// consumer's position.
func Setup(ctx context.Context, js jetstream.JetStream, t Topology, s StreamSettings, ds ...Durable) ([]Applied, error) {
	events, dlq := t.StreamConfigs(s)
	var out []Applied
	for i, cfg := range []jetstream.StreamConfig{events, dlq} {
		// The dead-letter stream's max_age is fixed (DLQMaxAge), not a setting.
		a, inForce, err := setupStream(ctx, js, cfg, s, i == 1)
		if err != nil {
			return out, err
		}
		if i == 0 {
			events = inForce
		}
		out = append(out, a)
	}
	for _, d := range ds {
		a, err := setupConsumer(ctx, js, t.Stream(), t.ConsumerConfig(d), events.Replicas)
		if err != nil {
			return out, err
		}
		out = append(out, a)
	}
	a, err := setupLeases(ctx, js, t.LeaseBucketConfig(s), s)
	if err != nil {
		return out, err
	}
	return append(out, a), nil
}

// keepUnset returns want with the limits s leaves unset taken from have, the stream as it is:
// the setup step's defaults are for a stream it creates. With fixedMaxAge, want's max_age is not
// a setting and stays managed.
func keepUnset(want, have jetstream.StreamConfig, s StreamSettings, fixedMaxAge bool) jetstream.StreamConfig {
	if s.MaxAge <= 0 && !fixedMaxAge {
		want.MaxAge = have.MaxAge
	}
	if s.MaxBytes <= 0 {
		want.MaxBytes = have.MaxBytes
	}
	if s.Replicas <= 0 {
		want.Replicas = max(have.Replicas, 1)
	}
	return want
}

// setupStream makes the stream want, keeping on an existing stream the limits s leaves unset (but
// max_age when fixedMaxAge), and returns what it did and the configuration now in force.
func setupStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, s StreamSettings, fixedMaxAge bool) (Applied, jetstream.StreamConfig, error) {
	a := Applied{Stream: want.Name, Settings: streamSettings(want)}
	st, err := js.Stream(ctx, want.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if _, err := js.CreateStream(ctx, want); err != nil {
			return a, want, streamError("create", want, err)
		}
		a.Action = Created
		return a, want, nil
	case err != nil:
		return a, want, streamError("read", want, err)
	}
	have := st.CachedInfo().Config
	want = keepUnset(want, have, s, fixedMaxAge)
	a.Settings = streamSettings(want)
	a.Changes = streamChanges(have, want)
	if len(a.Changes) == 0 {
		a.Action = Unchanged
		return a, want, nil
	}
	upd := have
	upd.Description, upd.Subjects = want.Description, want.Subjects
	upd.Storage, upd.Retention, upd.Discard = want.Storage, want.Retention, want.Discard
	upd.MaxAge, upd.MaxBytes, upd.Replicas, upd.Duplicates = want.MaxAge, want.MaxBytes, want.Replicas, want.Duplicates
	if _, err := js.UpdateStream(ctx, upd); err != nil {
		return a, want, fmt.Errorf("update stream %s (%s): %w", want.Name, changeList(a.Changes), err)
	}
	a.Action = Updated
	return a, want, nil
}

func streamError(verb string, cfg jetstream.StreamConfig, err error) error {
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
		return fmt.Errorf("%s stream %s: JetStream is not enabled on the server (start nats-server with -js): %w", verb, cfg.Name, err)
	}
	return fmt.Errorf("%s stream %s on %s: %w", verb, cfg.Name, strings.Join(cfg.Subjects, ","), err)
}

// setupConsumer makes the durable consumer want on stream, whose replica count is streamReplicas.
func setupConsumer(ctx context.Context, js jetstream.JetStream, stream string, want jetstream.ConsumerConfig, streamReplicas int) (Applied, error) {
	a := Applied{Stream: stream, Consumer: want.Durable, Settings: consumerSettings(want)}
	c, err := js.Consumer(ctx, stream, want.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		if _, err := js.CreateConsumer(ctx, stream, want); err != nil {
			return a, fmt.Errorf("create durable consumer %s on stream %s: %w", want.Durable, stream, err)
		}
		a.Action = Created
		return a, nil
	case errors.Is(err, jetstream.ErrNotPullConsumer):
		return a, fmt.Errorf("durable consumer %s on stream %s is a push consumer; the consumer reads a pull consumer: remove it (`nats consumer rm %s %s`) and run the setup again: %w",
			want.Durable, stream, stream, want.Durable, err)
	case err != nil:
		return a, fmt.Errorf("read durable consumer %s on stream %s: %w", want.Durable, stream, err)
	}
	have := c.CachedInfo().Config
	replicas := consumerReplicaDifferences(stream, have, streamReplicas)
	a.Changes = append(consumerChanges(stream, have, want), replicas...)
	if len(a.Changes) == 0 {
		a.Action = Unchanged
		return a, nil
	}
	upd := have
	upd.Description, upd.AckPolicy, upd.AckWait, upd.MaxDeliver = want.Description, want.AckPolicy, want.AckWait, want.MaxDeliver
	upd.MaxAckPending, upd.FilterSubject, upd.FilterSubjects = want.MaxAckPending, want.FilterSubject, nil
	if len(replicas) > 0 {
		upd.Replicas = want.Replicas // 0: the stream's, now and after the stream is scaled
	}
	if _, err := js.UpdateConsumer(ctx, stream, upd); err != nil {
		return a, fmt.Errorf("update durable consumer %s on stream %s (%s): %w", want.Durable, stream, changeList(a.Changes), err)
	}
	a.Action = Updated
	return a, nil
}

// changeList is "max_age 48h0m0s → 24h0m0s, num_replicas 3 → 1: scaled down, as the settings
// ask": a replica count lowered is said in words, because it gives up what a node's loss costs.
func changeList(ds []Difference) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.Setting + " " + d.Server + " → " + d.Service
		if d.Setting == settingReplicas {
			if h, err1 := strconv.Atoi(d.Server); err1 == nil {
				if w, err2 := strconv.Atoi(d.Service); err2 == nil && w < h {
					parts[i] += ": scaled down, as the settings ask"
				}
			}
		}
	}
	return strings.Join(parts, ", ")
}

// Setting names are NATS's own (the JSON names of the stream and consumer configurations).
const (
	settingSubjects        = "subjects"
	settingStorage         = "storage"
	settingRetention       = "retention"
	settingDiscard         = "discard"
	settingMaxAge          = "max_age"
	settingMaxBytes        = "max_bytes"
	settingReplicas        = "num_replicas"
	settingDuplicateWindow = "duplicate_window"
	settingAckPolicy       = "ack_policy"
	settingAckWait         = "ack_wait"
	settingMaxDeliver      = "max_deliver"
	settingMaxAckPending   = "max_ack_pending"
	settingFilter          = "filter_subjects"
	settingDescription     = "description"
)

func streamSettings(c jetstream.StreamConfig) []string {
	return []string{
		settingSubjects + " " + strings.Join(c.Subjects, ","),
		settingMaxAge + " " + c.MaxAge.String(),
		settingMaxBytes + " " + strconv.FormatInt(c.MaxBytes, 10),
		settingReplicas + " " + strconv.Itoa(c.Replicas),
		settingDuplicateWindow + " " + c.Duplicates.String(),
	}
}

func consumerSettings(c jetstream.ConsumerConfig) []string {
	return []string{
		settingFilter + " " + strings.Join(filters(c), ","),
		settingAckWait + " " + c.AckWait.String(),
		settingMaxAckPending + " " + strconv.Itoa(c.MaxAckPending),
		settingMaxDeliver + " " + strconv.Itoa(c.MaxDeliver),
	}
}

// streamChanges lists the managed settings of have that differ from want.
func streamChanges(have, want jetstream.StreamConfig) []Difference {
	var out []Difference
	add := func(setting, h, w string) {
		if h != w {
			out = append(out, Difference{Stream: want.Name, Setting: setting, Server: h, Service: w})
		}
	}
	add(settingSubjects, strings.Join(have.Subjects, ","), strings.Join(want.Subjects, ","))
	add(settingStorage, have.Storage.String(), want.Storage.String())
	add(settingRetention, have.Retention.String(), want.Retention.String())
	add(settingDiscard, have.Discard.String(), want.Discard.String())
	add(settingDescription, strconv.Quote(have.Description), strconv.Quote(want.Description))
	out = append(out, limitDifferences(have, want)...)
	return out
}

// limitDifferences lists the limits of have that differ from want's non-zero ones.
func limitDifferences(have, want jetstream.StreamConfig) []Difference {
	var out []Difference
	dur := func(setting string, h, w time.Duration) {
		if w != 0 && h != w {
			out = append(out, Difference{Stream: want.Name, Setting: setting, Server: h.String(), Service: w.String()})
		}
	}
	num := func(setting string, h, w int64) {
		if w != 0 && h != w {
			out = append(out, Difference{Stream: want.Name, Setting: setting, Server: strconv.FormatInt(h, 10), Service: strconv.FormatInt(w, 10)})
		}
	}
	dur(settingMaxAge, have.MaxAge, want.MaxAge)
	num(settingMaxBytes, have.MaxBytes, want.MaxBytes)
	num(settingReplicas, int64(max(have.Replicas, 1)), int64(want.Replicas))
	dur(settingDuplicateWindow, have.Duplicates, want.Duplicates)
	return out
}

// consumerChanges lists the managed settings of have that differ from want.
func consumerChanges(stream string, have, want jetstream.ConsumerConfig) []Difference {
	var out []Difference
	add := func(setting, h, w string) {
		if h != w {
			out = append(out, Difference{Stream: stream, Consumer: want.Durable, Setting: setting, Server: h, Service: w})
		}
	}
	add(settingDescription, strconv.Quote(have.Description), strconv.Quote(want.Description))
	add(settingAckPolicy, have.AckPolicy.String(), want.AckPolicy.String())
	add(settingFilter, strings.Join(filters(have), ","), strings.Join(filters(want), ","))
	out = append(out, consumerLimitDifferences(stream, have, want)...)
	return out
}

// consumerLimitDifferences lists ack_wait, max_ack_pending and max_deliver of have that differ
// from want's.
func consumerLimitDifferences(stream string, have, want jetstream.ConsumerConfig) []Difference {
	var out []Difference
	add := func(setting, h, w string) {
		if h != w {
			out = append(out, Difference{Stream: stream, Consumer: want.Durable, Setting: setting, Server: h, Service: w})
		}
	}
	add(settingAckWait, have.AckWait.String(), want.AckWait.String())
	add(settingMaxAckPending, strconv.Itoa(have.MaxAckPending), strconv.Itoa(want.MaxAckPending))
	add(settingMaxDeliver, strconv.Itoa(normalMaxDeliver(have.MaxDeliver)), strconv.Itoa(normalMaxDeliver(want.MaxDeliver)))
	return out
}

// consumerReplicaDifferences reports a durable consumer whose replica count was set apart from
// its stream's (streamReplicas; nothing is compared when it is 0). The setup step leaves it at 0,
// which NATS reads as "the stream's" and keeps so when the stream is scaled; a consumer set to
// fewer replicas than its stream keeps its position and pending acknowledgements on fewer nodes,
// and every consumer instance stops when those nodes are down.
func consumerReplicaDifferences(stream string, have jetstream.ConsumerConfig, streamReplicas int) []Difference {
	if streamReplicas <= 0 || have.Replicas == 0 || have.Replicas == streamReplicas {
		return nil
	}
	return []Difference{{Stream: stream, Consumer: have.Durable, Setting: settingReplicas,
		Server: strconv.Itoa(have.Replicas), Service: strconv.Itoa(streamReplicas)}}
}

// normalMaxDeliver maps the server's spellings of "without limit" (0 in a request, -1 in info) to -1.
func normalMaxDeliver(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// filters returns a consumer's filter subjects, sorted; none means the whole stream.
func filters(c jetstream.ConsumerConfig) []string {
	fs := slices.Clone(c.FilterSubjects)
	if c.FilterSubject != "" {
		fs = append(fs, c.FilterSubject)
	}
	slices.Sort(fs)
	return fs
}
