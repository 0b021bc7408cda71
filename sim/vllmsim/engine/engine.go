// Package engine is vllmsim's model of a vLLM V1 engine: continuous batching over simulated time.
//
// One goroutine (Run) steps the batch like vLLM's EngineCore busy loop. At each step boundary it
// takes newly arrived requests into a FIFO waiting queue, then schedules: every running sequence
// gets its next token (or its next prefill chunk) within a token budget (max_num_batched_tokens),
// then waiting requests are admitted in order while a slot (max_num_seqs) and KV blocks are free.
// The step's simulated duration comes from CostModel (flat while the batch is small, growing per
// scheduled token beyond a knee and with the KV the decoding sequences read, plus attention over
// cached prefixes); the loop sleeps until the step's end on the scaled Clock (absolute deadlines,
// so late wake-ups are caught up) and then emits one token per decoding sequence. Contention is not
// scripted: queueing, slot saturation, slower inter-token latency and slower prefill under a big
// batch all emerge from this loop.
//
// KV memory is accounted in blocks of BlockSize tokens (see kvCache): a sequence holds blocks for
// its prompt and generated tokens; full prompt blocks go to a prefix cache keyed by a chained hash
// of token ids, so a repeated prompt prefix is found and not recomputed (vLLM never serves the
// last prompt token from cache, so at least one token is computed). When blocks run out, the most
// recently admitted running sequence is preempted (recompute), as vLLM does.
//
// A request ends at max_tokens (finish reason "length") or at its natural end ("stop"), a length
// derived deterministically from the prompt (and seed), unless ignore_eos is set: uniform over
// 32..1,024 tokens, or log-normal around NaturalLenMedian (the answers of a model whose replies
// have a typical length). Output text is
// drawn deterministically from the tokenizer's word list; with WrongLanguageShare a share of
// requests get CJK characters mixed in.
//
// Timestamps follow vLLM's definitions, in simulated seconds: arrival (the API server got the
// request), queued (the engine took it at a step boundary), scheduled (first scheduled), first
// token, last token. Queue time = scheduled − queued; prefill = first token − scheduled;
// decode = last token − first token; inference = last token − scheduled; TTFT = first token −
// arrival; E2E = finish − arrival.
package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// ErrEngineDead is returned by Submit and delivered to in-flight sequences once the engine
// crashed or stopped.
var ErrEngineDead = errors.New("EngineCore encountered an issue. See stack trace (above) for the root cause.")

// ErrAborted is delivered to a sequence aborted by its caller.
var ErrAborted = errors.New("request aborted")

// Config holds the engine's limits and fault settings.
type Config struct {
	MaxModelLen         int       // tokens, prompt plus output
	MaxNumSeqs          int       // running slots
	MaxNumBatchedTokens int       // tokens scheduled per step
	KVCacheTokens       int       // KV capacity in tokens
	BlockSize           int       // tokens per KV block
	Cost                CostModel // step duration model
	// CrashAtRunning makes the engine die with a CUDA out-of-memory error in the sampler when
	// the number of running sequences exceeds it; 0 disables.
	CrashAtRunning int
	// WrongLanguageShare is the share of requests (0..1) whose output mixes in CJK characters.
	WrongLanguageShare float64
	// NaturalLenMedian, when above 0, makes a request's natural length (where it ends without
	// ignore_eos) log-normal with this median in tokens and log-space standard deviation
	// NaturalLenSigma, drawn from the prompt's hash; 0 keeps the uniform 32..1,024 tokens.
	NaturalLenMedian int
	NaturalLenSigma  float64
	// StatsIntervalSeconds is the simulated period of Observer.Stats calls (vLLM logs every 10 s).
	StatsIntervalSeconds float64
}

// DefaultConfig is vLLM's defaults on the RTX 3060 of docs/measurements.md (section vllmsim's engine
// model).
func DefaultConfig() Config {
	return Config{
		MaxModelLen:          4096,
		MaxNumSeqs:           256,
		MaxNumBatchedTokens:  2048,
		KVCacheTokens:        100_000,
		BlockSize:            16,
		Cost:                 DefaultCostModel(),
		StatsIntervalSeconds: 10,
	}
}

