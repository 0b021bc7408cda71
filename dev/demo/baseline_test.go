package demo

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/consumer/app"
)

func testBaseline(now time.Time) Baseline {
	return Baseline{From: now.Add(-3 * time.Hour), To: now.Add(-61 * time.Minute), RatePerSecond: 0.02,
		Model: "servescope/sim-7b", App: "ragdemo", Engine: EngineName,
		EmbeddingModel: "hash-embed-v1", IndexVersion: "corpus-2026-11@hash-embed-v1"}
}

func TestBaselineTraffic(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b := testBaseline(now)
	tr := b.Traffic(42)
	// Two Poisson streams of 0.02/s over 1 h 59 min: about 286 requests, half of them RAG.
	if n := len(tr.Started); n < 200 || n > 380 {
		t.Errorf("%d requests, want about 286", n)
	}
	if len(tr.Apps) == 0 || len(tr.Apps) >= len(tr.Started) {
		t.Errorf("%d app records for %d requests, want RAG records for part of them", len(tr.Apps), len(tr.Started))
	}
	if n := len(tr.Samples); n != 119 {
		t.Errorf("%d engine samples, want one a minute (119)", n)
	}
	for _, e := range tr.Events() {
		ts := e.Head().TS
		// Finished events may end a few seconds after the last arrival.
		if ts.Before(b.From) || ts.After(b.To.Add(time.Minute)) {
			t.Fatalf("event %s at %s outside the baseline %s → %s", e.Head().EventID, ts, b.From, b.To)
		}
	}
	for _, a := range tr.Apps {
		if a.App != "ragdemo" || a.EmbeddingModelVersion != "hash-embed-v1" || a.IndexVersion != b.IndexVersion || a.Model != b.Model {
			t.Fatalf("app record names another system: %+v", a)
		}
	}
	for _, s := range tr.Samples {
		if s.Engine != EngineName || s.NumRequestsWaiting == nil || *s.NumRequestsWaiting != 0 {
			t.Fatalf("engine sample %+v: want engine %s with nothing waiting", s, EngineName)
		}
	}
}

// TestPublishBaseline sends a baseline through real NATS JetStream and the real consumer into
// ClickHouse, as the demo does.
func TestPublishBaseline(t *testing.T) {
	js, _, ncfg := testenv.JetStream(t)
	conn, ccfg := testenv.ClickHouse(t)
	nc := testenv.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := app.Config{Consumer: config.Consumer{Durable: "demo-test", BatchRows: 1000, FlushInterval: 200 * time.Millisecond},
		MetricsAddr: ln.Addr().String(), NATS: ncfg, ClickHouse: ccfg}
	testenv.Provision(t, js, ncfg, cfg.DurableConsumer())
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(cctx, cfg, slog.New(slog.DiscardHandler), ln) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	}()

	tr := testBaseline(time.Now().UTC()).Traffic(7)
	if err := PublishBaseline(ctx, nc, ncfg.SubjectPrefix, t.TempDir(), conn, tr, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	var reqs, apps, samples uint64
	err = conn.QueryRow(ctx, `SELECT
		(SELECT count() FROM requests FINAL),
		(SELECT count() FROM app_records FINAL WHERE app = 'ragdemo' AND embedding_model_version = 'hash-embed-v1'),
		(SELECT count() FROM engine_samples FINAL WHERE engine = 'vllmsim')`).Scan(&reqs, &apps, &samples)
	if err != nil {
		t.Fatal(err)
	}
	if reqs != uint64(len(tr.Finished)) {
		t.Errorf("%d request rows, want %d", reqs, len(tr.Finished))
	}
	// The app records and samples ride the same stream; wait for the last batch.
	if err := waitFor(ctx, 2*time.Minute, func() (bool, error) {
		err := conn.QueryRow(ctx, `SELECT
			(SELECT count() FROM app_records FINAL WHERE app = 'ragdemo' AND embedding_model_version = 'hash-embed-v1'),
			(SELECT count() FROM engine_samples FINAL WHERE engine = 'vllmsim')`).Scan(&apps, &samples)
		return apps == uint64(len(tr.Apps)) && samples == uint64(len(tr.Samples)), err
	}, "app records and samples"); err != nil {
		t.Errorf("%v: %d app records (want %d), %d samples (want %d)", err, apps, len(tr.Apps), samples, len(tr.Samples))
	}
}
