package alerting

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// CHStore keeps alert state in the `alerts` table: one row per alert per evaluation in which its
// state changed or it was sent; an alert's current state is its latest row.
type CHStore struct {
	Conn driver.Conn
}

// Save inserts one row per alert at ts.
func (s CHStore) Save(ctx context.Context, ts time.Time, alerts []*Alert) error {
	b, err := s.Conn.PrepareBatch(ctx, "INSERT INTO alerts (ts, rule, fingerprint, state, severity, value, baseline, "+
		"threshold, labels, annotations, active_at, fired_at, resolved_at, last_sent_at)")
	if err != nil {
		return fmt.Errorf("prepare insert into alerts: %w", err)
	}
	for _, a := range alerts {
		if err := b.Append(ts.UTC(), a.Rule, a.Fingerprint, a.StateName(), a.Severity, nullFloat(a.Value),
			nullFloat(a.Baseline), nullFloat(a.Threshold), a.Labels, a.Annotations, nullTime(a.ActiveAt),
			nullTime(a.FiredAt), nullTime(a.ResolvedAt), nullTime(a.LastSentAt)); err != nil {
			_ = b.Abort()
			return fmt.Errorf("append alert %s/%s: %w", a.Rule, a.Fingerprint, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert %d rows into alerts: %w", len(alerts), err)
	}
	return nil
}

// Load reads every alert's latest row and returns those pending, firing or resolved (a rule drops a
// restored resolved alert at its first evaluation past the retention).
func (s CHStore) Load(ctx context.Context) ([]*Alert, error) {
	rows, err := s.Conn.Query(ctx, `
		SELECT rule, fingerprint, r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8, r.9, r.10, r.11
		FROM (
			SELECT rule, fingerprint,
			       argMax((state, severity, value, baseline, threshold, labels, annotations,
			               active_at, fired_at, resolved_at, last_sent_at), ts) AS r
			FROM alerts
			GROUP BY rule, fingerprint
		)
		WHERE r.1 IN ('pending', 'firing', 'resolved')`)
	if err != nil {
		return nil, fmt.Errorf("read alert state from alerts: %w", err)
	}
	defer rows.Close()
	var out []*Alert
	for rows.Next() {
		var (
			a                             Alert
			state                         string
			value, baseline, threshold    *float64
			active, fired, resolved, sent *time.Time
		)
		if err := rows.Scan(&a.Rule, &a.Fingerprint, &state, &a.Severity, &value, &baseline, &threshold,
			&a.Labels, &a.Annotations, &active, &fired, &resolved, &sent); err != nil {
			return nil, fmt.Errorf("read alerts row: %w", err)
		}
		a.Value, a.Baseline, a.Threshold = fromNull(value), fromNull(baseline), fromNull(threshold)
		a.ActiveAt, a.FiredAt, a.ResolvedAt, a.LastSentAt = fromNullTime(active), fromNullTime(fired),
			fromNullTime(resolved), fromNullTime(sent)
		switch state {
		case "pending":
			a.State = StatePending
		case "firing":
			a.State = StateFiring
		default:
			a.State = StateInactive
		}
		out = append(out, &a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read alerts rows: %w", err)
	}
	return out, nil
}

func nullFloat(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func fromNull(v *float64) float64 {
	if v == nil {
		return math.NaN()
	}
	return *v
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func fromNullTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}