// Request is what the API server submits. PromptIDs are the tokenized prompt (chat template
// applied); MaxTokens is already resolved (vLLM defaults it to max_model_len − prompt).
type Request struct {
	ID        string // e.g. "chatcmpl-<X-Request-Id>"
	PromptIDs []int
	MaxTokens int
	MinTokens int
	IgnoreEOS bool
	Seed      uint64 // mixes into the natural length and the output text
	// PrefillOnly marks a pooling request (an embedding): it leaves the engine once its prompt
	// is computed, with no output token and finish reason "stop".
	PrefillOnly bool
	// Notify, when set, is signalled (without blocking; give it a buffer of 1) whenever the
	// sequence has new tokens or ends, so one reader can follow several sequences (the n
	// samples and the prompts of one API request) with Seq.Take.
	Notify chan struct{}
	// Tag is opaque to the engine and handed back in Finished (the server keeps its trace
	// context and sampling parameters there).
	Tag any
}

// Token is one generated token. Step numbers the engine step that produced it (from 1), so a
// reader following several sequences can order their tokens as the engine emitted them.
type Token struct {
	ID   int
	Text string
	Step uint64
}

// Finished describes a request that left the engine. Times are simulated seconds since the
// engine's clock started; FirstToken and LastToken are 0 when no token was produced.
type Finished struct {
	ID           string
	Arrival      float64
	Queued       float64
	Scheduled    float64
	FirstToken   float64
	LastToken    float64
	Finish       float64
	PromptTokens int
	CachedTokens int // prompt tokens served by the prefix cache at first scheduling
	OutputTokens int
	MaxTokens    int
	FinishReason string // "stop", "length" or "abort"
	// ScheduledSteps is the number of engine steps that computed part of the request (prefill
	// chunks and decode steps).
	ScheduledSteps int
	Tag            any
}

// QueueSeconds is the time from entering the waiting queue to being first scheduled, in seconds.
func (f *Finished) QueueSeconds() float64 { return f.Scheduled - f.Queued }

// PrefillSeconds is the time from first scheduling to the first token, in seconds.
func (f *Finished) PrefillSeconds() float64 { return f.FirstToken - f.Scheduled }

// DecodeSeconds is the time from the first to the last token, in seconds.
func (f *Finished) DecodeSeconds() float64 { return f.LastToken - f.FirstToken }

// InferenceSeconds is the time from first scheduling to the last token, in seconds.
func (f *Finished) InferenceSeconds() float64 { return f.LastToken - f.Scheduled }

// TTFTSeconds is the time from arrival to the first token, in seconds.
func (f *Finished) TTFTSeconds() float64 { return f.FirstToken - f.Arrival }

// E2ESeconds is the time from arrival to finish, in seconds.
func (f *Finished) E2ESeconds() float64 { return f.Finish - f.Arrival }

// StepStats describes one executed step.
type StepStats struct {
	End              float64 // simulated end time, seconds
	DurationSeconds  float64
	ScheduledTokens  int // tokens computed in the step (vllm:iteration_tokens_total)
	PromptTokens     int // prompt tokens computed (prefill, not cached)
	GenerationTokens int // tokens emitted
	// InterTokenSeconds holds one inter-token latency per token emitted after a sequence's first.
	InterTokenSeconds []float64
	Preemptions       int
}

// IntervalStats is what vLLM's periodic stats line reports, over one StatsIntervalSeconds.
type IntervalStats struct {
	At               float64 // simulated time of the report, seconds
	IntervalSeconds  float64
	PromptTokens     int
	GenerationTokens int
	Running          int
	Waiting          int
	KVCacheUsage     float64 // 0..1
	PrefixQueries    int     // prompt tokens looked up in the prefix cache
	PrefixHits       int     // of which found
}

// CrashInfo describes the simulated CUDA out-of-memory failure.
type CrashInfo struct {
	At             float64 // simulated time, seconds
	Running        int
	Waiting        int
	KVCacheUsage   float64
	VocabSize      int
	RequestedBytes int64 // running × vocab × 4 (a float32 logits-sized temporary)
}

// Observer receives the engine's events on the engine goroutine; implementations must be quick
// and must not call back into the engine.
type Observer interface {
	StepDone(StepStats)
	RequestFinished(*Finished)
	Stats(IntervalStats)
	Crashed(CrashInfo)
	// PrefixCache reports prompt tokens looked up and found when a request is first scheduled.
	PrefixCache(queries, hits int)
}

// Gauges is an instantaneous view of the scheduler.
type Gauges struct {
	Running      int
	Waiting      int
	KVCacheUsage float64 // 0..1
}

