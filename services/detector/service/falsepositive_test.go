package service_test

import (
	"testing"
	"time"

	"github.com/servescope/servescope/services/detector/synth"
	"github.com/servescope/servescope/services/internal/testclock"
	"github.com/servescope/servescope/services/internal/testenv"
)

// A normal synthetic week — daily seasonality (rate swinging ±60% around its mean), log-normal
// latency noise, 1% 4xx, 2% length stops, 0.1% script violations, scores ≈0.88 — fires no rule and
// leaves nothing pending, replayed (--at) at times spread over every day but the first (which has
// no full baseline) and every part of the daily cycle.
func TestNormalWeekFiresNothing(t *testing.T) {
	t.Parallel()
	conn, ch := testenv.ClickHouse(t)
	end := testclock.EvalTime(t, time.Hour)
	start := end.Add(-7 * 24 * time.Hour)
	insert(t, conn, synth.New(42).Normal(start, end))
	d := newDetector(t, testConfig(ch), conn)
	// Every 13 h 07 min from day 2 on: the times drift through the day (night trough, ramps, peak).
	for at := start.Add(26 * time.Hour); !at.After(end); at = at.Add(13*time.Hour + 7*time.Minute) {
		if lines := replay(t, d, at); len(lines) > 0 {
			for _, l := range lines {
				t.Errorf("at %s %s is %s: %v value %v baseline %v threshold %v: %s", at.Format(time.RFC3339),
					l.Rule, l.State, l.Labels, val(l.Value), val(l.Baseline), val(l.Threshold), l.Summary)
			}
		}
	}
}
