package requestview_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/requestfixture"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/requestview"
	"github.com/servescope/servescope/schema"
)

const engine = "vllm-0"

// TestRequestStory writes demo-shaped requests through the consumer's sink into real ClickHouse and
// reads them back as the request page and `servescope request` do: an overload request is found by
// each of its ids and shows the engine's queue wait and the running and waiting counts at its
// arrival, each figure with its source; a reused X-Request-Id names two requests whose engine data
// is not mixed up; a request caught in an engine's death shows the death; a request that never
// finished is shown as such; an unknown id is ErrNotFound.
func TestRequestStory(t *testing.T) {
	conn, _ := testenv.ClickHouse(t)
	ctx := context.Background()
	// Events are checked as the consumer checks them (none from the future): around the clock's
	// now, whose time of day nothing here depends on.
	now := time.Now().UTC().Truncate(time.Second)

	over := requestfixture.Tell(requestfixture.Overload(engine), now.Add(-20*time.Minute))
	// Two requests reusing one X-Request-Id, a minute apart, each with its own trace.
	dupShape := requestfixture.Overload(engine)
	dupShape.RequestID, dupShape.Queue, dupShape.Stream = "client-req-0001", 0, true
	dup1 := requestfixture.Tell(dupShape, now.Add(-15*time.Minute))
	dupShape.Queue = 1.5
	dup2 := requestfixture.Tell(dupShape, now.Add(-14*time.Minute))
	// A stream the engine broke off when it died (vLLM 0.10's out-of-memory death, 193 running).
	death := now.Add(-6 * time.Minute)
	crashShape := requestfixture.Overload(engine)
	crashShape.Stream, crashShape.NoSpan, crashShape.E2E, crashShape.TopScore = true, true, 20.5, 0
	crashShape.Status, crashShape.ErrorLayer, crashShape.ErrorCode = 200, schema.LayerUpstream, "stream_interrupted"
	crashShape.Running, crashShape.Waiting, crashShape.KV = 46, 0, 0.036
	crashed := requestfixture.Tell(crashShape, death.Add(-20*time.Second))
	crashLog, err := requestfixture.CrashLog("../postmortem/testdata/v0_10_type_one.log", engine, death)
	if err != nil {
		t.Fatal(err)
	}
	// A request still in flight: started, never finished.
	hung := requestfixture.Tell(requestfixture.Overload(engine), now.Add(-3*time.Minute))
	var events []schema.Event
	for _, st := range []requestfixture.Story{over, dup1, dup2, crashed} {
		events = append(events, st.Events...)
	}
	events = append(events, crashLog...)
	for _, e := range hung.Events { // its start and the engine's samples: no answer, no span
		if k := e.Kind(); k == schema.KindRequestStarted || k == schema.KindEngineSample {
			events = append(events, e)
		}
	}
	if err := requestfixture.Insert(ctx, conn, events...); err != nil {
		t.Fatal(err)
	}

	t.Run("each id of one request finds it", func(t *testing.T) {
		for _, id := range []string{over.RequestID, over.ResponseID, over.TraceID, over.EngineRequestID} {
			ms, err := requestview.Find(ctx, conn, id)
			if err != nil {
				t.Fatalf("find %s: %v", id, err)
			}
			if len(ms) != 1 || ms[0].RequestID != over.RequestID || !ms[0].ArrivalTS.Equal(over.Arrival) || !ms[0].Finished {
				t.Errorf("find %s: %+v, want request %s at %s", id, ms, over.RequestID, over.Arrival)
			}
		}
	})

	t.Run("overload request", func(t *testing.T) {
		ms, err := requestview.Find(ctx, conn, over.ResponseID)
		if err != nil {
			t.Fatal(err)
		}
		r, err := requestview.Load(ctx, conn, ms[0], requestview.Options{SlotLimit: 256, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		step := map[string]requestview.Step{}
		for _, s := range r.Timeline {
			step[s.Name] = s
		}
		if q := step["queue"]; q.Seconds == nil || *q.Seconds != 0.472 || q.Source != requestview.SourceEngineSpan {
			t.Errorf("queue step %+v, want 0.472 s from the engine span", q)
		}
		if p := step["prefill"]; p.At == nil || *p.At != 0.472 || p.Seconds == nil || *p.Seconds != 0.288 {
			t.Errorf("prefill step %+v, want 0.288 s starting at 0.472", p)
		}
		if ft := step["engine_first_token"]; ft.At == nil || ft.Source != requestview.SourceEngineSpan || !strings.Contains(ft.Note, "not streamed") {
			t.Errorf("first token %+v: a non-streaming request's first token is the engine's", ft)
		}
		if _, ok := step["first_token"]; ok {
			t.Error("a non-streaming client saw no first token, but the timeline has one")
		}
		if e := step["end"]; e.At == nil || *e.At != 19.46 || e.Source != requestview.SourceGateway {
			t.Errorf("end %+v", e)
		}
		st := r.State
		if st == nil || st.Engine != engine || st.Before == nil || st.After == nil || *st.Before.Running != 256 || *st.Before.Waiting != 44 {
			t.Fatalf("state at arrival %+v", st)
		}
		if st.Before.OffsetS >= 0 || st.After.OffsetS <= 0 {
			t.Errorf("samples at %v and %v s from the arrival: want one before and one after", st.Before.OffsetS, st.After.OffsetS)
		}
		if st.Stats == nil || st.Stats.Running == nil || *st.Stats.Running != 256 || *st.Stats.Waiting != 44 {
			t.Errorf("stats line %+v", st.Stats)
		}
		if st.SlotLimit == nil || *st.SlotLimit != 256 || st.SlotLimitSource != requestview.SourceSlotRule {
			t.Errorf("slot limit %v from %q", st.SlotLimit, st.SlotLimitSource)
		}
		if !strings.Contains(strings.Join(st.Facts, "\n"), "every slot was taken") || !strings.Contains(strings.Join(st.Facts, "\n"), "44 requests were already waiting") {
			t.Errorf("facts %q", st.Facts)
		}
		if r.Tokens.Prompt.Value == nil || *r.Tokens.Prompt.Value != 44 || *r.Tokens.Completion.Value != 128 || r.Tokens.FinishReason != "length" {
			t.Errorf("tokens %+v", r.Tokens)
		}
		if r.Tokens.Cached.Value != nil {
			t.Errorf("cached tokens %v: the engine gave no prompt_tokens_details, so they are unknown", *r.Tokens.Cached.Value)
		}
		if r.Client.Stream || r.Client.TTFT.Value != nil || r.Client.EngineTTFT.Value == nil || r.Client.Aborted {
			t.Errorf("client view %+v", r.Client)
		}
		names := false
		for _, l := range r.Logs {
			names = names || (l.NamesRequest && strings.Contains(l.Message, "Added request "+over.EngineRequestID))
		}
		if !names {
			t.Errorf("the engine's log of the request lacks its Added request line: %+v", r.Logs)
		}
		if len(r.Records) != 1 || len(r.Records[0].Passages) != 3 || r.Records[0].Passages[0].Score != 0.86 || r.Records[0].JoinedBy != "request_id" {
			t.Errorf("application records %+v", r.Records)
		}
		if r.Crash != nil {
			t.Errorf("an overload request 20 minutes before the death was caught in it: %+v", r.Crash)
		}
		var out bytes.Buffer
		if err := r.WriteText(&out); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"queue (waiting for a slot)", "0.472", "engine span", "running 256  waiting 44", "slot limit (max_num_seqs) 256, from the slot_limit rule"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("text lacks %q:\n%s", want, out.String())
			}
		}
	})

	t.Run("a reused X-Request-Id", func(t *testing.T) {
		ms, err := requestview.Find(ctx, conn, "client-req-0001")
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 2 || !ms[0].ArrivalTS.Equal(dup2.Arrival) || !ms[1].ArrivalTS.Equal(dup1.Arrival) {
			t.Fatalf("matches %+v, want both requests newest first", ms)
		}
		if _, ok := requestview.Pick(ms, time.Time{}); ok {
			t.Error("Pick chose one of two requests without an arrival")
		}
		m, ok := requestview.Pick(ms, dup1.Arrival)
		if !ok || m.TraceID != dup1.TraceID {
			t.Fatalf("pick by arrival: %+v", m)
		}
		// Each trace id names its own request.
		for _, st := range []requestfixture.Story{dup1, dup2} {
			ms, err := requestview.Find(ctx, conn, st.TraceID)
			if err != nil || len(ms) != 1 || !ms[0].ArrivalTS.Equal(st.Arrival) {
				t.Errorf("find trace %s: %+v, %v", st.TraceID, ms, err)
			}
		}
		r, err := requestview.Load(ctx, conn, m, requestview.Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		other := 0
		if r.Engine != nil {
			for _, s := range r.Engine.Spans {
				if s.Other {
					other++
				}
			}
		}
		if other != 1 || !strings.Contains(strings.Join(r.Notes, " "), "reused its X-Request-Id") {
			t.Errorf("the other request's span is not told apart: %d others, notes %q", other, r.Notes)
		}
	})

	t.Run("a request caught in the engine's death", func(t *testing.T) {
		ms, err := requestview.Find(ctx, conn, crashed.RequestID)
		if err != nil {
			t.Fatal(err)
		}
		r, err := requestview.Load(ctx, conn, ms[0], requestview.Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if r.Crash == nil || r.Crash.Report == nil || !r.Crash.Report.Crashed {
			t.Fatalf("crash %+v", r.Crash)
		}
		if !strings.Contains(r.Crash.Relation, "while it was in flight") || !strings.Contains(r.Crash.Report.Verdict, "type one") {
			t.Errorf("crash relation %q, verdict %q", r.Crash.Relation, r.Crash.Report.Verdict)
		}
		if r.Status == nil || r.Status.Layer != "upstream" || !r.Client.Broken || r.Engine != nil || r.EngineNote == "" {
			t.Errorf("status %+v, client %+v, engine %+v, note %q", r.Status, r.Client, r.Engine, r.EngineNote)
		}
		if r.State == nil || r.State.Engine != engine || !strings.Contains(r.State.EngineSource, "only engine sampled") {
			t.Errorf("state %+v: the only engine sampled then is the request's", r.State)
		}
		fatal := false
		for _, l := range r.Logs {
			fatal = fatal || l.Fatal
		}
		if !fatal {
			t.Error("the engine's log of the request lacks its death")
		}
	})

	t.Run("a request that has not finished", func(t *testing.T) {
		ms, err := requestview.Find(ctx, conn, hung.RequestID)
		if err != nil || len(ms) != 1 || ms[0].Finished {
			t.Fatalf("find %s: %+v, %v", hung.RequestID, ms, err)
		}
		r, err := requestview.Load(ctx, conn, ms[0], requestview.Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != nil || !strings.Contains(strings.Join(r.Notes, " "), "No request.finished") || r.State == nil || r.State.Before == nil {
			t.Errorf("status %+v, notes %q, state %+v", r.Status, r.Notes, r.State)
		}
	})

	t.Run("the slowest requests", func(t *testing.T) {
		from, to := now.Add(-time.Hour), now
		byQueue, err := requestview.Slowest(ctx, conn, from, to, "", "", "queue_s", false, 2)
		if err != nil {
			t.Fatal(err)
		}
		// The engine's queue wait (no gateway copy of its timing object here): the overload request
		// first. (The reused id's two requests share their spans until the engine data joins on the
		// trace: which of them comes next is not asserted.)
		if len(byQueue) != 2 || byQueue[0].RequestID != over.RequestID || *byQueue[0].QueueS != 0.472 ||
			byQueue[0].QueueSource != requestview.SourceEngineSpan {
			t.Errorf("by queue wait: %+v", byQueue)
		}
		byE2E, err := requestview.Slowest(ctx, conn, from, to, "", "", "e2e_s", false, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(byE2E) != 4 || byE2E[0].RequestID != crashed.RequestID || byE2E[1].QueueS == nil || byE2E[0].PromptText != "" {
			t.Errorf("by E2E: %+v", byE2E)
		}
		none, err := requestview.Slowest(ctx, conn, from, to, "no such model", "", "queue_s", false, 10)
		if err != nil || len(none) != 0 {
			t.Errorf("another model's slowest: %+v, %v", none, err)
		}
		if _, err := requestview.Slowest(ctx, conn, from, to, "", "", "ttft_s; DROP", false, 10); err == nil {
			t.Error("an order that is no latency column was taken")
		}
	})

	t.Run("unknown and bad ids", func(t *testing.T) {
		if _, err := requestview.Find(ctx, conn, "chatcmpl-no-such-request"); !errors.Is(err, requestview.ErrNotFound) {
			t.Errorf("unknown id: %v, want ErrNotFound", err)
		}
		for _, id := range []string{"", "   ", strings.Repeat("x", 300), "a\nb"} {
			if _, err := requestview.Find(ctx, conn, id); err == nil || errors.Is(err, requestview.ErrNotFound) {
				t.Errorf("id %q: %v, want a refusal", id, err)
			}
		}
		// An id with quotes and backslashes is a bound parameter, not SQL.
		if _, err := requestview.Find(ctx, conn, `x' OR 1=1 --\`); !errors.Is(err, requestview.ErrNotFound) {
			t.Errorf("hostile id: %v, want ErrNotFound", err)
		}
	})
}
