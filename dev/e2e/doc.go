// Package e2e holds servescope's cross-service end-to-end tests: vllmsim behind the gateway,
// the collector scraping the simulator's /metrics and receiving its OTLP spans, the consumer
// writing everything through real NATS JetStream into a real ClickHouse database, and the
// readers of those tables (the engine views, diagnose, the detector's rules) checked against
// what the load generator and the simulator measured. The package has no non-test code; each
// test starts its own pipeline with its own ClickHouse database and subject prefix.
package e2e
