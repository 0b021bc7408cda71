package docs

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
)

// Pages are the Markdown pages of docs/, by path relative to it ("sql-cookbook.md",
// "operations/backups.md").
//
//go:embed *.md operations
var Pages embed.FS

// sqlBlock matches a ```sql block's body.
var sqlBlock = regexp.MustCompile("(?s)```sql\n(.*?)```")

// Statements returns the SQL statements of the ```sql blocks of the docs page (a path relative
// to docs/, e.g. "sql-cookbook.md"), in order, each without its terminating semicolon. It is the
// one reader of the documented SQL: the tests that run it and the benchmark that times it call it.
func Statements(page string) ([]string, error) {
	raw, err := fs.ReadFile(Pages, page)
	if err != nil {
		return nil, fmt.Errorf("docs page %s: %w", page, err)
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
		return nil, fmt.Errorf("docs page %s holds no ```sql block", page)
	}
	return out, nil
}

// CookbookPage holds the ready SQL users copy.
const CookbookPage = "sql-cookbook.md"

// SQLPages are the pages whose ```sql blocks a test runs: the cookbook's on a migrated database
// (internal/chstore), on two shards and as the console's account there (dev/e2e, dev/security),
// the backups page's on a server with a backup disk (docs). A ```sql block
// anywhere else fails TestSQLOnlyWhereItRuns.
var SQLPages = []string{CookbookPage, "operations/backups.md"}