// Engine is the simulated engine. Create with New, run with Run, submit with Submit.
type Engine struct {
	cfg       Config
	tok       *Tokenizer
	clock     *Clock
	observers []Observer

	mu       sync.Mutex
	inbox    []*Seq
	aborts   []*Seq
	dead     bool
	wake     chan struct{}
	deadCh   chan struct{}
	running  atomic.Int64
	waitingN atomic.Int64
	kvUsage  atomic.Uint64 // usage × 1e6

	// loop-owned state
	steps     uint64
	ivQueries int
	ivHits    int
	waiting   []*Seq
	run       []*Seq
	kv        *kvCache
}

// New builds an engine; it does nothing until Run.
func New(cfg Config, tok *Tokenizer, clock *Clock, observers ...Observer) *Engine {
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	if cfg.StatsIntervalSeconds <= 0 {
		cfg.StatsIntervalSeconds = 10
	}
	if cfg.MaxNumBatchedTokens < cfg.MaxNumSeqs {
		cfg.MaxNumBatchedTokens = max(cfg.MaxNumSeqs, 2048)
	}
	return &Engine{
		cfg:       cfg,
		tok:       tok,
		clock:     clock,
		observers: observers,
		wake:      make(chan struct{}, 1),
		deadCh:    make(chan struct{}),
		kv:        newKVCache(cfg.KVCacheTokens, cfg.BlockSize),
	}
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Tokenizer returns the engine's tokenizer.
func (e *Engine) Tokenizer() *Tokenizer { return e.tok }

// Clock returns the engine's clock.
func (e *Engine) Clock() *Clock { return e.clock }

// Dead is closed when the engine has crashed or stopped.
func (e *Engine) Dead() <-chan struct{} { return e.deadCh }

// Gauges reads the scheduler's state as of the last step.
func (e *Engine) Gauges() Gauges {
	return Gauges{
		Running:      int(e.running.Load()),
		Waiting:      int(e.waitingN.Load()),
		KVCacheUsage: float64(e.kvUsage.Load()) / 1e6,
	}
}

// Submit hands a request to the engine, stamping its arrival now. It fails with ErrEngineDead
// once the engine is dead.
func (e *Engine) Submit(req Request) (*Seq, error) {
	seqs, err := e.SubmitAll([]Request{req})
	if err != nil {
		return nil, err
	}
	return seqs[0], nil
}

// SubmitAll hands several requests to the engine at once (the prompts and samples of one API
// request): they reach the waiting queue at the same step boundary, in order. It fails with
// ErrEngineDead, submitting none, once the engine is dead.
func (e *Engine) SubmitAll(reqs []Request) ([]*Seq, error) {
	now := e.clock.Now()
	seqs := make([]*Seq, len(reqs))
	for i, req := range reqs {
		seqs[i] = e.newSeq(req, now)
	}
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		return nil, ErrEngineDead
	}
	e.inbox = append(e.inbox, seqs...)
	e.mu.Unlock()
	e.poke()
	return seqs, nil
}

func (e *Engine) newSeq(req Request, now float64) *Seq {
	s := &Seq{
		req:     req,
		eng:     e,
		arrival: now,
		notify:  make(chan struct{}, 1),
		hashes:  blockHashes(req.PromptIDs, e.cfg.BlockSize),
	}
	h := uint64(1469598103934665603) ^ req.Seed
	for _, id := range req.PromptIDs {
		h = (h ^ uint64(id)) * 1099511628211
	}
	s.rng = h | 1
	s.naturalLen = e.cfg.naturalLen(h)
	s.wrongLang = e.cfg.WrongLanguageShare > 0 && float64((h>>11)%1_000_000)/1e6 < e.cfg.WrongLanguageShare
	return s
}

// naturalLen is the natural length of a request whose prompt hashes to h: uniform over 32..1,024
// tokens, or, with NaturalLenMedian, median × exp(σ·z) with z standard normal (the inverse normal
// of a uniform draw from h), at least one token.
func (c Config) naturalLen(h uint64) int {
	if c.NaturalLenMedian <= 0 {
		return 32 + int(h%993)
	}
	u := (float64(h>>11) + 0.5) / (1 << 53)
	z := math.Sqrt2 * math.Erfinv(2*u-1)
	return max(1, int(math.Round(float64(c.NaturalLenMedian)*math.Exp(c.NaturalLenSigma*z))))
}

// Abort removes a request (client went away); its sequence ends with ErrAborted.
func (e *Engine) Abort(s *Seq) {
	e.mu.Lock()
	e.aborts = append(e.aborts, s)
	e.mu.Unlock()
	e.poke()
}

