package bus_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/schema"
)

func actions(as []bus.Applied) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}

func wantActions(t *testing.T, got []bus.Applied, want ...bus.Action) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("setup did %q, want %d resources", actions(got), len(want))
	}
	for i := range want {
		if got[i].Action != want[i] {
			t.Errorf("resource %d: %q, want %s", i, got[i], want[i])
		}
	}
}

// TestSetupOwnsTheResources runs the setup step on a fresh prefix, again unchanged, and again
// with other limits: it creates the two streams, the durable consumer and the lease bucket, changes nothing the
// second time, and updates exactly what changed the third, keeping a setting it does not manage.
func TestSetupOwnsTheResources(t *testing.T) {
	t.Parallel()
	js, topo, _ := testenv.NATSPrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	limits := bus.StreamSettings{MaxAge: 48 * time.Hour, MaxBytes: 256 << 20}
	d := bus.DurableFor("writer", 500, time.Second)

	applied, err := bus.Setup(ctx, js, topo, limits, d)
	if err != nil {
		t.Fatal(err)
	}
	wantActions(t, applied, bus.Created, bus.Created, bus.Created, bus.Created)
	if got := applied[0].String(); got != "stream "+topo.Stream()+": created (subjects "+topo.Subjects()+", max_age 48h0m0s, max_bytes 268435456, num_replicas 1, duplicate_window 2m0s)" {
		t.Errorf("line for the events stream: %q", got)
	}

	again, err := bus.Setup(ctx, js, topo, limits, d)
	if err != nil {
		t.Fatal(err)
	}
	wantActions(t, again, bus.Unchanged, bus.Unchanged, bus.Unchanged, bus.Unchanged)

	// An operator's own setting on the stream survives the setup's updates.
	st, err := js.Stream(ctx, topo.Stream())
	if err != nil {
		t.Fatal(err)
	}
	own := st.CachedInfo().Config
	own.MaxMsgsPerSubject = 1_000_000
	if _, err := js.UpdateStream(ctx, own); err != nil {
		t.Fatal(err)
	}

	limits.MaxAge = 24 * time.Hour
	limits.LeaseTTL = 5 * time.Second
	d2 := bus.DurableFor("writer", 500, 10*time.Second) // ack_wait 30s → 1m40s
	updated, err := bus.Setup(ctx, js, topo, limits, d2)
	if err != nil {
		t.Fatal(err)
	}
	wantActions(t, updated, bus.Updated, bus.Unchanged, bus.Updated, bus.Updated)
	if got := updated[3].String(); got != "key-value bucket "+topo.LeaseBucket()+": updated (ttl 15s → 5s)" {
		t.Errorf("line for the lease bucket: %q", got)
	}
	kv, diffs, err := bus.CheckLeases(ctx, js, topo, bus.StreamSettings{LeaseTTL: 9 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bus.Difference{{Bucket: topo.LeaseBucket(), Setting: "ttl", Server: "5s", Service: "9s"}}; !reflect.DeepEqual(diffs, want) {
		t.Errorf("lease bucket differences = %+v, want %+v", diffs, want)
	}
	if st, err := kv.Status(ctx); err != nil || st.TTL() != 5*time.Second || st.History() != 1 {
		t.Errorf("lease bucket after the update: %v, %v", st, err)
	}
	if want := []bus.Difference{{Stream: topo.Stream(), Setting: "max_age", Server: "48h0m0s", Service: "24h0m0s"}}; !reflect.DeepEqual(updated[0].Changes, want) {
		t.Errorf("stream changes = %+v, want %+v", updated[0].Changes, want)
	}
	if want := []bus.Difference{{Stream: topo.Stream(), Consumer: "writer", Setting: "ack_wait", Server: "30s", Service: "1m40s"}}; !reflect.DeepEqual(updated[2].Changes, want) {
		t.Errorf("consumer changes = %+v, want %+v", updated[2].Changes, want)
	}
	if got := updated[0].String(); got != "stream "+topo.Stream()+": updated (max_age 48h0m0s → 24h0m0s)" {
		t.Errorf("line for the update: %q", got)
	}

	st, err = js.Stream(ctx, topo.Stream())
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxAge != 24*time.Hour || c.MaxBytes != 256<<20 || c.MaxMsgsPerSubject != 1_000_000 {
		t.Errorf("stream after the update: max_age %s, max_bytes %d, max_msgs_per_subject %d", c.MaxAge, c.MaxBytes, c.MaxMsgsPerSubject)
	}
	c, err := js.Consumer(ctx, topo.Stream(), "writer")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config; got.AckWait != 100*time.Second || got.MaxAckPending != 2500 || got.FilterSubject != topo.Subjects() || got.AckPolicy != jetstream.AckExplicitPolicy {
		t.Errorf("durable consumer after the update: %+v", got)
	}
}

// TestSetupRefusesWhatNATSCannotChange: a stream made by hand in memory cannot be turned into a
// file stream; the setup says which setting and leaves the stream as it was.
func TestSetupRefusesWhatNATSCannotChange(t *testing.T) {
	t.Parallel()
	js, topo, _ := testenv.NATSPrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: topo.Stream(), Subjects: []string{topo.Subjects()}, Storage: jetstream.MemoryStorage, MaxBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	_, err := bus.Setup(ctx, js, topo, bus.StreamSettings{MaxBytes: 64 << 20})
	if err == nil || !strings.Contains(err.Error(), "update stream "+topo.Stream()+" (storage Memory → File") {
		t.Fatalf("Setup = %v, want an error naming the storage change", err)
	}
	st, err := js.Stream(ctx, topo.Stream())
	if err != nil {
		t.Fatal(err)
	}
	if st.CachedInfo().Config.Storage != jetstream.MemoryStorage {
		t.Error("the stream was changed")
	}
}

// TestCheckStream: a publisher's check finds nothing before the setup (an error that says what to
// run), passes after it, and reports each limit that differs from the service's own settings;
// a stream that does not take one of its subjects is an error too.
func TestCheckStream(t *testing.T) {
	t.Parallel()
	js, topo, _ := testenv.NATSPrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kinds := []schema.Kind{schema.KindRequestStarted, schema.KindRequestFinished}
	expected, _ := topo.Expected(bus.StreamSettings{MaxAge: 24 * time.Hour, MaxBytes: 128 << 20})

	_, err := bus.CheckStream(ctx, js, topo, kinds, expected)
	if !errors.Is(err, bus.ErrNotSetUp) || !strings.Contains(err.Error(), "stream "+topo.Stream()+" (subjects "+topo.Subjects()+") does not exist") ||
		!strings.Contains(err.Error(), "run `servescope migrate up`") {
		t.Fatalf("check before the setup = %v", err)
	}

	if _, err := bus.Setup(ctx, js, topo, bus.StreamSettings{MaxAge: 48 * time.Hour, MaxBytes: 256 << 20}); err != nil {
		t.Fatal(err)
	}
	diffs, err := bus.CheckStream(ctx, js, topo, kinds, expected)
	if err != nil {
		t.Fatal(err)
	}
	want := []bus.Difference{
		{Stream: topo.Stream(), Setting: "max_age", Server: "48h0m0s", Service: "24h0m0s"},
		{Stream: topo.Stream(), Setting: "max_bytes", Server: "268435456", Service: "134217728"},
	}
	if !reflect.DeepEqual(diffs, want) {
		t.Errorf("differences = %+v, want %+v", diffs, want)
	}
	st, err := js.Stream(ctx, topo.Stream())
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxAge != 48*time.Hour || c.MaxBytes != 256<<20 {
		t.Errorf("the check changed the stream: %+v", c)
	}
	// Settings the service leaves unset are not compared.
	if diffs, err := bus.CheckStream(ctx, js, topo, kinds, jetstream.StreamConfig{}); err != nil || len(diffs) != 0 {
		t.Errorf("check without expectations = %v, %v", diffs, err)
	}

	// A stream made by hand for request.* only does not take engine.log.
	other := testenv.UniqueName("t")
	otopo := bus.Topology{Prefix: other}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: otopo.Stream(), Subjects: []string{other + ".v1.request.*"}, MaxBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), otopo.Stream()) })
	_, err = bus.CheckStream(ctx, js, otopo, []schema.Kind{schema.KindRequestStarted, schema.KindEngineLog}, jetstream.StreamConfig{})
	if !errors.Is(err, bus.ErrNotSetUp) || !strings.Contains(err.Error(), "takes subjects "+other+".v1.request.*, not "+other+".v1.engine.log") {
		t.Errorf("check of a narrow stream = %v", err)
	}

	// A sealed stream takes no messages.
	sealed := st.CachedInfo().Config
	sealed.Sealed = true
	if _, err := js.UpdateStream(ctx, sealed); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.CheckStream(ctx, js, topo, kinds, jetstream.StreamConfig{}); !errors.Is(err, bus.ErrNotSetUp) || !strings.Contains(err.Error(), "is sealed") {
		t.Errorf("check of a sealed stream = %v", err)
	}
}

