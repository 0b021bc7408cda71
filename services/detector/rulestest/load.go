package rulestest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// column is a table column as system.columns describes it.
type column struct {
	name, typ string
	// hasDefault: the column has a DEFAULT, MATERIALIZED, ALIAS or EPHEMERAL expression.
	hasDefault bool
}

func (c column) isTime() bool {
	return strings.HasPrefix(c.typ, "DateTime") || strings.HasPrefix(c.typ, "Nullable(DateTime")
}

// isTimeArray: an Array(DateTime…) column, whose times offsets are a list.
func (c column) isTimeArray() bool { return strings.HasPrefix(c.typ, "Array(DateTime") }

// loader inserts a case's inputs into its database.
type loader struct {
	conn    driver.Conn
	columns map[string][]column
}

// insertRows bounds one INSERT's data parameter.
const insertRows = 5_000

func (l *loader) tableColumns(ctx context.Context, table string) ([]column, error) {
	if cols, ok := l.columns[table]; ok {
		return cols, nil
	}
	rows, err := l.conn.Query(clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{"table": table})),
		"SELECT name, type, default_kind != '' FROM system.columns WHERE database = currentDatabase() AND table = {table:String} ORDER BY position")
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	defer rows.Close()
	var cols []column
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.name, &c.typ, &c.hasDefault); err != nil {
			return nil, fmt.Errorf("read the columns of %s: %w", table, err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("no table %s in the schema", table)
	}
	l.columns[table] = cols
	return cols, nil
}

// insert writes input number j's rows, time 0 being t0.
func (l *loader) insert(ctx context.Context, j int, in Input, t0 time.Time) error {
	cols, err := l.tableColumns(ctx, in.Table)
	if err != nil {
		return err
	}
	byName := map[string]column{}
	for _, c := range cols {
		byName[c.name] = c
	}
	for k := range in.Row {
		if _, ok := byName[k]; !ok {
			return fmt.Errorf("table %s has no column %s", in.Table, k)
		}
	}
	// offsets holds every time column's offsets and whether they count from time 0.
	type offsets struct {
		offs  Offsets
		fixed bool
	}
	timed := map[string]offsets{}
	for _, src := range []struct {
		key   string
		m     map[string]Offsets
		fixed bool
	}{{"times", in.Times, false}, {"fixed_times", in.FixedTimes, true}} {
		for k, offs := range src.m {
			c, ok := byName[k]
			if !ok || !(c.isTime() || c.isTimeArray()) {
				return fmt.Errorf("%s: table %s has no time column %s", src.key, in.Table, k)
			}
			if c.isTime() && len(offs) != 1 {
				return fmt.Errorf("%s: %s is one time: give one offset, not %d", src.key, k, len(offs))
			}
			if _, set := in.Row[k]; set {
				return fmt.Errorf("%s: column %s is also set in row", src.key, k)
			}
			if _, twice := timed[k]; twice {
				return fmt.Errorf("%s: column %s is in times and fixed_times", src.key, k)
			}
			timed[k] = offsets{offs, src.fixed}
		}
	}
	// The columns written: the row's, the time columns without a default of their own, and the
	// ids that make each row its own.
	var names []string
	for _, c := range cols {
		_, set := in.Row[c.name]
		_, offset := timed[c.name]
		idCol := (c.name == "event_id" || c.name == "request_id") && !c.hasDefault
		if set || offset || (c.isTime() && !c.hasDefault) || idCol {
			names = append(names, c.name)
		}
	}
	sort.Strings(names)
	var structure, list []string
	for _, n := range names {
		structure = append(structure, "`"+n+"` "+byName[n].typ)
		list = append(list, "`"+n+"`")
	}
	query := "INSERT INTO `" + in.Table + "` (" + strings.Join(list, ", ") + ") SELECT " + strings.Join(list, ", ") +
		" FROM format(JSONEachRow, {structure:String}, {data:String})"
	var data strings.Builder
	flush := func() error {
		if data.Len() == 0 {
			return nil
		}
		qctx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{
			"structure": escapeParam(strings.Join(structure, ", ")), "data": escapeParam(data.String())}))
		if err := l.conn.Exec(qctx, query); err != nil {
			return fmt.Errorf("insert into %s: %w", in.Table, err)
		}
		data.Reset()
		return nil
	}
	for i := 0; i < in.Count; i++ {
		at := t0.Add(in.At.D() + time.Duration(i)*in.Every.D())
		row := map[string]any{}
		for k, v := range in.Row {
			row[k] = substitute(v, i)
		}
		for _, n := range names {
			if _, set := row[n]; set {
				continue
			}
			c := byName[n]
			base := at
			if timed[n].fixed {
				base = t0
			}
			switch {
			case c.isTimeArray():
				ts := []string{}
				for _, d := range timed[n].offs {
					ts = append(ts, timeText(c.typ, base.Add(d.D())))
				}
				row[n] = ts
			case c.isTime():
				off := time.Duration(0)
				if o := timed[n].offs; len(o) == 1 {
					off = o[0].D()
				}
				row[n] = timeText(c.typ, base.Add(off))
			case n == "event_id" || n == "request_id":
				row[n] = fmt.Sprintf("input%d-row%d", j, i)
			}
		}
		line, err := json.Marshal(row)
		if err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
		data.Write(line)
		data.WriteByte('\n')
		if (i+1)%insertRows == 0 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// paramEscaper writes a String query parameter's value as the server reads it over the native
// protocol: in ClickHouse's escaped (TabSeparated) form, where a backslash starts an escape.
var paramEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\t", `\t`)

func escapeParam(s string) string { return paramEscaper.Replace(s) }

// substitute replaces ${i} in string values (also inside lists and maps) with the row's index.
func substitute(v any, i int) any {
	switch x := v.(type) {
	case string:
		return indexRE.ReplaceAllString(x, fmt.Sprint(i))
	case []any:
		out := make([]any, len(x))
		for k, e := range x {
			out[k] = substitute(e, i)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = substitute(e, i)
		}
		return out
	default:
		return v
	}
}

// timeText writes t as JSONEachRow reads a DateTime (seconds) or DateTime64 (microseconds here).
func timeText(typ string, t time.Time) string {
	if strings.Contains(typ, "DateTime64") {
		return t.UTC().Format("2006-01-02 15:04:05.000000")
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}
