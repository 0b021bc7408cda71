package demo

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/capacity"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/services/detector/slo"
)

// RunOrder is the order the demo plays the four workloads in: the overload last, so that the
// capacity reading taken before it (in the normal workload, the overload's own mix at a seventh of
// its rate) has the day's larger batches (long output's) to fit how a step slows with its tokens.
// The report prints them in docs/measurements.md's order.
var RunOrder = []string{"long-prompt", "long-output", "normal", "overload"}

// TTFTPage is the built-in SLO's fast-burn alert the overload must fire once and resolve once.
const TTFTPage = "slo_streams_page"

// MaxHeadroomError is how far the capacity reading taken before the overload may miss the rate at
// which the overload first queued: 30 %.
const MaxHeadroomError = 0.30

// PageEpisodes returns the episodes of rule's alerts for objective that fired at or after since.
func PageEpisodes(alerts []Received, rule, objective string, since time.Time) []Episode {
	var mine []Received
	for _, a := range alerts {
		if a.Rule == rule && a.Labels["objective"] == objective {
			mine = append(mine, a)
		}
	}
	var out []Episode
	for _, e := range Episodes(mine) {
		if !e.FiredAt.Before(since) {
			out = append(out, e)
		}
	}
	return out
}

// PageCheck is the check that the overload's TTFT burn paged once and resolved once.
func PageCheck(eps []Episode, started time.Time) Check {
	var parts []string
	for _, e := range eps {
		s := fmt.Sprintf("fired at +%.0f s", e.FiredAt.Sub(started).Seconds())
		if !e.ResolvedAt.IsZero() {
			s += fmt.Sprintf(", resolved at +%.0f s", e.ResolvedAt.Sub(started).Seconds())
		}
		parts = append(parts, s)
	}
	ok := len(eps) == 1 && !eps[0].ResolvedAt.IsZero()
	return Check{OK: ok, Text: fmt.Sprintf("the overload burns the TTFT budget: %s{objective=ttft} fired once and resolved once (%s)",
		TTFTPage, listOrNone(parts))}
}

// FirstQueue is when the overload first queued and the arrival rate then.
type FirstQueue struct {
	At time.Time
	// RPS is the requests that arrived through the gateway in the Span before At, a second.
	RPS  float64
	Span time.Duration
}

// ReadFirstQueue finds the first engine sample of w with a request waiting, and the arrival rate
// over the 20 s before it (or since w began, when that is shorter).
func ReadFirstQueue(ctx context.Context, conn driver.Conn, w Window) (FirstQueue, error) {
	var fq FirstQueue
	pctx := chstore.WithParams(ctx, map[string]string{
		"from_us": fmt.Sprint(w.Range.From.UnixMicro()), "to_us": fmt.Sprint(w.Range.To.UnixMicro())})
	var at *time.Time
	if err := conn.QueryRow(pctx, `SELECT minIf(ts, num_requests_waiting > 0) FROM engine_samples
		WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC') AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC') AND up
		HAVING countIf(num_requests_waiting > 0) > 0`).Scan(&at); err != nil {
		return fq, fmt.Errorf("read the overload's first waiting sample: %w", err)
	}
	if at == nil {
		return fq, fmt.Errorf("no engine sample of the overload has a request waiting")
	}
	fq.At = *at
	from := at.Add(-20 * time.Second)
	if from.Before(w.Range.From) {
		from = w.Range.From
	}
	fq.Span = at.Sub(from)
	var n uint64
	if err := conn.QueryRow(chstore.WithParams(ctx, map[string]string{
		"from_us": fmt.Sprint(from.UnixMicro()), "to_us": fmt.Sprint(at.UnixMicro())}),
		`SELECT count() FROM requests FINAL
		 WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC') AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')`).Scan(&n); err != nil {
		return fq, fmt.Errorf("read the overload's arrivals: %w", err)
	}
	if fq.Span > 0 {
		fq.RPS = float64(n) / fq.Span.Seconds()
	}
	return fq, nil
}

