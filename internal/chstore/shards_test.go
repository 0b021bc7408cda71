package chstore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// A node's answer that a shard did not answer (ClickHouse's own message for a synchronous
// Distributed insert into a stopped shard, as the development engine gives it) is told apart from
// an error of the connection to the node itself and from an answer about the rows; the shard's
// address is read from it.
func TestShardUnavailable(t *testing.T) {
	stopped := &clickhouse.Exception{Code: 279, Message: "All connection tries failed. Log: \n\n" +
		"Code: 210. DB::NetException: Connection refused (127.0.0.1:34983). (NETWORK_ERROR) (version 26.7.2.1)\n" +
		"Code: 210. DB::NetException: Connection refused (127.0.0.1:34983). (NETWORK_ERROR) (version 26.7.2.1)\n\n" +
		": Insertion status:\nWrote 1 blocks and 28 rows on shard 0 replica 0, 127.0.0.1:43011 (average 1 ms per block)\n" +
		"Wrote 0 blocks and 0 rows on shard 1 replica 0, 127.0.0.1:34983 (average 0 ms per block)"}
	cases := []struct {
		name string
		err  error
		want bool
		addr string
	}{
		{"a shard stopped", fmt.Errorf("insert 28 rows into requests: %w", stopped), true, "127.0.0.1:34983"},
		{"a shard went away mid-insert", &clickhouse.Exception{Code: 210, Message: "Connection reset by peer, while writing to socket (10.0.0.7:9000 -> 10.0.0.5:51234)"}, true, "10.0.0.7:9000"},
		{"the node itself unreachable", errors.New("dial tcp 127.0.0.1:9000: connect: connection refused"), false, ""},
		{"a row refused", &clickhouse.Exception{Code: 469, Message: "Constraint `c` for table requests is violated at row 1"}, false, ""},
		{"no error", nil, false, ""},
	}
	for _, c := range cases {
		if got := ShardUnavailable(c.err); got != c.want {
			t.Errorf("%s: ShardUnavailable = %v, want %v", c.name, got, c.want)
		}
		if c.want {
			if got := UnavailableShard(c.err); got != c.addr {
				t.Errorf("%s: UnavailableShard = %q, want %q", c.name, got, c.addr)
			}
		}
	}
}
