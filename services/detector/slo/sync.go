package slo

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
)

// objectiveRow is one row of slo_objectives (migrations/000040).
type objectiveRow struct {
	LoadedAt           time.Time `ch:"loaded_at"`
	SLO                string    `ch:"slo"`
	Source             string    `ch:"source"`
	Model              string    `ch:"model"`
	App                string    `ch:"app"`
	Endpoint           string    `ch:"endpoint"`
	Stream             *bool     `ch:"stream"`
	PeriodS            uint32    `ch:"period_s"`
	AvailabilityTarget *float64  `ch:"availability_target"`
	TTFTThresholdS     *float64  `ch:"ttft_threshold_s"`
	TTFTTarget         *float64  `ch:"ttft_target"`
	TPOTThresholdS     *float64  `ch:"tpot_threshold_s"`
	TPOTTarget         *float64  `ch:"tpot_target"`
	E2EThresholdS      *float64  `ch:"e2e_threshold_s"`
	E2ETarget          *float64  `ch:"e2e_target"`
	PageLongS          *uint32   `ch:"page_long_s"`
	PageFactor         *float64  `ch:"page_factor"`
}

func rows(defs []*Definition, at time.Time) []objectiveRow {
	out := []objectiveRow{{LoadedAt: at}} // the load's marker
	for _, d := range defs {
		r := objectiveRow{LoadedAt: at, SLO: d.Name, Source: d.Source, Model: d.Selector.Model, App: d.Selector.App,
			Endpoint: d.Selector.Endpoint, Stream: d.Selector.Stream, PeriodS: uint32(d.Period.D() / time.Second)}
		o := d.Objectives
		if o.Availability != nil {
			r.AvailabilityTarget = ptr(o.Availability.Target)
		}
		if o.TTFT != nil {
			r.TTFTThresholdS, r.TTFTTarget = ptr(o.TTFT.Threshold.Seconds()), ptr(o.TTFT.Target)
		}
		if o.TPOT != nil {
			r.TPOTThresholdS, r.TPOTTarget = ptr(o.TPOT.Threshold.Seconds()), ptr(o.TPOT.Target)
		}
		if o.E2E != nil {
			r.E2EThresholdS, r.E2ETarget = ptr(o.E2E.Threshold.Seconds()), ptr(o.E2E.Target)
		}
		if p := d.Alerts.PageWindows(); len(p) > 0 {
			r.PageLongS, r.PageFactor = ptr(uint32(p[0].Long.D()/time.Second)), ptr(p[0].Factor)
		}
		out = append(out, r)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// Sync writes defs into slo_objectives as one load at time at (microseconds; the views read the
// latest load), on every node of a sharded schema (chstore.EveryNode), so that the views judge
// requests by the SLOs the detector runs. An empty defs is a load too: it retires the SLOs of the
// load before. conn is the connection to cfg's database.
func Sync(ctx context.Context, cfg config.ClickHouse, conn driver.Conn, defs []*Definition, at time.Time) error {
	at = at.UTC().Truncate(time.Microsecond)
	rs := rows(defs, at)
	err := chstore.EveryNode(ctx, cfg, conn, func(ctx context.Context, c driver.Conn) error {
		b, err := c.PrepareBatch(ctx, "INSERT INTO slo_objectives")
		if err != nil {
			return err
		}
		for i := range rs {
			if err := b.AppendStruct(&rs[i]); err != nil {
				_ = b.Abort()
				return err
			}
		}
		return b.Send()
	})
	if err != nil {
		return fmt.Errorf("write the SLOs into slo_objectives: %w", err)
	}
	return nil
}
