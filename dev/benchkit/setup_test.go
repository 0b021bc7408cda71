package benchkit

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/service"
)

func TestOpenStreamsSetsUpTheStreamsAndCloseDeletesThemAndTheSpool(t *testing.T) {
	testenv.NATS(t) // unreachable: skipped, or failed under SERVESCOPE_REQUIRE_INTEGRATION=1
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := "bench_" + RunID()
	s, err := OpenStreams(ctx, "benchkit-test", prefix, 64<<20, bus.DurableFor("bench-test", 100, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	if s.NATS.SubjectPrefix != prefix || s.Topology.Prefix != prefix || s.NATS.StreamMaxBytes != 64<<20 {
		t.Errorf("config %+v, topology %+v: want prefix %s and 64 MiB", s.NATS, s.Topology, prefix)
	}
	// A second connection sees what the setup step made.
	nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, s.Topology.Stream())
	if err != nil {
		t.Fatalf("events stream after OpenStreams: %v", err)
	}
	if got := st.CachedInfo().Config.MaxBytes; got != 64<<20 {
		t.Errorf("events stream max_bytes = %d, want %d", got, 64<<20)
	}
	if _, err := js.Stream(ctx, s.Topology.DLQStream()); err != nil {
		t.Errorf("dead-letter stream after OpenStreams: %v", err)
	}
	if _, err := js.Consumer(ctx, s.Topology.Stream(), "bench-test"); err != nil {
		t.Errorf("durable after OpenStreams: %v", err)
	}
	spool, err := s.Spool("benchkit-test")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(spool); err != nil || !fi.IsDir() {
		t.Fatalf("spool %s: %v", spool, err)
	}
	s.Close()
	closed = true
	if _, err := os.Stat(spool); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("spool %s after Close: %v, want it removed", spool, err)
	}
	for _, name := range []string{s.Topology.Stream(), s.Topology.DLQStream()} {
		if _, err := js.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("stream %s after Close: err %v, want ErrStreamNotFound", name, err)
		}
	}
}

func TestCreateDatabaseMigratesAndDropRemovesIt(t *testing.T) {
	cfg := testenv.ClickHouseConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := cfg
	admin.Database = "default"
	conn, err := chstore.Open(ctx, admin)
	if err != nil {
		testenv.Unavailable(t, "ClickHouse: %v", err)
	}
	defer conn.Close()
	exists := func(db string) bool {
		t.Helper()
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.databases WHERE name = ?", db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	name := "bench_test_" + RunID()
	db, err := CreateDatabase(ctx, cfg, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if db.Config.Database != name {
		t.Errorf("Config.Database = %q, want %q", db.Config.Database, name)
	}
	var rows uint64
	if err := db.Conn.QueryRow(ctx, "SELECT count() FROM requests").Scan(&rows); err != nil {
		t.Errorf("the migrated table requests through Conn: %v", err)
	}
	if err := db.Drop(); err != nil {
		t.Fatal(err)
	}
	if exists(name) {
		t.Errorf("database %s still there after Drop", name)
	}

	// A migration that fails half-way leaves nothing behind.
	failed := "bench_test_" + RunID()
	boom := errors.New("boom")
	_, err = CreateDatabase(ctx, cfg, failed, func(ctx context.Context, c config.ClickHouse) error {
		if err := chstore.Migrate(ctx, c); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("CreateDatabase with a failing migration: err %v, want boom", err)
	}
	if exists(failed) {
		t.Errorf("database %s left behind by a failed migration", failed)
	}
}

func TestListsAreParsedOrRefusedNamingTheFlag(t *testing.T) {
	n, err := PositiveInts("rates", "100, 1000", "rate")
	if err != nil || len(n) != 2 || n[0] != 100 || n[1] != 1000 {
		t.Errorf("PositiveInts(100, 1000) = %v, %v", n, err)
	}
	d, err := PositiveDurations("flush", "1s,200ms")
	if err != nil || len(d) != 2 || d[0] != time.Second || d[1] != 200*time.Millisecond {
		t.Errorf("PositiveDurations(1s,200ms) = %v, %v", d, err)
	}
	for _, c := range []struct {
		list string
		ints bool
		want string
	}{
		{"100,0", true, `--rates: "0" is not a positive rate`},
		{"100,x", true, `--rates: "x" is not a positive rate`},
		{"", true, `--rates: "" is not a positive rate`},
		{"1s,-2s", false, `--flush: "-2s" is not a positive duration`},
		{"1s,,2s", false, `--flush: "" is not a positive duration`},
	} {
		if c.ints {
			_, err = PositiveInts("rates", c.list, "rate")
		} else {
			_, err = PositiveDurations("flush", c.list)
		}
		var ee *service.ExitError
		if !errors.As(err, &ee) || ee.Code != 2 || ee.Err == nil || ee.Err.Error() != c.want {
			t.Errorf("%q: err %v, want the usage error %q", c.list, err, c.want)
		}
	}
}

func TestVerdictExitCodes(t *testing.T) {
	if err := Verdict(true, nil); err != nil {
		t.Errorf("met: %v, want nil", err)
	}
	var ee *service.ExitError
	if err := Verdict(false, nil); !errors.As(err, &ee) || ee.Code != 1 || ee.Err != nil {
		t.Errorf("missed: %v, want exit 1 without an error", err)
	}
	boom := errors.New("boom")
	if err := Verdict(true, boom); !errors.As(err, &ee) || ee.Code != 2 || !errors.Is(ee.Err, boom) {
		t.Errorf("failed: %v, want exit 2 with the error", err)
	}
}
