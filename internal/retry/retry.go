// Package retry is the one retry policy of servescope's services: capped exponential backoff
// with jitter, on github.com/cenkalti/backoff/v5.
//
// A [Policy] gives the waits between failed attempts. The n-th wait is drawn uniformly from
// [b/2, b], where b = Min × 2^(n-1), capped at Max: never more than Max, never less than half the
// nominal wait, and spread so that the clients of a server that comes back do not all retry at
// the same instant ("equal jitter").
//
// [Do] runs an operation under a policy until it succeeds, fails for good ([Permanent]), runs
// out of time ([Policy.GiveUpAfter]) or its context ends; the context ends the wait at once.
// Loops whose control flow is their own (a batch split between attempts, a keep-alive during the
// wait) draw the same waits from [Policy.Backoff] and wait with [Sleep].
package retry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Policy is how an operation is retried.
type Policy struct {
	// Min is the nominal first wait and Max the cap of the nominal wait, which doubles per
	// failed attempt (the wait drawn is between half the nominal wait and all of it). Max below
	// Min means Min.
	Min, Max time.Duration
	// AttemptTimeout bounds each attempt of [Do] (the context passed to the operation); 0 means
	// only the caller's context does.
	AttemptTimeout time.Duration
	// GiveUpAfter makes [Do] stop once another attempt would start this long after the first
	// one; 0 means never.
	GiveUpAfter time.Duration
}

// Backoff is the sequence of waits of a [Policy]. It is not safe for concurrent use.
type Backoff struct {
	exp backoff.ExponentialBackOff
}

// Backoff returns the policy's waits, starting from the first.
func (p Policy) Backoff() *Backoff {
	maxWait := max(p.Max, p.Min)
	// cenkalti/backoff draws a wait uniformly from c × [1-f, 1+f] around its current interval c,
	// which it multiplies per attempt up to MaxInterval. With c = 3b/4 and f = 1/3 that is
	// [b/2, b]: the policy's waits, with the interval and its cap scaled by 3/4.
	b := &Backoff{exp: backoff.ExponentialBackOff{
		InitialInterval:     p.Min * 3 / 4,
		RandomizationFactor: 1.0 / 3,
		Multiplier:          2,
		MaxInterval:         maxWait * 3 / 4,
	}}
	b.Reset()
	return b
}

// Next returns the wait before the next attempt and advances the sequence.
func (b *Backoff) Next() time.Duration { return max(b.exp.NextBackOff(), 0) }

// Reset starts the sequence again from the first wait, as after a success.
func (b *Backoff) Reset() { b.exp.Reset() }

// NextBackOff implements backoff.BackOff.
func (b *Backoff) NextBackOff() time.Duration { return b.Next() }

// Notify is told of every failed attempt that will be retried: the attempt's number (from 1),
// its error, and the wait before the next one.
type Notify func(attempt int, err error, wait time.Duration)

// Permanent marks err as not worth retrying: [Do] returns err at once.
func Permanent(err error) error { return backoff.Permanent(err) }

// Do calls op until it returns nil, and returns nil then. It returns early:
//   - with op's error, unwrapped, when op returns a [Permanent] error;
//   - with "gave up after N attempts: <op's last error>" once p.GiveUpAfter has passed;
//   - with an error that matches ctx's cause (errors.Is(err, context.Canceled) after a cancel)
//     and names op's last error, when ctx ends, whether during an attempt or a wait.
//
// notify (may be nil) is called after each failed attempt that will be retried.
func Do(ctx context.Context, p Policy, op func(ctx context.Context) error, notify Notify) error {
	var (
		attempt   int
		last      error
		permanent bool
	)
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		attempt++
		actx, cancel := ctx, context.CancelFunc(func() {})
		if p.AttemptTimeout > 0 {
			actx, cancel = context.WithTimeout(ctx, p.AttemptTimeout)
		}
		err := op(actx)
		cancel()
		var perm *backoff.PermanentError
		permanent = errors.As(err, &perm)
		last = err
		return struct{}{}, err
	},
		backoff.WithBackOff(p.Backoff()),
		// 0 turns the library's default of 15 minutes off: retry until ctx ends.
		backoff.WithMaxElapsedTime(p.GiveUpAfter),
		backoff.WithNotify(func(err error, wait time.Duration) {
			if notify != nil {
				notify(attempt, err, wait)
			}
		}),
	)
	switch {
	case err == nil:
		return nil
	case permanent:
		return err
	case ctx.Err() != nil:
		if last == nil || errors.Is(last, ctx.Err()) {
			return context.Cause(ctx)
		}
		return fmt.Errorf("%w (last attempt: %w)", context.Cause(ctx), last)
	default:
		return fmt.Errorf("gave up after %d attempts: %w", attempt, err)
	}
}

// Sleep waits d or until ctx ends, and reports whether it waited the whole time.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
