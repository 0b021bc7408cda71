package engine

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestTokenizerRoundTrip(t *testing.T) {
	tok := NewTokenizer(152064)
	tests := []string{
		"The quick brown fox jumps over the lazy dog.",
		"Serving systems batch requests; KV cache usage stays at 28%!",
		"模型 推理 mixed with English",
		"tabs\tand\nnewlines\n\n",
		"UPPER lower MiXeD 12345",
	}
	for _, s := range tests {
		ids := tok.Encode(s, false)
		if got := tok.Decode(ids, false); got != s {
			t.Errorf("round trip %q -> %q", s, got)
		}
		again := tok.Encode(s, false)
		if len(again) != len(ids) {
			t.Errorf("%q: not deterministic", s)
		}
		for _, id := range ids {
			if id < 0 || id >= 152064 {
				t.Fatalf("id %d out of vocabulary", id)
			}
		}
	}
	prose := strings.Repeat("Operators read the time to first token and compare it with a normal day of the same system. ", 20)
	ratio := float64(len(prose)) / float64(len(tok.Encode(prose, false)))
	if ratio < 3 || ratio > 6 {
		t.Errorf("English prose at %.2f characters per token, want a BPE-like 3..6", ratio)
	}
	chat := tok.Encode(ApplyChatTemplate([]ChatMessage{{Role: "user", Content: "hi"}}, true), true)
	if chat[0] != TokenIMStart || !contains(chat, TokenIMEnd) {
		t.Errorf("chat template tokens %v lack the special tokens", chat)
	}
}

func contains(ids []int, id int) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func TestCostModelCalibration(t *testing.T) {
	m := DefaultCostModel()
	tests := []struct {
		name string
		w    Work
		want float64 // seconds, from docs/measurements.md (Four workloads)
		tol  float64
	}{
		{"normal decode, 12 running", Work{DecodeTokens: 12, ContextTokens: 12 * 100}, 0.016, 0.002},
		{"long output decode, 27 running", Work{DecodeTokens: 27, ContextTokens: 27 * 556}, 0.0265, 0.003},
		{"overload decode, 256 running", Work{DecodeTokens: 256, ContextTokens: 256 * 108}, 0.156, 0.012},
		{"uncached 2,843-token prefill", Work{PrefillTokens: 2843}, 1.55, 0.03},
		{"44-token prefill beside 4 decodes", Work{DecodeTokens: 4, PrefillTokens: 44, ContextTokens: 400}, 0.036, 0.004},
		{"cached 2,905-token prompt", Work{DecodeTokens: 3, PrefillTokens: 9, CachedTokens: 2896, ContextTokens: 3 * 2940}, 0.082, 0.006},
	}
	for _, tc := range tests {
		if got := m.StepSeconds(tc.w); math.Abs(got-tc.want) > tc.tol {
			t.Errorf("%s: %.4f s, want %.3f ± %.3f", tc.name, got, tc.want, tc.tol)
		}
	}
}

// recorder collects finished requests and crash reports.
type recorder struct {
	mu       sync.Mutex
	finished []*Finished
	crashes  []CrashInfo
	preempt  int
}

func (r *recorder) StepDone(s StepStats) {
	r.mu.Lock()
	r.preempt += s.Preemptions
	r.mu.Unlock()
}
func (r *recorder) RequestFinished(f *Finished) {
	r.mu.Lock()
	r.finished = append(r.finished, f)
	r.mu.Unlock()
}
func (r *recorder) Stats(IntervalStats)  {}
func (r *recorder) Crashed(c CrashInfo)  { r.mu.Lock(); r.crashes = append(r.crashes, c); r.mu.Unlock() }
func (r *recorder) PrefixCache(int, int) {}

func startEngine(t *testing.T, cfg Config) (*Engine, *recorder, chan error) {
	t.Helper()
	rec := &recorder{}
	e := New(cfg, NewTokenizer(152064), NewClock(200), rec)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		errc <- e.Run(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("engine did not stop")
		}
	})
	return e, rec, errc
}

func drain(t *testing.T, s *Seq) (*Finished, int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := 0
	for {
		toks, fin, done, err := s.Wait(ctx, nil)
		n += len(toks)
		if done || err != nil {
			return fin, n, err
		}
	}
}

