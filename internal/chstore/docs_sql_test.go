package chstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/docs"
)

// TestDocsSQLRuns runs every query of the SQL cookbook (docs/sql-cookbook.md) against a migrated
// database, so the documented queries keep matching the schema.
func TestDocsSQLRuns(t *testing.T) {
	t.Parallel()
	stmts, err := docs.Statements("sql-cookbook.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(stmts) < 10 {
		t.Fatalf("found %d statements in docs/sql-cookbook.md, want the symptom table's", len(stmts))
	}
	conn, _ := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, q := range stmts {
		rows, err := conn.Query(ctx, q)
		if err != nil {
			t.Errorf("docs/sql-cookbook.md query fails: %v\n%s", err, q)
			continue
		}
		rows.Close()
	}
}
