// Package requestview assembles one request's whole story from what servescope recorded of it:
// the gateway's request.started and request.finished, the engine's spans, /metrics samples and log
// lines, the application's records and, where capture is on, its text. The console's request page
// (GET /request/{id}) and `servescope request ID` show what Load returns; Find resolves the id a
// user holds to the requests it names.
//
// Ids: a request is found by its request_id (the caller's X-Request-Id when it sent one, else the
// gateway's KSUID), by the engine's answer id (response_id, chatcmpl-<X-Request-Id> for vLLM's chat
// completions), by its W3C trace id, or by an engine request id of its spans. A caller's
// X-Request-Id may repeat: an id can name several requests, told apart by their arrival time.
//
// Every figure carries its source (the gateway's measurement, vLLM's per-request timing object in
// the response, the engine's span, its /metrics, its log), and what is unknown stays unknown (nil),
// never 0. The SQL is in sql/*.sql; every value reaches ClickHouse as a query parameter.
package requestview

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

func query(name string) string {
	b, err := sqlFiles.ReadFile("sql/" + name + ".sql")
	if err != nil {
		// The files are embedded at build time; a missing one is a build defect.
		panic(fmt.Sprintf("requestview: embedded query %s: %v", name, err))
	}
	return string(b)
}

// ErrNotFound is wrapped by Find's error when no request carries the id.
var ErrNotFound = errors.New("no request found")

// MaxIDBytes bounds an id: the schema's longest id field (response_id) is 256 bytes.
const MaxIDBytes = 256

// CheckID says whether id can name a request: not empty, at most MaxIDBytes, no control characters.
func CheckID(id string) error {
	switch {
	case strings.TrimSpace(id) == "":
		return errors.New("request id: empty")
	case len(id) > MaxIDBytes:
		return fmt.Errorf("request id: longer than %d bytes", MaxIDBytes)
	case strings.IndexFunc(id, unicode.IsControl) >= 0:
		return errors.New("request id: holds a control character")
	}
	return nil
}

// Match is one request an id names.
type Match struct {
	// RequestID is the gateway's request_id; with ArrivalTS it names one request even when a
	// caller reused its X-Request-Id.
	RequestID string    `json:"request_id"`
	ArrivalTS time.Time `json:"arrival_ts"`
	// Finished is false for a request with a request.started and no request.finished yet.
	Finished   bool       `json:"finished"`
	FinishedTS *time.Time `json:"finished_ts,omitempty"`
	Model      string     `json:"model"`
	StatusCode *uint16    `json:"status_code,omitempty"`
	ResponseID string     `json:"response_id,omitempty"`
	TraceID    string     `json:"trace_id,omitempty"`
	// MatchedBy is the id kind that matched: request_id, response_id, trace_id or engine_request_id.
	MatchedBy string `json:"matched_by"`
}

// Key is the match's identity as the console's links carry it: the arrival in RFC 3339 with
// microseconds (ClickHouse's DateTime64(6)).
func (m Match) Key() string { return m.ArrivalTS.UTC().Format(ArrivalLayout) }

// ArrivalLayout is how an arrival time picks one of several requests of an id (the console's
// `arrival` parameter, the CLI's --arrival).
const ArrivalLayout = "2006-01-02T15:04:05.000000Z07:00"

// ParseArrival reads an arrival time written in ArrivalLayout (or any RFC 3339 time).
func ParseArrival(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("arrival %q: want RFC 3339 with microseconds, e.g. 2026-09-11T15:53:01.123456Z", s)
	}
	return t.UTC(), nil
}

// Find returns the requests id names, newest first (at most 100). The error wraps ErrNotFound
// when there is none.
func Find(ctx context.Context, conn driver.Conn, id string) ([]Match, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	rows, err := conn.Query(chstore.WithParams(ctx, map[string]string{"id": chstore.StringParam(id)}), query("find"))
	if err != nil {
		return nil, fmt.Errorf("look up request %q: %w", id, err)
	}
	defer rows.Close()
	var out []Match
	for rows.Next() {
		var m Match
		if err := rows.Scan(&m.RequestID, &m.ArrivalTS, &m.Finished, &m.FinishedTS, &m.Model, &m.StatusCode,
			&m.ResponseID, &m.TraceID, &m.MatchedBy); err != nil {
			return nil, fmt.Errorf("look up request %q: read a row: %w", id, err)
		}
		m.ArrivalTS = m.ArrivalTS.UTC()
		if m.FinishedTS != nil {
			t := m.FinishedTS.UTC()
			m.FinishedTS = &t
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up request %q: %w", id, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w with id %q: it is no gateway request id or X-Request-Id, response id (chatcmpl-…), trace id or engine request id in requests, requests_started or engine_spans (they keep 30 days by default)", ErrNotFound, id)
	}
	slices.SortStableFunc(out, func(a, b Match) int { return b.ArrivalTS.Compare(a.ArrivalTS) })
	if len(out) > 100 {
		out = out[:100]
	}
	return out, nil
}

// Pick chooses among Find's matches: the one arriving at arrival when it is set, else the only
// one. ok is false when several match and arrival picks none of them.
func Pick(ms []Match, arrival time.Time) (Match, bool) {
	if !arrival.IsZero() {
		for _, m := range ms {
			if m.ArrivalTS.Equal(arrival) {
				return m, true
			}
		}
		return Match{}, false
	}
	if len(ms) == 1 {
		return ms[0], true
	}
	return Match{}, false
}

// ConsolePath is the console's page of the request m: /request/<id>, with its arrival when the id
// names several requests (pick). The id is escaped as one path segment.
func ConsolePath(m Match, pick bool) string {
	p := "/request/" + url.PathEscape(m.RequestID)
	if pick {
		p += "?" + url.Values{"arrival": {m.Key()}}.Encode()
	}
	return p
}

// Caught are the requests the engine death at death caught (sql/caught.sql), newest first, at
// most limit.
func Caught(ctx context.Context, conn driver.Conn, death time.Time, limit int) ([]Match, error) {
	rows, err := conn.Query(chstore.WithParams(ctx, map[string]string{"death": chTime(death), "limit": strconv.Itoa(limit)}), query("caught"))
	if err != nil {
		return nil, fmt.Errorf("read the requests caught in the death at %s: %w", death.Format(time.RFC3339), err)
	}
	defer rows.Close()
	out := []Match{}
	for rows.Next() {
		var m Match
		if err := rows.Scan(&m.RequestID, &m.ArrivalTS, &m.Finished, &m.FinishedTS, &m.Model, &m.StatusCode,
			&m.ResponseID, &m.TraceID, &m.MatchedBy); err != nil {
			return nil, fmt.Errorf("read a request caught in the death: %w", err)
		}
		m.ArrivalTS = m.ArrivalTS.UTC()
		out = append(out, m)
	}
	return out, rows.Err()
}
