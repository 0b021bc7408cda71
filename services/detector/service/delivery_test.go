package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/services/detector/service"
)

// A state change counts as delivered to a receiver only once the receiver answered 2xx: a
// detector stopped while a notification is undelivered (receiver down, or hanging) delivers it
// after its restart, to each receiver that lacks it, exactly once; the resolution goes out once
// too; and a further restart sends nothing.
func TestUndeliveredNotificationsSurviveRestart(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour)
	g := synth.New(11)
	errShape := synth.NormalShape()
	errShape.Status5xxProb = 0.3
	tr := g.Requests(at.Add(-5*time.Minute), at, synth.Constant(0.2), errShape)
	tr.Add(g.Requests(at, at.Add(12*time.Minute), synth.Constant(0.2), synth.NormalShape()))
	insert(t, conn, tr)

	secret := []byte("k")
	up, down := startReceiver(t, secret), startReceiver(t, secret)
	cfg := testConfig(ch)
	cfg.WebhookURLs, cfg.WebhookSecret = []string{up.URL(), down.URL()}, string(secret)

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	// start is a detector process start: state restored, undelivered notifications queued (their
	// number is returned), the notifier running. Its stop cancels the notifier as a shutdown (or a
	// kill) would.
	start := func() (*service.Detector, int, context.CancelFunc) {
		d := newDetector(t, cfg, conn, "server_errors")
		if err := d.Restore(ctx); err != nil {
			t.Fatal(err)
		}
		queued := d.Notifier().Pending()
		nctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); d.Notifier().Run(nctx) }()
		return d, queued, func() { stop(); <-done }
	}
	eval := func(d *service.Detector, ts time.Time) {
		t.Helper()
		if err := d.Groups()[0].Eval(ctx, ts); err != nil {
			t.Fatalf("evaluate at %s: %v", ts, err)
		}
	}
	idle := func(d *service.Detector) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute) // returns as soon as it holds
		for d.Notifier().Pending() > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d notifications still pending", d.Notifier().Pending())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	accepted := func(r *webhookReceiver, status string) string {
		return "SELECT count() FROM alert_deliveries ARRAY JOIN statuses AS st WHERE ok AND receiver = 'http://" +
			r.addr + "/hook' AND st = '" + status + "'"
	}

	// Process 1 decides firing: one receiver takes it, the other is down, then the process stops.
	down.down()
	d, queued, stop := start()
	if queued != 0 {
		t.Fatalf("first start queued %d notifications, want none", queued)
	}
	eval(d, at)
	up.waitFor(1)
	waitRows(ctx, t, conn, accepted(up, "firing"), 1)
	waitRows(ctx, t, conn, "SELECT count() FROM alert_deliveries WHERE NOT ok AND http_status = 0", 1)
	stop()

	// Process 2, both receivers up: only the one that lacks the firing gets it.
	down.up()
	d, queued, stop = start()
	if queued != 1 {
		t.Fatalf("after restart %d notifications queued, want 1 (the firing, for the receiver that was down)", queued)
	}
	down.waitFor(1)
	idle(d)
	eval(d, at.Add(30*time.Second))
	idle(d)
	// The resolution is decided while both receivers hang; the process stops before any answer.
	up.setBlocking(true)
	down.setBlocking(true)
	eval(d, at.Add(10*time.Minute))
	deadline := time.Now().Add(2 * time.Minute) // returns as soon as it holds
	for up.blockedRequests() == 0 || down.blockedRequests() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the resolution never reached both receivers")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	up.setBlocking(false)
	down.setBlocking(false)

	// Process 3 delivers the resolution to both, once.
	d, queued, stop = start()
	if queued != 2 {
		t.Fatalf("after restart %d notifications queued, want 2 (the resolution, per receiver)", queued)
	}
	up.waitFor(2)
	down.waitFor(2)
	idle(d)
	waitRows(ctx, t, conn, accepted(up, "resolved"), 1)
	waitRows(ctx, t, conn, accepted(down, "resolved"), 1)
	stop()

	// Process 4 has nothing to deliver, and its evaluations decide nothing new.
	d, queued, stop = start()
	if queued != 0 {
		t.Fatalf("after the last restart %d notifications queued, want none", queued)
	}
	eval(d, at.Add(10*time.Minute+30*time.Second))
	idle(d)
	stop()

	var fp string
	for _, r := range []*webhookReceiver{up, down} {
		msgs := r.messages()
		if len(msgs) != 2 || r.badSigs != 0 {
			t.Fatalf("receiver %s got %d messages (%d bad signatures), want exactly 2: %+v", r.addr, len(msgs), r.badSigs, msgs)
		}
		want := []struct {
			status string
			endsAt time.Time
		}{{"firing", time.Time{}}, {"resolved", at.Add(10 * time.Minute)}}
		for i, m := range msgs {
			if len(m.Alerts) != 1 {
				t.Fatalf("receiver %s message %d: %d alerts, want 1", r.addr, i, len(m.Alerts))
			}
			a := m.Alerts[0]
			if fp == "" {
				fp = a.Fingerprint
			}
			if m.Status != want[i].status || a.Status != want[i].status || a.Fingerprint != fp ||
				!a.StartsAt.Equal(at) || !a.EndsAt.Equal(want[i].endsAt) {
				t.Fatalf("receiver %s message %d: %s %+v, want %s of %s since %s", r.addr, i, m.Status, a,
					want[i].status, fp, at)
			}
		}
	}
	// The alerts table holds one row per decision, none per delivery.
	var states []string
	rows, err := conn.Query(ctx, "SELECT state FROM alerts WHERE rule = 'server_errors' ORDER BY ts")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		states = append(states, s)
	}
	if len(states) != 2 || states[0] != "firing" || states[1] != "resolved" {
		t.Fatalf("alerts table states %v, want [firing resolved]", states)
	}
	// Every accepted delivery names the state change it carried.
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM alert_deliveries WHERE ok AND statuses = [status] AND "+
		"starts_at = [toDateTime64('"+at.Format("2006-01-02 15:04:05")+"', 6, 'UTC')] AND fingerprints = ['"+fp+"']").
		Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("%d accepted deliveries carry the alert's fingerprint, status and startsAt, want 4", n)
	}
}
