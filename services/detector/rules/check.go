package rules

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// checkTime is the evaluation time of a dry run: a window no table holds rows for (every table's
// TTL is far shorter), so the run reads no data on a production server while still executing the
// query, scanning its result and binding every parameter with the types the detector binds.
var checkTime = time.Date(2000, 1, 3, 12, 0, 0, 0, time.UTC)

// Check verifies def's query against the rule contract and dry-runs it on conn's database. First,
// before ClickHouse sees it, that its result names every column of the contract ([Contract]:
// labels, value, baseline, threshold, firing, baseline_ok and, with hysteresis, keep_firing): a
// [*ContractError] naming the item, at the line of the SELECT at fault. Then EXPLAIN (ClickHouse's
// analyzer: unknown tables, columns and functions, type errors), and one evaluation over an empty
// window (runtime errors and the result's types). The parameters are those an evaluation binds.
// An error the server returns is a [*FileError] at the `query` key's line; an error reaching the
// server (no connection) is returned as is, so that a caller can tell a broken rule from an
// unavailable server with [IsServerVerdict].
func Check(ctx context.Context, conn driver.Conn, def *Definition) error {
	q, err := def.expandQuery()
	if err != nil {
		return &FileError{File: def.Source, Line: def.Line("query"), Key: "query", Err: err}
	}
	if line, err := checkContract(q, def.Hysteresis); err != nil {
		return &FileError{File: def.Source, Line: def.QueryLine(line), Key: "query", Err: fmt.Errorf("rule %s: %w", def.Name, err)}
	}
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

// contractItemOf names, for a ClickHouse type error of the wrapping query, the contract column
// whose type is wrong, when the message names one.
func contractItemOf(msg string) string {
	for _, c := range Contract {
		if strings.Contains(msg, "CAST("+c.Name) || strings.Contains(msg, "("+c.Name+")") {
			return c.Name
		}
	}
	return ""
}

// queryError places err at the rule's `query` key when ClickHouse refused the query; other errors
// (a lost connection) are returned unchanged.
func (d *Definition) queryError(err error) error {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		if item := contractItemOf(ex.Message); item != "" {
			for _, c := range Contract {
				if c.Name == item {
					return &FileError{File: d.Source, Line: d.Line("query"), Key: "query",
						Err: fmt.Errorf("rule %s: %w (ClickHouse: %s, code %d)", d.Name,
							&ContractError{Item: item, Problem: "wrong type: want " + c.Holds}, ex.Message, ex.Code)}
				}
			}
		}
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
