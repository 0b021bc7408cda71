// Package demo is the driver of scripts/demo: it runs servescope end to end on one machine —
// dev services, migrations, every service as a process with vllmsim as the engine — plays the
// four workloads of docs/measurements.md and three silent incidents against it, and prints what
// the pipeline recorded: the workloads' table read back from ClickHouse, the alerts its own webhook receiver got from
// the detector, and the crashed engine's last log lines.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/servers"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/sim/ragdemo/rag"
)

// Options configure a demo run.
type Options struct {
	// Root is the repository root; the demo keeps everything under Root/.cache/demo.
	Root string
	// Once tears the stack down after the report and makes Run fail when an expected alert did
	// not arrive; otherwise Run keeps the stack up until ctx ends.
	Once bool
	// PortBase is the first of the demo's ten consecutive ports (DefaultPortBase when 0).
	PortBase int
	// Database and Prefix isolate the demo in ClickHouse and NATS from tests and deployments.
	Database, Prefix string
	// KeepDevServices leaves the dev services running at the end even when the demo started them
	// (other work on the machine uses them too).
	KeepDevServices bool
	// RuleScale divides the built-in rules' windows and hold times (see ScaleRule).
	RuleScale float64
	// AppReport is how ragdemo reports its requests (RAGDEMO_REPORT): app.record (when empty),
	// otel (OpenTelemetry spans to the collector only) or both.
	AppReport string
	// Out receives the report and progress.
	Out io.Writer
	Log *slog.Logger
}

// Dirs are the demo's directories under .cache/demo.
type Dirs struct{ Base, Bin, Logs, Pids, State string }

// DirsOf returns the directories of a repository root.
func DirsOf(root string) Dirs {
	base := filepath.Join(root, ".cache", "demo")
	return Dirs{Base: base, Bin: filepath.Join(base, "bin"), Logs: filepath.Join(base, "logs"),
		Pids: filepath.Join(base, "pids"), State: filepath.Join(base, "state")}
}

// Down stops a stack left running by an earlier driver (pid files) and reports what it stopped.
func Down(ctx context.Context, root string, out io.Writer) error {
	d := DirsOf(root)
	names, err := StopStale(ctx, d.Pids, 10*time.Second)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		fmt.Fprintln(out, "demo: nothing running")
		return nil
	}
	fmt.Fprintf(out, "demo: stopped %s\n", strings.Join(names, ", "))
	return nil
}

// run is one demo run's state.
type run struct {
	opt     Options
	dirs    Dirs
	out     io.Writer
	log     *slog.Logger
	stack   Stack
	procs   *Procs
	conn    driver.Conn
	nc      *nats.Conn
	recv    *Receiver
	engine  *Proc
	started time.Time
	devUp   bool // the demo started the dev services (and stops them at the end)
}

func (r *run) step(format string, a ...any) {
	fmt.Fprintf(r.out, "[%5.1fs] %s\n", time.Since(r.started).Seconds(), fmt.Sprintf(format, a...))
}

// Run runs the demo. See Options.
func Run(ctx context.Context, opt Options) error {
	if opt.PortBase == 0 {
		opt.PortBase = DefaultPortBase
	}
	if opt.RuleScale == 0 {
		opt.RuleScale = 10
	}
	r := &run{opt: opt, dirs: DirsOf(opt.Root), out: opt.Out, log: opt.Log, started: time.Now(), recv: NewReceiver()}
	r.procs = &Procs{BinDir: r.dirs.Bin, LogDir: r.dirs.Logs, PidDir: r.dirs.Pids, Exited: make(chan error, 8)}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer r.teardown()
	go func() {
		// A service that dies on its own (anything but the engine in the crash incident) ends the demo.
		select {
		case err := <-r.procs.Exited:
			cancel(err)
		case <-ctx.Done():
		}
	}()
	err := r.prepare(ctx)
	if err == nil {
		err = r.play(ctx)
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	if err != nil {
		return err
	}
	if opt.Once {
		return nil
	}
	r.printRunning()
	<-ctx.Done()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		// After the report a service that ends (scripts/demo down, or a crash) ends the demo.
		fmt.Fprintf(r.out, "\n%v\n", cause)
	}
	fmt.Fprintln(r.out, "\nstopping the demo stack…")
	return nil
}

