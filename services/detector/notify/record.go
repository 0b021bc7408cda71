package notify

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// CHRecorder writes each delivery attempt as a row of the alert_deliveries table.
type CHRecorder struct {
	Conn driver.Conn
}

// RecordDelivery inserts d.
func (c CHRecorder) RecordDelivery(ctx context.Context, d Delivery) error {
	b, err := c.Conn.PrepareBatch(ctx, "INSERT INTO alert_deliveries (ts, receiver, group_key, status, attempt, ok, "+
		"http_status, error, duration_s, fingerprints)")
	if err != nil {
		return fmt.Errorf("prepare insert into alert_deliveries: %w", err)
	}
	if err := b.Append(d.TS.UTC(), d.Receiver, d.GroupKey, d.Status, uint32(d.Attempt), d.OK, uint16(d.HTTPStatus),
		d.Error, d.Duration.Seconds(), d.Fingerprints); err != nil {
		_ = b.Abort()
		return fmt.Errorf("append delivery row: %w", err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert 1 row into alert_deliveries: %w", err)
	}
	return nil
}