func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run steps the engine until ctx ends (returning ctx.Err()) or the simulated crash happens
// (returning a *CrashError). Either way every in-flight sequence is ended with ErrEngineDead.
func (e *Engine) Run(ctx context.Context) error {
	err := e.loop(ctx)
	e.mu.Lock()
	e.dead = true
	inbox := e.inbox
	e.inbox = nil
	e.mu.Unlock()
	for _, s := range append(append(e.run, e.waiting...), inbox...) {
		s.fail(ErrEngineDead)
	}
	e.run, e.waiting = nil, nil
	close(e.deadCh)
	return err
}

// CrashError is returned by Run when the simulated CUDA out-of-memory error killed the engine.
type CrashError struct{ Info CrashInfo }

func (c *CrashError) Error() string {
	return fmt.Sprintf("engine core died: CUDA out of memory allocating %d bytes with %d running", c.Info.RequestedBytes, c.Info.Running)
}

type planned struct {
	s     *Seq
	chunk int
}

func (e *Engine) loop(ctx context.Context) error {
	now := e.clock.Now()
	nextStats := now + e.cfg.StatsIntervalSeconds
	var iv IntervalStats
	plan := make([]planned, 0, e.cfg.MaxNumSeqs)
	for {
		if len(e.run) == 0 && len(e.waiting) == 0 && !e.hasInbox() {
			e.publishGauges()
			select {
			case <-e.wake:
			case <-ctx.Done():
				return ctx.Err()
			}
			now = max(now, e.clock.Now())
			if now >= nextStats {
				// vLLM demotes idle stats lines to debug; report once and realign.
				e.reportStats(&iv, now, e.cfg.StatsIntervalSeconds)
				nextStats = now + e.cfg.StatsIntervalSeconds
			}
			continue
		}
		e.drain(now)
		var preemptions, promptTokens int
		var work Work
		plan, preemptions, work, promptTokens = e.schedule(now, plan[:0])
		e.publishGauges()
		if e.cfg.CrashAtRunning > 0 && len(e.run) > e.cfg.CrashAtRunning {
			// A last stats line at the moment of death (the "15:53:37 (crash)" row of
			// docs/measurements.md, The crash), so the log holds the running count the allocation was sized by.
			if since := now - (nextStats - e.cfg.StatsIntervalSeconds); since > 0 {
				e.reportStats(&iv, now, since)
			}
			info := CrashInfo{
				At: now, Running: len(e.run), Waiting: len(e.waiting), KVCacheUsage: e.kv.usage(),
				VocabSize: e.tok.VocabSize(), RequestedBytes: int64(len(e.run)) * int64(e.tok.VocabSize()) * 4,
			}
			for _, o := range e.observers {
				o.Crashed(info)
			}
			return &CrashError{Info: info}
		}
		if len(plan) == 0 {
			// After preempting everything, the next pass admits again. Otherwise nothing fits
			// an empty engine (a request larger than the whole KV cache): fail the head rather
			// than spin.
			if preemptions == 0 && len(e.run) == 0 && len(e.waiting) > 0 {
				s := e.waiting[0]
				e.waiting = e.waiting[1:]
				s.fail(fmt.Errorf("request %s needs more KV cache than the engine has", s.req.ID))
			}
			continue
		}
		d := e.cfg.Cost.StepSeconds(work)
		tokens := work.DecodeTokens + work.PrefillTokens
		if !e.clock.SleepUntil(ctx, now+d) {
			return ctx.Err()
		}
		now += d
		st := StepStats{End: now, DurationSeconds: d, ScheduledTokens: tokens, PromptTokens: promptTokens, Preemptions: preemptions}
		e.apply(now, plan, &st)
		for _, o := range e.observers {
			o.StepDone(st)
		}
		iv.PromptTokens += st.PromptTokens
		iv.GenerationTokens += st.GenerationTokens
		for now >= nextStats {
			e.reportStats(&iv, nextStats, e.cfg.StatsIntervalSeconds)
			nextStats += e.cfg.StatsIntervalSeconds
		}
	}
}

func (e *Engine) reportStats(iv *IntervalStats, at, interval float64) {
	iv.At = at
	iv.IntervalSeconds = interval
	// Like vLLM's SchedulerStats, the counts are those of the last scheduling decision.
	g := e.Gauges()
	iv.Running = g.Running
	iv.Waiting = g.Waiting
	iv.KVCacheUsage = g.KVCacheUsage
	iv.PrefixQueries = e.ivQueries
	iv.PrefixHits = e.ivHits
	for _, o := range e.observers {
		o.Stats(*iv)
	}
	*iv = IntervalStats{}
	e.ivQueries, e.ivHits = 0, 0
}