func (r *run) prepare(ctx context.Context) error {
	for _, d := range []string{r.dirs.Logs, r.dirs.Pids} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	if pid, ok := RunningDriver(r.dirs.Pids); ok {
		return fmt.Errorf("a demo is already running (driver pid %d); stop it with `scripts/demo down` first", pid)
	}
	if names, err := StopStale(ctx, r.dirs.Pids, 10*time.Second); err != nil {
		return err
	} else if len(names) > 0 {
		r.step("stopped a demo stack left running: %s", strings.Join(names, ", "))
	}
	// A fresh state every run: logs, spools, collector offsets and rules of the last run go.
	for _, d := range []string{r.dirs.State, r.dirs.Logs} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("clear %s: %w", d, err)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	if err := WriteDriverPidFile(r.dirs.Pids); err != nil {
		return err
	}
	ports := PortsFrom(r.opt.PortBase)
	if err := ports.CheckFree(); err != nil {
		return err
	}
	var list []string
	for _, np := range ports.List() {
		list = append(list, fmt.Sprintf("%d %s", np.Port, np.Use))
	}
	r.step("ports (all free): %s", strings.Join(list, ", "))

	if err := r.devServices(ctx); err != nil {
		return err
	}
	token := make([]byte, 16)
	_, _ = rand.Read(token)
	consoleToken := make([]byte, 16)
	_, _ = rand.Read(consoleToken)
	r.stack = Stack{
		Ports: ports, Database: r.opt.Database, Prefix: r.opt.Prefix,
		Dev: Dev{
			NATSURL:             "nats://127.0.0.1:" + envOr("SERVESCOPE_DEV_NATS_PORT", "4222"),
			ClickHouseAddr:      "127.0.0.1:" + envOr("SERVESCOPE_DEV_CLICKHOUSE_TCP_PORT", "9000"),
			ConsolePasswordFile: servers.ConsolePasswordFile(servers.CacheDir(r.opt.Root)),
		},
		StateDir: r.dirs.State, LogDir: r.dirs.Logs, EngineLog: filepath.Join(r.dirs.Logs, "vllm-engine.log"),
		AdminToken: hex.EncodeToString(token), ConsoleToken: hex.EncodeToString(consoleToken), Model: "servescope/sim-7b", AppReport: r.opt.AppReport,
	}
	if err := r.resetStorage(ctx); err != nil {
		return err
	}
	names, err := WriteScaledRules(filepath.Join(r.dirs.State, "rules"), r.opt.RuleScale)
	if err != nil {
		return err
	}
	r.step("detector rules: the %d built-in rules with windows and hold times ÷%g (demo time is compressed)", len(names), r.opt.RuleScale)
	slos, err := WriteScaledSLOs(filepath.Join(r.dirs.State, "slos"), SLOScale)
	if err != nil {
		return err
	}
	for _, d := range slos {
		r.step("SLO %s (%s): its burn-rate windows ÷%d, page %s", d.Name, d.Description, SLOScale, windowsText(d.Alerts.PageWindows()))
	}
	if err := WriteEngines(filepath.Join(r.dirs.State, "engines.yaml")); err != nil {
		return err
	}

	if err := r.recv.Listen(ctx, addr(ports.Webhook)); err != nil {
		return err
	}
	return r.startStack(ctx)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// devServices starts NATS and ClickHouse with scripts/dev-services unless they already serve.
func (r *run) devServices(ctx context.Context) error {
	script := filepath.Join(r.opt.Root, "scripts", "dev-services")
	if exec.CommandContext(ctx, script, "status").Run() == nil {
		r.step("dev services already running (NATS, ClickHouse); the demo leaves them as they are")
		return nil
	}
	r.step("starting the dev services (scripts/dev-services up; the first run installs ClickHouse and NATS)…")
	cmd := exec.CommandContext(ctx, script, "up")
	cmd.Stdout, cmd.Stderr = r.out, r.out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("scripts/dev-services up: %w", err)
	}
	r.devUp = true
	if r.opt.KeepDevServices {
		r.step("dev services started; they stay up after the demo (SERVESCOPE_DEMO_KEEP_DEV_SERVICES)")
	} else {
		r.step("dev services started; the demo stops them at the end (set SERVESCOPE_DEMO_KEEP_DEV_SERVICES=1 to keep them)")
	}
	return nil
}

