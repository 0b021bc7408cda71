// Package sim assembles a complete vllmsim — clock, tokenizer, engine, vLLM-shaped log,
// Prometheus metrics and the API server — so the binary, the demo and tests (which serve
// Handler with httptest) build it the same way.
package sim

import (
	"io"
	"net/http"

	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/simmetrics"
	"github.com/servescope/servescope/sim/vllmsim/simserver"
	"github.com/servescope/servescope/sim/vllmsim/vllmlog"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// Options configure a simulator. Zero values take vLLM's defaults (engine.DefaultConfig).
type Options struct {
	Model string // served model name; default "servescope/sim-7b"
	// Version is the vLLM release imitated (default main): API formats, /metrics and the log. It
	// overrides Server.Version; span exporters among Observers take their own (simtrace.WithVersion).
	Version   vllmversion.Version
	VocabSize int     // default 152064
	TimeScale float64 // default 1; ignored when Clock is set
	// Clock, when set, is the simulator's clock (so observers created beforehand share it).
	Clock  *engine.Clock
	Engine engine.Config
	Server simserver.Config // Model is filled from Model
	// LogWriter receives the vLLM-shaped log (stats lines, crash traceback); nil discards it.
	LogWriter io.Writer
	// APIPID is the "(APIServer pid=N)" of log lines; default 1 as in vLLM's container image.
	APIPID int
	// Observers get the engine's events besides the log and the metrics (e.g. span export).
	Observers []engine.Observer
	// LogJSON writes the log as a JSON formatter configured through VLLM_LOGGING_CONFIG_PATH does.
	LogJSON bool
}

// Sim is an assembled simulator. Run Engine.Run(ctx) in a goroutine and serve Handler.
type Sim struct {
	Clock   *engine.Clock
	Engine  *engine.Engine
	Metrics *simmetrics.Metrics
	Log     *vllmlog.Logger
	Handler http.Handler
}

// New builds a simulator from o.
func New(o Options) *Sim {
	if o.Model == "" {
		o.Model = "servescope/sim-7b"
	}
	if o.VocabSize == 0 {
		o.VocabSize = 152064
	}
	if o.APIPID == 0 {
		o.APIPID = 1
	}
	if o.LogWriter == nil {
		o.LogWriter = io.Discard
	}
	if o.Engine.MaxNumSeqs == 0 {
		o.Engine = engine.DefaultConfig()
	}
	if o.Clock == nil {
		o.Clock = engine.NewClock(o.TimeScale)
	}
	s := &Sim{Clock: o.Clock}
	tok := engine.NewTokenizer(o.VocabSize)
	s.Log = vllmlog.NewWith(o.LogWriter, s.Clock, o.APIPID, vllmlog.Options{Release: o.Version, JSON: o.LogJSON})
	s.Metrics = simmetrics.NewRelease(o.Model, o.Engine.MaxModelLen, func() engine.Gauges { return s.Engine.Gauges() }, o.Version)
	s.Engine = engine.New(o.Engine, tok, s.Clock, append([]engine.Observer{s.Metrics, s.Log}, o.Observers...)...)
	o.Server.Model = o.Model
	o.Server.Version = o.Version
	s.Handler = simserver.New(o.Server, s.Engine, s.Metrics)
	return s
}
