package chstore_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
)

// TestReadmeSQLRuns runs every ad-hoc query of the README's symptom table against a migrated
// database, so the documented queries keep matching the schema.
func TestReadmeSQLRuns(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(raw), -1)
	if len(blocks) < 7 {
		t.Fatalf("found %d SQL blocks in README.md, want the symptom table's", len(blocks))
	}
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, b := range blocks {
		for _, q := range strings.Split(b[1], ";") {
			if q = strings.TrimSpace(q); q == "" {
				continue
			}
			rows, err := conn.Query(ctx, q)
			if err != nil {
				t.Errorf("README query fails: %v\n%s", err, q)
				continue
			}
			rows.Close()
		}
	}
}