// resetStorage gives the demo an empty database and empty streams: the detector's baseline must
// not hold an earlier demo's incidents.
func (r *run) resetStorage(ctx context.Context) error {
	admin, err := chstore.Open(ctx, config.ClickHouse{Addr: []string{r.stack.Dev.ClickHouseAddr}, Database: "default", User: "default", DialTimeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("connect to ClickHouse: %w", err)
	}
	if err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+r.stack.Database+" SYNC"); err != nil {
		admin.Close()
		return fmt.Errorf("drop database %s: %w", r.stack.Database, err)
	}
	admin.Close()
	if r.nc, err = nats.Connect(r.stack.Dev.NATSURL, nats.Name("servescope-demo")); err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", r.stack.Dev.NATSURL, err)
	}
	js, err := jetstream.New(r.nc)
	if err != nil {
		return fmt.Errorf("JetStream context: %w", err)
	}
	topo := bus.Topology{Prefix: r.stack.Prefix}
	for _, s := range []string{topo.Stream(), topo.DLQStream()} {
		if err := js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("delete stream %s of the last demo: %w", s, err)
		}
	}
	consumer, _, _, _, _ := r.stack.Services()
	if _, err := RunOnce(ctx, r.dirs.Bin, r.stack.Setup(consumer)); err != nil {
		return err
	}
	if r.conn, err = chstore.Open(ctx, config.ClickHouse{Addr: []string{r.stack.Dev.ClickHouseAddr}, Database: r.stack.Database, User: "default", DialTimeout: 5 * time.Second}); err != nil {
		return fmt.Errorf("connect to ClickHouse database %s: %w", r.stack.Database, err)
	}
	r.step("servescope migrate up: ClickHouse database %s migrated; NATS streams %s and %s (subjects %s) and durable consumer %s created",
		r.stack.Database, topo.Stream(), topo.DLQStream(), topo.Subjects(), consumer.Env["CONSUMER_DURABLE"])
	return r.checkConsoleAccount(ctx)
}

// checkConsoleAccount makes sure the console's read-only account can read the demo's database
// before the console starts on it: dev services started before the account existed, or for
// another SERVESCOPE_DEMO_DATABASE, lack it until they are started again.
func (r *run) checkConsoleAccount(ctx context.Context) error {
	restart := "restart the dev ClickHouse (scripts/dev-services down clickhouse && scripts/dev-services up) with the same SERVESCOPE_DEMO_DATABASE"
	if _, err := os.Stat(r.stack.Dev.ConsolePasswordFile); err != nil {
		return fmt.Errorf("the console's read-only ClickHouse account: %w; %s", err, restart)
	}
	cfg, err := config.LoadFrom[config.ClickHouse](r.stack.Console().Env)
	if err != nil {
		return fmt.Errorf("the console's ClickHouse settings: %w", err)
	}
	cfg.DialTimeout = 5 * time.Second
	conn, err := chstore.Open(ctx, cfg)
	if err == nil {
		var n uint64
		err = conn.QueryRow(ctx, "SELECT count() FROM requests").Scan(&n)
		conn.Close()
	}
	if err != nil {
		return fmt.Errorf("the console's read-only ClickHouse account %s cannot read database %s: %w; %s", cfg.User, r.stack.Database, err, restart)
	}
	r.step("the console reads database %s through the read-only account %s (SELECT only, no captured text)", r.stack.Database, cfg.User)
	return nil
}

func (r *run) startStack(ctx context.Context) error {
	consumer, collector, gateway, ragdemo, detector := r.stack.Services()
	var err error
	for _, svc := range []Service{consumer, r.stack.Engine(), collector, gateway, ragdemo} {
		p, err := r.procs.Start(ctx, svc, 30*time.Second)
		if err != nil {
			return err
		}
		if svc.Name == "vllmsim" {
			r.engine = p
		}
	}
	r.step("services up: consumer, vllmsim (engine), collector, gateway, ragdemo — logs in %s", rel(r.opt.Root, r.dirs.Logs))

	idx, err := r.indexVersion(ctx)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	b := Baseline{From: now.Add(-25 * time.Hour), To: now.Add(-61 * time.Minute), RatePerSecond: 0.01,
		Model: r.stack.Model, App: "ragdemo", Engine: EngineName, EmbeddingModel: idx.Index, IndexVersion: idx.IndexVersion}
	t := b.Traffic(42)
	r.step("baseline: publishing a synthetic normal day through NATS (%d requests, %d app records, %d engine samples, %s → %s), so the detector compares with the same system's previous day…",
		len(t.Started), len(t.Apps), len(t.Samples), b.From.Format("Jan 2 15:04"), b.To.Format("Jan 2 15:04 MST"))
	if err := PublishBaseline(ctx, r.nc, r.stack.Prefix, filepath.Join(r.dirs.State, "baseline-spool"), r.conn, t, r.log); err != nil {
		return err
	}
	r.step("baseline written to ClickHouse by the consumer")
	if _, err := r.procs.Start(ctx, detector, 30*time.Second); err != nil {
		return err
	}
	r.step("detector up: every 2 s, 3 s behind the clock, alerts to the demo's webhook receiver %s", url(r.stack.Ports.Webhook, "/alerts"))
	if _, err := r.procs.Start(ctx, r.stack.Console(), 30*time.Second); err != nil {
		return err
	}
	r.step("console up: open %s and log in with the token %s to watch the scenarios live", r.stack.ConsoleURL(), r.stack.ConsoleToken)
	return nil
}

