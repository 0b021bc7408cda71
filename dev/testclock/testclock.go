// Package testclock gives the tests whose data follows the time of day — synthetic traffic with
// daily seasonality, windows that may straddle midnight and so two daily partitions — the time they
// evaluate at, and lets a run pin it so that every hour can be shown to pass, not only the hour the
// suite happens to run in.
//
// Unpinned, the evaluation time is a whole hour at least a given lag before the wall clock. With
// SERVESCOPE_TEST_EVAL_TIME set it is pinned:
//
//	SERVESCOPE_TEST_EVAL_TIME=18          18:00:00 UTC
//	SERVESCOPE_TEST_EVAL_TIME=23:59:30    23:59:30 UTC
//	SERVESCOPE_TEST_EVAL_TIME=2026-12-01T00:00:30Z   that instant
//
// A time of day keeps the date near the wall clock: the latest day on which that time lies at least
// the lag in the past, so rows stay inside ClickHouse's TTLs and events pass the schema's check for
// timestamps in the future. An instant is for crossing a month or a year boundary; it must lie
// between MaxAge and the lag before the wall clock, or the test fails saying so.
//
// tests.txt beside this file names every test that calls EvalTime; scripts/test runs them again
// pinned at several times of day and at a day's and a month's boundary.
package testclock

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Env is the variable that pins the evaluation time.
const Env = "SERVESCOPE_TEST_EVAL_TIME"

// MaxAge bounds how far before the wall clock a pinned instant may lie: the tests' data reaches up
// to 8 days before their evaluation time, and engine_samples, the table with the shortest TTL,
// keeps 14 days (ClickHouse drops expired rows already at insert).
const MaxAge = 5 * 24 * time.Hour

// EvalTime returns the time the test evaluates at, at least lag before the wall clock: the hour
// that starts at or before now − lag, or the time Env pins (see the package doc). It logs the time,
// and fails the test when Env cannot be read or pins an instant outside [now − MaxAge, now − lag].
func EvalTime(t testing.TB, lag time.Duration) time.Time {
	t.Helper()
	at, pinned, err := evalTime(time.Now().UTC(), lag, os.Getenv(Env))
	if err != nil {
		t.Fatalf("%s: %v", Env, err)
	}
	if pinned {
		t.Logf("evaluation time %s (pinned by %s=%s)", at.Format(time.RFC3339), Env, os.Getenv(Env))
	} else {
		t.Logf("evaluation time %s (pin it with %s=HH[:MM[:SS]])", at.Format(time.RFC3339), Env)
	}
	return at
}

// evalTime is EvalTime with the wall clock and the variable's value passed in.
func evalTime(now time.Time, lag time.Duration, pin string) (at time.Time, pinned bool, err error) {
	latest := now.Add(-lag)
	pin = strings.TrimSpace(pin)
	if pin == "" {
		return latest.Truncate(time.Hour), false, nil
	}
	if strings.Contains(pin, "T") {
		at, err := time.Parse(time.RFC3339, pin)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("%q is neither HH[:MM[:SS]] nor an RFC 3339 instant: %w", pin, err)
		}
		at = at.UTC()
		if at.After(latest) || at.Before(now.Add(-MaxAge)) {
			return time.Time{}, false, fmt.Errorf("%s must lie between %s and %s (the test's lag before now %s; older rows leave ClickHouse's TTLs)",
				at.Format(time.RFC3339), now.Add(-MaxAge).Format(time.RFC3339), latest.Format(time.RFC3339), now.Format(time.RFC3339))
		}
		return at, true, nil
	}
	tod, err := timeOfDay(pin)
	if err != nil {
		return time.Time{}, false, err
	}
	day := time.Date(latest.Year(), latest.Month(), latest.Day(), 0, 0, 0, 0, time.UTC)
	at = day.Add(tod)
	if at.After(latest) {
		at = at.AddDate(0, 0, -1)
	}
	return at, true, nil
}

// timeOfDay reads HH, HH:MM or HH:MM:SS as a duration since midnight.
func timeOfDay(s string) (time.Duration, error) {
	parts := strings.Split(s, ":")
	limits := []int{23, 59, 59}
	if len(parts) > len(limits) {
		return 0, fmt.Errorf("%q: want HH, HH:MM or HH:MM:SS (UTC), or an RFC 3339 instant", s)
	}
	units := []time.Duration{time.Hour, time.Minute, time.Second}
	var d time.Duration
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || len(p) == 0 || len(p) > 2 || n < 0 || n > limits[i] {
			return 0, fmt.Errorf("%q: want HH, HH:MM or HH:MM:SS (UTC), or an RFC 3339 instant", s)
		}
		d += time.Duration(n) * units[i]
	}
	return d, nil
}
