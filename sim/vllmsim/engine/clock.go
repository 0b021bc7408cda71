package engine

import (
	"context"
	"time"
)

// Clock maps wall time to simulated time. Simulated time runs Scale times faster than the wall:
// with Scale 10 a 147 ms decode step takes 14.7 ms of wall time but is reported as 0.147 s in
// every metric, span and response. Simulated time is counted in seconds from Start.
type Clock struct {
	start time.Time
	scale float64
}

// NewClock starts a clock at the current wall time. scale <= 0 means 1 (real time).
func NewClock(scale float64) *Clock {
	if scale <= 0 {
		scale = 1
	}
	return &Clock{start: time.Now(), scale: scale}
}

// Scale is the speed-up factor of simulated over wall time.
func (c *Clock) Scale() float64 { return c.scale }

// Now is the current simulated time in seconds since the clock started.
func (c *Clock) Now() float64 { return time.Since(c.start).Seconds() * c.scale }

// Time is the wall-clock-looking timestamp of simulated second s: the clock's start plus s
// simulated seconds. Logs and spans carry these timestamps so their spacing reads in simulated
// seconds (10 s between stats lines even when the wall saw 1 s).
func (c *Clock) Time(s float64) time.Time {
	return c.start.Add(time.Duration(s * float64(time.Second)))
}

// WallDuration converts a simulated duration in seconds to the wall duration it takes.
func (c *Clock) WallDuration(s float64) time.Duration {
	return time.Duration(s / c.scale * float64(time.Second))
}

// SleepUntil blocks until simulated time s (absolute deadline, so oversleeping one step does not
// accumulate) or until ctx ends, reporting whether the deadline was reached.
func (c *Clock) SleepUntil(ctx context.Context, s float64) bool {
	wallAt := c.start.Add(time.Duration(s / c.scale * float64(time.Second)))
	d := time.Until(wallAt)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
