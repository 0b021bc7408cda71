package security

import (
	"context"
	"github.com/servescope/servescope/internal/access/accesstest"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/services/detector/alerting"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/detector/service"
)

// hostileLabels are values that would break out of a string literal, or look like a query
// parameter, if a query ever spliced them into its text.
var hostileLabels = []string{
	`x'); DROP TABLE requests; --`,
	`\' OR 1=1 --`,
	`{now:String}`,
	"m\" UNION ALL SELECT name FROM system.users --",
	"`requests`; TRUNCATE TABLE alerts",
}

// TestDetectorSQLBindsValues evaluates every built-in rule as the least-privilege detector user
// over requests whose model names are SQL, then stores and reloads alerts labelled with them: every
// query must run, the values must come back unchanged, and no table may be touched.
func TestDetectorSQLBindsValues(t *testing.T) {
	t.Parallel()
	a := accesstest.Access(t)
	_, admin := accesstest.Server(t, a)
	ctx := context.Background()
	root := accesstest.Open(t, admin)
	detector := accesstest.Open(t, accesstest.As(admin, a.Detector))

	now := time.Now().UTC().Truncate(time.Second)
	b, err := root.PrepareBatch(ctx, "INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, "+
		"endpoint, stream, status_code, ttft_s, tpot_s, e2e_s, app)")
	if err != nil {
		t.Fatal(err)
	}
	const perModel = 25
	for i, model := range hostileLabels {
		for j := range perModel {
			arrival := now.Add(-3*time.Minute + time.Duration(j)*time.Second)
			ttft, tpot, e2e := 0.2+float64(j)/100, 0.02, 1.5
			status := uint16(200)
			if j%5 == 0 {
				status = 500
			}
			id := model + "/" + string(rune('a'+i)) + string(rune('a'+j))
			if err := b.Append(id, id, arrival, arrival, arrival.Add(2*time.Second), model, "/v1/chat/completions",
				true, status, &ttft, &tpot, &e2e, model); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	wantRows := uint64(len(hostileLabels) * perModel)

	defs, err := service.LoadRules("")
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) == 0 {
		t.Fatal("no built-in rules")
	}
	seen := map[string]bool{}
	for _, def := range defs {
		r, err := rules.NewSQLRule(def, detector)
		if err != nil {
			t.Fatalf("prepare rule %s: %v", def.Name, err)
		}
		for _, h := range hostileLabels {
			if strings.Contains(r.Query(), h) {
				t.Fatalf("rule %s query contains data value %q", def.Name, h)
			}
		}
		samples, err := r.Eval(ctx, now)
		if err != nil {
			t.Fatalf("rule %s as the detector user: %v", def.Name, err)
		}
		for _, s := range samples {
			for _, v := range s.Labels {
				seen[v] = true
			}
		}
	}
	for _, h := range hostileLabels {
		if !seen[h] {
			t.Errorf("no rule returned the label value %q unchanged (labels seen: %v)", h, keys(seen))
		}
	}

	var alerts []*alerting.Alert
	for _, h := range hostileLabels {
		labels := map[string]string{"alertname": "latency_p95", "severity": "warning", "model": h, "metric": h}
		alerts = append(alerts, &alerting.Alert{
			Rule: "latency_p95", Fingerprint: alerting.Fingerprint(labels), Labels: labels,
			Annotations: map[string]string{"summary": h}, Severity: "warning", State: alerting.StateFiring,
			Value: 1, Baseline: 0.5, Threshold: 0.75, ActiveAt: now, FiredAt: now,
		})
	}
	store := alerting.CHStore{Conn: detector}
	if err := store.Save(ctx, now, alerts); err != nil {
		t.Fatalf("save alerts as the detector user: %v", err)
	}
	loaded, err := store.Load(ctx)
	if err != nil {
		t.Fatalf("load alerts as the detector user: %v", err)
	}
	byFP := map[string]*alerting.Alert{}
	for _, l := range loaded {
		byFP[l.Fingerprint] = l
	}
	for _, want := range alerts {
		got := byFP[want.Fingerprint]
		if got == nil {
			t.Fatalf("alert %q not loaded back", want.Labels["model"])
		}
		if !maps.Equal(got.Labels, want.Labels) || !maps.Equal(got.Annotations, want.Annotations) {
			t.Fatalf("alert came back as labels %v annotations %v, want %v %v", got.Labels, got.Annotations, want.Labels, want.Annotations)
		}
	}
	if n := accesstest.Count(t, root, "requests"); n != wantRows {
		t.Fatalf("requests has %d rows after the rules ran, want %d", n, wantRows)
	}
	if n := accesstest.Count(t, root, "alerts"); n != uint64(len(alerts)) {
		t.Fatalf("alerts has %d rows, want %d", n, len(alerts))
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// sqlCalls are the clickhouse-go driver.Conn / batch methods whose argument after ctx is SQL text.
var sqlCalls = map[string]bool{"Query": true, "QueryRow": true, "Exec": true, "PrepareBatch": true, "Select": true, "AsyncInsert": true}

// TestDetectorSQLIsConstant scans the Go code linked into the detector binary (its own packages, as
// `go list -deps` reports them): the SQL text of every ClickHouse call must be a constant (string
// literals, possibly joined with +) or a rule's prepared query (a field named query or its accessor Query(), built by
// rules.NewSQLRule from the rule file and its column-checked macros), never a value formatted into
// the text. Values go through clickhouse.WithParameters or batch Append.
func TestDetectorSQLIsConstant(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{.Dir}}{{end}}",
		"github.com/servescope/servescope/services/detector").Output()
	if err != nil {
		t.Fatalf("go list the detector's packages: %v", err)
	}
	var dirs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, dir, ok := strings.Cut(line, " ")
		if ok && strings.HasPrefix(path, "github.com/servescope/servescope/services/detector") {
			dirs = append(dirs, dir)
		}
	}
	if len(dirs) < 2 {
		t.Fatalf("go list found only %v: the scan no longer sees the detector's packages", dirs)
	}
	fset := token.NewFileSet()
	calls := 0
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || !sqlCalls[sel.Sel.Name] || len(call.Args) < 2 || !isCtx(call.Args[0]) {
					return true
				}
				arg := call.Args[1]
				if sel.Sel.Name == "Select" {
					if len(call.Args) < 3 {
						return true
					}
					arg = call.Args[2]
				}
				calls++
				if !constantSQL(arg) {
					t.Errorf("%s: %s's SQL is built at run time; bind values with clickhouse.WithParameters instead",
						fset.Position(arg.Pos()), sel.Sel.Name)
				}
				return true
			})
		}
	}
	if calls < 3 {
		t.Fatalf("found only %d ClickHouse calls in %v: the scan no longer sees the detector's queries", calls, dirs)
	}
}

func isCtx(e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	return ok && (id.Name == "ctx" || strings.HasSuffix(id.Name, "ctx") || strings.HasSuffix(id.Name, "Ctx"))
}

func constantSQL(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.BasicLit:
		return x.Kind == token.STRING
	case *ast.BinaryExpr:
		return x.Op == token.ADD && constantSQL(x.X) && constantSQL(x.Y)
	case *ast.ParenExpr:
		return constantSQL(x.X)
	case *ast.SelectorExpr:
		return x.Sel.Name == "query"
	case *ast.CallExpr:
		// The rule's prepared query through its accessor (SQLRule.Query), e.g. behind EXPLAIN.
		sel, ok := x.Fun.(*ast.SelectorExpr)
		return ok && sel.Sel.Name == "Query" && len(x.Args) == 0
	case *ast.Ident:
		// A package-level or local constant declared with const.
		return x.Obj != nil && x.Obj.Kind == ast.Con
	}
	return false
}