func (e *Engine) hasInbox() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.inbox) > 0 || len(e.aborts) > 0
}

// publishGauges records the scheduler state right after a scheduling decision, which is when
// vLLM computes the gauges it exports (running = the batch being executed), and after
// sequences leave, before their ends are delivered.
func (e *Engine) publishGauges() {
	e.running.Store(int64(len(e.run)))
	e.waitingN.Store(int64(len(e.waiting)))
	e.kvUsage.Store(uint64(e.kv.usage() * 1e6))
}

// drain moves arrivals into the waiting queue and applies aborts, at step boundary now.
func (e *Engine) drain(now float64) {
	e.mu.Lock()
	inbox, aborts := e.inbox, e.aborts
	e.inbox, e.aborts = nil, nil
	e.mu.Unlock()
	for _, s := range inbox {
		s.arrival = min(s.arrival, now)
		s.queued = now
		s.state = stateWaiting
		e.waiting = append(e.waiting, s)
	}
	var aborted []*Seq
	for _, s := range aborts {
		switch s.state {
		case stateWaiting:
			e.waiting = removeSeq(e.waiting, s)
		case stateRunning:
			e.run = removeSeq(e.run, s)
			e.releaseBlocks(s)
		default:
			continue // already finished, or aborted before arrival was drained
		}
		s.state = stateDone
		aborted = append(aborted, s)
	}
	if len(aborted) == 0 {
		return
	}
	e.publishGauges() // as in apply: freed before the end is delivered
	for _, s := range aborted {
		f := s.finished(now, "abort")
		for _, o := range e.observers {
			o.RequestFinished(f)
		}
		s.fail(ErrAborted)
	}
}

