package chstore

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/config"
)

// EveryNode runs f with conn on a single server. On a sharded schema (cfg.Cluster set) it runs f
// once for each node of cfg.Addr instead, with a connection to that node's local database: the
// way to write the small tables of NodeTables, which every shard's parameterized views read whole
// on their own node. It stops at the first node whose f fails.
func EveryNode(ctx context.Context, cfg config.ClickHouse, conn driver.Conn, f func(context.Context, driver.Conn) error) error {
	if cfg.Cluster == "" {
		return f(ctx, conn)
	}
	for _, addr := range cfg.Addr {
		node := cfg
		node.Addr = []string{addr}
		node.Database = LocalDatabase(cfg)
		c, err := Open(ctx, node)
		if err != nil {
			return fmt.Errorf("node %s: %w", addr, err)
		}
		err = f(ctx, c)
		c.Close()
		if err != nil {
			return fmt.Errorf("node %s: %w", addr, err)
		}
	}
	return nil
}
