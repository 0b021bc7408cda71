package diagnose

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
)

// Alert is one firing of a detector alert that overlaps a range: from when it fired to when it
// resolved, read from the `alerts` table (one row per state change, written by the detector).
type Alert struct {
	Rule        string            `json:"rule"`
	Fingerprint string            `json:"fingerprint"`
	Severity    string            `json:"severity,omitempty"`
	Labels      map[string]string `json:"labels"`
	// FiredAt is when it went firing (it may be before the range); ResolvedAt when it resolved,
	// nil while it was still firing at the range's end.
	FiredAt    time.Time  `json:"fired_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	// Value, Baseline and Threshold are the rule's figures when it fired (nil: unknown).
	Value     *float64 `json:"value,omitempty"`
	Baseline  *float64 `json:"baseline,omitempty"`
	Threshold *float64 `json:"threshold,omitempty"`
	Summary   string   `json:"summary,omitempty"`
}

// alertLookback is how far before a range the alerts table is read for an alert already firing
// when the range starts.
const alertLookback = 30 * 24 * time.Hour

// ReadAlerts reads every alert that was firing at some time in r: fired in r, or fired before it
// and not resolved before r starts. They are sorted by when they fired, then by rule.
func ReadAlerts(ctx context.Context, conn driver.Conn, r Range) ([]Alert, error) {
	// The state changes of [from, to), and each alert's last row before from (its state when the
	// range starts).
	q := `
SELECT rule, fingerprint, ts, state, severity, labels, value, baseline, threshold, summary, fired_at, resolved_at
FROM
(
    SELECT rule, fingerprint, ts, state, severity, labels, value, baseline, threshold,
           annotations['summary'] AS summary, fired_at, resolved_at
    FROM alerts FINAL
    WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC') AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
      AND state IN ('pending', 'firing', 'resolved')
    UNION ALL
    SELECT rule, fingerprint, r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8, r.9, r.10
    FROM
    (
        SELECT rule, fingerprint,
               argMax((ts, state, severity, labels, value, baseline, threshold, annotations['summary'], fired_at, resolved_at), ts) AS r
        FROM alerts FINAL
        WHERE ts < fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
          AND ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC') - INTERVAL {lookback_s:Int64} SECOND
          AND state IN ('pending', 'firing', 'resolved')
        GROUP BY rule, fingerprint
    )
)
ORDER BY rule, fingerprint, ts`
	ctx = chstore.WithParams(ctx, map[string]string{
		"from_us":    fmt.Sprint(r.From.UnixMicro()),
		"to_us":      fmt.Sprint(r.To.UnixMicro()),
		"lookback_s": fmt.Sprint(int64(alertLookback / time.Second)),
	})
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read the detector's alerts: %w", err)
	}
	defer rows.Close()
	var out []Alert
	var open *Alert // the current fingerprint's firing, not yet resolved
	key := ""
	flush := func() {
		if open != nil {
			out = append(out, *open)
			open = nil
		}
	}
	for rows.Next() {
		var (
			a                 Alert
			ts                time.Time
			state             string
			fired, resolved   *time.Time
			value, base, thre *float64
		)
		if err := rows.Scan(&a.Rule, &a.Fingerprint, &ts, &state, &a.Severity, &a.Labels, &value, &base, &thre,
			&a.Summary, &fired, &resolved); err != nil {
			return nil, fmt.Errorf("read the detector's alerts: %w", err)
		}
		if k := a.Rule + "\x00" + a.Fingerprint; k != key {
			flush()
			key = k
		}
		switch state {
		case "firing":
			if open == nil {
				a.FiredAt = ts.UTC()
				if fired != nil {
					a.FiredAt = fired.UTC()
				}
				a.Value, a.Baseline, a.Threshold = clean(value), clean(base), clean(thre)
				open = &a
			}
		case "resolved":
			if open != nil {
				at := ts.UTC()
				if resolved != nil {
					at = resolved.UTC()
				}
				if at.Before(r.From) {
					open = nil // resolved before the range
					continue
				}
				open.ResolvedAt = &at
				flush()
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the detector's alerts: %w", err)
	}
	flush()
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].FiredAt.Equal(out[j].FiredAt) {
			return out[i].FiredAt.Before(out[j].FiredAt)
		}
		return out[i].Rule < out[j].Rule
	})
	return out, nil
}

// Span says when the alert fired and resolved, e.g. "fired 12:04:30, resolved 12:20:00" or
// "fired 12:04:30, still firing at 13:00:00".
func (a Alert) Span(r Range) string {
	s := "fired " + clockIn(a.FiredAt, r)
	if a.ResolvedAt != nil {
		return s + ", resolved " + clockIn(*a.ResolvedAt, r)
	}
	return s + ", still firing at " + clockIn(r.To, r)
}

// Name is the rule with the labels that tell its alerts apart, e.g. "latency_p95{metric=ttft_s,
// model=m}".
func (a Alert) Name() string {
	var keys []string
	for k, v := range a.Labels {
		if k != "alertname" && k != "severity" && v != "" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return a.Rule
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + a.Labels[k]
	}
	return a.Rule + "{" + strings.Join(parts, ", ") + "}"
}

// Text is the alert in one line: its name, when it fired and resolved, and its summary.
func (a Alert) Text(r Range) string {
	s := a.Name() + " " + a.Span(r)
	if a.Summary != "" {
		s += ": " + a.Summary
	}
	return s
}

// clockIn prints t as a time of day (UTC), with its date when r is longer than a day or t is
// on another day than r's end.
func clockIn(t time.Time, r Range) string {
	t = t.UTC()
	if r.To.Sub(r.From) > 24*time.Hour || t.Format("2006-01-02") != r.To.UTC().Format("2006-01-02") {
		return t.Format("01-02 15:04:05")
	}
	return t.Format("15:04:05")
}

func clean(v *float64) *float64 {
	if v == nil || *v != *v {
		return nil
	}
	return v
}
