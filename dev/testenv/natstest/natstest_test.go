package natstest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
)

func TestStartServesJetStream(t *testing.T) {
	s := Start(t)
	nc, err := nats.Connect(s.URL(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "NATSTEST", Subjects: []string{"natstest.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	// A stream reserving 200 GiB is accepted whatever the disk has free: the budget is fixed, not
	// 75% of the free disk (err 10047 refused parallel tests their streams with 16 GB free).
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RESERVED", Subjects: []string{"reserved.>"}, Storage: jetstream.FileStorage, MaxBytes: 200 << 30}); err != nil {
		t.Fatalf("create a stream reserving 200 GiB: %v", err)
	}
	if _, err := js.Publish(ctx, "natstest.a", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetMsg(ctx, 1)
	if err != nil || string(m.Data) != "kept" {
		t.Fatalf("stored message: %v, %v", m, err)
	}
}

func TestStartAuthRequiresTheToken(t *testing.T) {
	s := StartAuth(t, testenv.NATSAuth{Token: "s3cret"})
	if nc, err := nats.Connect(s.URL(), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("connected without the token")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Errorf("refusal: %v", err)
	}
	nc, err := nats.Connect(s.URL(), nats.Token("s3cret"), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect with the token: %v", err)
	}
	nc.Close()
}
