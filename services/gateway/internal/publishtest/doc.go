// Package publishtest holds the integration tests of schema/publish against a real JetStream
// server. They live here because schema/publish is a public package that cannot import the
// repository's internal test environment.
package publishtest
