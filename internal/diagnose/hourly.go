package diagnose

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/baseline"
	"github.com/servescope/servescope/internal/chstore"
)

// Where a report's baseline came from (Report.BaselineSource).
const (
	// BaselineLive: read from the landing tables over the baseline range itself.
	BaselineLive = "live"
	// BaselineHourly: merged from diagnose_hourly's rows of the baseline's whole hours
	// (migrations/000017), the engine's samples and log lines read live.
	BaselineHourly = "diagnose_hourly"
)

const (
	// HourlyMinSpan is the shortest baseline read by the hour: shorter ones cost little live.
	HourlyMinSpan = 6 * time.Hour
	// HourlyMinRequests is the fewest requests (the whole hours', without FINAL) a baseline is
	// read by the hour from: below, the live reads are exact (migrations/000016's sampling bound)
	// and cheap, and a baseline read live is exact where one merged from hours is not (t-digest
	// quantiles).
	HourlyMinRequests = 100_000
	// maxInlineFills is how many missing or outdated hours Run computes itself before merging:
	// an hour of 190 k requests costs about what a live day's read costs one twelfth of, so
	// with more Run reads the baseline live and leaves the hours to Warm.
	maxInlineFills = 2
	// inputsTolerance is how far (a fraction) an hour's input counts may move before its row is
	// recomputed: a few late rows move its means by less, a dead-letter replay by more.
	inputsTolerance = 0.001
)

// hourInputs are the row counts, without FINAL, of the tables an hour of diagnose_hourly reads,
// in that hour.
type hourInputs struct{ requests, spans, app uint64 }

func (a hourInputs) near(b hourInputs) bool {
	return nearCount(a.requests, b.requests) && nearCount(a.spans, b.spans) && nearCount(a.app, b.app)
}

func nearCount(a, b uint64) bool {
	d := max(a, b) - min(a, b)
	return float64(d) <= inputsTolerance*float64(max(a, b))
}

// WholeHours is r moved to whole hours: as long as r (rounded to the hour, at least one), ending
// at the start of the hour r ends in. The baseline of a window is read so when it is long and
// large (HourlyMinSpan, HourlyMinRequests).
func WholeHours(r Range) Range {
	to := r.To.UTC().Truncate(time.Hour)
	n := max(r.To.Sub(r.From).Round(time.Hour), time.Hour)
	return Range{From: to.Add(-n), To: to}
}

// hours lists the starts of r's hours; r is whole hours.
func hours(r Range) []time.Time {
	var out []time.Time
	for h := r.From; h.Before(r.To); h = h.Add(time.Hour) {
		out = append(out, h)
	}
	return out
}

// readInputs counts the rows of requests, engine_spans and app_records in each hour of r.
func readInputs(ctx context.Context, conn driver.Conn, r Range) (map[time.Time]hourInputs, error) {
	rows, err := conn.Query(params(ctx, r, ""), query("hour_inputs"))
	if err != nil {
		return nil, fmt.Errorf("count the rows of requests, engine_spans and app_records by hour: %w", err)
	}
	defer rows.Close()
	out := map[time.Time]hourInputs{}
	for rows.Next() {
		var source string
		var h time.Time
		var n uint64
		if err := rows.Scan(&source, &h, &n); err != nil {
			return nil, fmt.Errorf("scan row count: %w", err)
		}
		in := out[h.UTC()]
		switch source {
		case "requests":
			in.requests = n
		case "engine_spans":
			in.spans = n
		case "app_records":
			in.app = n
		}
		out[h.UTC()] = in
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count the rows of requests, engine_spans and app_records by hour: %w", err)
	}
	return out, nil
}

// enoughRequests reports whether the hours of inputs hold HourlyMinRequests requests or more,
// enough to read them by the hour.
func enoughRequests(inputs map[time.Time]hourInputs) bool {
	var total uint64
	for _, in := range inputs {
		total += in.requests
	}
	return total >= HourlyMinRequests
}

// readCached returns the input counts diagnose_hourly's rows for model in r were computed from.
func readCached(ctx context.Context, conn driver.Conn, r Range, model string) (map[time.Time]hourInputs, error) {
	rows, err := conn.Query(params(ctx, r, model), query("hour_cached"))
	if err != nil {
		return nil, fmt.Errorf("read diagnose_hourly: %w", err)
	}
	defer rows.Close()
	out := map[time.Time]hourInputs{}
	for rows.Next() {
		var h time.Time
		var in hourInputs
		if err := rows.Scan(&h, &in.requests, &in.spans, &in.app); err != nil {
			return nil, fmt.Errorf("scan diagnose_hourly: %w", err)
		}
		out[h.UTC()] = in
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read diagnose_hourly: %w", err)
	}
	return out, nil
}

