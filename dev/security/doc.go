// Package security holds the tests of servescope's security promises across the whole system,
// against real servers: NATS authentication, the least-privilege ClickHouse accounts at work
// (internal/access), secrets kept out of logs, body limits on every listener and bound parameters
// in the detector's SQL.
package security