// HeadroomCheck compares the rate at which the capacity reading said requests would queue with
// the rate at which the overload first queued.
func HeadroomCheck(predicted *float64, fq FirstQueue) Check {
	if predicted == nil || fq.RPS == 0 {
		return Check{OK: false, Text: "capacity headroom before the overload: cannot tell (no prediction or no queue)"}
	}
	miss := math.Abs(*predicted-fq.RPS) / fq.RPS
	return Check{OK: miss <= MaxHeadroomError, Text: fmt.Sprintf(
		"capacity headroom before the overload predicted queueing at %.2f req/s; the overload first queued at %.2f req/s (%.0f%% off, %.0f%% allowed)",
		*predicted, fq.RPS, 100*miss, 100*MaxHeadroomError)}
}

// writeGoodput prints each window's goodput under each SLO (slo_goodput).
func writeGoodput(ctx context.Context, out io.Writer, conn driver.Conn, ws []Window) error {
	fmt.Fprintf(out, "  %-22s %-8s %8s %8s %9s %12s   %s\n", "Window", "SLO", "judged", "good", "goodput", "good req/s", "missed (availability / TTFT / TPOT / E2E)")
	for _, w := range ws {
		rows, err := conn.Query(chstore.WithParams(ctx, map[string]string{
			"from_us": fmt.Sprint(w.Range.From.UnixMicro()), "to_us": fmt.Sprint(w.Range.To.UnixMicro())}), `
			SELECT slo, sum(judged), sum(good), sum(availability_bad), sum(ttft_bad), sum(tpot_bad), sum(e2e_bad)
			FROM slo_goodput(from = fromUnixTimestamp64Micro({from_us:Int64}, 'UTC'), to = fromUnixTimestamp64Micro({to_us:Int64}, 'UTC'))
			GROUP BY slo ORDER BY slo`)
		if err != nil {
			return fmt.Errorf("read the goodput of %s: %w", w.Key, err)
		}
		for rows.Next() {
			var name string
			var judged, good, ab, tb, pb, eb uint64
			if err := rows.Scan(&name, &judged, &good, &ab, &tb, &pb, &eb); err != nil {
				rows.Close()
				return fmt.Errorf("read the goodput of %s: %w", w.Key, err)
			}
			share := "-"
			if judged > 0 {
				share = fmt.Sprintf("%.1f%%", 100*float64(good)/float64(judged))
			}
			rate := float64(good) / w.Range.To.Sub(w.Range.From).Seconds()
			fmt.Fprintf(out, "  %-22s %-8s %8d %8d %9s %12.2f   %d / %d / %d / %d\n", w.Title, name, judged, good, share, rate, ab, tb, pb, eb)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read the goodput of %s: %w", w.Key, err)
		}
	}
	return nil
}

// writeCost prints cost_window over [from, to): each model's requests and apps, its idle engines.
func writeCost(ctx context.Context, out io.Writer, conn driver.Conn, from, to time.Time) error {
	rows, err := conn.Query(chstore.WithParams(ctx, map[string]string{
		"from_us": fmt.Sprint(from.UnixMicro()), "to_us": fmt.Sprint(to.UnixMicro())}), `
		SELECT model, app, kind, currency, requests, output_tokens, engine_hours, idle_hours, cost, cost_per_request, cost_per_mtok
		FROM cost_window(from = fromUnixTimestamp64Micro({from_us:Int64}, 'UTC'), to = fromUnixTimestamp64Micro({to_us:Int64}, 'UTC'))
		ORDER BY model, kind = 'idle', app`)
	if err != nil {
		return fmt.Errorf("read cost_window: %w", err)
	}
	defer rows.Close()
	fmt.Fprintf(out, "  %-18s %-10s %-12s %9s %12s %10s %12s %14s\n", "Model", "App", "Kind", "requests", "output tok", "cost", "per request", "per M output")
	for rows.Next() {
		var model, app, kind, currency string
		var requests, tokens uint64
		var hours, idle float64
		var cost, perReq, perMtok *float64
		if err := rows.Scan(&model, &app, &kind, &currency, &requests, &tokens, &hours, &idle, &cost, &perReq, &perMtok); err != nil {
			return fmt.Errorf("read cost_window: %w", err)
		}
		if app == "" {
			app = "-"
		}
		money := func(p *float64, digits int) string {
			if p == nil {
				return "-"
			}
			return fmt.Sprintf("%.*f %s", digits, *p, currency)
		}
		fmt.Fprintf(out, "  %-18s %-10s %-12s %9d %12d %10s %12s %14s", model, app, kind, requests, tokens, money(cost, 4), money(perReq, 6), money(perMtok, 3))
		if kind == "idle" {
			fmt.Fprintf(out, "   (%.3f of %.3f engine-hours idle)", idle, hours)
		}
		fmt.Fprintln(out)
	}
	return rows.Err()
}

