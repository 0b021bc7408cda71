// Package sim assembles a complete vllmsim — clock, tokenizer, engine, vLLM-shaped log,
// Prometheus metrics and the API server — so the binary, the demo and tests (which serve
// Handler with httptest) build it the same way.
package sim

import (
	"context"
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
	// DataParallelSize is the number of engine cores (vllm serve --data-parallel-size; default 1),
	// each with Engine's slots and KV cache, behind one API server (engine.Group): /metrics labels
	// each engine's series engine="i", the log has each engine's stats line and engine core
	// process. Engine.CrashAtRunning applies to engine CrashEngine only.
	DataParallelSize int
	CrashEngine      int
	// AggregateEngineLogging writes one "N Engines Aggregated:" stats line instead of one per
	// engine (--aggregate-engine-logging, vLLM main).
	AggregateEngineLogging bool
}

// Sim is an assembled simulator. Run it with Run(ctx) in a goroutine and serve Handler.
type Sim struct {
	Clock *engine.Clock
	// Engine is engine 0; Engines every engine core of a data-parallel server (Engine alone
	// otherwise).
	Engine  *engine.Engine
	Engines []*engine.Engine
	Metrics *simmetrics.Metrics
	Log     *vllmlog.Logger
	Handler http.Handler
	group   *engine.Group
}

// Run runs the engines until ctx ends or one dies (a *engine.CrashError), as engine.Engine.Run
// and engine.Group.Run do.
func (s *Sim) Run(ctx context.Context) error {
	if s.group != nil {
		return s.group.Run(ctx)
	}
	return s.Engine.Run(ctx)
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
	n := max(o.DataParallelSize, 1)
	if !o.Version.V1Engine() {
		n = 1 // vllmsim's data parallelism is V1's (one engine core per rank)
	}
	s := &Sim{Clock: o.Clock}
	tok := engine.NewTokenizer(o.VocabSize)
	s.Log = vllmlog.NewWith(o.LogWriter, s.Clock, o.APIPID, vllmlog.Options{Release: o.Version, JSON: o.LogJSON,
		Engines: n, Aggregate: o.AggregateEngineLogging})
	gauges := make([]func() engine.Gauges, n)
	for i := range n {
		gauges[i] = func() engine.Gauges { return s.Engines[i].Gauges() }
	}
	s.Metrics = simmetrics.NewDataParallel(o.Model, o.Engine.MaxModelLen, gauges, o.Version)
	for i := range n {
		cfg := o.Engine
		if n > 1 && i != o.CrashEngine {
			cfg.CrashAtRunning = 0
		}
		obs := append([]engine.Observer{s.Metrics.Engine(i), s.Log.Engine(i)}, o.Observers...)
		s.Engines = append(s.Engines, engine.New(cfg, tok, s.Clock, obs...))
	}
	s.Engine = s.Engines[0]
	var eng simserver.Engine = s.Engine
	if n > 1 {
		s.group = engine.NewGroup(s.Engines...)
		eng = s.group
	}
	o.Server.Model = o.Model
	o.Server.Version = o.Version
	s.Handler = simserver.New(o.Server, eng, s.Metrics)
	return s
}
