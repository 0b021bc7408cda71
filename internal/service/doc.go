// Package service is the one shape of every servescope binary's main: the common flags, the
// logger, the version, the run group that starts and stops a service's parts in a stated order,
// and the health and readiness endpoints.
//
// A binary built on package flag is a [Command]; one built on cobra (subcommands) is wrapped by
// [Cobra]. Both give every binary the same flags:
//
//	--log.level debug|info|warn|error   (SERVESCOPE_LOG_LEVEL, default info)
//	--log.format logfmt|text|json       (SERVESCOPE_LOG_FORMAT, default logfmt; text is logfmt)
//	--version                           print the version and build details, exit 0
//	--help                              print the usage, exit 0
//
// A flag given on the command line wins over its variable. The logger is Prometheus's
// (prometheus/common/promslog): log/slog with a timestamp, the level, the source line and the
// message on every line. The version is prometheus/common/version's: -ldflags
// "-X github.com/prometheus/common/version.Version=1.2.3" (and .Revision, .Branch, .BuildUser,
// .BuildDate) sets it at build time; without it, the module version Go recorded in the binary
// (runtime/debug.ReadBuildInfo) is used. [NewRegistry] exports the same as
// servescope_build_info{program="<name>",version,revision,goversion,...} and Go's go_build_info.
//
// A long-running service runs its parts in a [Group] (github.com/oklog/run, the pattern of
// Prometheus's cmd/prometheus): each part is an execute function and an interrupt function; the
// group runs until its context ends (SIGINT or SIGTERM) or the first part returns, then
// interrupts the parts one after the other in the order they were added, each interrupt
// returning once its part has stopped. The order of Add calls is therefore the stop order, and
// each service writes it down where it builds its group. A second SIGINT or SIGTERM during the
// stop ends the process at once.
//
// Every service serves /healthz and /readyz apart, as Prometheus serves /-/healthy and
// /-/ready: [Healthy] says the process runs and never asks a dependency, so an outage of NATS or
// ClickHouse never gets a service restarted; [Readiness] says whether the service is started and
// its dependencies answer, as each service defines it.
package service