type indexInfo struct {
	Query        string `json:"query"`
	Index        string `json:"index"`
	IndexVersion string `json:"index_version"`
}

func (r *run) indexVersion(ctx context.Context) (indexInfo, error) {
	var info indexInfo
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url(r.stack.Ports.RAG, "/admin/embedding-model"), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return info, fmt.Errorf("ask ragdemo for its index: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return info, fmt.Errorf("decode ragdemo's index description: %w", err)
	}
	return info, nil
}

// restartEngine replaces the engine process with one started with extra flags.
func (r *run) restartEngine(ctx context.Context, extra ...string) error {
	if r.engine != nil {
		// An engine that needed SIGKILL is gone all the same.
		if err := r.procs.Stop(ctx, r.engine); err != nil && !errors.Is(err, proc.ErrKilledAfterGrace) {
			return err
		}
	}
	p, err := r.procs.Start(ctx, r.stack.Engine(extra...), 30*time.Second)
	if err != nil {
		return err
	}
	r.engine = p
	return nil
}

func (r *run) teardown() {
	if r.procs != nil {
		// The run's context may have ended: the stop needs one of its own.
		if err := r.procs.StopAll(context.Background()); err != nil {
			fmt.Fprintf(r.out, "demo: %v\n", err)
		}
	}
	_ = os.Remove(filepath.Join(r.dirs.Pids, DriverPidFile))
	if r.conn != nil {
		r.conn.Close()
	}
	if r.nc != nil {
		r.nc.Close()
	}
	if r.devUp && !r.opt.KeepDevServices {
		cmd := exec.Command(filepath.Join(r.opt.Root, "scripts", "dev-services"), "down")
		cmd.Stdout, cmd.Stderr = r.out, r.out
		_ = cmd.Run()
	}
}

func (r *run) printRunning() {
	p := r.stack.Ports
	fmt.Fprintf(r.out, "\nThe demo stack is running:\n")
	fmt.Fprintf(r.out, "  console                %s   token %s (the minimal dashboard, alerts, complaints, crashes)\n", r.stack.ConsoleURL(), r.stack.ConsoleToken)
	fmt.Fprintf(r.out, "  gateway (OpenAI API)   %s   e.g. curl %s -H 'Content-Type: application/json' -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n",
		url(p.Gateway, "/v1"), url(p.Gateway, "/v1/chat/completions"), r.stack.Model)
	fmt.Fprintf(r.out, "  ragdemo                %s   e.g. curl %s -d '{\"question\":\"Why does queue wait stay at zero?\"}'\n", url(p.RAG, "/ask"), url(p.RAG, "/ask"))
	fmt.Fprintf(r.out, "  vllmsim (engine)       %s\n", url(p.Engine, "/metrics"))
	fmt.Fprintf(r.out, "  consumer / detector / collector metrics  %s  %s  %s\n", url(p.Consumer, "/metrics"), url(p.Detector, "/metrics"), url(p.Collector, "/metrics"))
	fmt.Fprintf(r.out, "  ClickHouse             database %s at %s (HTTP 127.0.0.1:%s), e.g.\n", r.stack.Database, r.stack.Dev.ClickHouseAddr, envOr("SERVESCOPE_DEV_CLICKHOUSE_HTTP_PORT", "8123"))
	fmt.Fprintf(r.out, "                         curl 'http://127.0.0.1:%s/?database=%s' --data-binary 'SELECT rule, state, count() FROM alerts GROUP BY ALL'\n", envOr("SERVESCOPE_DEV_CLICKHOUSE_HTTP_PORT", "8123"), r.stack.Database)
	fmt.Fprintf(r.out, "  NATS                   %s, subjects %s.v1.>\n", r.stack.Dev.NATSURL, r.stack.Prefix)
	fmt.Fprintf(r.out, "  logs                   %s\n", rel(r.opt.Root, r.dirs.Logs))
	fmt.Fprintf(r.out, "Stop it with Ctrl-C here (or scripts/demo down from another terminal).\n")
}

func rel(root, p string) string {
	if s, err := filepath.Rel(root, p); err == nil {
		return s
	}
	return p
}

// questions are ragdemo's demo questions in a fixed order.
func questions() []string {
	qs := rag.Questions()
	keys := make([]string, 0, len(qs))
	for k := range qs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = qs[k]
	}
	return out
}
