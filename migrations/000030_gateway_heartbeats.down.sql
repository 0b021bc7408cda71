-- Back to 000017: no gateway heartbeats (requests_hung has nothing to read).
DROP TABLE IF EXISTS gateway_heartbeats