func prompt(tok *Tokenizer, text string) []int {
	return tok.Encode(ApplyChatTemplate([]ChatMessage{{Role: "user", Content: text}}, true), true)
}

func TestSlotsAndFIFOQueue(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxNumSeqs = 2
	e, _, _ := startEngine(t, cfg)
	// One submission: at 200× the first two finish 2 ms of wall time after they start, so
	// requests submitted one by one could find a free slot on a loaded machine and never queue.
	var reqs []Request
	for i := 0; i < 4; i++ {
		reqs = append(reqs, Request{ID: string(rune('a' + i)), PromptIDs: prompt(e.Tokenizer(), strings.Repeat("word ", 10+i)), MaxTokens: 20, IgnoreEOS: true})
	}
	seqs, err := e.SubmitAll(reqs)
	if err != nil {
		t.Fatal(err)
	}
	var fins []*Finished
	for _, s := range seqs {
		f, n, err := drain(t, s)
		if err != nil || n != 20 || f.OutputTokens != 20 || f.FinishReason != "length" {
			t.Fatalf("%s: %d tokens, %+v, %v", s.ID(), n, f, err)
		}
		fins = append(fins, f)
	}
	if fins[0].QueueSeconds() != 0 || fins[1].QueueSeconds() != 0 {
		t.Errorf("first two requests queued %.3f / %.3f s with free slots", fins[0].QueueSeconds(), fins[1].QueueSeconds())
	}
	if fins[2].QueueSeconds() <= 0 || fins[3].QueueSeconds() <= 0 {
		t.Errorf("third and fourth requests did not queue behind 2 slots: %.3f / %.3f s", fins[2].QueueSeconds(), fins[3].QueueSeconds())
	}
	if fins[2].Scheduled > fins[3].Scheduled {
		t.Error("waiting queue is not FIFO")
	}
	for _, f := range fins {
		if !(f.Arrival <= f.Queued && f.Queued <= f.Scheduled && f.Scheduled < f.FirstToken && f.FirstToken <= f.LastToken && f.LastToken == f.Finish) {
			t.Errorf("timestamps out of order: %+v", f)
		}
		if math.Abs(f.TTFTSeconds()+f.DecodeSeconds()-f.E2ESeconds()) > 1e-9 {
			t.Errorf("TTFT + decode != E2E: %+v", f)
		}
	}
}

