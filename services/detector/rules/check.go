package rules

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// checkTime is the evaluation time of a dry run: a window no table holds rows for (every table's
// TTL is far shorter), so the run reads no data on a production server while still executing the
// query, scanning its result and binding every parameter with the types the detector binds.
var checkTime = time.Date(2000, 1, 3, 12, 0, 0, 0, time.UTC)

// Check dry-runs def's query on conn's database: EXPLAIN (ClickHouse's analyzer: unknown tables,
// columns and functions, type errors, and a {name:Type} parameter the rule's params do not set),
// then one evaluation over an empty window (runtime errors and the result's shape: labels, value,
// baseline, threshold, firing, baseline_ok and, with hysteresis, keep_firing). The parameters are
// those an evaluation binds. An error the server returns is a [*FileError] at the `query` key's
// line; an error reaching the server (no connection) is returned as is, so that a caller can tell
// a broken rule from an unavailable server with [IsServerVerdict].
func Check(ctx context.Context, conn driver.Conn, def *Definition) error {
	r, err := NewSQLRule(def, conn)
	if err != nil {
		return &FileError{File: def.Source, Line: def.Line("query"), Key: "query", Err: err}
	}
	qctx := clickhouse.Context(ctx, clickhouse.WithParameters(r.Params(checkTime)))
	rows, err := conn.Query(qctx, "EXPLAIN "+r.Query())
	if err == nil {
		for rows.Next() {
		}
		err = errors.Join(rows.Err(), rows.Close())
	}
	if err != nil {
		return def.queryError(err)
	}
	if _, err := r.Eval(ctx, checkTime); err != nil {
		return def.queryError(err)
	}
	return nil
}

// queryError places err at the rule's `query` key when ClickHouse refused the query; other errors
// (a lost connection) are returned unchanged.
func (d *Definition) queryError(err error) error {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		return &FileError{File: d.Source, Line: d.Line("query"), Key: "query",
			Err: fmt.Errorf("rule %s: ClickHouse refused the query: %s (code %d)", d.Name, ex.Message, ex.Code)}
	}
	return err
}

// IsServerVerdict reports whether err says what is wrong with a rule (its file, its SQL as
// ClickHouse analysed it) rather than that the check could not run.
func IsServerVerdict(err error) bool {
	var fe *FileError
	return errors.As(err, &fe)
}