// writeBudgets prints the SLOs' error budgets now (slo_error_budget over each SLO's period).
func writeBudgets(ctx context.Context, out io.Writer, conn driver.Conn) error {
	bs, err := slo.ReadBudgets(ctx, conn, time.Now().UTC())
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  %-8s %-13s %8s %8s %6s %12s %10s\n", "SLO", "objective", "target", "judged", "bad", "budget left", "burn (1 h)")
	for _, b := range bs {
		left, burn := "-", "-"
		if b.BudgetLeft != nil {
			left = fmt.Sprintf("%.1f%%", 100**b.BudgetLeft)
		}
		if b.BurnRate1h != nil {
			burn = fmt.Sprintf("%.1f×", *b.BurnRate1h)
		}
		fmt.Fprintf(out, "  %-8s %-13s %8s %8d %6d %12s %10s\n", b.SLO, b.Objective, slo.FormatShare(b.Target), b.Judged, b.Bad, left, burn)
	}
	return nil
}

// serviceLevels prints section (d) of the report and returns its checks: the overload paged once
// for TTFT and resolved, and the capacity reading taken in the normal workload predicted the rate
// at which the overload first queued within MaxHeadroomError.
func (r *run) serviceLevels(ctx context.Context, scen []Window) ([]Check, error) {
	var normal, overload Window
	for _, w := range scen {
		switch w.Key {
		case "normal":
			normal = w
		case "overload":
			overload = w
		}
	}
	out := r.out
	fmt.Fprintf(out, "\n(d) Service levels: the built-in SLO (deploy/detector/slos/streams.yaml, windows ÷%d), goodput, capacity and cost, from ClickHouse\n\n", SLOScale)
	eps := PageEpisodes(r.recv.Alerts(), TTFTPage, "ttft", overload.Range.From)
	checks := []Check{PageCheck(eps, r.started)}
	fmt.Fprintf(out, "  %s %s\n\n", mark(checks[0].OK), checks[0].Text)
	if err := writeGoodput(ctx, out, r.conn, scen); err != nil {
		return nil, err
	}
	fmt.Fprintln(out)
	if err := writeBudgets(ctx, out, r.conn); err != nil {
		return nil, err
	}

	fmt.Fprintf(out, "\n  Capacity, read in the normal workload (%s → %s), before the overload:\n\n", normal.Range.From.Format("15:04:05"), normal.Range.To.Format("15:04:05"))
	es, err := capacity.Read(ctx, r.conn, normal.Range.From, normal.Range.To, "")
	if err != nil {
		return nil, err
	}
	var text strings.Builder
	if err := capacity.WriteText(&text, es); err != nil {
		return nil, err
	}
	for _, l := range strings.Split(strings.TrimRight(text.String(), "\n"), "\n") {
		fmt.Fprintf(out, "    %s\n", l)
	}
	var predicted *float64
	for _, e := range es {
		if e.Engine == EngineName {
			predicted = e.QueueAtRPS
		}
	}
	fq, err := ReadFirstQueue(ctx, r.conn, overload)
	if err != nil {
		fmt.Fprintf(out, "  %v\n", err)
	} else {
		fmt.Fprintf(out, "\n    the overload first queued at %s (+%.0f s into it): %.2f requests a second arrived in the %.0f s before\n",
			fq.At.Format("15:04:05.0"), fq.At.Sub(overload.Range.From).Seconds(), fq.RPS, fq.Span.Seconds())
	}
	hc := HeadroomCheck(predicted, fq)
	fmt.Fprintf(out, "  %s %s\n", mark(hc.OK), hc.Text)
	checks = append(checks, hc)

	first, last := scen[0].Range.From, scen[0].Range.To
	for _, w := range scen {
		first = minTime(first, w.Range.From)
		last = maxTime(last, w.Range.To)
	}
	fmt.Fprintf(out, "\n  Cost of the four workloads (%s → %s, the engine at %g USD an hour), cost_window:\n\n", first.Format("15:04:05"), last.Format("15:04:05"), EnginePricePerHour)
	if err := writeCost(ctx, out, r.conn, first, last); err != nil {
		return nil, err
	}
	return checks, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