func TestPrefixCacheServesRepeatedPrompt(t *testing.T) {
	e, _, _ := startEngine(t, DefaultConfig())
	p := prompt(e.Tokenizer(), strings.Repeat("The prefix cache keeps full blocks of a prompt. ", 30))
	var fins []*Finished
	for i := 0; i < 2; i++ {
		s, err := e.Submit(Request{ID: "p", PromptIDs: p, MaxTokens: 2, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		f, _, err := drain(t, s)
		if err != nil {
			t.Fatal(err)
		}
		fins = append(fins, f)
	}
	want := (len(p) - 1) / 16 * 16
	if fins[0].CachedTokens != 0 || fins[1].CachedTokens != want {
		t.Fatalf("cached tokens %d then %d, want 0 then %d (full blocks, last token recomputed)", fins[0].CachedTokens, fins[1].CachedTokens, want)
	}
	if fins[1].PrefillSeconds() >= fins[0].PrefillSeconds()/2 {
		t.Errorf("cached prefill %.3f s is not much faster than uncached %.3f s", fins[1].PrefillSeconds(), fins[0].PrefillSeconds())
	}
}

func TestPreemptionWhenKVRunsOut(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KVCacheTokens = 1024
	cfg.MaxModelLen = 1024
	e, rec, _ := startEngine(t, cfg)
	// One submission, so that the six are in the engine together however slowly the test runs.
	var reqs []Request
	for i := 0; i < 6; i++ {
		reqs = append(reqs, Request{ID: "k", PromptIDs: prompt(e.Tokenizer(), strings.Repeat("x", 40+i)), MaxTokens: 300, IgnoreEOS: true})
	}
	seqs, err := e.SubmitAll(reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seqs {
		f, n, err := drain(t, s)
		if err != nil || n != 300 || f.OutputTokens != 300 {
			t.Fatalf("%d tokens, %+v, %v", n, f, err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.preempt == 0 {
		t.Error("no preemption although 6 × ~320 tokens exceed 1,024 KV tokens")
	}
	if g := e.Gauges(); g.KVCacheUsage != 0 || g.Running != 0 {
		t.Errorf("gauges after the run: %+v", g)
	}
}

func TestNaturalStop(t *testing.T) {
	e, _, _ := startEngine(t, DefaultConfig())
	s, err := e.Submit(Request{ID: "n", PromptIDs: prompt(e.Tokenizer(), "Tell me a story."), MaxTokens: 2000})
	if err != nil {
		t.Fatal(err)
	}
	f, n, err := drain(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if f.FinishReason != "stop" || n != f.OutputTokens || n < 32 || n >= 1025 {
		t.Fatalf("finish %q after %d tokens", f.FinishReason, n)
	}
}

func TestCrashWhenRunningExceedsLimit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CrashAtRunning = 3
	e, rec, errc := startEngine(t, cfg)
	// One submission: one by one, a test descheduled for 40 ms of wall time (500 tokens at 200×)
	// between two would see the first ones finish before the limit is passed.
	var reqs []Request
	for i := 0; i < 6; i++ {
		reqs = append(reqs, Request{ID: "c", PromptIDs: prompt(e.Tokenizer(), "hello"), MaxTokens: 500, IgnoreEOS: true})
	}
	seqs, err := e.SubmitAll(reqs)
	if err != nil {
		t.Fatal(err)
	}
	var crash *CrashError
	select {
	case err := <-errc:
		if !errors.As(err, &crash) {
			t.Fatalf("Run returned %v, want *CrashError", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("engine did not crash")
	}
	if crash.Info.Running != 4 || crash.Info.RequestedBytes != 4*152064*4 {
		t.Fatalf("crash %+v, want 4 running and 4 × 152064 × 4 bytes", crash.Info)
	}
	rec.mu.Lock()
	if len(rec.crashes) != 1 {
		t.Errorf("%d crash reports", len(rec.crashes))
	}
	rec.mu.Unlock()
	for _, s := range seqs {
		if _, _, err := drain(t, s); !errors.Is(err, ErrEngineDead) {
			t.Errorf("in-flight request ended with %v, want ErrEngineDead", err)
		}
	}
	if _, err := e.Submit(Request{PromptIDs: []int{1}, MaxTokens: 1}); !errors.Is(err, ErrEngineDead) {
		t.Errorf("Submit after the crash: %v", err)
	}
	select {
	case <-e.Dead():
	default:
		t.Error("Dead() not closed")
	}
}

func TestAbort(t *testing.T) {
	e, rec, _ := startEngine(t, DefaultConfig())
	s, err := e.Submit(Request{ID: "ab", PromptIDs: prompt(e.Tokenizer(), "hi"), MaxTokens: 3000, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, _, err := s.Wait(ctx, nil); err != nil {
		t.Fatal(err)
	}
	e.Abort(s)
	if _, _, err := drain(t, s); !errors.Is(err, ErrAborted) {
		t.Fatalf("aborted request ended with %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		rec.mu.Lock()
		n := len(rec.finished)
		rec.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.finished) != 1 || rec.finished[0].FinishReason != "abort" {
		t.Fatalf("finished %+v", rec.finished)
	}
}

// TestNotifyFollowsSeveralSequences follows the samples of one request through a shared Notify
// channel and Take, as the API server does for n > 1: every token arrives, step numbers never go
// back within a sequence, samples submitted together start in the same step, and samples with
// different seeds write different text.
func TestNotifyFollowsSeveralSequences(t *testing.T) {
	e, _, _ := startEngine(t, DefaultConfig())
	notify := make(chan struct{}, 1)
	p := prompt(e.Tokenizer(), "Explain paged attention.")
	var reqs []Request
	for j := 0; j < 3; j++ {
		reqs = append(reqs, Request{ID: string(rune('0'+j)) + "_r", PromptIDs: p, MaxTokens: 12, IgnoreEOS: true, Seed: uint64(j), Notify: notify})
	}
	seqs, err := e.SubmitAll(reqs)
	if err != nil {
		t.Fatal(err)
	}
	steps := make([][]uint64, len(seqs))
	texts := make([]string, len(seqs))
	done := make([]bool, len(seqs))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for left := len(seqs); left > 0; {
		select {
		case <-notify:
		case <-ctx.Done():
			t.Fatal("timed out following the samples")
		}
		for i, s := range seqs {
			if done[i] {
				continue
			}
			toks, fin, d, err := s.Take(nil)
			for _, tk := range toks {
				steps[i] = append(steps[i], tk.Step)
				texts[i] += tk.Text
			}
			if d {
				if err != nil || fin == nil || fin.OutputTokens != 12 {
					t.Fatalf("sample %d ended with %+v, %v", i, fin, err)
				}
				done[i] = true
				left--
			}
		}
	}
	for i := range seqs {
		if len(steps[i]) != 12 {
			t.Fatalf("sample %d: %d tokens, want 12", i, len(steps[i]))
		}
		for k := 1; k < len(steps[i]); k++ {
			if steps[i][k] <= steps[i][k-1] {
				t.Fatalf("sample %d: steps %v not increasing", i, steps[i])
			}
		}
		if steps[i][0] != steps[0][0] {
			t.Errorf("samples submitted together got their first tokens in steps %d and %d", steps[0][0], steps[i][0])
		}
	}
	if texts[0] == texts[1] || texts[1] == texts[2] {
		t.Errorf("samples with different seeds wrote the same text: %q", texts)
	}
}

func TestPrefillOnlyRequest(t *testing.T) {
	e, rec, _ := startEngine(t, DefaultConfig())
	s, err := e.Submit(Request{ID: "embd-1-0", PromptIDs: prompt(e.Tokenizer(), "embed this sentence"), PrefillOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	f, n, err := drain(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 || f.OutputTokens != 0 || f.FinishReason != "stop" || f.PromptTokens == 0 || f.ScheduledSteps != 1 {
		t.Fatalf("pooling request: %d tokens, %+v", n, f)
	}
	if !(f.Scheduled < f.FirstToken && f.FirstToken == f.Finish) {
		t.Errorf("timestamps %+v", f)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.finished) != 1 {
		t.Errorf("%d finished records", len(rec.finished))
	}
}

// gaugeAtFinish reads the engine's gauges when each request's end is reported.
type gaugeAtFinish struct {
	recorder
	e  *Engine
	at []Gauges
}

func (g *gaugeAtFinish) RequestFinished(f *Finished) {
	g.recorder.RequestFinished(f)
	g.mu.Lock()
	g.at = append(g.at, g.e.Gauges())
	g.mu.Unlock()
}

// TestRequestLeavesGaugesBeforeItsEnd: a finished or aborted request no longer counts in the
// gauges once its end is reported, as in vLLM, where the scheduler frees a request in the step
// that finishes it. A client holding its last token used to read running 1 and a used KV cache
// (the reproducer, once a race a loaded machine lost, is now deterministic).
func TestRequestLeavesGaugesBeforeItsEnd(t *testing.T) {
	for _, abort := range []bool{false, true} {
		t.Run(map[bool]string{false: "finished", true: "aborted"}[abort], func(t *testing.T) {
			obs := &gaugeAtFinish{}
			e := New(DefaultConfig(), NewTokenizer(152064), NewClock(200), obs)
			obs.e = e
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = e.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			s, err := e.Submit(Request{ID: "g", PromptIDs: prompt(e.Tokenizer(), "hello there"), MaxTokens: 20, IgnoreEOS: true})
			if err != nil {
				t.Fatal(err)
			}
			if abort {
				wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer wcancel()
				if _, _, _, err := s.Wait(wctx, nil); err != nil {
					t.Fatal(err)
				}
				e.Abort(s)
			}
			_, _, err = drain(t, s)
			if abort != errors.Is(err, ErrAborted) || (!abort && err != nil) {
				t.Fatalf("request ended with %v", err)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if len(obs.at) != 1 {
				t.Fatalf("%d ends reported", len(obs.at))
			}
			if g := obs.at[0]; g.Running != 0 || g.KVCacheUsage != 0 {
				t.Errorf("gauges when the end was reported: %+v, want none running and no KV used", g)
			}
		})
	}
}
