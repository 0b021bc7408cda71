package chstore

import (
	"errors"
	"regexp"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// shardCodes are the exception codes with which a node that answered says that a shard it
// inserts into or reads from did not: 279 ALL_CONNECTION_TRIES_FAILED (no replica of the shard
// accepts a connection), 210 NETWORK_ERROR and 209 SOCKET_TIMEOUT (the connection to it broke or
// hung), 32 ATTEMPT_TO_READ_AFTER_EOF and 3 UNEXPECTED_END_OF_FILE (it went away mid-query).
var shardCodes = map[int32]bool{279: true, 210: true, 209: true, 32: true, 3: true}

// ShardUnavailable reports whether err is a node's answer that one shard of the cluster did not
// answer: a ClickHouse exception of one of shardCodes. An error without an exception (the node
// itself is unreachable) is not: it is the connection's, retried on the next node.
func ShardUnavailable(err error) bool {
	var ex *clickhouse.Exception
	return err != nil && errors.As(err, &ex) && shardCodes[ex.Code]
}

// shardAddr finds the address of the shard in a ShardUnavailable error's message: "...
// Connection refused (127.0.0.1:9001)", "(10.0.0.7:9000 -> 10.0.0.5:51234)", "(host:9000,
// connection timeout 1000 ms)".
var shardAddr = regexp.MustCompile(`\(([A-Za-z0-9_.\-\[\]:]+:\d+)[,) ]`)

// UnavailableShard returns the address (host:port) of the shard a ShardUnavailable error names,
// "" when it names none.
func UnavailableShard(err error) string {
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) {
		return ""
	}
	if m := shardAddr.FindStringSubmatch(ex.Message); m != nil {
		return m[1]
	}
	return ""
}
