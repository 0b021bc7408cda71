// Package compose holds the checks of the users' docker-compose.yml at the repository root. There
// is no Docker engine where servescope is developed, so the file is checked by reading it: every
// environment variable a servescope service is given must be one its configuration reads, ports
// and service addresses must agree, images must be pinned, the NATS and ClickHouse images must be
// the releases the tests run against, state must live on volumes, and no secret may be written
// into the file. The cluster profile (3 NATS nodes, ClickHouse Keeper, ClickHouse as 2 shards of 2
// replicas) is checked against its config files under deploy/clickhouse/cluster: routes, Keeper
// ids and peers, remote_servers' layout and each node's macros; a development ClickHouse loads a
// node's remote_servers and macros to prove the server accepts them.
package compose
