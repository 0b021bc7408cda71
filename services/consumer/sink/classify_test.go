package sink

import (
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/servescope/servescope/dev/testenv"
)

func exception(code int32, msg string) error {
	return fmt.Errorf("insert 10 rows into requests: %w", &clickhouse.Exception{Code: code, Name: "DB::Exception", Message: msg})
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Class
		code int32
	}{
		{"too many partitions in one block", exception(252, "Too many partitions for single INSERT block (more than 100). The limit is controlled by 'max_partitions_per_insert_block' setting."), Split, 252},
		{"too many parts: merges behind", exception(252, "Too many parts (3001 with average size of 1.00 MiB) in table 'db.requests'. Merges are processing significantly slower than inserts"), Retry, 252},
		{"constraint", exception(469, "Constraint `c` for table db.app_records is violated at row 2"), Refuse, 469},
		{"memory", exception(241, "Memory limit (total) exceeded"), Retry, 241},
		{"missing column", exception(16, "No such column ttft_s in table db.requests"), Retry, 16},
		{"grant revoked", exception(497, "servescope_consumer: Not enough privileges"), Retry, 497},
		{"unknown code", exception(4242, "something new"), Unknown, 4242},
		{"connection refused", fmt.Errorf("prepare batch: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), Retry, 0},
		{"EOF", fmt.Errorf("insert: %w", io.EOF), Retry, 0},
		{"timeout", fmt.Errorf("insert: %w", context.DeadlineExceeded), Retry, 0},
		{"pool exhausted", clickhouse.ErrAcquireConnTimeout, Retry, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Classify(tc.err)
			if v.Class != tc.want || v.Code != tc.code {
				t.Errorf("Classify(%v) = %v code %d, want %v code %d", tc.err, v.Class, v.Code, tc.want, tc.code)
			}
			if tc.code != 0 && (v.Reason() == "" || !strings.Contains(v.Reason(), strconv.Itoa(int(tc.code)))) {
				t.Errorf("Reason %q does not carry the code", v.Reason())
			}
		})
	}
	re := &RowsError{Table: "requests", Rows: []RowError{{Index: 2, Reason: "a"}, {Index: 7, Reason: "b"}}}
	v := Classify(fmt.Errorf("insert 9 rows into requests: %w", re))
	if v.Class != Refuse || len(v.Rows) != 2 || v.Rows[1] != 7 || v.Reasons[1] != "b" {
		t.Errorf("Classify(RowsError) = %+v, want Refuse of rows 2 and 7 with their reasons", v)
	}
	if v := Classify(exception(469, "Constraint `c` is violated")); v.Reason() != "ClickHouse refused the row: code 469 VIOLATED_CONSTRAINT: Constraint `c` is violated" || v.Row != -1 {
		t.Errorf("Reason = %q, Row = %d", v.Reason(), v.Row)
	}
	// ClickHouse's 1-based pointer at the refused row becomes a 0-based hint, for refusals only.
	if v := Classify(exception(469, "Constraint `c` for table db.t (uuid) is violated at row 17. Expression: (x > 0)")); v.Row != 16 {
		t.Errorf("Row = %d, want 16", v.Row)
	}
	if v := Classify(exception(241, "Memory limit exceeded at row 17")); v.Row != -1 {
		t.Errorf("Row of a Retry = %d, want -1", v.Row)
	}
}

