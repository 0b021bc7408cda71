package record

import (
	"time"

	"github.com/servescope/servescope/schema"
)

// maxChoices bounds the choices tracked one by one (n × prompts can be anything a client asks
// for); later choices still count in the totals.
const maxChoices = schema.MaxFinishReasons

// choice is one choice's timeline: when its first and last token-bearing events arrived, how
// many there were, and its finish reason.
type choice struct {
	first, last time.Time
	events      int
	finish      string
}

func (c *choice) token(now time.Time) {
	if c.first.IsZero() {
		c.first = now
	}
	c.last = now
	c.events++
}

// choices are the choices of one response, by index.
type choices struct {
	list   []choice
	events int // token-bearing events over every choice
}

// at returns choice i's state, growing the list; nil for an index out of range. A choice without
// an index (-1) is choice 0.
func (cs *choices) at(i int) *choice {
	if i < 0 {
		i = 0
	}
	if i >= maxChoices {
		return nil
	}
	if i >= len(cs.list) {
		cs.list = append(cs.list, make([]choice, i+1-len(cs.list))...)
	}
	return &cs.list[i]
}

func (cs *choices) finishReasons() []string {
	found := false
	for i := range cs.list {
		if cs.list[i].finish != "" {
			found = true
			break
		}
	}
	if !found {
		return nil
	}
	out := make([]string, len(cs.list))
	for i := range cs.list {
		out[i] = cs.list[i].finish
	}
	return out
}

// tpot is Σc (lastc − firstc) ÷ (tokens − k) over the k choices with a token-bearing event. vLLM
// generates the choices of n > 1 and of several prompts side by side, one token per choice per
// engine step, and reports their tokens summed; tokens − k is the number of gaps between two
// tokens of the same choice, so the result is each choice's time per token after its first.
func (cs *choices) tpot(tokens uint32) (float64, bool) {
	var span time.Duration
	k := 0
	for i := range cs.list {
		c := &cs.list[i]
		if c.events == 0 {
			continue
		}
		k++
		span += c.last.Sub(c.first)
	}
	if k == 0 || int64(tokens) <= int64(k) || span <= 0 {
		return 0, false
	}
	return span.Seconds() / float64(int64(tokens)-int64(k)), true
}
