// Package chstoretest reads servescope's schema as a user would — every view, and the docs' ready
// SQL — for the tests of a single server and of a sharded cluster (internal/chstore, dev/e2e,
// dev/security).
package chstoretest

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
)

// ReadEveryView reads every view of database through conn by its qualified name, whatever conn's
// current database: `SELECT count() FROM db.view` for a plain view, and with from and to for each
// of [chstore.ParameterizedViews] and [chstore.MainViews] (every one takes those two parameters).
// On a sharded schema the
// Distributed tables are read too (request_facts and engine_timeline are Distributed tables over
// the shards' views). It returns what it read, and the first error, naming the view.
func ReadEveryView(ctx context.Context, conn driver.Conn, database string, from, to time.Time) ([]string, error) {
	rows, err := conn.Query(chstore.WithParams(ctx, map[string]string{"db": database}),
		"SELECT name FROM system.tables WHERE database = {db:String} AND engine IN ('View', 'Distributed') ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("list the views of %s: %w", database, err)
	}
	var views []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, err
		}
		views = append(views, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	params := map[string]string{"from": from.UTC().Format("2006-01-02 15:04:05.000000"), "to": to.UTC().Format("2006-01-02 15:04:05.000000")}
	for _, v := range views {
		q := "SELECT count() FROM `" + database + "`.`" + v + "`"
		if slices.Contains(chstore.ParameterizedViews, v) || slices.Contains(chstore.MainViews, v) {
			q += "(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')})"
		}
		var n uint64
		if err := conn.QueryRow(chstore.WithParams(ctx, params), q).Scan(&n); err != nil {
			return views, fmt.Errorf("%s: %w", q, err)
		}
	}
	return views, nil
}
