package baseline

import (
	"testing"
	"time"
)

func TestOf(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// The last hour at 12:00 is compared with 10:00 the day before to 10:00: an overload that
	// began at 10:59 is in the gap, not in "normal".
	p := Spec{}.Of(at("2026-09-11T11:00:00Z"), at("2026-09-11T12:00:00Z"))
	if !p.From.Equal(at("2026-09-10T10:00:00Z")) || !p.To.Equal(at("2026-09-11T10:00:00Z")) || p.Seconds() != 86400 {
		t.Errorf("default period %v – %v (%v s)", p.From, p.To, p.Seconds())
	}
	// A rule's 10 m window evaluated at 12:00.
	p = Default.Of(at("2026-09-11T11:50:00Z"), at("2026-09-11T12:00:00Z"))
	if !p.From.Equal(at("2026-09-10T10:50:00Z")) || !p.To.Equal(at("2026-09-11T10:50:00Z")) {
		t.Errorf("rule period %v – %v", p.From, p.To)
	}
	// Same time of day on each of 7 days: the window's length before its end's time of day.
	p = Spec{Days: 7}.Of(at("2026-09-11T11:50:00Z"), at("2026-09-11T12:00:00Z"))
	if !p.From.Equal(at("2026-09-04T11:50:00Z")) || !p.To.Equal(at("2026-09-10T12:00:00Z")) || p.Slice != 10*time.Minute || p.Seconds() != 7*600 {
		t.Errorf("days period %v – %v slice %v", p.From, p.To, p.Slice)
	}
	if got := Default.Describe(); got != "the 24h ending 1h before the window starts" {
		t.Errorf("Describe = %q", got)
	}
	if got := (Spec{Days: 7, Slice: 30 * time.Minute}).Describe(); got != "the 30m before the window's end on each of the 7 days before" {
		t.Errorf("Describe days = %q", got)
	}
}

func TestCompare(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, c := range []struct {
		name      string
		cur, base *float64
		want      Change
		up        bool
	}{
		// The reproducer: 256 running against a baseline engine that ran nothing is new, not "no growth".
		{"from zero", f(256), f(0), New, true},
		{"zero to zero", f(0), f(0), Unchanged, false},
		{"from zero under the minimum difference", f(0.05), f(0), Unchanged, false},
		{"no baseline", f(256), nil, NoBaseline, false},
		{"no window value", nil, f(3), Unknown, false},
		{"rose", f(4), f(1), Rose, true},
		{"rose by ratio, not by difference", f(0.04), f(0.01), Unchanged, false},
		{"fell", f(1), f(4), Fell, false},
		{"unchanged", f(1.1), f(1), Unchanged, false},
	} {
		got := Compare(c.cur, c.base, 2, 0.1)
		if got.Change != c.want || got.Up() != c.up {
			t.Errorf("%s: %v (up %v), want %v (up %v)", c.name, got.Change, got.Up(), c.want, c.up)
		}
		if c.want == NoBaseline && (got.Known() || got.Ratio != 0) {
			t.Errorf("%s: a missing baseline reads as known (%+v)", c.name, got)
		}
	}
}
