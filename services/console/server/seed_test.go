package server

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/dev/requestfixture"
	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/postmortem"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/detector/alerting"
	"github.com/servescope/servescope/services/detector/slo"
)

// Demo-shaped data: the shape scripts/demo leaves in its database, made in a second. A synthetic
// normal day as the baseline, then, in the hour before now: an overload (queue wait, 44 waiting,
// 256 running), a switch of the embedding model with the top score falling, answers in a wrong
// script, and an engine crash (vLLM 0.10's out-of-memory log, 193 running) with 5xx answers.
// The detector's alerts for them are in the alerts table as the detector writes them.
type seeded struct {
	now                                   time.Time
	model, otherModel, engine, app        string
	overloadFrom, overloadTo              time.Time
	switchAt, crashAt                     time.Time
	firingRule                            string
	firingLabels, pendingLabels, okLabels map[string]string
	// Whole requests (dev/requestfixture): an overload request answered without streaming, a
	// stream the engine's death broke off, and a request that never finished.
	overload, crashed, hung requestfixture.Story
	resolvedAt              time.Time
}

const seedModel = "Qwen/Qwen2.5-7B-Instruct-AWQ"

func seed(t *testing.T, conn driver.Conn, now time.Time) seeded {
	t.Helper()
	ctx := context.Background()
	s := seeded{now: now, model: seedModel, otherModel: "meta-llama/Llama-3.1-8B-Instruct", engine: "http://vllm-0:8000", app: "docs-qa"}
	g := synth.New(7)

	// The normal day: the detector's baseline (24 h ending an hour ago) and the first half hour.
	tr := g.Normal(now.Add(-26*time.Hour), now.Add(-50*time.Minute))
	// A second model's traffic, so that the model filter has something to tell apart.
	other := synth.NormalShape()
	other.Model, other.App, other.TopScore = s.otherModel, "chat", 0
	tr.Add(g.Requests(now.Add(-26*time.Hour), now, synth.Constant(0.02), other))

	// The overload: requests queue 0.47 s, the engine runs 256 with 44 waiting (docs/measurements.md, Four workloads).
	s.overloadFrom, s.overloadTo = now.Add(-50*time.Minute), now.Add(-35*time.Minute)
	over := synth.NormalShape()
	over.QueueProb, over.QueueSeconds, over.TTFTSeconds, over.TPOTSeconds = 1, 0.47, 0.38, 0.147
	tr.Add(g.Requests(s.overloadFrom, s.overloadTo, synth.Constant(0.5), over))
	es := synth.NormalEngine(synth.NormalRate, synth.NormalE2ES)
	busy := es
	busy.Running = func(time.Time) float64 { return 256 }
	busy.Waiting = func(time.Time) float64 { return 44 }
	busy.KVCache = func(time.Time) float64 { return 0.28 }
	busy.Noise, busy.Every = 0, 10*time.Second
	tr.Add(g.Samples(s.overloadFrom, s.overloadTo, busy))

	// The embedding model switch: a version the baseline never saw, top score 0.88 → 0.12.
	s.switchAt = now.Add(-35 * time.Minute)
	drift := synth.NormalShape()
	drift.TopScore, drift.EmbeddingModelVersion = 0.12, "bge-m3@2"
	tr.Add(g.Requests(s.switchAt, now.Add(-20*time.Minute), synth.Constant(0.3), drift))

	// Wrong-script answers (4 of 32), then the crash window's 5xx.
	tr.Add(synth.LanguageErrors(8, 40)(g, now.Add(-20*time.Minute), now.Add(-10*time.Minute)))
	crash := synth.NormalShape()
	crash.Status5xxProb = 0.3
	tr.Add(g.Requests(now.Add(-10*time.Minute), now, synth.Constant(0.3), crash))
	tr.Add(g.Samples(s.switchAt, now, es))

	// What the gateway copies from vLLM's timing object and the application reports.
	for i, f := range tr.Finished {
		if f.TTFTSeconds != nil && f.QueueSeconds != nil && f.TPOTSeconds != nil && f.CompletionTokens != nil {
			prefill := max(0.001, *f.TTFTSeconds-*f.QueueSeconds-0.004)
			decode := *f.TPOTSeconds * float64(max(1, *f.CompletionTokens)-1)
			f.PrefillSeconds, f.DecodeSeconds = &prefill, &decode
			tokens := uint32(40 + i%12)
			f.PromptTokens = &tokens
		}
		f.PromptVersion = "p12"
	}
	for _, a := range tr.Apps {
		a.PromptVersion = "p12"
	}
	if err := synth.Insert(ctx, conn, tr); err != nil {
		t.Fatal(err)
	}
	// synth does not write citations_missing: one answer in 37 lacks its citations.
	if err := conn.Exec(ctx, "ALTER TABLE app_records UPDATE citations_missing = (cityHash64(request_id) % 37 = 0) WHERE 1 SETTINGS mutations_sync = 2"); err != nil {
		t.Fatalf("set citations_missing: %v", err)
	}

	// The detector's SLOs and engines file (the service-level and cost panels read them), and the
	// engine's cumulative histograms every minute of the day (the capacity panel's reading).
	slos, err := slo.LoadBuiltin(builtin.SLOs, builtin.SLOsDir, builtin.RepoDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := slo.Sync(ctx, config.ClickHouse{}, conn, slos, now.Add(-26*time.Hour)); err != nil {
		t.Fatal(err)
	}
	price, seqs := 0.45, uint32(256)
	if err := slo.SyncEngines(ctx, config.ClickHouse{}, conn, &slo.Engines{Currency: "USD",
		Default: &slo.EngineSetting{PricePerHour: &price, MaxNumSeqs: &seqs}}, now.Add(-26*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// No scrape of these in the overload: its own samples (256 running, 44 waiting) are the
	// engine's state then, which the request page and the running panel read.
	insertHistograms(t, ctx, conn, s.engine, s.model, now.Add(-26*time.Hour), now, s.overloadFrom.Add(-time.Minute), s.overloadTo.Add(time.Minute))

	// The crash: vLLM 0.10's log of the out-of-memory death of docs/measurements.md (The crash), moved to 6 minutes ago.
	s.crashAt = now.Add(-6 * time.Minute)
	insertCrashLog(t, ctx, conn, s.engine, s.crashAt)

	// Whole requests as the demo leaves them: one of the overload, answered without streaming, with
	// its engine span (queue 0.472 s) and the engine at 256 running and 44 waiting when it arrived;
	// a stream broken off by the engine's death 20 s after it arrived; a request that never ended, in
	// flight when the engine died.
	s.overload = requestfixture.Tell(requestfixture.Overload(s.engine), s.overloadFrom.Add(5*time.Minute))
	crashShape := requestfixture.Overload(s.engine)
	crashShape.Stream, crashShape.NoSpan, crashShape.E2E, crashShape.TopScore = true, true, 20.5, 0
	crashShape.Status, crashShape.ErrorLayer, crashShape.ErrorCode = 200, schema.LayerUpstream, "stream_interrupted"
	crashShape.Running, crashShape.Waiting, crashShape.KV = 46, 0, 0.036
	s.crashed = requestfixture.Tell(crashShape, s.crashAt.Add(-20*time.Second))
	s.hung = requestfixture.Tell(requestfixture.Overload(s.engine), s.crashAt.Add(-2*time.Minute))
	stories := append(append([]schema.Event{}, s.overload.Events...), s.crashed.Events...)
	stories = append(stories, s.hung.Events[0]) // its request.started only
	if err := requestfixture.Insert(ctx, conn, stories...); err != nil {
		t.Fatal(err)
	}

	// The alerts, as the detector writes them: latency_p95 (TTFT) firing, overload_queue pending
	// earlier then resolved, retrieval_version_change firing.
	s.firingRule = "latency_p95"
	s.firingLabels = map[string]string{"alertname": "latency_p95", "severity": "warning", "model": s.model, "metric": "ttft_s"}
	s.pendingLabels = map[string]string{"alertname": "retrieval_score_drift", "severity": "critical", "app": s.app}
	s.okLabels = map[string]string{"alertname": "overload_queue", "severity": "critical", "engine": s.engine, "model": s.model, "signal": "num_requests_waiting"}
	store := alerting.CHStore{Conn: conn}
	at := func(d time.Duration) time.Time { return now.Add(-d) }
	alert := func(rule string, labels map[string]string, st alerting.State, value, base, thr float64, active, fired, resolved time.Time) *alerting.Alert {
		return &alerting.Alert{Rule: rule, Fingerprint: alerting.Fingerprint(labels), Labels: labels, Severity: labels["severity"],
			State: st, Value: value, Baseline: base, Threshold: thr, ActiveAt: active, FiredAt: fired, ResolvedAt: resolved,
			Annotations: map[string]string{"summary": fmt.Sprintf("%s %s value %.3f (baseline %.3f, threshold %.3f)", rule, labels["metric"], value, base, thr)}}
	}
	stuckLabels := map[string]string{"alertname": "unfinished_rising", "severity": "critical", "kind": "stuck", "model": s.model}
	stuck := alert("unfinished_rising", stuckLabels, alerting.StateFiring, 1, 0, 1, at(2*time.Minute), at(1*time.Minute), time.Time{})
	stuck.Annotations["request_id"] = s.hung.RequestID
	overloadStart := at(48 * time.Minute)
	s.resolvedAt = at(29 * time.Minute)
	for _, step := range []struct {
		ts time.Time
		a  *alerting.Alert
	}{
		{overloadStart, alert("overload_queue", s.okLabels, alerting.StatePending, 1, 0, 0.5, overloadStart, time.Time{}, time.Time{})},
		{at(47 * time.Minute), alert("overload_queue", s.okLabels, alerting.StateFiring, 1, 0, 0.5, overloadStart, at(47*time.Minute), time.Time{})},
		// Resolved when the rule's 5-minute window no longer holds the overload's samples.
		{s.resolvedAt, alert("overload_queue", s.okLabels, alerting.StateInactive, 1, 0, 0.5, overloadStart, at(47*time.Minute), s.resolvedAt)},
		{at(33 * time.Minute), alert("latency_p95", s.firingLabels, alerting.StatePending, 0.61, 0.058, 0.108, at(33*time.Minute), time.Time{}, time.Time{})},
		{at(31 * time.Minute), alert("latency_p95", s.firingLabels, alerting.StateFiring, 0.61, 0.058, 0.108, at(33*time.Minute), at(31*time.Minute), time.Time{})},
		{at(2 * time.Minute), alert("retrieval_score_drift", s.pendingLabels, alerting.StatePending, 0.12, 0.88, 0.73, at(2*time.Minute), time.Time{}, time.Time{})},
		// A stuck request, named by id, as the alerts helper's stuck-request alerts carry it.
		{at(1 * time.Minute), stuck},
	} {
		if err := store.Save(ctx, step.ts, []*alerting.Alert{step.a}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// insertHistograms writes a scrape of the engine every minute in [from, to) holding the cumulative
// histograms of its /metrics: 2 requests a second of 128 output and 44 prompt tokens that hold a
// slot 2.07 s, and 60 steps a second computing 4, 12 or 33 tokens in turn (a minute each) at
// 0.0156 s + 0.00032 s a token. No scrape falls in [skipFrom, skipTo].
func insertHistograms(t *testing.T, ctx context.Context, conn driver.Conn, engine, model string, from, to, skipFrom, skipTo time.Time) {
	t.Helper()
	if err := conn.Exec(ctx, `INSERT INTO engine_samples (event_id, ts, engine, model, up, num_requests_running, num_requests_waiting,
			kv_cache_usage_perc, histogram_sum, histogram_count)
		SELECT concat('hist-', toString(n)), fromUnixTimestamp64Micro($1, 'UTC') + toIntervalMinute(n), $2, $3, true, 4, 0, 0.004,
		       map('e2e_request_latency_seconds', r * 2.08, 'request_inference_time_seconds', r * 2.07,
		           'request_queue_time_seconds', 0., 'request_generation_tokens', r * 128, 'request_prompt_tokens', r * 44,
		           'iteration_tokens_total', tok, 'inter_token_latency_seconds', itl),
		       map('e2e_request_latency_seconds', r, 'request_inference_time_seconds', r, 'request_queue_time_seconds', r,
		           'request_generation_tokens', r, 'request_prompt_tokens', r, 'iteration_tokens_total', steps, 'inter_token_latency_seconds', tok)
		FROM
		(
		    SELECT number AS n, toFloat64(n * 120) AS r, toFloat64(n * 3600) AS steps,
		           3600 * (intDiv(n, 3) * 49 + arraySum(arraySlice([4, 12, 33], 1, n % 3))) AS tok,
		           3600 * (intDiv(n, 3) * arraySum(x -> x * (0.0156 + 0.00032 * x), [4, 12, 33])
		                   + arraySum(x -> x * (0.0156 + 0.00032 * x), arraySlice([4, 12, 33], 1, n % 3))) AS itl
		    FROM numbers(toUInt64($4))
		)
		WHERE NOT (n >= $5 AND n <= $6)`, from.UnixMicro(), engine, model, int64(to.Sub(from)/time.Minute),
		int64(skipFrom.Sub(from)/time.Minute), int64(skipTo.Sub(from)/time.Minute)+1); err != nil {
		t.Fatalf("insert the engine's histograms: %v", err)
	}
}

func insertCrashLog(t *testing.T, ctx context.Context, conn driver.Conn, engine string, death time.Time) {
	t.Helper()
	f, err := os.Open("../../../internal/postmortem/testdata/v0_10_type_one.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines, err := postmortem.ReadLog(f, engine, "vllm.log", death, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	rep := postmortem.Analyze(lines, postmortem.Options{})
	if !rep.Crashed {
		t.Fatal("the crash fixture holds no crash")
	}
	shift := death.Sub(rep.LastWords.TS)
	b, err := conn.PrepareBatch(ctx, `INSERT INTO engine_logs (event_id, ts, engine, source, offset, line, level, process, logger,
		message, prompt_throughput_tps, generation_throughput_tps, running, waiting, kv_cache_usage_perc, prefix_cache_hit_rate,
		exception_type, oom_bytes_requested, oom_total_capacity_bytes, oom_free_bytes, frames)`)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range lines {
		frames := l.Frames
		if frames == nil {
			frames = []string{}
		}
		if err := b.Append(fmt.Sprintf("crash-%d", i), l.TS.Add(shift), l.Engine, l.Source, l.Offset, l.Line, l.Level, l.Process,
			l.Logger, l.Message, l.PromptThroughputTPS, l.GenerationThroughputTPS, l.Running, l.Waiting, l.KVCacheUsagePerc,
			l.PrefixCacheHitRate, l.ExceptionType, l.OOMBytesRequested, l.OOMTotalCapacityBytes, l.OOMFreeBytes, frames); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatalf("insert the crash log: %v", err)
	}
}
