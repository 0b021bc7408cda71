package service

import (
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/version"
)

// defaultVersion fills version.Version, when -ldflags did not set it, with the main module's
// version as Go recorded it in the binary: a release tag for `go install module@v1.2.3`,
// "(devel)" for a build inside the repository. It runs once, before anything reads the version.
var defaultVersion = sync.OnceFunc(func() {
	if version.Version != "" {
		return
	}
	version.Version = "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version.Version = bi.Main.Version
	}
})

// Version returns what --version prints for program: version, branch, revision, build user and
// date, Go version, platform and build tags (prometheus/common/version's layout).
func Version(program string) string {
	defaultVersion()
	return version.Print(program)
}

// NewRegistry returns the metrics registry of a service: Go runtime and process metrics,
// go_build_info (the module path, version and checksum Go recorded), and servescope_build_info,
// always 1, whose labels say what runs: program (gateway, collector, ...), version, revision,
// branch, goversion, goos, goarch and tags, as --version prints them. One name for every
// service, so that `count by (version) (servescope_build_info)` shows a mixed fleet.
func NewRegistry(program string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
		BuildInfo(program),
	)
	return reg
}

// BuildInfo returns the servescope_build_info gauge of program (see NewRegistry). It is
// prometheus/client_golang's collectors/version with a program label, which that one has no
// room for.
func BuildInfo(program string) prometheus.Collector {
	defaultVersion()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "servescope",
		Name:      "build_info",
		Help:      "1, with labels saying which servescope program runs, its version and how it was built.",
		ConstLabels: prometheus.Labels{
			"program":   program,
			"version":   version.Version,
			"revision":  version.GetRevision(),
			"branch":    version.Branch,
			"goversion": version.GoVersion,
			"goos":      runtime.GOOS,
			"goarch":    runtime.GOARCH,
			"tags":      version.GetTags(),
		},
	}, func() float64 { return 1 })
}
