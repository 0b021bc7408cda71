package engine

import (
	"context"
	"errors"
	"sync"
)

// Group is a data-parallel vLLM server's engine cores behind its one API server (vllm serve
// --data-parallel-size N): each engine has its own slots, KV cache and scheduler. A request goes
// to one of them as vLLM's DPLBAsyncMPClient routes it (vllm/v1/engine/core_client.py,
// get_core_engine_for_request): the engine with the lowest waiting × 4 + running, the lowest index
// on a tie, counting the requests it was just handed as waiting. Each prompt and sample of an API
// request is its own engine request and is routed on its own. One engine's death is the server's:
// vLLM's client marks the engines dead and fails every request (EngineDeadError), so Dead closes
// when any engine dies and Run stops the others.
type Group struct {
	engines []*Engine
	dead    chan struct{}
}

// NewGroup makes a group of engines (at least one), which share a clock and a tokenizer.
func NewGroup(engines ...*Engine) *Group {
	g := &Group{engines: engines, dead: make(chan struct{})}
	var once sync.Once
	for _, e := range engines {
		go func() {
			<-e.Dead()
			once.Do(func() { close(g.dead) })
		}()
	}
	return g
}

// Engines returns the group's engines, engine i at index i.
func (g *Group) Engines() []*Engine { return g.engines }

// Config returns the engines' configuration (engine 0's: they are alike).
func (g *Group) Config() Config { return g.engines[0].Config() }

// Clock returns the engines' clock.
func (g *Group) Clock() *Clock { return g.engines[0].Clock() }

// Tokenizer returns the engines' tokenizer.
func (g *Group) Tokenizer() *Tokenizer { return g.engines[0].Tokenizer() }

// Dead is closed when any engine has died.
func (g *Group) Dead() <-chan struct{} { return g.dead }

// SubmitAll routes each request to an engine and submits them there, each engine's in order; it
// fails with ErrEngineDead, submitting none, once any engine is dead.
func (g *Group) SubmitAll(reqs []Request) ([]*Seq, error) {
	select {
	case <-g.dead:
		return nil, ErrEngineDead
	default:
	}
	score := make([]int, len(g.engines))
	for i, e := range g.engines {
		gs := e.Gauges()
		score[i] = (gs.Waiting+e.inboxLen())*4 + gs.Running
	}
	byEngine := make([][]int, len(g.engines)) // request indexes per engine
	for k := range reqs {
		best := 0
		for i := range g.engines {
			if score[i] < score[best] {
				best = i
			}
		}
		byEngine[best] = append(byEngine[best], k)
		score[best] += 4 // handed to it: one more waiting
	}
	out := make([]*Seq, len(reqs))
	for i, ks := range byEngine {
		if len(ks) == 0 {
			continue
		}
		part := make([]Request, len(ks))
		for j, k := range ks {
			part[j] = reqs[k]
		}
		seqs, err := g.engines[i].SubmitAll(part)
		if err != nil {
			for _, s := range out {
				if s != nil {
					s.eng.Abort(s)
				}
			}
			return nil, err
		}
		for j, k := range ks {
			out[k] = seqs[j]
		}
	}
	return out, nil
}

// Abort removes a request from the engine running it.
func (g *Group) Abort(s *Seq) { s.eng.Abort(s) }

// Run runs every engine until ctx ends or one of them dies; then it stops the others and returns
// the first engine's error that is not the context's (a *CrashError), else ctx.Err().
func (g *Group) Run(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	errs := make(chan error, len(g.engines))
	for _, e := range g.engines {
		go func() { errs <- e.Run(ctx) }()
	}
	var first error
	for range g.engines {
		err := <-errs
		cancel()
		if first == nil && err != nil && !errors.Is(err, context.Canceled) {
			first = err
		}
	}
	if first != nil {
		return first
	}
	return parent.Err()
}

// inboxLen is how many submitted requests the engine has not yet taken into its waiting queue.
func (e *Engine) inboxLen() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.inbox)
}
