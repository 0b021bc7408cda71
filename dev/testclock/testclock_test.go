package testclock

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestEvalTime(t *testing.T) {
	now := time.Date(2026, 12, 1, 19, 31, 59, 0, time.UTC)
	day := func(d, h, m, s int) time.Time { return time.Date(2026, 12, d, h, m, s, 0, time.UTC) }
	for _, tc := range []struct {
		pin    string
		lag    time.Duration
		want   time.Time
		pinned bool
		err    string
	}{
		{"", 2 * time.Hour, day(1, 17, 0, 0), false, ""},
		{"", time.Hour, day(1, 18, 0, 0), false, ""},
		{"18", 2 * time.Hour, day(1, 0, 0, 0).Add(-6 * time.Hour), true, ""}, // 18:00 today is not 2 h old yet
		{"18", time.Hour, day(1, 18, 0, 0), true, ""},
		{"00", 2 * time.Hour, day(1, 0, 0, 0), true, ""},
		{"06", 2 * time.Hour, day(1, 6, 0, 0), true, ""},
		{" 23:59:30 ", 2 * time.Hour, day(1, 0, 0, 0).Add(-30 * time.Second), true, ""},
		{"17:31:59", 2 * time.Hour, day(1, 17, 31, 59), true, ""},
		{"17:32", 2 * time.Hour, day(1, 0, 0, 0).Add(-6*time.Hour - 28*time.Minute), true, ""},
		{"2026-12-01T00:00:30Z", 2 * time.Hour, day(1, 0, 0, 30), true, ""},
		{"2026-12-01T01:00:30+01:00", 2 * time.Hour, day(1, 0, 0, 30), true, ""},
		{"2026-12-01T18:00:00Z", 2 * time.Hour, time.Time{}, false, "must lie between"},
		{"2026-11-26T00:00:00Z", time.Hour, time.Time{}, false, "must lie between"},
		{"2026-12-01T00:00:30", time.Hour, time.Time{}, false, "RFC 3339"},
		{"24", time.Hour, time.Time{}, false, "HH:MM:SS"},
		{"12:60", time.Hour, time.Time{}, false, "HH:MM:SS"},
		{"1:2:3:4", time.Hour, time.Time{}, false, "HH:MM:SS"},
		{"noon", time.Hour, time.Time{}, false, "HH:MM:SS"},
		{"12:", time.Hour, time.Time{}, false, "HH:MM:SS"},
		{"-1", time.Hour, time.Time{}, false, "HH:MM:SS"},
	} {
		got, pinned, err := evalTime(now, tc.lag, tc.pin)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("pin %q: %v, %v; want an error with %q", tc.pin, got, err, tc.err)
			}
			continue
		}
		if err != nil || !got.Equal(tc.want) || pinned != tc.pinned {
			t.Errorf("pin %q lag %s: %s pinned=%v %v; want %s pinned=%v", tc.pin, tc.lag, got.Format(time.RFC3339), pinned, err, tc.want.Format(time.RFC3339), tc.pinned)
		}
		if got.After(now.Add(-tc.lag)) || got.Before(now.Add(-tc.lag-24*time.Hour)) {
			t.Errorf("pin %q: %s is not within a day before now − lag", tc.pin, got.Format(time.RFC3339))
		}
	}
}

// entry is a line of tests.txt.
type entry struct{ pkg, test string }

func readList(t *testing.T) map[entry]bool {
	t.Helper()
	f, err := os.Open("tests.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	list := map[entry]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case len(fields) == 3 && strings.HasPrefix(fields[0], "./") && strings.HasPrefix(fields[1], "Test") &&
			(fields[2] == "all" || fields[2] == "hours"):
			list[entry{fields[0], fields[1]}] = true
		default:
			t.Fatalf("tests.txt:%d: %q, want ./package TestName all|hours [# why]", n, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return list
}

// TestListNamesEveryCaller keeps tests.txt, which scripts/test reads, equal to the set of test
// functions that call EvalTime; and, since scripts/test selects them with one -run pattern across
// their packages, no listed name may name a test of another listed package.
func TestListNamesEveryCaller(t *testing.T) {
	list := readList(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
	const importPath = "github.com/servescope/servescope/dev/testclock"
	callers := map[entry]bool{}
	tests := map[string]map[string]bool{} // package → its Test functions
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := "./" + filepath.ToSlash(rel)
		local := ""
		for _, imp := range file.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == importPath {
				local = "testclock"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil {
				continue
			}
			isTest := strings.HasPrefix(fn.Name.Name, "Test")
			if isTest {
				if tests[pkg] == nil {
					tests[pkg] = map[string]bool{}
				}
				tests[pkg][fn.Name.Name] = true
			}
			if local == "" || !callsEvalTime(fn.Body, local) {
				continue
			}
			if !isTest {
				t.Errorf("%s: %s calls testclock.EvalTime; call it in the test function itself, so that tests.txt can name it",
					fset.Position(fn.Pos()), fn.Name.Name)
				continue
			}
			callers[entry{pkg, fn.Name.Name}] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for e := range callers {
		if !list[e] {
			t.Errorf("%s %s calls testclock.EvalTime but tests.txt does not name it", e.pkg, e.test)
		}
	}
	for e := range list {
		if !callers[e] {
			t.Errorf("tests.txt names %s %s, which does not call testclock.EvalTime (or does not exist)", e.pkg, e.test)
		}
		for other := range list {
			if other.pkg != e.pkg && tests[other.pkg][e.test] {
				t.Errorf("tests.txt names %s in %s, and %s has a test of that name: the pinned runs would run both", e.test, e.pkg, other.pkg)
			}
		}
	}
	if len(callers) == 0 {
		t.Fatal("no test calls testclock.EvalTime: the walk found nothing")
	}
}

func callsEvalTime(body *ast.BlockStmt, local string) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "EvalTime" {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == local {
				found = true
			}
		}
		return !found
	})
	return found
}

// FuzzEvalTime: any value of the variable either fails with an error or pins a time at least the
// lag before now and no older than a day more (a time of day) or MaxAge (an instant).
func FuzzEvalTime(f *testing.F) {
	for _, s := range []string{"", "18", "06", "23:59:30", "2026-12-01T00:00:30Z", "24", "1:2:3:4", "-1", " 7 ", "12:60", "2026-12-01T00:00:30+14:00"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 1, 19, 31, 59, 0, time.UTC)
	f.Fuzz(func(t *testing.T, pin string) {
		const lag = 2 * time.Hour
		at, pinned, err := evalTime(now, lag, pin)
		if err != nil {
			return
		}
		oldest := now.Add(-lag - 24*time.Hour)
		if strings.Contains(pin, "T") {
			oldest = now.Add(-MaxAge)
		}
		if at.After(now.Add(-lag)) || at.Before(oldest) || at.Location() != time.UTC || pinned != (strings.TrimSpace(pin) != "") {
			t.Fatalf("pin %q: %s pinned=%v, want UTC within [%s, %s]", pin, at.Format(time.RFC3339Nano), pinned, oldest.Format(time.RFC3339), now.Add(-lag).Format(time.RFC3339))
		}
	})
}
