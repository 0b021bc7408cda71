// Package chstoretest reads servescope's schema as a user would — every view, and the docs' ready
// SQL — for the tests of a single server and of a sharded cluster (internal/chstore, dev/e2e,
// dev/security).
package chstoretest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
)

// ReadEveryView reads every view of database through conn by its qualified name, whatever conn's
// current database: `SELECT count() FROM db.view` for a plain view, and with from and to for each
// of [chstore.ParameterizedViews] (every one takes those two parameters). On a sharded schema the
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
		if slices.Contains(chstore.ParameterizedViews, v) {
			q += "(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')})"
		}
		var n uint64
		if err := conn.QueryRow(chstore.WithParams(ctx, params), q).Scan(&n); err != nil {
			return views, fmt.Errorf("%s: %w", q, err)
		}
	}
	return views, nil
}

// ReadySQLSource is the file holding the ready SQL users copy (every ```sql block of it), relative
// to the repository root: the one place that says where the docs keep it.
const ReadySQLSource = "README.md"

// ReadySQL returns every statement of the ```sql blocks of ReadySQLSource, in order, found from
// dir (a test's working directory) up to the repository root (the directory holding go.mod).
func ReadySQL(dir string) ([]string, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			return nil, fmt.Errorf("no go.mod above %s: not inside the repository", dir)
		}
		root = parent
	}
	raw, err := os.ReadFile(filepath.Join(root, ReadySQLSource))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range sqlBlock.FindAllStringSubmatch(string(raw), -1) {
		for _, q := range strings.Split(b[1], ";") {
			if q = strings.TrimSpace(q); q != "" {
				out = append(out, q)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no ```sql block", ReadySQLSource)
	}
	return out, nil
}

var sqlBlock = regexp.MustCompile("(?s)```sql\n(.*?)```")
