package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/schema"
)

func TestTopologyNames(t *testing.T) {
	d := bus.Default()
	if d.Stream() != "SERVESCOPE" || d.DLQStream() != "SERVESCOPE_DLQ" || d.Subjects() != "servescope.v1.>" || d.DLQSubjects() != "servescope.dlq.>" {
		t.Errorf("default topology: %s %s %s %s", d.Stream(), d.DLQStream(), d.Subjects(), d.DLQSubjects())
	}
	if got := d.Subject(schema.KindRequestFinished); got != "servescope.v1.request.finished" {
		t.Errorf("subject = %s", got)
	}
	if got := d.DLQSubject("servescope.v1.app.record"); got != "servescope.dlq.v1.app.record" {
		t.Errorf("DLQ subject = %s", got)
	}
	if got := d.DLQSubject("elsewhere.x"); got != "servescope.dlq.unknown" {
		t.Errorf("foreign DLQ subject = %s", got)
	}
	if got := (bus.Topology{Prefix: "t_ab-c"}).Stream(); got != "T_AB_C" {
		t.Errorf("stream of t_ab-c = %s", got)
	}
}

// TestSetupPublishConsume sets the streams up, publishes an event twice with the same
// Nats-Msg-Id and reads exactly one message back from real JetStream.
func TestSetupPublishConsume(t *testing.T) {
	t.Parallel()
	js, topo, _ := testenv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	info, err := js.Stream(ctx, topo.Stream())
	if err != nil {
		t.Fatal(err)
	}
	c := info.CachedInfo().Config
	if c.MaxAge != bus.DefaultStreamSettings.MaxAge || c.Duplicates != bus.DuplicateWindow || c.Storage != jetstream.FileStorage || c.Subjects[0] != topo.Subjects() {
		t.Errorf("stream config: %+v", c)
	}
	if _, err := js.Stream(ctx, topo.DLQStream()); err != nil {
		t.Errorf("DLQ stream: %v", err)
	}

	ev := schema.NewRequestStarted(schema.NewRequestID(), time.Now())
	ev.Endpoint = "/v1/chat/completions"
	data, err := schema.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		msg := &nats.Msg{Subject: topo.Subject(ev.Kind()), Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, schema.MsgID(ev))
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, topo.Stream(), jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []jetstream.Msg
	for m := range batch.Messages() {
		got = append(got, m)
		_ = m.Ack()
	}
	if len(got) != 1 {
		t.Fatalf("got %d messages, want 1 (the duplicate must be dropped by Nats-Msg-Id)", len(got))
	}
	back, err := schema.Decode(got[0].Subject(), got[0].Data())
	if err != nil {
		t.Fatal(err)
	}
	if back.Head().EventID != ev.EventID || back.Head().RequestID != ev.RequestID {
		t.Errorf("round trip: %+v", back.Head())
	}
}