// The package documentation lists every code of exceptionCodes under its class, and nothing else.
func TestCodeTableMatchesDoc(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "sink.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil || f.Doc == nil {
		t.Fatalf("package doc of sink.go: %v", err)
	}
	_, errs, ok := strings.Cut(f.Doc.Text(), "Errors\n")
	if !ok {
		t.Fatal("package doc has no Errors section")
	}
	bullet := regexp.MustCompile(`(?m)^  - (Retry|Split|Refuse|Unknown)\b`)
	pair := regexp.MustCompile(`\b(\d+) ([A-Z][A-Z0-9_]+)\b`)
	classes := map[string]Class{"Retry": Retry, "Split": Split, "Refuse": Refuse, "Unknown": Unknown}
	seen := map[int32]bool{}
	locs := bullet.FindAllStringSubmatchIndex(errs, -1)
	if len(locs) != 4 {
		t.Fatalf("Errors section has %d class bullets, want 4", len(locs))
	}
	for i, loc := range locs {
		end := len(errs)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		class := classes[errs[loc[2]:loc[3]]]
		for _, m := range pair.FindAllStringSubmatch(errs[loc[1]:end], -1) {
			n, _ := strconv.Atoi(m[1])
			c, ok := exceptionCodes[int32(n)]
			switch {
			case !ok:
				t.Errorf("doc lists %s %s under %v; the table does not have it", m[1], m[2], class)
			case c.name != m[2]:
				t.Errorf("doc names code %s %s, the table %s", m[1], m[2], c.name)
			case c.class != class && !(n == 252 && class == Split):
				t.Errorf("doc lists %s %s under %v, the table under %v", m[1], m[2], class, c.class)
			}
			if c.class == class {
				seen[int32(n)] = true
			}
		}
	}
	for code, c := range exceptionCodes {
		if !seen[code] {
			t.Errorf("code %d %s (%v) is in the table but not under its class in the package doc", code, c.name, c.class)
		}
	}
}

// The names in the table are the server's own for their codes (system.errors).
func TestCodeNamesMatchServer(t *testing.T) {
	t.Parallel()
	conn, _ := testenv.ClickHouse(t)
	rows, err := conn.Query(context.Background(), "SELECT DISTINCT code, name FROM system.errors SETTINGS system_events_show_zero_values = 1")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	server := map[int32]string{}
	for rows.Next() {
		var code int32
		var name string
		if err := rows.Scan(&code, &name); err != nil {
			t.Fatal(err)
		}
		server[code] = name
	}
	for code, c := range exceptionCodes {
		if server[code] != c.name {
			t.Errorf("code %d is %q on the server, %q in the table", code, server[code], c.name)
		}
	}
}

func TestParseTTL(t *testing.T) {
	for _, tc := range []struct {
		engine string
		want   Retention
		ok     bool
	}{
		{"ReplacingMergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY (toStartOfHour(ts), request_id, event_id) TTL toDateTime(ts) + toIntervalDay(30) SETTINGS non_replicated_deduplication_window = 10000, index_granularity = 8192",
			Retention{Column: "ts", Keep: 30 * 24 * time.Hour, Expr: "toDateTime(ts) + toIntervalDay(30)"}, true},
		{"ReplacingMergeTree ORDER BY x TTL toDateTime(arrival_ts) + toIntervalDay(365) SETTINGS index_granularity = 8192",
			Retention{Column: "arrival_ts", Keep: 365 * 24 * time.Hour, Expr: "toDateTime(arrival_ts) + toIntervalDay(365)"}, true},
		{"MergeTree ORDER BY x TTL ts + toIntervalHour(6)", Retention{Column: "ts", Keep: 6 * time.Hour, Expr: "ts + toIntervalHour(6)"}, true},
		{"MergeTree ORDER BY x TTL toDateTime(ts) + toIntervalMonth(1) SETTINGS index_granularity = 8192", Retention{}, false},
		{"MergeTree ORDER BY x TTL toDateTime(ts) + toIntervalDay(30) WHERE app = 'x' SETTINGS index_granularity = 8192", Retention{}, false},
		{"MergeTree ORDER BY x TTL toDateTime(ts) + toIntervalDay(30), toDateTime(ts) + toIntervalDay(1) TO VOLUME 'cold' SETTINGS a = 1", Retention{}, false},
		{"MergeTree ORDER BY x SETTINGS index_granularity = 8192", Retention{}, false},
	} {
		got, ok := parseTTL(tc.engine)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseTTL(%q) = %+v, %v; want %+v, %v", tc.engine, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRowsErrorMessage(t *testing.T) {
	err := error(&RowsError{Table: "requests", Rows: []RowError{{Index: 3, Reason: "why"}}})
	var re *RowsError
	if !errors.As(fmt.Errorf("wrapped: %w", err), &re) || !strings.Contains(err.Error(), "row 3") || !strings.Contains(err.Error(), "why") {
		t.Errorf("RowsError = %v", err)
	}
}
