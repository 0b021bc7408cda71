package engine

import (
	"context"
	"sync"
)

type seqState int

const (
	stateInbox seqState = iota
	stateWaiting
	stateRunning
	stateDone
)

// Seq is one request inside the engine, as seen by the API server: Wait returns its tokens as
// the engine emits them and, at the end, its Finished record or the error that ended it.
type Seq struct {
	req    Request
	eng    *Engine  // the engine that runs it
	hashes []uint64 // chained hashes of the prompt's full blocks

	// Owned by the engine goroutine.
	state         seqState
	arrival       float64
	queued        float64
	scheduled     float64
	firstToken    float64
	lastToken     float64
	everScheduled bool
	cachedTokens  int
	computed      int // tokens (prompt then output) whose KV exists
	generated     int
	shared        []uint64 // prefix-cache blocks held
	priv          int      // private blocks held
	naturalLen    int
	wrongLang     bool
	rng           uint64
	reason        string
	lastTok       Token
	steps         int
	pooled        bool

	mu      sync.Mutex
	pending []Token
	done    bool
	final   *Finished
	err     error
	notify  chan struct{}
}

// ID is the request id given at Submit.
func (s *Seq) ID() string { return s.req.ID }

// PromptTokens is the prompt length in tokens.
func (s *Seq) PromptTokens() int { return len(s.req.PromptIDs) }

func (s *Seq) totalLen() int { return len(s.req.PromptIDs) + s.generated }

func (s *Seq) heldBlocks() int { return len(s.shared) + s.priv }

func (s *Seq) rand() uint64 {
	s.rng ^= s.rng << 13
	s.rng ^= s.rng >> 7
	s.rng ^= s.rng << 17
	return s.rng
}

// nextToken draws the next output token: words with a leading space, a period or comma now and
// then, and, for wrong-language requests, CJK characters mixed in.
func (s *Seq) nextToken(t *Tokenizer) Token {
	r := s.rand()
	var id int
	switch {
	case s.wrongLang && r%5 == 0:
		id = t.cjk[(r>>8)%uint64(len(t.cjk))]
	case r%13 == 0 && s.generated > 0:
		id = t.punct["."]
	case r%11 == 0 && s.generated > 0:
		id = t.punct[","]
	default:
		id = t.words[(r>>8)%uint64(len(t.words))]
	}
	return Token{ID: id, Text: t.Piece(id)}
}

func (s *Seq) finished(now float64, reason string) *Finished {
	return &Finished{
		ID:             s.req.ID,
		Arrival:        s.arrival,
		Queued:         s.queued,
		Scheduled:      s.scheduled,
		FirstToken:     s.firstToken,
		LastToken:      s.lastToken,
		Finish:         now,
		PromptTokens:   len(s.req.PromptIDs),
		CachedTokens:   s.cachedTokens,
		OutputTokens:   s.generated,
		MaxTokens:      s.req.MaxTokens,
		FinishReason:   reason,
		ScheduledSteps: s.steps,
		Tag:            s.req.Tag,
	}
}

func (s *Seq) push(t Token) {
	s.mu.Lock()
	s.pending = append(s.pending, t)
	s.mu.Unlock()
	s.signal()
}

func (s *Seq) finish(last Token, f *Finished) {
	s.mu.Lock()
	s.pending = append(s.pending, last)
	s.done = true
	s.final = f
	s.mu.Unlock()
	s.signal()
}

func (s *Seq) finishEmpty(f *Finished) {
	s.mu.Lock()
	s.done = true
	s.final = f
	s.mu.Unlock()
	s.signal()
}

func (s *Seq) fail(err error) {
	s.mu.Lock()
	if !s.done {
		s.done = true
		s.err = err
	}
	s.mu.Unlock()
	s.signal()
}

func (s *Seq) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
	if s.req.Notify != nil {
		select {
		case s.req.Notify <- struct{}{}:
		default:
		}
	}
}

// Take is Wait without blocking: it returns at once what Wait would, with no tokens and done
// false when nothing happened since the previous call. Readers following several sequences
// wait on their Request.Notify channel and then Take from each.
func (s *Seq) Take(buf []Token) (toks []Token, fin *Finished, done bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	buf = append(buf, s.pending...)
	s.pending = s.pending[:0]
	return buf, s.final, s.done, s.err
}

// Wait blocks until the sequence has new tokens or has ended, or ctx ends. It returns the tokens
// emitted since the previous call (appended to buf) and, once the sequence ended, either its
// Finished record or the error that ended it (ErrEngineDead, ErrAborted); done reports the end.
func (s *Seq) Wait(ctx context.Context, buf []Token) (toks []Token, fin *Finished, done bool, err error) {
	for {
		s.mu.Lock()
		if len(s.pending) > 0 || s.done {
			buf = append(buf, s.pending...)
			s.pending = s.pending[:0]
			done, fin, err = s.done, s.final, s.err
			s.mu.Unlock()
			return buf, fin, done, err
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return buf, nil, false, ctx.Err()
		}
	}
}
