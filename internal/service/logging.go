package service

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/prometheus/common/promslog"
	"github.com/spf13/pflag"
)

// The variables that set the common flags' defaults.
const (
	EnvLogLevel  = "SERVESCOPE_LOG_LEVEL"
	EnvLogFormat = "SERVESCOPE_LOG_FORMAT"
)

// Options are the flags every binary takes besides its own.
type Options struct {
	// LogLevel is the least level logged: debug, info, warn or error.
	LogLevel string
	// LogFormat is the format of log lines: logfmt (also called text) or json.
	LogFormat string
	// Version asks for the version instead of a run.
	Version bool
}

// DefaultOptions returns the options before any flag is parsed: the logging settings from
// SERVESCOPE_LOG_LEVEL and SERVESCOPE_LOG_FORMAT when set, else info and logfmt.
func DefaultOptions() Options {
	o := Options{LogLevel: "info", LogFormat: "logfmt"}
	if v := os.Getenv(EnvLogLevel); v != "" {
		o.LogLevel = v
	}
	if v := os.Getenv(EnvLogFormat); v != "" {
		o.LogFormat = v
	}
	return o
}

const (
	levelUsage   = "least level logged: debug, info, warn or error (default from " + EnvLogLevel + ")"
	formatUsage  = "log line format: logfmt (or text) or json (default from " + EnvLogFormat + ")"
	versionUsage = "print the version and build details, then exit"
)

// Register defines --log.level, --log.format and --version on fs, with o's values as defaults.
func (o *Options) Register(fs *flag.FlagSet) {
	fs.StringVar(&o.LogLevel, "log.level", o.LogLevel, levelUsage)
	fs.StringVar(&o.LogFormat, "log.format", o.LogFormat, formatUsage)
	fs.BoolVar(&o.Version, "version", false, versionUsage)
}

// RegisterLogging defines --log.level and --log.format on a cobra (pflag) flag set; cobra
// provides --version itself.
func (o *Options) RegisterLogging(fs *pflag.FlagSet) {
	fs.StringVar(&o.LogLevel, "log.level", o.LogLevel, levelUsage)
	fs.StringVar(&o.LogFormat, "log.format", o.LogFormat, formatUsage)
}

// Logger returns the logger the options describe, writing to w.
func (o *Options) Logger(w io.Writer) (*slog.Logger, error) {
	return NewLogger(w, o.LogLevel, o.LogFormat)
}

// NewLogger returns servescope's logger: promslog's log/slog handler writing to w, logfmt ("text"
// is accepted for it) or JSON, logging level and above. The error names the flag and the
// variable of a value it does not know.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	lvl := promslog.NewLevel()
	if err := lvl.Set(level); err != nil {
		return nil, fmt.Errorf("--log.level (%s): %q: want debug, info, warn or error", EnvLogLevel, level)
	}
	f := promslog.NewFormat()
	if strings.EqualFold(format, "text") {
		format = "logfmt"
	}
	if err := f.Set(strings.ToLower(format)); err != nil {
		return nil, fmt.Errorf("--log.format (%s): %q: want logfmt, text or json", EnvLogFormat, format)
	}
	return promslog.New(&promslog.Config{Level: lvl, Format: f, Writer: w}), nil
}
