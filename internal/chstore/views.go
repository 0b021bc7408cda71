package chstore

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/config"
)

// Views readable from any database. ClickHouse qualifies the tables a view reads with their
// database when the view is created, but not a call of a parameterized view, which it stores as
// written (a table function) and resolves in the current database of the query that reads the
// view. The migrations call parameterized views by their bare names (request_facts reads
// request_facts_window(...), which reads app_requests(...) and engine_requests(...), ...), so a
// client whose current database is another one (Grafana's, clickhouse-client's `default`) got
// "Unknown table function request_facts_window" from `SELECT count() FROM servescope.request_facts`,
// and a shard read its views in whatever database its remote_servers entry named.
//
// QualifyViews rewrites those calls with the database's name after every migration step
// (Migrator.Up and Down, Migrate, MigrateSharded), whichever migration created the view, so the
// migration files keep their bare names and a database can have any name.

// parameterizedCall matches a call of one of the parameterized views, name and opening
// parenthesis, preceded by a character that cannot end a qualified name (so `db`.name( and
// db.name( are left alone). The calls in a view's stored query are formatted by ClickHouse:
// name(`from` = ..., to = ...).
var parameterizedCall = regexp.MustCompile("(^|[^A-Za-z0-9_.`])(" + strings.Join(ParameterizedViews, "|") + `)\(`)

// qualifiedQuery returns the view's stored CREATE statement (system.tables.create_table_query) as
// a CREATE OR REPLACE statement whose calls of the parameterized views name database, and false
// when it has no bare call.
func qualifiedQuery(createQuery, database string) (string, bool) {
	const create = "CREATE VIEW "
	if !strings.HasPrefix(createQuery, create) || !parameterizedCall.MatchString(createQuery) {
		return "", false
	}
	q := parameterizedCall.ReplaceAllString(createQuery, "${1}`"+database+"`.${2}(")
	return "CREATE OR REPLACE VIEW " + strings.TrimPrefix(q, create), true
}

// QualifyViews recreates every view of database whose query calls a parameterized view of
// [ParameterizedViews] by its bare name, with the call naming database, so that the view reads
// the same from any current database. It returns the views it recreated; running it again
// changes nothing.
func QualifyViews(ctx context.Context, conn driver.Conn, database string) ([]string, error) {
	rows, err := conn.Query(WithParams(ctx, map[string]string{"db": StringParam(database)}),
		"SELECT name, create_table_query FROM system.tables WHERE database = {db:String} AND engine = 'View' ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("read the views of %s: %w", database, err)
	}
	type view struct{ name, query string }
	var stale []view
	for rows.Next() {
		var name, create string
		if err := rows.Scan(&name, &create); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the views of %s: %w", database, err)
		}
		if q, ok := qualifiedQuery(create, database); ok {
			stale = append(stale, view{name, q})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the views of %s: %w", database, err)
	}
	var done []string
	for _, v := range stale {
		if err := conn.Exec(ctx, v.query); err != nil {
			return done, fmt.Errorf("recreate view %s.%s with its calls qualified: %w", database, v.name, err)
		}
		done = append(done, v.name)
	}
	return done, nil
}

// qualifyViews is [QualifyViews] on cfg.Database over a connection of its own.
func qualifyViews(ctx context.Context, cfg config.ClickHouse) error {
	conn, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = QualifyViews(ctx, conn, cfg.Database)
	return err
}
