package migrations

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// TestStatementsSplitCleanly guards the x-multi-statement split: golang-migrate cuts files on ';',
// so a ';' inside a comment yields a comment-only "statement" that ClickHouse rejects as an empty
// query (this happened). Every piece must hold SQL besides comments.
func TestStatementsSplitCleanly(t *testing.T) {
	files, err := fs.Glob(FS, "*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations embedded: %v", err)
	}
	for _, f := range files {
		b, _ := fs.ReadFile(FS, f)
		for i, piece := range strings.Split(string(b), ";") {
			var sql []string
			for _, line := range strings.Split(piece, "\n") {
				if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
					sql = append(sql, l)
				}
			}
			if len(sql) == 0 && strings.TrimSpace(piece) != "" {
				t.Errorf("%s: piece %d after splitting on ';' is only comments: %q", f, i, piece)
			}
		}
	}
}

// TestPairs checks that every up migration has a down migration and the names follow
// golang-migrate's NNNNNN_name.(up|down).sql.
func TestPairs(t *testing.T) {
	re := regexp.MustCompile(`^(\d{6})_[a-z0-9_]+\.(up|down)\.sql$`)
	files, _ := fs.Glob(FS, "*.sql")
	seen := map[string]int{}
	for _, f := range files {
		m := re.FindStringSubmatch(f)
		if m == nil {
			t.Errorf("%s: not named NNNNNN_name.up.sql or .down.sql", f)
			continue
		}
		seen[strings.TrimSuffix(strings.TrimSuffix(f, ".up.sql"), ".down.sql")]++
	}
	for base, n := range seen {
		if n != 2 {
			t.Errorf("%s: has %d of up/down, want both", base, n)
		}
	}
}
