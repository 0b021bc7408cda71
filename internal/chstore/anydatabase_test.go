package chstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/chstore/chstoretest"
)

// Every view and parameterized view of a migrated database reads by its qualified name from a
// connection whose current database is `default`, as Grafana's and clickhouse-client's are: the
// migrations call parameterized views by bare names, which ClickHouse resolves in the reader's
// database ("Unknown table function request_facts_window" before QualifyViews). Qualifying again
// changes nothing.
func TestViewsReadFromAnyDatabase(t *testing.T) {
	t.Parallel()
	conn, cfg := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	other := cfg
	other.Database = "default"
	def, err := chstore.Open(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	now := time.Now()
	views, err := chstoretest.ReadEveryView(ctx, def, cfg.Database, now.Add(-time.Hour), now)
	if err != nil {
		t.Fatalf("from database default: %v", err)
	}
	if want := len(chstore.ParameterizedViews) + len(chstore.MainViews) + 2; len(views) != want {
		t.Errorf("read %d views %v, want %d (the parameterized ones, request_facts and engine_timeline)", len(views), views, want)
	}
	var n uint64
	if err := def.QueryRow(ctx, "SELECT count() FROM `"+cfg.Database+"`.request_facts").Scan(&n); err != nil {
		t.Errorf("SELECT count() FROM %s.request_facts from database default: %v", cfg.Database, err)
	}
	again, err := chstore.QualifyViews(ctx, conn, cfg.Database)
	if err != nil || len(again) != 0 {
		t.Errorf("QualifyViews on a qualified database recreated %v, %v; want nothing", again, err)
	}
}
