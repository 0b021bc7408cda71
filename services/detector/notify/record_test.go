package notify

import (
	"context"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
)

// Accepted reads back, per receiver, the state changes answered 2xx since a time: failed attempts,
// older rows, other fingerprints and rows that name no state change are not counted.
func TestAcceptedStateChanges(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now().UTC()
	rec := CHRecorder{Conn: conn}
	// StartsAt with nanoseconds: stored, and matched, at microsecond precision.
	starts := t0.Add(1234567 * time.Nanosecond)
	rows := []Delivery{
		{TS: now.Add(-time.Hour), Receiver: "r1", Status: "firing", OK: true, HTTPStatus: 200,
			Fingerprints: []string{"fp1"}, Statuses: []string{"firing"}, StartsAt: []time.Time{starts}},
		{TS: now.Add(-50 * time.Minute), Receiver: "r1", Status: "resolved", OK: false,
			Fingerprints: []string{"fp1"}, Statuses: []string{"resolved"}, StartsAt: []time.Time{starts}},
		// A firing message that also carries a resolution.
		{TS: now.Add(-40 * time.Minute), Receiver: "r2", Status: "firing", OK: true, HTTPStatus: 204,
			Fingerprints: []string{"fp1", "fp2"}, Statuses: []string{"resolved", "firing"}, StartsAt: []time.Time{starts, t0}},
		// Before since.
		{TS: now.Add(-3 * time.Hour), Receiver: "r3", Status: "firing", OK: true, HTTPStatus: 200,
			Fingerprints: []string{"fp1"}, Statuses: []string{"firing"}, StartsAt: []time.Time{starts}},
		// Written before statuses and starts_at existed.
		{TS: now.Add(-time.Minute), Receiver: "r4", Status: "firing", OK: true, HTTPStatus: 200,
			Fingerprints: []string{"fp1"}},
	}
	for _, d := range rows {
		if err := rec.RecordDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	got, err := rec.Accepted(ctx, now.Add(-2*time.Hour), []string{"fp1"})
	if err != nil {
		t.Fatal(err)
	}
	resolved := Alert{Fingerprint: "fp1", Status: "resolved", StartsAt: starts}
	firing := Alert{Fingerprint: "fp1", Status: "firing", StartsAt: starts}
	want := map[Key]bool{KeyOf("r1", firing): true, KeyOf("r2", resolved): true}
	if len(got) != len(want) {
		t.Fatalf("accepted %v, want %v", got, want)
	}
	for k := range want {
		if !got[k] {
			t.Fatalf("accepted %v lacks %+v", got, k)
		}
	}
	if none, err := rec.Accepted(ctx, now.Add(-2*time.Hour), nil); err != nil || len(none) != 0 {
		t.Fatalf("no fingerprints: %v, %v", none, err)
	}
}
