package diagnose

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ratio is cur ÷ base when both are known and base is positive.
func ratio(cur, base *float64) (float64, bool) {
	if cur == nil || base == nil || *base <= 0 {
		return 0, false
	}
	return *cur / *base, true
}

// vs renders "cur vs base (change)" with f, or "cur (no baseline)".
func vs(cur, base *float64, f func(float64) string) string {
	if cur == nil {
		return "unknown"
	}
	if base == nil {
		return f(*cur) + " (no baseline)"
	}
	out := f(*cur) + " vs " + f(*base)
	if c := change(cur, base, f); c != "" && c != "=" {
		out += " (" + c + ")"
	}
	return out
}

// change renders how cur differs from base: "new" when the baseline's is 0 and the window's is
// not (no ratio says a rise from nothing), a ratio "×9.2" when the baseline is positive and the
// quantity is not a share, a difference otherwise, "=" when equal at the printed precision; ""
// when either is missing.
func change(cur, base *float64, f func(float64) string) string {
	if cur == nil || base == nil {
		return ""
	}
	if f(*cur) == f(*base) {
		return "="
	}
	if *base == 0 && *cur > 0 {
		return "new"
	}
	if isShare(f) {
		return fmt.Sprintf("%+.1f pts", 100*(*cur-*base))
	}
	if r, ok := ratio(cur, base); ok {
		return "×" + trimFloat(r)
	}
	d := *cur - *base
	sign := "+"
	if d < 0 {
		sign = "-"
	}
	return sign + f(math.Abs(d))
}

func trimFloat(r float64) string {
	switch {
	case r >= 100:
		return strconv.FormatFloat(r, 'f', 0, 64)
	case r >= 10:
		return strconv.FormatFloat(r, 'f', 1, 64)
	default:
		return strconv.FormatFloat(r, 'f', 2, 64)
	}
}

// isShare tells the share formatters apart; comparing function values is not possible in Go, so
// the formatter's output for a probe value is used.
func isShare(f func(float64) string) bool { return strings.HasSuffix(f(0.5), "%") }

func secs(x float64) string {
	if x >= 10 {
		return strconv.FormatFloat(x, 'f', 2, 64) + " s"
	}
	return strconv.FormatFloat(x, 'f', 3, 64) + " s"
}

func tokens(x float64) string { return thousands(x) }

func count(x float64) string { return thousands(x) }

func perSec(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) + " req/s" }

func score(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }

func pct(x float64) string { return strconv.FormatFloat(100*x, 'f', 1, 64) + "%" }

func pctPtr(x float64) string { return pct(x) }

func mib(bytes float64) string { return strconv.FormatFloat(bytes/(1<<20), 'f', 2, 64) + " MiB" }

func stamp(t *time.Time) string {
	if t == nil {
		return "unknown time"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// thousands renders x rounded to an integer with comma separators, e.g. 2,905.
func thousands(x float64) string {
	s := strconv.FormatFloat(math.Round(x), 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
