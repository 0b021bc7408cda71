package requestview

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
)

// Slow is one of the slowest requests of a range. Queue is the engine's queue wait (the gateway's
// copy of vLLM's timing object, else the engine's span, QueueSource says which). PromptText and
// OutputText are set only when Slowest was asked for content.
type Slow struct {
	RequestID   string    `json:"request_id"`
	ArrivalTS   time.Time `json:"arrival_ts"`
	Model       string    `json:"model"`
	StatusCode  uint16    `json:"status_code"`
	TTFTS       *float64  `json:"ttft_s"`
	E2ES        *float64  `json:"e2e_s"`
	TPOTS       *float64  `json:"tpot_s"`
	QueueS      *float64  `json:"queue_s"`
	QueueSource string    `json:"queue_source,omitempty"`
	Prompt      *uint32   `json:"prompt_tokens"`
	Completion  *uint32   `json:"completion_tokens"`
	Finish      string    `json:"finish_reason"`
	Stream      bool      `json:"stream"`
	PromptText  string    `json:"prompt_text,omitempty"`
	OutputText  string    `json:"output_text,omitempty"`
}

// SlowOrders are the orders Slowest knows: the gateway's E2E, TTFT (streams) and TPOT (streams),
// and the engine's queue wait.
var SlowOrders = []string{"e2e_s", "ttft_s", "tpot_s", "queue_s"}

// Slowest reads the limit slowest requests of [from, to) by order (one of SlowOrders), of the
// model and app filters ("" for all). content reads the first 300 characters of the captured text:
// set it only for a viewer allowed to see it (the console's account cannot read the text
// otherwise).
func Slowest(ctx context.Context, conn driver.Conn, from, to time.Time, model, app, order string, content bool, limit int) ([]Slow, error) {
	if !slices.Contains(SlowOrders, order) {
		return nil, fmt.Errorf("order by %q: want one of %s", order, strings.Join(SlowOrders, ", "))
	}
	p := map[string]string{"from": chTime(from), "to": chTime(to), "model": chstore.StringParam(model), "app": chstore.StringParam(app),
		"order": order, "limit": strconv.Itoa(limit), "ids": "[]"}
	var queueOrder []string
	queued := map[string]float64{}
	if order == "queue_s" {
		// The engine's queue wait needs the engine's record: pick the requests by it, then read
		// their rows (of the app filter too, hence a few more than limit).
		qp := map[string]string{"from": chTime(from), "to": chTime(to), "model": chstore.StringParam(model), "limit": strconv.Itoa(limit * 3)}
		rows, err := conn.Query(chstore.WithParams(ctx, qp), query("slowest_queue"))
		if err != nil {
			return nil, fmt.Errorf("read the requests that waited longest: %w", err)
		}
		for rows.Next() {
			var id string
			var q float64
			if err := rows.Scan(&id, &q); err != nil {
				rows.Close()
				return nil, fmt.Errorf("read a request that waited: %w", err)
			}
			queueOrder = append(queueOrder, id)
			queued[id] = q
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("read the requests that waited longest: %w", err)
		}
		if len(queueOrder) == 0 {
			return []Slow{}, nil
		}
		p["ids"], p["order"], p["limit"] = arrayParam(queueOrder), "arrival_ts", strconv.Itoa(len(queueOrder)*2)
	}
	rows, err := conn.Query(chstore.WithParams(ctx, p), query("slowest"))
	if err != nil {
		return nil, fmt.Errorf("read the slowest requests: %w", err)
	}
	out := []Slow{}
	for rows.Next() {
		var s Slow
		if err := rows.Scan(&s.RequestID, &s.ArrivalTS, &s.Model, &s.StatusCode, &s.TTFTS, &s.E2ES, &s.TPOTS, &s.QueueS,
			&s.Prompt, &s.Completion, &s.Finish, &s.Stream); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read a slow request: %w", err)
		}
		s.ArrivalTS = s.ArrivalTS.UTC()
		if s.QueueS != nil {
			s.QueueSource = SourceTimingObject
		}
		out = append(out, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the slowest requests: %w", err)
	}
	if order == "queue_s" {
		for i := range out {
			if out[i].QueueS == nil {
				q := queued[out[i].RequestID]
				out[i].QueueS, out[i].QueueSource = &q, SourceEngineSpan
			}
		}
		slices.SortStableFunc(out, func(a, b Slow) int { return cmpDesc(*a.QueueS, *b.QueueS) })
		if len(out) > limit {
			out = out[:limit]
		}
	}
	if err := fillQueues(ctx, conn, from, to, out); err != nil {
		return nil, err
	}
	if content && len(out) > 0 {
		if err := fillText(ctx, conn, from, to, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func cmpDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// fillQueues gives the requests whose gateway row has no queue wait the engine's (engine_requests,
// as request_facts_window reads spans: from a minute before the range to an hour after it).
func fillQueues(ctx context.Context, conn driver.Conn, from, to time.Time, out []Slow) error {
	var ids []string
	for _, s := range out {
		if s.QueueS == nil {
			ids = append(ids, s.RequestID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	p := map[string]string{"from": chTime(from.Add(-time.Minute)), "to": chTime(to.Add(time.Hour)), "ids": arrayParam(ids)}
	rows, err := conn.Query(chstore.WithParams(ctx, p), query("engine_queue"))
	if err != nil {
		return fmt.Errorf("read the engine's queue waits: %w", err)
	}
	defer rows.Close()
	q := map[string]float64{}
	for rows.Next() {
		var id string
		var v float64
		if err := rows.Scan(&id, &v); err != nil {
			return fmt.Errorf("read an engine queue wait: %w", err)
		}
		q[id] = v
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the engine's queue waits: %w", err)
	}
	for i := range out {
		if v, ok := q[out[i].RequestID]; ok && out[i].QueueS == nil {
			out[i].QueueS, out[i].QueueSource = &v, SourceEngineSpan
		}
	}
	return nil
}

func fillText(ctx context.Context, conn driver.Conn, from, to time.Time, out []Slow) error {
	ids := make([]string, len(out))
	for i, s := range out {
		ids[i] = s.RequestID
	}
	p := map[string]string{"from": chTime(from), "to": chTime(to), "ids": arrayParam(ids)}
	rows, err := conn.Query(chstore.WithParams(ctx, p), query("slowest_content"))
	if err != nil {
		return fmt.Errorf("read the captured text of the slowest requests: %w", err)
	}
	defer rows.Close()
	type key struct {
		id string
		at time.Time
	}
	text := map[key][2]string{}
	for rows.Next() {
		var k key
		var t [2]string
		if err := rows.Scan(&k.id, &k.at, &t[0], &t[1]); err != nil {
			return fmt.Errorf("read captured text: %w", err)
		}
		text[key{k.id, k.at.UTC()}] = t
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the captured text of the slowest requests: %w", err)
	}
	for i := range out {
		t := text[key{out[i].RequestID, out[i].ArrivalTS}]
		out[i].PromptText, out[i].OutputText = t[0], t[1]
	}
	return nil
}

// arrayParam writes a string list as a ClickHouse Array(String) query parameter value.
func arrayParam(list []string) string {
	parts := make([]string, len(list))
	for i, s := range list {
		parts[i] = "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
	}
	return "[" + strings.Join(parts, ",") + "]"
}
