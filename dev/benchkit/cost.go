package benchkit

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// Cost is what ClickHouse reports the queries run with its context cost: the rows they read,
// from the progress packets streamed with each answer, and the CPU time the server spent on
// them, from its ProfileEvents packets (UserTimeMicroseconds + SystemTimeMicroseconds of the
// query's thread group, the row ClickHouse sends with thread id 0; per-thread rows repeat it).
// On a shared machine the CPU time is the figure load does not change: a query's wall time
// there is its CPU time stretched by the run queue.
type Cost struct {
	rows  atomic.Uint64
	cpuUs atomic.Int64
}

// WithCost returns ctx with callbacks adding each query's rows read and CPU time to c.
func WithCost(ctx context.Context, c *Cost) context.Context {
	return clickhouse.Context(ctx,
		clickhouse.WithProgress(func(p *clickhouse.Progress) { c.rows.Add(p.Rows) }),
		clickhouse.WithProfileEvents(func(evs []clickhouse.ProfileEvent) {
			for _, e := range evs {
				if e.ThreadID == 0 && e.Type == "increment" && (e.Name == "UserTimeMicroseconds" || e.Name == "SystemTimeMicroseconds") {
					c.cpuUs.Add(e.Value)
				}
			}
		}))
}

// RowsRead is the rows read so far.
func (c *Cost) RowsRead() uint64 { return c.rows.Load() }

// CPU is the server's CPU time so far.
func (c *Cost) CPU() time.Duration { return time.Duration(c.cpuUs.Load()) * time.Microsecond }