// staleHours are r's hours whose diagnose_hourly row for model is missing or was computed from
// other input counts than inputs; hours with no input and no row need none.
func staleHours(r Range, inputs, cached map[time.Time]hourInputs) []time.Time {
	var out []time.Time
	for _, h := range hours(r) {
		in := inputs[h]
		c, ok := cached[h]
		if (!ok && in != hourInputs{}) || (ok && !c.near(in)) {
			out = append(out, h)
		}
	}
	return out
}

// fillHour computes the hour starting at h under model and stores it in diagnose_hourly with the
// input counts in, read before (rows landing meanwhile move the counts, so a later read
// recomputes the hour rather than trust a row that saw more than it says).
func fillHour(ctx context.Context, conn driver.Conn, h time.Time, model string, in hourInputs) error {
	ctx = chstore.WithParams(ctx, map[string]string{
		"from_us":       fmt.Sprint(h.UnixMicro()),
		"to_us":         fmt.Sprint(h.Add(time.Hour).UnixMicro()),
		"model":         chstore.StringParam(model),
		"requests_rows": fmt.Sprint(in.requests),
		"spans_rows":    fmt.Sprint(in.spans),
		"app_rows":      fmt.Sprint(in.app),
	})
	if err := conn.Exec(ctx, query("hour_fill")); err != nil {
		return fmt.Errorf("compute the hour %s into diagnose_hourly: %w", h.Format(time.RFC3339), err)
	}
	return nil
}

// hourlyBaseline reads the baseline r (whole hours) from diagnose_hourly, first computing up to
// maxInlineFills hours that are missing or outdated. ok is false, with the reason in note when
// the user should hear it, when the baseline is better read live: too small, too many hours to
// compute, or diagnose_hourly unreadable or unwritable (a schema before migrations/000017, a
// read-only user).
func hourlyBaseline(ctx context.Context, conn driver.Conn, r Range, model string, now time.Time) (s Stats, ok bool, note string, err error) {
	inputs, err := readInputs(ctx, conn, r)
	if err != nil {
		return s, false, "", nil // the live read names what is unreadable
	}
	if !enoughRequests(inputs) {
		return s, false, "", nil
	}
	cached, err := readCached(ctx, conn, r, model)
	if err != nil {
		return s, false, "baseline read live: " + HourlyError(err), nil
	}
	stale := staleHours(r, inputs, cached)
	if len(stale) > maxInlineFills {
		kept := WarmRange(now, DefaultWarmBaseline)
		why := "the detector computes them, DETECTOR_DIAGNOSE_WARM_INTERVAL"
		switch {
		case model != "":
			why = "the detector computes the hours of all models together, not one model's: a --model baseline is read live"
		case stale[0].Before(kept.From):
			why = fmt.Sprintf("the detector keeps the last %d hours only, from %s: an older baseline is read live", len(hours(kept)), kept.From.Format(time.RFC3339))
		}
		return s, false, fmt.Sprintf("baseline read live: %d of its %d hours are not in diagnose_hourly (%s)", len(stale), len(hours(r)), why), nil
	}
	for _, h := range stale {
		if err := fillHour(ctx, conn, h, model, inputs[h]); err != nil {
			return s, false, "baseline read live: " + HourlyError(err), nil
		}
	}
	s, err = collectWith(ctx, conn, r, model, func(s *Stats) []reader { return []reader{s.readHourly} })
	return s, err == nil, "", err
}

