package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultLeaseTTL is the lease bucket's TTL when none is configured: a dead holder's lease
// expires 15 s after its last renewal, and a standby takes over within about 19 s (package
// internal/lease).
const DefaultLeaseTTL = 15 * time.Second

// leaseBucketMaxBytes caps the lease bucket: a lease is one short value per key (history 1), and
// JetStream reserves a stream's max_bytes on the server up front, so the cap stays small.
const leaseBucketMaxBytes = 8 << 20

// LeaseBucket is the key-value bucket of the leases ("SERVESCOPE_LEASES", stored in the stream
// KV_SERVESCOPE_LEASES): one key per job that one instance at a time must do (the detector's
// notifications, one engine's scrapes).
func (t Topology) LeaseBucket() string { return t.Stream() + "_LEASES" }

// LeaseBucketConfig is the lease bucket as the setup step makes it: history 1, and a TTL (the
// stream's max_age, s.LeaseTTL) after which a key not written again disappears, so the lease of a
// holder that died expires. The bucket is replicated like the streams.
func (t Topology) LeaseBucketConfig(s StreamSettings) jetstream.KeyValueConfig {
	s = s.withDefaults()
	ttl := s.LeaseTTL
	return jetstream.KeyValueConfig{
		Bucket:      t.LeaseBucket(),
		Description: "servescope leases: one holder per key, expiring " + ttl.String() + " after the holder's last renewal",
		History:     1,
		TTL:         ttl,
		MaxBytes:    leaseBucketMaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    s.Replicas,
	}
}

func leaseSettings(c jetstream.KeyValueConfig) []string {
	return []string{
		"ttl " + c.TTL.String(),
		"history " + strconv.FormatInt(int64(c.History), 10),
		settingReplicas + " " + strconv.Itoa(c.Replicas),
	}
}

// setupLeases creates the lease bucket or updates its TTL and replicas to want's; on a bucket
// that exists, the TTL and replicas s leaves unset keep their values (see [Setup]).
func setupLeases(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig, s StreamSettings) (Applied, error) {
	a := Applied{Bucket: want.Bucket, Settings: leaseSettings(want)}
	kv, err := js.KeyValue(ctx, want.Bucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		if _, err := js.CreateKeyValue(ctx, want); err != nil {
			return a, fmt.Errorf("create key-value bucket %s: %w", want.Bucket, err)
		}
		a.Action = Created
		return a, nil
	case err != nil:
		return a, fmt.Errorf("read key-value bucket %s: %w", want.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return a, fmt.Errorf("read key-value bucket %s: %w", want.Bucket, err)
	}
	if s.LeaseTTL <= 0 {
		want.TTL = st.TTL()
	}
	if s.Replicas <= 0 {
		want.Replicas = max(st.Config().Replicas, 1)
	}
	a.Settings = leaseSettings(want)
	a.Changes = leaseDifferences(want.Bucket, st, want)
	if len(a.Changes) == 0 {
		a.Action = Unchanged
		return a, nil
	}
	if _, err := js.UpdateKeyValue(ctx, want); err != nil {
		return a, fmt.Errorf("update key-value bucket %s (%s): %w", want.Bucket, changeList(a.Changes), err)
	}
	a.Action = Updated
	return a, nil
}

// leaseDifferences lists the TTL, history and replicas of have that differ from want's (want's
// zero fields are not compared).
func leaseDifferences(bucket string, have jetstream.KeyValueStatus, want jetstream.KeyValueConfig) []Difference {
	var out []Difference
	add := func(setting, h, w string) {
		if h != w {
			out = append(out, Difference{Bucket: bucket, Setting: setting, Server: h, Service: w})
		}
	}
	if want.TTL != 0 {
		add("ttl", have.TTL().String(), want.TTL.String())
	}
	if want.History != 0 {
		add("history", strconv.FormatInt(have.History(), 10), strconv.FormatInt(int64(want.History), 10))
	}
	if want.Replicas != 0 {
		add(settingReplicas, strconv.Itoa(max(have.Config().Replicas, 1)), strconv.Itoa(want.Replicas))
	}
	return out
}

// CheckLeases verifies that t's lease bucket exists and expires keys (a TTL), and returns it with
// the settings in which it differs from s's set fields (LeaseTTL, Replicas) and history 1.
// Nothing is changed. A missing bucket, or one without a TTL (a dead holder's lease
// would never expire), is a [*SetupError].
func CheckLeases(ctx context.Context, js jetstream.JetStream, t Topology, s StreamSettings) (jetstream.KeyValue, []Difference, error) {
	name := t.LeaseBucket()
	kv, err := js.KeyValue(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return nil, nil, &SetupError{What: fmt.Sprintf("key-value bucket %s (the leases) does not exist", name)}
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		return nil, nil, fmt.Errorf("read key-value bucket %s: JetStream is not enabled on the server (start nats-server with -js): %w", name, err)
	case err != nil:
		return nil, nil, fmt.Errorf("read key-value bucket %s: %w", name, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read key-value bucket %s: %w", name, err)
	}
	if st.TTL() <= 0 {
		return nil, nil, &SetupError{What: fmt.Sprintf("key-value bucket %s has no TTL, so the lease of a holder that died would never expire", name)}
	}
	want := jetstream.KeyValueConfig{TTL: s.LeaseTTL, History: 1, Replicas: s.Replicas}
	return kv, leaseDifferences(name, st, want), nil
}
