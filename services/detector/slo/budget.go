package slo

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
)

// Budget is one objective's error budget over the period of its SLO ending at a time, as
// slo_error_budget (migrations/000040) computes it.
type Budget struct {
	SLO, Objective string
	Target         float64
	Period         time.Duration
	// Judged and Bad are the period's requests judged for the objective and those that missed it.
	Judged, Bad uint64
	// BudgetLeft is 1 − (Bad/Judged)/(1 − Target): 1 untouched, 0 spent, below 0 overspent; nil
	// when no request was judged.
	BudgetLeft *float64
	// BurnRate1h is the last hour's bad share over the budget (1 spends it exactly in the
	// period); nil without a request in the hour.
	BurnRate1h *float64
	// ExhaustedIn is how long the budget left lasts at BurnRate1h; nil at rate 0 or unknown.
	ExhaustedIn *time.Duration
}

// ReadBudgets reads the error budget of every objective of every SLO in slo_objectives' latest
// load, each over its SLO's period ending at end. Objectives without a request in the period
// are absent.
func ReadBudgets(ctx context.Context, conn driver.Conn, end time.Time) ([]Budget, error) {
	rows, err := conn.Query(ctx, `SELECT slo, period_s FROM slo_objectives
		WHERE loaded_at = (SELECT max(loaded_at) FROM slo_objectives) AND slo != '' ORDER BY slo`)
	if err != nil {
		return nil, fmt.Errorf("read slo_objectives: %w", err)
	}
	type item struct {
		name   string
		period uint32
	}
	var slos []item
	for rows.Next() {
		var it item
		if err := rows.Scan(&it.name, &it.period); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read slo_objectives: %w", err)
		}
		slos = append(slos, it)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read slo_objectives: %w", err)
	}
	var out []Budget
	for _, s := range slos {
		from := end.Add(-time.Duration(s.period) * time.Second)
		qctx := chstore.WithParams(ctx, map[string]string{
			"from": chTime(from), "to": chTime(end), "slo": chstore.StringParam(s.name)})
		r, err := conn.Query(qctx, `SELECT objective, target, judged, bad, budget_left, burn_rate_1h, exhausted_in_s
			FROM slo_error_budget(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')})
			WHERE slo = {slo:String}
			ORDER BY indexOf(['availability', 'ttft', 'tpot', 'e2e'], objective)`)
		if err != nil {
			return nil, fmt.Errorf("read the error budget of SLO %s: %w", s.name, err)
		}
		for r.Next() {
			b := Budget{SLO: s.name, Period: time.Duration(s.period) * time.Second}
			var exhausted *float64
			if err := r.Scan(&b.Objective, &b.Target, &b.Judged, &b.Bad, &b.BudgetLeft, &b.BurnRate1h, &exhausted); err != nil {
				r.Close()
				return nil, fmt.Errorf("read the error budget of SLO %s: %w", s.name, err)
			}
			if exhausted != nil {
				d := time.Duration(*exhausted * float64(time.Second))
				b.ExhaustedIn = &d
			}
			out = append(out, b)
		}
		r.Close()
		if err := r.Err(); err != nil {
			return nil, fmt.Errorf("read the error budget of SLO %s: %w", s.name, err)
		}
	}
	return out, nil
}

func chTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }
