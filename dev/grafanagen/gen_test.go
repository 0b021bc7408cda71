package grafanagen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/dev/testclock"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/panels"
	"github.com/servescope/servescope/services/detector/alerting"
	"github.com/servescope/servescope/services/detector/slo"
)

// repoPath is a path relative to the repository root (this package is two levels below it).
func repoPath(p string) string { return filepath.Join("..", "..", filepath.FromSlash(p)) }

// TestDashboardIsCurrent fails when a panel file changed and the dashboard was not regenerated.
func TestDashboardIsCurrent(t *testing.T) {
	want, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(repoPath(Path))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what deploy/console/panels generate: run go run ./dev/cmd/grafanagen from the repository root", Path)
	}
}

// panelJSON is one panel of the committed dashboard.
type panelJSON struct {
	Type       string `json:"type"`
	ID         int    `json:"id"`
	Title      string `json:"title"`
	Datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID  string `json:"refId"`
		RawSQL string `json:"rawSql"`
		Format int    `json:"format"`
	} `json:"targets"`
	FieldConfig struct {
		Overrides []struct {
			Matcher struct {
				ID      string `json:"id"`
				Options string `json:"options"`
			} `json:"matcher"`
			Properties []struct {
				ID    string `json:"id"`
				Value any    `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
}

// annotationJSON is one annotation query of the committed dashboard.
type annotationJSON struct {
	Name   string `json:"name"`
	Target struct {
		RawSQL string `json:"rawSql"`
	} `json:"target"`
}

// dashboardFile is the part of the committed dashboard the tests read.
type dashboardFile struct {
	UID        string      `json:"uid"`
	Panels     []panelJSON `json:"panels"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
			// Query is the query variables' query, a textbox variable's default value.
			Query any `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []annotationJSON `json:"list"`
	} `json:"annotations"`
}

func readDashboard(t *testing.T) dashboardFile {
	t.Helper()
	b, err := os.ReadFile(repoPath(Path))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboardFile
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", Path, err)
	}
	return d
}

// TestDashboardNamesTheConsolePanels reads the committed file as Grafana would and checks that it
// holds the console's panels, in the console's order, each with the SQL rendered from the same
// panel file (series as target A, baseline and threshold as target B) on the provisioned data
// source, every filter as a variable, and every panel's version marks as an annotation.
func TestDashboardNamesTheConsolePanels(t *testing.T) {
	ps, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	d := readDashboard(t)
	var titles []string
	ids := map[int]bool{}
	i := 0
	for _, dp := range d.Panels {
		if ids[dp.ID] {
			t.Errorf("panel id %d used twice", dp.ID)
		}
		ids[dp.ID] = true
		if dp.Type != "timeseries" {
			continue
		}
		titles = append(titles, dp.Title)
		if i >= len(ps) {
			continue
		}
		p := ps[i]
		i++
		if dp.Title != p.Title {
			t.Errorf("panel %d: title %q, the console's is %q", i, dp.Title, p.Title)
			continue
		}
		if dp.Datasource.Type != PluginType || dp.Datasource.UID != DatasourceUID {
			t.Errorf("%s: data source %+v", p.Name, dp.Datasource)
		}
		if len(dp.Targets) != 2 {
			t.Errorf("%s: %d targets, want 2", p.Name, len(dp.Targets))
			continue
		}
		for j, k := range []panels.Kind{panels.SeriesQuery, panels.BaselineQuery} {
			want, err := p.SQL(k, panels.Grafana)
			if err != nil {
				t.Fatal(err)
			}
			if got := dp.Targets[j]; got.RawSQL != strings.TrimSpace(want) || got.Format != 0 {
				t.Errorf("%s: target %s is not the panel file's %s query:\n%s", p.Name, got.RefID, k, got.RawSQL)
			}
		}
	}
	if i != len(ps) || len(titles) != len(ps) {
		t.Errorf("dashboard panels %q, the console has %d panels", titles, len(ps))
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	if want := append(slices.Clone(panels.Filters), ConsoleURLVariable); !slices.Equal(vars, want) {
		t.Errorf("variables %v, want the console's filters and the console's URL %v", vars, want)
	}
	var marks int
	for _, p := range ps {
		if p.HasQuery(panels.MarksQuery) {
			marks++
		}
	}
	alerts := slices.IndexFunc(d.Annotations.List, func(a annotationJSON) bool { return a.Target.RawSQL == strings.TrimSpace(alertsSQL) })
	if len(d.Annotations.List) != marks+1 || marks == 0 || alerts < 0 {
		t.Errorf("%d annotations for %d panels with marks and the alerts (found: %v)", len(d.Annotations.List), marks, alerts >= 0)
	}
	// The slowest requests' table: its request ids open their page in the console.
	ti := slices.IndexFunc(d.Panels, func(x panelJSON) bool { return x.Type == "table" })
	if ti < 0 {
		t.Fatal("no table of requests")
	}
	link := ""
	for _, o := range d.Panels[ti].FieldConfig.Overrides {
		if o.Matcher.Options == "request_id" {
			for _, p := range o.Properties {
				if p.ID == "links" {
					if ls, ok := p.Value.([]any); ok && len(ls) == 1 {
						link, _ = ls[0].(map[string]any)["url"].(string)
					}
				}
			}
		}
	}
	if link != RequestLink || !strings.HasPrefix(link, "${console_url}/request/${__value.raw") || len(d.Panels[ti].Targets) != 1 ||
		d.Panels[ti].Targets[0].RawSQL != strings.TrimSpace(slowestSQL) {
		t.Errorf("request table: link %q, targets %+v", link, d.Panels[ti].Targets)
	}
}

// grafanaQuery is one dashboard query with the variables and macros grafana-clickhouse-datasource
// and Grafana would give it.
type grafanaQuery struct {
	from, to time.Time
	interval time.Duration
	// vars are the dashboard variables' values; absent or "" is "All".
	vars map[string]string
}

var (
	macroRE = regexp.MustCompile(`\$__(timeFilter|timeInterval)\(([^)]*)\)|\$__(fromTime|toTime|interval_s)\b`)
	varRE   = regexp.MustCompile(`\$\{([a-z]+):sqlstring\}`)
)

// expand writes sql as the data source sends it to ClickHouse. Grafana interpolates the
// variables first: format sqlstring quotes a value and doubles its single quotes, and "All" is
// the custom all value ” written as it is. The plugin then expands its macros as
// grafana/clickhouse-datasource pkg/macros/macros.go does: times as toDateTime(unix seconds),
// $__timeFilter(c) as c >= from AND c <= to, $__timeInterval(c) as
// toStartOfInterval(toDateTime(c), INTERVAL n second).
func (g grafanaQuery) expand(sql string) (string, error) {
	sql = varRE.ReplaceAllStringFunc(sql, func(m string) string {
		v := g.vars[varRE.FindStringSubmatch(m)[1]]
		if v == "" {
			return "''"
		}
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	})
	at := func(t time.Time) string { return fmt.Sprintf("toDateTime(%d)", t.Unix()) }
	step := int(math.Max(g.interval.Seconds(), 1))
	sql = macroRE.ReplaceAllStringFunc(sql, func(m string) string {
		s := macroRE.FindStringSubmatch(m)
		switch s[1] + s[3] {
		case "timeFilter":
			return fmt.Sprintf("%[1]s >= %[2]s AND %[1]s <= %[3]s", s[2], at(g.from), at(g.to))
		case "timeInterval":
			return fmt.Sprintf("toStartOfInterval(toDateTime(%s), INTERVAL %d second)", s[2], step)
		case "fromTime":
			return at(g.from)
		case "toTime":
			return at(g.to)
		default:
			return fmt.Sprint(step)
		}
	})
	if strings.Contains(sql, "$") {
		return "", fmt.Errorf("a macro or variable left unexpanded:\n%s", sql)
	}
	return sql, nil
}

// run runs q and returns its column names and row count.
func run(ctx context.Context, conn driver.Conn, q string) ([]string, int, error) {
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	return rows.Columns(), n, rows.Err()
}

// TestDashboardSQLOnClickHouse runs every query of the dashboard, expanded as Grafana and the
// data source expand it, against real ClickHouse holding a normal day and an embedding model
// switch: each returns rows and the columns its panel draws (t, the split column, the series; t,
// the baseline and the threshold; t and text for the marks), the same columns as the console's
// query from the same panel file, and the variables' queries list the seeded model, app and engine.
func TestDashboardSQLOnClickHouse(t *testing.T) {
	conn, ch := testenv.ClickHouse(t)
	ctx := context.Background()
	// The SLO and cost panels read the detector's SLOs and engines file: the built-in SLOs and one
	// price for every engine.
	slos, err := slo.LoadBuiltin(builtin.SLOs, builtin.SLOsDir, builtin.RepoDir)
	if err != nil {
		t.Fatal(err)
	}
	price := 1.5
	if err := slo.Sync(ctx, ch, conn, slos, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := slo.SyncEngines(ctx, ch, conn, &slo.Engines{Currency: "USD", Default: &slo.EngineSetting{PricePerHour: &price}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	// The normal day follows the time of day: the instant comes from testclock (pinned by scripts/test).
	now := testclock.EvalTime(t, 0)
	g := synth.New(11)
	tr := g.Normal(now.Add(-26*time.Hour), now.Add(-20*time.Minute))
	switched := synth.NormalShape()
	switched.EmbeddingModelVersion, switched.TopScore = "e5-large@2", 0.3
	tr.Add(g.Requests(now.Add(-20*time.Minute), now, synth.Constant(0.5), switched))
	tr.Add(g.Samples(now.Add(-20*time.Minute), now, synth.NormalEngine(synth.NormalRate, synth.NormalE2ES)))
	if err := synth.Insert(ctx, conn, tr); err != nil {
		t.Fatal(err)
	}
	// synth records no citation check; the apps that make one say for every answer whether a
	// citation is missing.
	if err := conn.Exec(ctx, "ALTER TABLE app_records UPDATE citations_missing = (cityHash64(request_id) % 37 = 0) WHERE 1 SETTINGS mutations_sync = 2"); err != nil {
		t.Fatal(err)
	}
	// synth records no prompt length; the engine's usage gives one for every answer.
	if err := conn.Exec(ctx, "ALTER TABLE requests UPDATE prompt_tokens = toUInt32(40 + cityHash64(request_id) % 12) WHERE status_code < 400 SETTINGS mutations_sync = 2"); err != nil {
		t.Fatal(err)
	}
	// The detector's alerts: an episode that fired and resolved, one that fires, one that stayed
	// pending, and one of another model.
	store := alerting.CHStore{Conn: conn}
	model := synth.NormalShape().Model
	episode := func(rule, m string, states []alerting.State, at ...time.Time) {
		labels := map[string]string{"alertname": rule, "severity": "warning", "model": m}
		a := &alerting.Alert{Rule: rule, Fingerprint: alerting.Fingerprint(labels), Labels: labels, Severity: "warning",
			ActiveAt: at[0], Annotations: map[string]string{"summary": rule + " for " + m}}
		for i, st := range states {
			a.State = st
			if st == alerting.StateFiring {
				a.FiredAt = at[i]
			}
			if st == alerting.StateInactive {
				a.ResolvedAt = at[i]
			}
			if err := store.Save(ctx, at[i], []*alerting.Alert{a}); err != nil {
				t.Fatal(err)
			}
		}
	}
	episode("latency_p95", model, []alerting.State{alerting.StatePending, alerting.StateFiring, alerting.StateInactive},
		now.Add(-50*time.Minute), now.Add(-48*time.Minute), now.Add(-30*time.Minute))
	episode("truncated_outputs", model, []alerting.State{alerting.StatePending, alerting.StateFiring}, now.Add(-10*time.Minute), now.Add(-8*time.Minute))
	episode("server_errors", model, []alerting.State{alerting.StatePending}, now.Add(-5*time.Minute))
	episode("latency_p95", "other-model", []alerting.State{alerting.StatePending, alerting.StateFiring}, now.Add(-20*time.Minute), now.Add(-19*time.Minute))

	d := readDashboard(t)
	ps, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	all := grafanaQuery{from: now.Add(-time.Hour), to: now, interval: time.Minute}
	oneModel := all
	oneModel.vars = map[string]string{"model": synth.NormalShape().Model}
	noModel := all
	noModel.vars = map[string]string{"model": "no such model' OR 1=1 --"}
	console := panels.Request{From: all.from, To: all.to, Step: all.interval}

	for _, p := range ps {
		dp := d.Panels[slices.IndexFunc(d.Panels, func(x panelJSON) bool { return x.Type == "timeseries" && x.Title == p.Title })]
		want := [][]string{{"t"}, {"t"}}
		if p.Split != "" {
			want[0] = append(want[0], p.Split)
		}
		for _, s := range p.Series {
			want[0] = append(want[0], s.Column)
		}
		for _, s := range p.Baseline {
			want[1] = append(want[1], s.Column)
		}
		if p.Threshold != nil {
			want[1] = append(want[1], p.Threshold.Column)
		}
		for j, k := range []panels.Kind{panels.SeriesQuery, panels.BaselineQuery} {
			q, err := all.expand(dp.Targets[j].RawSQL)
			if err != nil {
				t.Fatalf("%s %s: %v", p.Name, k, err)
			}
			cols, n, err := run(ctx, conn, q)
			if err != nil {
				t.Errorf("%s %s: %v\n%s", p.Name, k, err, q)
				continue
			}
			if !sameSet(cols, want[j]) {
				t.Errorf("%s %s: columns %v, the panel draws %v", p.Name, k, cols, want[j])
			}
			if n == 0 {
				t.Errorf("%s %s: no rows over a seeded hour", p.Name, k)
			}
			cq, err := p.SQL(k, panels.Console)
			if err != nil {
				t.Fatal(err)
			}
			ccols, _, err := run(chstore.WithParams(ctx, p.Params(console)), conn, cq)
			if err != nil {
				t.Errorf("%s %s: the console's query: %v", p.Name, k, err)
			} else if !slices.Equal(ccols, cols) {
				t.Errorf("%s %s: Grafana's columns %v, the console's %v", p.Name, k, cols, ccols)
			}
		}
		// The model variable reaches the query as a quoted value: a hostile one matches nothing.
		if strings.Contains(dp.Targets[0].RawSQL, "${model:sqlstring}") {
			for _, c := range []struct {
				g    grafanaQuery
				some bool
			}{{oneModel, true}, {noModel, false}} {
				q, err := c.g.expand(dp.Targets[0].RawSQL)
				if err != nil {
					t.Fatal(err)
				}
				_, n, err := run(ctx, conn, q)
				if err != nil {
					t.Errorf("%s with model %q: %v", p.Name, c.g.vars["model"], err)
				} else if (n > 0) != c.some {
					t.Errorf("%s with model %q: %d rows", p.Name, c.g.vars["model"], n)
				}
			}
		}
	}

	for _, a := range d.Annotations.List {
		q, err := all.expand(a.Target.RawSQL)
		if err != nil {
			t.Fatal(err)
		}
		cols, n, err := run(ctx, conn, q)
		if err != nil {
			t.Errorf("annotation %s: %v", a.Name, err)
			continue
		}
		if a.Target.RawSQL == strings.TrimSpace(alertsSQL) {
			// The two episodes that fired (the resolved one and the one firing), not the one that
			// stayed pending; the other model's alert only without a model filter.
			if !slices.Equal(cols, []string{"time", "timeEnd", "text", "tags"}) || n != 3 {
				t.Errorf("alerts annotation: columns %v, %d rows; want time, timeEnd, text, tags and 3 episodes", cols, n)
			}
			q, _ := oneModel.expand(a.Target.RawSQL)
			if _, n, err := run(ctx, conn, q); err != nil || n != 2 {
				t.Errorf("alerts annotation for model %s: %d rows, %v; want 2", oneModel.vars["model"], n, err)
			}
			continue
		}
		if !slices.Equal(cols, []string{"t", "text"}) || n != 1 {
			t.Errorf("annotation %s: columns %v, %d rows; want t, text and the one switch", a.Name, cols, n)
		}
	}
	// The requests' table lists the slowest requests, each with the arrival its link carries.
	ti := slices.IndexFunc(d.Panels, func(x panelJSON) bool { return x.Type == "table" })
	q, err := oneModel.expand(d.Panels[ti].Targets[0].RawSQL)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, q)
	if err != nil {
		t.Fatalf("requests table: %v", err)
	}
	n := 0
	for rows.Next() {
		n++
		vals := make([]any, len(rows.Columns()))
		for i, c := range rows.ColumnTypes() {
			vals[i] = reflect.New(c.ScanType()).Interface()
		}
		if err := rows.Scan(vals...); err != nil {
			t.Fatal(err)
		}
		id, arrival := *(vals[0].(*string)), *(vals[1].(*string))
		var found uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM requests WHERE request_id = {id:String} AND arrival_ts = parseDateTime64BestEffort({a:String}, 6, 'UTC')",
			clickhouse.Named("id", id), clickhouse.Named("a", arrival)).Scan(&found); err != nil || found == 0 {
			t.Errorf("request %s arriving at %q is not in requests: %v", id, arrival, err)
		}
	}
	rows.Close()
	if n != 20 {
		t.Errorf("requests table: %d rows, want the 20 slowest", n)
	}

	seededValue := map[string]string{"model": synth.NormalShape().Model, "app": synth.NormalShape().App}
	for _, v := range d.Templating.List {
		qm, ok := v.Query.(map[string]any)
		if !ok {
			if v.Name != ConsoleURLVariable || v.Query != DefaultConsoleURL {
				t.Errorf("variable %s: query %v", v.Name, v.Query)
			}
			continue
		}
		raw, _ := qm["rawSql"].(string)
		q, err := all.expand(raw)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(ctx, q)
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
			continue
		}
		var values []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			values = append(values, s)
		}
		rows.Close()
		if len(values) == 0 || (seededValue[v.Name] != "" && !slices.Contains(values, seededValue[v.Name])) {
			t.Errorf("variable %s: values %q", v.Name, values)
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