// readHourly fills the per-request quantities from diagnose_hourly's merged rows.
func (s *Stats) readHourly(ctx context.Context, conn driver.Conn) error {
	var (
		n                              uint64
		status                         map[uint16]uint64
		sums                           map[string]float64
		queue, ttft, tpot, e2e, scores []float32
		checked, violations, factor    uint64
		versions                       map[string]uint64
	)
	if err := conn.QueryRow(ctx, query("hour_read")).Scan(&n, &status, &sums, &queue, &ttft, &tpot, &e2e,
		&s.RetrievalN, &scores, &checked, &violations, &versions, &factor); err != nil {
		return fmt.Errorf("read the baseline's hours from diagnose_hourly: %w", err)
	}
	s.setStatusCodes(status)
	mean := func(key string) *float64 {
		w := sums[key+".w"]
		if w <= 0 {
			return nil
		}
		v := sums[key] / w
		return &v
	}
	dest, keys := s.perRequest(true)
	from := map[string]*float64{
		"prompt_tokens_mean": mean("prompt_tokens"), "completion_tokens_mean": mean("completion_tokens"),
		"cached_share": mean("cached_tokens"), "queue_s_mean": mean("queue_s"), "queue_s_p95": quantileAt(queue, 1),
		"prefill_s_mean": mean("prefill_s"), "ttft_s_mean": mean("ttft_s"), "ttft_s_p50": quantileAt(ttft, 0),
		"ttft_s_p95": quantileAt(ttft, 1), "tpot_s_mean": mean("tpot_s"), "tpot_s_p95": quantileAt(tpot, 1),
		"decode_s_mean": mean("decode_s"), "e2e_s_mean": mean("e2e_s"), "e2e_s_p50": quantileAt(e2e, 0),
		"e2e_s_p95": quantileAt(e2e, 1), "length_share": mean("length"), "max_tokens_mean": mean("max_tokens"),
	}
	for i, key := range keys {
		*(dest[i].(**float64)) = from[key]
	}
	s.markSources(dest, keys, SourceRequests)
	if s.RetrievalN > 0 {
		s.RetrievalTopP50 = quantileAt(scores, 0)
	}
	s.setScript(checked, violations)
	s.scriptFactor = factor
	s.CountsByHour = true
	for key, n := range versions {
		kind, value, ok := strings.Cut(key, "\t")
		if ok && n > 0 {
			s.addVersion(kind, value, n)
		}
	}
	return nil
}

// quantileAt is q[i] of a merged t-digest, nil when it held no value (NaN).
func quantileAt(q []float32, i int) *float64 {
	if i >= len(q) || math.IsNaN(float64(q[i])) {
		return nil
	}
	v := float64(q[i])
	return &v
}

// warmLag is how long after an hour's end Warm first computes it.
const warmLag = 5 * time.Minute

// DefaultWarmBaseline is how far back Warm keeps diagnose_hourly: the default baseline (24 h
// ending 1 h before the window starts) of any window of up to 24 h ending now (`servescope
// diagnose --since D`, the console's ranges up to 24h), whole hours.
var DefaultWarmBaseline = 24*time.Hour + baseline.Default.Offset + baseline.Default.Length

// WarmRange is the whole hours Warm keeps at now for span.
func WarmRange(now time.Time, span time.Duration) Range {
	return WholeHours(Range{From: now.Add(-warmLag - span), To: now.Add(-warmLag)})
}

// HourlyError says what failed on diagnose_hourly in a line: the two expected causes (a schema
// before migrations/000017, an account that may not write it) in words, others as ClickHouse
// gave them, without the statement.
func HourlyError(err error) string {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		switch ex.Code {
		case 60: // UNKNOWN_TABLE
			return "the table diagnose_hourly does not exist (servescope migrate up creates it)"
		case 497: // ACCESS_DENIED
			return "this ClickHouse account may not write diagnose_hourly (the detector's account may: after upgrading, run servescope access apply again)"
		}
		msg, _, _ := strings.Cut(ex.Message, " In scope ")
		return fmt.Sprintf("diagnose_hourly: code %d: %s", ex.Code, msg)
	}
	return err.Error()
}

// Warm computes into diagnose_hourly every hour of the span before now that is missing or
// outdated, for all models, when those hours hold HourlyMinRequests requests or more (below,
// diagnose reads its baseline live): the detector runs it on an interval, so that a diagnose finds
// its baseline's hours ready. The newest hour is left until warmLag after it ends, when the
// rows of its longest streams have landed. It returns how many hours it computed.
func Warm(ctx context.Context, conn driver.Conn, now time.Time, span time.Duration, log *slog.Logger) (int, error) {
	r := WarmRange(now, span)
	inputs, err := readInputs(ctx, conn, r)
	if err != nil {
		return 0, err
	}
	if !enoughRequests(inputs) {
		return 0, nil
	}
	cached, err := readCached(ctx, conn, r, "")
	if err != nil {
		return 0, err
	}
	filled := 0
	for _, h := range staleHours(r, inputs, cached) {
		t0 := time.Now()
		if err := fillHour(ctx, conn, h, "", inputs[h]); err != nil {
			return filled, err
		}
		filled++
		log.Debug("diagnose_hourly: hour computed", "hour", h, "requests", inputs[h].requests, "took", time.Since(t0))
	}
	return filled, nil
}
