package notify

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// CHRecorder writes each delivery attempt as a row of the alert_deliveries table, and reads back
// which state changes receivers accepted.
type CHRecorder struct {
	Conn driver.Conn
}

// RecordDelivery inserts d.
func (c CHRecorder) RecordDelivery(ctx context.Context, d Delivery) error {
	b, err := c.Conn.PrepareBatch(ctx, "INSERT INTO alert_deliveries (ts, receiver, group_key, status, attempt, ok, "+
		"http_status, error, duration_s, fingerprints, statuses, starts_at)")
	if err != nil {
		return fmt.Errorf("prepare insert into alert_deliveries: %w", err)
	}
	starts := make([]time.Time, len(d.StartsAt))
	for i, t := range d.StartsAt {
		starts[i] = t.UTC().Truncate(time.Microsecond)
	}
	if err := b.Append(d.TS.UTC(), d.Receiver, d.GroupKey, d.Status, uint32(d.Attempt), d.OK, uint16(d.HTTPStatus),
		d.Error, d.Duration.Seconds(), d.Fingerprints, d.Statuses, starts); err != nil {
		_ = b.Abort()
		return fmt.Errorf("append delivery row: %w", err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert 1 row into alert_deliveries: %w", err)
	}
	return nil
}

// Accepted returns the keys of the state changes that receivers accepted (answered 2xx) at or
// after since, limited to the alerts whose fingerprint is in fingerprints. Rows written before
// alert_deliveries had statuses and starts_at name no state change and are not read.
func (c CHRecorder) Accepted(ctx context.Context, since time.Time, fingerprints []string) (map[Key]bool, error) {
	out := map[Key]bool{}
	if len(fingerprints) == 0 {
		return out, nil
	}
	want := map[string]bool{}
	for _, fp := range fingerprints {
		want[fp] = true
	}
	ctx = clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{
		"since": since.UTC().Format("2006-01-02 15:04:05.000000"),
	}))
	// The partition and the (receiver, ts) order prune the scan to the recent rows, and a day of
	// deliveries is small: fingerprints are matched here rather than bound into the query.
	rows, err := c.Conn.Query(ctx, `
		SELECT DISTINCT receiver, fingerprint, status, started
		FROM (
			SELECT receiver, fingerprints, statuses, starts_at
			FROM alert_deliveries
			WHERE ok AND ts >= {since:DateTime64(6, 'UTC')}
			  AND length(statuses) = length(fingerprints) AND length(starts_at) = length(fingerprints)
		)
		ARRAY JOIN fingerprints AS fingerprint, statuses AS status, starts_at AS started`)
	if err != nil {
		return nil, fmt.Errorf("read accepted deliveries from alert_deliveries: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k Key
		if err := rows.Scan(&k.Receiver, &k.Fingerprint, &k.Status, &k.StartsAt); err != nil {
			return nil, fmt.Errorf("read alert_deliveries row: %w", err)
		}
		if want[k.Fingerprint] {
			k.StartsAt = k.StartsAt.UTC()
			out[k] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read alert_deliveries rows: %w", err)
	}
	return out, nil
}
