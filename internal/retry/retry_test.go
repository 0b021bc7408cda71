package retry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/internal/retry"
)

// The n-th wait lies in [b/2, b] with b = Min × 2^(n-1) capped at Max, and the draws spread over
// that range (a policy without jitter would give the same wait to every client).
func TestBackoffWaits(t *testing.T) {
	for _, p := range []retry.Policy{
		{Min: 100 * time.Millisecond, Max: 5 * time.Second},
		{Min: 250 * time.Millisecond, Max: 10 * time.Second},
		{Min: 500 * time.Millisecond, Max: 30 * time.Second},
		{Min: time.Second, Max: time.Second},
		{Min: time.Second, Max: 0}, // Max below Min means Min
	} {
		const sequences = 400
		const steps = 12
		lo := make([]time.Duration, steps)
		hi := make([]time.Duration, steps)
		for s := range sequences {
			b := p.Backoff()
			for n := range steps {
				w := b.Next()
				nominal := min(p.Min<<n, max(p.Max, p.Min))
				if w < nominal/2 || w > nominal {
					t.Fatalf("%+v: wait %d = %s, want within [%s, %s]", p, n+1, w, nominal/2, nominal)
				}
				if s == 0 || w < lo[n] {
					lo[n] = w
				}
				if s == 0 || w > hi[n] {
					hi[n] = w
				}
			}
		}
		for n := range steps {
			nominal := min(p.Min<<n, max(p.Max, p.Min))
			// 400 uniform draws over [b/2, b] leave less than a tenth of it uncovered at
			// either end except with probability below 1e-18.
			if lo[n] > nominal/2+nominal/20 || hi[n] < nominal-nominal/20 {
				t.Errorf("%+v: waits %d spread over [%s, %s] only, want about [%s, %s]", p, n+1, lo[n], hi[n], nominal/2, nominal)
			}
		}
	}
}

func TestBackoffReset(t *testing.T) {
	p := retry.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	b := p.Backoff()
	for range 10 {
		b.Next()
	}
	if w := b.Next(); w < 2500*time.Millisecond {
		t.Fatalf("wait after 10 failures %s, want the cap's range [2.5s, 5s]", w)
	}
	b.Reset()
	if w := b.Next(); w < 50*time.Millisecond || w > 100*time.Millisecond {
		t.Fatalf("first wait after Reset %s, want within [50ms, 100ms]", w)
	}
}

// Do retries until the operation succeeds, telling notify of every failure with its attempt
// number and the wait before the next.
func TestDoRetriesUntilSuccess(t *testing.T) {
	p := retry.Policy{Min: time.Millisecond, Max: 4 * time.Millisecond}
	calls := 0
	var attempts []int
	err := retry.Do(context.Background(), p, func(context.Context) error {
		calls++
		if calls < 5 {
			return errors.New("refused")
		}
		return nil
	}, func(attempt int, err error, wait time.Duration) {
		attempts = append(attempts, attempt)
		nominal := min(time.Millisecond<<(attempt-1), 4*time.Millisecond)
		if err == nil || err.Error() != "refused" || wait < nominal/2 || wait > nominal {
			t.Errorf("notify(%d, %v, %s): want the attempt's error and a wait within [%s, %s]", attempt, err, wait, nominal/2, nominal)
		}
	})
	if err != nil || calls != 5 {
		t.Fatalf("Do = %v after %d calls, want nil after 5", err, calls)
	}
	if len(attempts) != 4 || attempts[0] != 1 || attempts[3] != 4 {
		t.Fatalf("notified attempts %v, want 1..4", attempts)
	}
}

var errBad = errors.New("bad request")

// A Permanent error ends Do at once with the operation's error.
func TestDoPermanent(t *testing.T) {
	calls := 0
	err := retry.Do(context.Background(), retry.Policy{Min: time.Hour}, func(context.Context) error {
		calls++
		return retry.Permanent(errBad)
	}, func(int, error, time.Duration) { t.Error("notified of a permanent error") })
	if !errors.Is(err, errBad) || err.Error() != errBad.Error() || calls != 1 {
		t.Fatalf("Do = %v after %d calls, want %v after 1", err, calls, errBad)
	}
}

// Ending the context ends the wait at once; the error matches the context's and names the last
// failure.
func TestDoContextEndsTheWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- retry.Do(ctx, retry.Policy{Min: time.Hour, Max: time.Hour}, func(context.Context) error {
			return errors.New("connection refused")
		}, func(int, error, time.Duration) { cancel() })
	}()
	// A wait of an hour: only the cancellation can end Do before the test's own timeout.
	err := <-done
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Do = %v, want context.Canceled naming the last attempt's error", err)
	}
}

// An attempt gets AttemptTimeout; the context passed to it carries the deadline.
func TestDoAttemptTimeout(t *testing.T) {
	calls := 0
	err := retry.Do(context.Background(), retry.Policy{Min: time.Millisecond, AttemptTimeout: time.Millisecond}, func(ctx context.Context) error {
		calls++
		if _, ok := ctx.Deadline(); !ok {
			return retry.Permanent(errors.New("attempt without a deadline"))
		}
		if calls == 1 {
			<-ctx.Done() // a hung attempt ends with its own timeout, not the caller's
			return ctx.Err()
		}
		return nil
	}, nil)
	if err != nil || calls != 2 {
		t.Fatalf("Do = %v after %d calls, want nil after 2", err, calls)
	}
}

// With GiveUpAfter, Do stops retrying and says how many attempts it made.
func TestDoGivesUp(t *testing.T) {
	calls := 0
	err := retry.Do(context.Background(), retry.Policy{Min: time.Millisecond, Max: time.Millisecond, GiveUpAfter: 20 * time.Millisecond},
		func(context.Context) error {
			calls++
			return errBad
		}, nil)
	if !errors.Is(err, errBad) || !strings.HasPrefix(err.Error(), "gave up after ") || calls < 1 {
		t.Fatalf("Do = %v after %d calls, want gave up after N attempts: %v", err, calls, errBad)
	}
}

func TestSleep(t *testing.T) {
	if !retry.Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep with a live context did not wait the whole time")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if retry.Sleep(ctx, time.Hour) {
		t.Error("Sleep with an ended context reported a whole wait")
	}
}