func removeSeq(q []*Seq, s *Seq) []*Seq {
	for i, x := range q {
		if x == s {
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}

// schedule decides this step's work: running sequences first (one decode token or the next
// prefill chunk each), preempting from the back when KV blocks run out, then admissions from the
// waiting queue in FIFO order.
func (e *Engine) schedule(now float64, plan []planned) ([]planned, int, Work, int) {
	budget := e.cfg.MaxNumBatchedTokens
	var w Work
	promptTokens, preemptions := 0, 0
	add := func(s *Seq, c int) {
		if s.totalLen()-s.computed == 1 && c == 1 {
			w.DecodeTokens++
			w.ContextTokens += s.computed
		} else {
			w.PrefillTokens += c
		}
	}
	for i := 0; i < len(e.run) && budget > 0; i++ {
		s := e.run[i]
		c := min(s.totalLen()-s.computed, budget)
		need := e.kv.blocksFor(s.computed+c) - s.heldBlocks()
		preemptedSelf := false
		for need > e.kv.free() {
			victim := e.run[len(e.run)-1]
			e.run = e.run[:len(e.run)-1]
			e.preempt(victim)
			preemptions++
			if victim == s {
				preemptedSelf = true
				break
			}
		}
		if preemptedSelf {
			break
		}
		if need > 0 {
			e.kv.allocPrivate(need)
			s.priv += need
		}
		plan = append(plan, planned{s, c})
		add(s, c)
		budget -= c
		if s.computed < len(s.req.PromptIDs) {
			promptTokens += min(c, len(s.req.PromptIDs)-s.computed)
		}
	}
	for preemptions == 0 && len(e.waiting) > 0 && len(e.run) < e.cfg.MaxNumSeqs && budget > 0 {
		if e.cfg.CrashAtRunning > 0 && len(e.run) > e.cfg.CrashAtRunning {
			// The batch that first exceeds the limit is the one whose sampler fails, so
			// the crash happens at exactly CrashAtRunning+1 (193 in docs/measurements.md).
			break
		}
		s := e.waiting[0]
		total := s.totalLen()
		// Never serve the last token from cache: vLLM must compute at least one token.
		maxHitBlocks := min(len(s.hashes), (total-1)/e.cfg.BlockSize)
		hitBlocks := e.kv.hits(s.hashes[:maxHitBlocks])
		cached := hitBlocks * e.cfg.BlockSize
		c := min(total-cached, budget)
		need := e.kv.blocksFor(cached+c) - hitBlocks
		if need+e.kv.freeCost(s.hashes[:hitBlocks]) > e.kv.free() {
			break
		}
		for _, h := range s.hashes[:hitBlocks] {
			e.kv.acquire(h)
		}
		s.shared = append(s.shared[:0], s.hashes[:hitBlocks]...)
		e.kv.allocPrivate(need)
		s.priv = need
		s.computed = cached
		if !s.everScheduled {
			s.everScheduled = true
			s.scheduled = now
			s.cachedTokens = cached
			for _, o := range e.observers {
				o.PrefixCache(len(s.req.PromptIDs), cached)
			}
			e.ivQueries += len(s.req.PromptIDs)
			e.ivHits += cached
		}
		w.CachedTokens += cached
		e.waiting = e.waiting[1:]
		s.state = stateRunning
		e.run = append(e.run, s)
		plan = append(plan, planned{s, c})
		add(s, c)
		budget -= c
		promptTokens += min(c, max(0, len(s.req.PromptIDs)-s.computed))
	}
	return plan, preemptions, w, promptTokens
}

// preempt returns a running sequence to the front of the waiting queue, freeing its blocks; it
// will recompute its prompt and output so far (vLLM's recompute preemption).
func (e *Engine) preempt(s *Seq) {
	e.releaseBlocks(s)
	s.computed = 0
	s.state = stateWaiting
	e.waiting = append([]*Seq{s}, e.waiting...)
}

func (e *Engine) releaseBlocks(s *Seq) {
	for _, h := range s.shared {
		e.kv.release(h)
	}
	s.shared = s.shared[:0]
	e.kv.freePrivate(s.priv)
	s.priv = 0
}

// apply commits a step that ended at now: computed tokens advance, full prompt blocks join the
// prefix cache, sequences whose input is complete sample a token, finished ones leave.
func (e *Engine) apply(now float64, plan []planned, st *StepStats) {
	e.steps++
	finished := false
	for _, p := range plan {
		s := p.s
		if s.state != stateRunning {
			continue // preempted later in the same scheduling pass
		}
		s.computed += p.chunk
		s.steps++
		// Full prompt blocks now computed become shareable cache entries.
		for fb := min(s.computed, len(s.req.PromptIDs)) / e.cfg.BlockSize; len(s.shared) < fb && len(s.shared) < len(s.hashes); {
			h := s.hashes[len(s.shared)]
			e.kv.freePrivate(1)
			s.priv--
			e.kv.acquire(h)
			s.shared = append(s.shared, h)
		}
		if s.computed < s.totalLen() {
			continue
		}
		if s.req.PrefillOnly {
			// A pooling request is done once its prompt is computed; vLLM stamps its "first
			// token" when that output arrives.
			s.firstToken, s.lastToken = now, now
			s.state = stateDone
			s.reason = "stop"
			s.pooled = true
			finished = true
			continue
		}
		tok := s.nextToken(e.tok)
		tok.Step = e.steps
		s.generated++
		st.GenerationTokens++
		if s.firstToken == 0 {
			s.firstToken = now
		} else {
			st.InterTokenSeconds = append(st.InterTokenSeconds, now-s.lastToken)
		}
		s.lastToken = now
		reason := ""
		switch {
		case s.generated >= s.req.MaxTokens:
			reason = "length"
		case !s.req.IgnoreEOS && s.generated >= max(1, s.req.MinTokens) && s.generated >= s.naturalLen:
			reason = "stop"
		}
		if reason == "" {
			s.push(tok)
			continue
		}
		// The last token is delivered together with the end so the API server can put the
		// finish reason on the last content chunk.
		s.state = stateDone
		s.reason = reason
		s.lastTok = tok
		finished = true
	}
	if !finished {
		return
	}
	// Finished sequences leave the batch and free their blocks before their outputs go out, as
	// vLLM's scheduler frees a request in the step that finishes it: a client that has its last
	// token never reads gauges that still count its request.
	var done []*Seq
	kept := e.run[:0]
	for _, s := range e.run {
		if s.state != stateDone {
			kept = append(kept, s)
			continue
		}
		e.releaseBlocks(s)
		done = append(done, s)
	}
	for i := len(kept); i < len(e.run); i++ {
		e.run[i] = nil
	}
	e.run = kept
	e.publishGauges()
	for _, s := range done {
		f := s.finished(now, s.reason)
		for _, o := range e.observers {
			o.RequestFinished(f)
		}
		if s.pooled {
			s.finishEmpty(f)
			continue
		}
		s.finish(s.lastTok, f)
	}
}