// TestCheckConsumer: the consumer's check needs the durable consumer as the setup makes it, and
// reports its limits that differ from the consumer's own sizing.
func TestCheckConsumer(t *testing.T) {
	t.Parallel()
	js, topo, cfg := testenv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := bus.DurableFor("writer", 1000, time.Second)

	_, _, err := bus.CheckConsumer(ctx, js, topo, d, cfg.StreamSettings())
	if !errors.Is(err, bus.ErrNotSetUp) || !strings.Contains(err.Error(), "durable consumer writer on stream "+topo.Stream()+" does not exist") {
		t.Fatalf("check before the durable consumer exists = %v", err)
	}

	testenv.Provision(t, js, cfg, bus.DurableFor("writer", 500, time.Second))
	cons, diffs, err := bus.CheckConsumer(ctx, js, topo, d, cfg.StreamSettings())
	if err != nil {
		t.Fatal(err)
	}
	if cons == nil || cons.CachedInfo().Name != "writer" {
		t.Fatalf("consumer = %v", cons)
	}
	want := []bus.Difference{{Stream: topo.Stream(), Consumer: "writer", Setting: "max_ack_pending", Server: "2500", Service: "5000"}}
	if !reflect.DeepEqual(diffs, want) {
		t.Errorf("differences = %+v, want %+v", diffs, want)
	}

	// Durable consumers made by hand that cannot serve the consumer.
	bad := []struct {
		name string
		cfg  jetstream.ConsumerConfig
		want string
	}{
		{"narrow", jetstream.ConsumerConfig{Durable: "narrow", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: topo.Subject(schema.KindRequestFinished)},
			"filters " + topo.Subject(schema.KindRequestFinished) + ", so request.started events"},
		{"acknone", jetstream.ConsumerConfig{Durable: "acknone", AckPolicy: jetstream.AckNonePolicy},
			"has ack_policy AckNone"},
	}
	for _, b := range bad {
		if _, err := js.CreateConsumer(ctx, topo.Stream(), b.cfg); err != nil {
			t.Fatal(err)
		}
		_, _, err := bus.CheckConsumer(ctx, js, topo, bus.DurableFor(b.name, 500, time.Second), cfg.StreamSettings())
		if !errors.Is(err, bus.ErrNotSetUp) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: check = %v, want %q", b.name, err, b.want)
		}
	}
}

