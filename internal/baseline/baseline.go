// Package baseline is servescope's one definition of "the same system's normal": which earlier
// period a window is compared with, and how a figure of the window compares with the same figure
// over that period. The detector's rules, `servescope diagnose`, the console's complaint pages and
// its panels all take the period from Spec.Of and word a comparison with Compare, so that one page
// never shows two baselines and a missing baseline is never read as a zero one.
//
// The period (docs/concepts.md, The baseline): by default the 24 h that end 1 h before the
// compared window starts. It ends before the window, so the window is never compared with
// itself, and an hour before it, so that an incident already under way when the window starts
// (an overload a minute earlier, a version switched half an hour ago) is not part of "normal".
// A rule may instead compare with the same slice of time on each of the previous Days days, which
// follows daily seasonality.
package baseline

import (
	"fmt"
	"strings"
	"time"
)

// Spec says which earlier period a window is compared with. A rule file's `baseline:` block is one
// (services/detector/rules.Baseline, whose zero fields take Default's); the zero Spec means
// Default.
type Spec struct {
	// Length is how long the period is and Offset how long before the window's start it ends.
	Length, Offset time.Duration
	// Days > 0 selects the same-time-of-day mode: the Slice before the window's end, on each of
	// the Days days before it (Slice 0: the window's own length).
	Days  int
	Slice time.Duration
}

// Default is the detector's default baseline: the 24 h ending 1 h before the window starts.
var Default = Spec{Length: 24 * time.Hour, Offset: time.Hour}

// Period is a window's baseline: the times in [From, To), and, when Days > 0, only the Slice of
// each day before To's time of day (see Spec.Days).
type Period struct {
	From, To time.Time
	Days     int
	Slice    time.Duration
	// Spec is what the period was derived from.
	Spec Spec
}

// withDefaults is Default for the zero Spec, else s.
func (s Spec) withDefaults() Spec {
	if s == (Spec{}) {
		return Default
	}
	return s
}

// Of is the baseline period of the window [from, to) (or (from, to]: the period's bounds are
// meant with the same convention as the window's).
//
// Length/Offset mode: [from − Offset − Length, from − Offset). Days mode: from to − Days×24 h −
// Slice up to to − 24 h, restricted to the Slice before the window's end's time of day on each day
// (Slice defaults to the window's length).
func (s Spec) Of(from, to time.Time) Period {
	s = s.withDefaults()
	from, to = from.UTC(), to.UTC()
	if s.Days > 0 {
		slice := s.Slice
		if slice <= 0 {
			slice = to.Sub(from)
		}
		return Period{From: to.Add(-time.Duration(s.Days)*24*time.Hour - slice), To: to.Add(-24 * time.Hour), Days: s.Days, Slice: slice, Spec: s}
	}
	end := from.Add(-s.Offset)
	return Period{From: end.Add(-s.Length), To: end, Spec: s}
}

// Seconds is the period's total length in seconds: Length, or Days × Slice.
func (p Period) Seconds() float64 {
	if p.Days > 0 {
		return float64(p.Days) * p.Slice.Seconds()
	}
	return p.To.Sub(p.From).Seconds()
}

// Describe says in words how the period was chosen, e.g. "the 24 h ending 1 h before the window
// starts".
func (s Spec) Describe() string {
	s = s.withDefaults()
	if s.Days > 0 {
		slice := "the window's time of day"
		if s.Slice > 0 {
			slice = "the " + Short(s.Slice) + " before the window's end"
		}
		return fmt.Sprintf("%s on each of the %d days before", slice, s.Days)
	}
	return fmt.Sprintf("the %s ending %s before the window starts", Short(s.Length), Short(s.Offset))
}

// Short prints a duration without zero units: 24h, 1h30m, 90s → 1m30s.
func Short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Change is how a window's figure compares with the baseline's.
type Change int

const (
	// Unknown: the window holds no value of the figure.
	Unknown Change = iota
	// NoBaseline: the baseline holds none of the figure (no period, no records, or none of this
	// quantity). Never read it as 0 or as "no change": nothing can be said about a rise.
	NoBaseline
	// New: the baseline's figure is 0 and the window's is not (a queue where none was, 256
	// running where none ran): a rise from nothing, which no ratio expresses.
	New
	// Rose and Fell: the window's figure is at least the ratio times the baseline's (at most
	// 1/ratio of it) and moved by at least the minimum difference.
	Rose
	Fell
	// Unchanged: both known, and neither risen nor fallen by those bounds.
	Unchanged
)

var changeNames = [...]string{"unknown", "no baseline", "new", "rose", "fell", "unchanged"}

func (c Change) String() string { return changeNames[c] }

// Comparison is one figure of a window against its baseline.
type Comparison struct {
	Change Change
	// Ratio is window ÷ baseline when both are known and the baseline is positive, else 0.
	Ratio float64
	// Delta is window − baseline when both are known.
	Delta float64
}

// Up reports whether the figure rose: by the ratio and the minimum difference, or from nothing.
func (c Comparison) Up() bool { return c.Change == Rose || c.Change == New }

// Known reports whether both the window's and the baseline's figures exist.
func (c Comparison) Known() bool { return c.Change != Unknown && c.Change != NoBaseline }

// Compare compares the window's figure cur with the baseline's base (nil: none). A figure rose
// when it is at least ratio times the baseline's and minDelta above it, or when the baseline's is
// 0 and the window's at least minDelta (and above 0): New. It fell when at most 1/ratio of the
// baseline's and minDelta below it. ratio must be above 1; figures are not negative.
func Compare(cur, base *float64, ratio, minDelta float64) Comparison {
	switch {
	case cur == nil:
		return Comparison{Change: Unknown}
	case base == nil:
		return Comparison{Change: NoBaseline}
	}
	c := Comparison{Delta: *cur - *base}
	switch {
	case *base <= 0 && *cur > 0 && c.Delta >= minDelta:
		c.Change = New
	case *base <= 0:
		c.Change = Unchanged
	default:
		c.Ratio = *cur / *base
		switch {
		case c.Ratio >= ratio && c.Delta >= minDelta:
			c.Change = Rose
		case c.Ratio <= 1/ratio && -c.Delta >= minDelta:
			c.Change = Fell
		default:
			c.Change = Unchanged
		}
	}
	return c
}
