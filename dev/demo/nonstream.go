package demo

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
)

// OverloadStreamShare is the share of the overload scenario's requests that ask for a stream; the
// others ask for one JSON body. Without a stream no client sees the first token, so their TTFT in
// request_facts comes from the engine (its span, or the queue wait plus vLLM's
// scheduled-to-first-token); the demo shows that it still counts the queue wait, the largest part
// of TTFT in an overload.
const OverloadStreamShare = 0.5

// QueueSlackS is how far, in seconds, a TTFT may fall below the queue wait of the same request and
// still count as including it: the two may come from different records of the engine (its span and
// vLLM's per-request timing object, which is in milliseconds).
const QueueSlackS = 0.001

// NonStreaming is what request_facts holds for the requests of one window that asked for no
// stream. Durations are seconds, means over the requests that have the value.
type NonStreaming struct {
	// Requests counts every request that arrived in the window, NonStreaming those without a
	// stream, WithTTFT those of them with a TTFT (ttft_s), Compared those with a TTFT and a queue
	// wait (queue_s), and BelowQueue those whose TTFT is below their queue wait by more than
	// QueueSlackS.
	Requests, NonStreaming, WithTTFT, Compared, BelowQueue uint64
	TTFTMean, QueueMean                                    *float64
	// Sources counts the non-streaming requests with a TTFT by ttft_source (gateway, engine_span,
	// engine_timing).
	Sources map[string]uint64
}

// nonStreamingQuery reads request_facts per (stream, ttft_source) for the requests that arrived in
// [from_us, to_us).
const nonStreamingQuery = `
SELECT
    stream,
    ttft_source,
    count(),
    countIf(ttft_s IS NOT NULL),
    countIf(ttft_s IS NOT NULL AND queue_s IS NOT NULL),
    countIf(ttft_s IS NOT NULL AND queue_s IS NOT NULL AND assumeNotNull(ttft_s) + {slack_s:Float64} < assumeNotNull(queue_s)),
    sum(ifNull(ttft_s, 0)),
    countIf(queue_s IS NOT NULL),
    sum(ifNull(queue_s, 0))
FROM request_facts
WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
GROUP BY stream, ttft_source`

// MeasureNonStreaming reads from request_facts the TTFT and queue wait of w's requests that asked
// for no stream.
func MeasureNonStreaming(ctx context.Context, conn driver.Conn, w Window) (NonStreaming, error) {
	n := NonStreaming{Sources: map[string]uint64{}}
	rows, err := conn.Query(chstore.WithParams(ctx, map[string]string{
		"from_us": fmt.Sprint(w.Range.From.UnixMicro()), "to_us": fmt.Sprint(w.Range.To.UnixMicro()),
		"slack_s": fmt.Sprint(QueueSlackS),
	}), nonStreamingQuery)
	if err != nil {
		return n, fmt.Errorf("read the non-streaming requests of %s from request_facts: %w", w.Key, err)
	}
	defer rows.Close()
	var ttftSum, queueSum float64
	var withQueue uint64
	for rows.Next() {
		var (
			stream                                   bool
			source                                   string
			count, withTTFT, compared, below, queueN uint64
			ttft, queue                              float64
		)
		if err := rows.Scan(&stream, &source, &count, &withTTFT, &compared, &below, &ttft, &queueN, &queue); err != nil {
			return n, fmt.Errorf("scan the non-streaming requests of %s: %w", w.Key, err)
		}
		n.Requests += count
		if stream {
			continue
		}
		n.NonStreaming += count
		n.WithTTFT += withTTFT
		n.Compared += compared
		n.BelowQueue += below
		if withTTFT > 0 {
			n.Sources[source] += withTTFT
		}
		ttftSum += ttft
		withQueue += queueN
		queueSum += queue
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("read the non-streaming requests of %s: %w", w.Key, err)
	}
	if n.WithTTFT > 0 {
		n.TTFTMean = ptr(ttftSum / float64(n.WithTTFT))
	}
	if withQueue > 0 {
		n.QueueMean = ptr(queueSum / float64(withQueue))
	}
	return n, nil
}

func ptr(v float64) *float64 { return &v }

// Check says whether the non-streaming requests' TTFT includes their queue wait: there are such
// requests, every one has a TTFT and a queue wait, none has a TTFT below its queue wait (beyond
// QueueSlackS), and they waited (mean queue wait shown above 0.000 s).
func (n NonStreaming) Check() Check {
	val := func(p *float64) float64 {
		if p == nil {
			return 0
		}
		return *p
	}
	ok := n.NonStreaming > 0 && n.WithTTFT == n.NonStreaming && n.Compared == n.NonStreaming && n.BelowQueue == 0 &&
		val(n.QueueMean) >= 0.0005 && val(n.TTFTMean) >= val(n.QueueMean)
	text := fmt.Sprintf("non-streaming TTFT includes the queue wait (%d of %d with a TTFT and a queue wait, %d below their queue wait; mean TTFT %s s ≥ queue wait %s s > 0)",
		n.Compared, n.NonStreaming, n.BelowQueue, f(n.TTFTMean, "%.3f"), f(n.QueueMean, "%.3f"))
	return Check{OK: ok, Text: text}
}

// WriteNonStreaming prints n, the non-streaming requests of the window titled title, under the
// workloads' table.
func WriteNonStreaming(out io.Writer, title string, n NonStreaming) error {
	var src []string
	for s, c := range n.Sources {
		if s == "" {
			s = "none"
		}
		src = append(src, fmt.Sprintf("%s×%d", s, c))
	}
	sort.Strings(src)
	from := "-"
	if len(src) > 0 {
		from = strings.Join(src, " ")
	}
	_, err := fmt.Fprintf(out, "\n  %s without streaming (request_facts): %d of %d requests asked for one JSON body\n"+
		"    TTFT (s)          %7s   (ttft_source: %s)\n"+
		"    Queue wait (s)    %7s\n",
		title, n.NonStreaming, n.Requests, f(n.TTFTMean, "%.3f"), from, f(n.QueueMean, "%.3f"))
	return err
}