// TestLogDifferences: one line per resource, each setting with the server's and the service's
// value.
func TestLogDifferences(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	bus.LogDifferences(log, []bus.Difference{
		{Stream: "S", Setting: "max_age", Server: "48h0m0s", Service: "24h0m0s"},
		{Stream: "S", Consumer: "w", Setting: "ack_wait", Server: "30s", Service: "1m40s"},
		{Stream: "S", Setting: "max_bytes", Server: "268435456", Service: "134217728"},
	})
	bus.LogDifferences(log, nil)
	want := `level=WARN msg="JetStream stream differs from this service's settings; using it as it is" stream=S max_age.server=48h0m0s max_age.service=24h0m0s max_bytes.server=268435456 max_bytes.service=134217728 setup="servescope migrate up"
level=WARN msg="JetStream durable consumer differs from this service's settings; using it as it is" stream=S consumer=w ack_wait.server=30s ack_wait.service=1m40s setup="servescope migrate up"
`
	if buf.String() != want {
		t.Errorf("log:\n%s\nwant:\n%s", buf.String(), want)
	}
}

// TestSetupKeepsWhatASettingLeftUnsetHolds: the defaults are for what the setup creates. A setup
// run without a setting (an operator who set SERVESCOPE_STREAM_MAX_AGE=720h once, then runs
// `migrate up` without it) keeps the value in force on the streams and the bucket instead of
// putting the default back (which would drop every message older than 7 days); a setting given is
// applied.
func TestSetupKeepsWhatASettingLeftUnsetHolds(t *testing.T) {
	t.Parallel()
	js, topo, _ := testenv.NATSPrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := bus.DurableFor("writer", 500, time.Second)
	if _, err := bus.Setup(ctx, js, topo, bus.StreamSettings{MaxAge: 720 * time.Hour, MaxBytes: 128 << 20, LeaseTTL: 30 * time.Second}, d); err != nil {
		t.Fatal(err)
	}

	kept, err := bus.Setup(ctx, js, topo, bus.StreamSettings{}, d)
	if err != nil {
		t.Fatal(err)
	}
	wantActions(t, kept, bus.Unchanged, bus.Unchanged, bus.Unchanged, bus.Unchanged)
	if got := kept[0].String(); !strings.Contains(got, "max_age 720h0m0s, max_bytes 134217728, num_replicas 1") {
		t.Errorf("line for the events stream without settings: %q, want the values in force", got)
	}
	if got := kept[3].String(); !strings.Contains(got, "ttl 30s") {
		t.Errorf("line for the lease bucket without settings: %q, want ttl 30s kept", got)
	}
	st, err := js.Stream(ctx, topo.Stream())
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxAge != 720*time.Hour || c.MaxBytes != 128<<20 {
		t.Errorf("events stream after a setup without settings: max_age %s, max_bytes %d", c.MaxAge, c.MaxBytes)
	}

	given, err := bus.Setup(ctx, js, topo, bus.StreamSettings{MaxAge: 24 * time.Hour}, d)
	if err != nil {
		t.Fatal(err)
	}
	wantActions(t, given, bus.Updated, bus.Unchanged, bus.Unchanged, bus.Unchanged)
	if got := given[0].String(); got != "stream "+topo.Stream()+": updated (max_age 720h0m0s → 24h0m0s)" {
		t.Errorf("line for the events stream with max_age given: %q", got)
	}
}
