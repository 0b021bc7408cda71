package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/servescope/servescope/dev/servers"
)

// Ports are the demo's fixed loopback ports. They stay clear of the dev services (NATS 4222/8222,
// ClickHouse 9000/8123) and of the services' production defaults (8000, 8080, 4317, ...), so a
// demo runs beside both.
type Ports struct {
	Engine, Gateway, RAG, Webhook, Consumer, Detector, Collector, OTLPGRPC, OTLPHTTP, Console int
}

// DefaultPortBase is the first of the demo's ten consecutive ports.
const DefaultPortBase = 19600

// PortsFrom lays the ten ports out from base.
func PortsFrom(base int) Ports {
	return Ports{
		Engine: base, Gateway: base + 1, RAG: base + 2, Webhook: base + 3, Consumer: base + 4,
		Detector: base + 5, Collector: base + 6, OTLPGRPC: base + 7, OTLPHTTP: base + 8, Console: base + 9,
	}
}

// List names every port with its use, in print order.
func (p Ports) List() []NamedPort {
	return []NamedPort{
		{"vllmsim (OpenAI API, /metrics)", p.Engine}, {"gateway (OpenAI API)", p.Gateway},
		{"ragdemo (POST /ask)", p.RAG}, {"webhook receiver (in the driver)", p.Webhook},
		{"consumer /metrics", p.Consumer}, {"detector /metrics", p.Detector},
		{"collector /metrics", p.Collector}, {"collector OTLP/gRPC", p.OTLPGRPC}, {"collector OTLP/HTTP", p.OTLPHTTP},
		{"console", p.Console},
	}
}

// NamedPort is one port and what listens on it.
type NamedPort struct {
	Use  string
	Port int
}

// CheckFree fails, naming every port of p that cannot be bound on 127.0.0.1 and its use.
func (p Ports) CheckFree() error {
	var errs []error
	for _, np := range p.List() {
		ln, err := net.Listen("tcp", addr(np.Port))
		if err != nil {
			errs = append(errs, fmt.Errorf("port %d (%s) is taken: %w", np.Port, np.Use, err))
			continue
		}
		ln.Close()
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w; stop what uses them or pick other ports with SERVESCOPE_DEMO_PORT_BASE", errors.Join(errs...))
	}
	return nil
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

func url(port int, path string) string { return "http://" + addr(port) + path }

// Dev is how to reach the dev services.
type Dev struct {
	NATSURL, ClickHouseAddr string
	// ConsolePasswordFile holds the password of the dev server's read-only console account
	// (servers.DemoConsoleUser), which the demo's console reads through.
	ConsolePasswordFile string
}

// Stack holds the settings every demo service shares.
type Stack struct {
	Ports    Ports
	Dev      Dev
	Database string // ClickHouse database of the demo
	Prefix   string // NATS subject prefix of the demo
	StateDir string // spools, collector offsets, rules
	LogDir   string
	// EngineLog is the vLLM-shaped log vllmsim appends to and the collector follows.
	EngineLog  string
	AdminToken string // ragdemo's admin bearer token
	// ConsoleToken is the console's viewer token (printed with its URL).
	ConsoleToken string
	Model        string
	// AppReport is ragdemo's RAGDEMO_REPORT (app.record when empty).
	AppReport string
}

// EngineName is the engine's name in engine.* events (COLLECTOR_TARGETS name=URL).
const EngineName = "vllmsim"

func (s *Stack) shared() map[string]string {
	return map[string]string{
		"SERVESCOPE_NATS_URL":            s.Dev.NATSURL,
		"SERVESCOPE_SUBJECT_PREFIX":      s.Prefix,
		"SERVESCOPE_CLICKHOUSE_ADDR":     s.Dev.ClickHouseAddr,
		"SERVESCOPE_CLICKHOUSE_DATABASE": s.Database,
	}
}

func with(base map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(base)+len(kv)/2)
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// Service is one process of the stack: how to start it and how to know it serves.
type Service struct {
	Name   string
	Bin    string
	Args   []string
	Env    map[string]string
	Health string // URL answering 200 once the service serves
	// StopGrace is how long a stop waits after SIGTERM before SIGKILL (proc.DefaultStopGrace when 0).
	StopGrace time.Duration
}

// EngineArgs are vllmsim's flags; extra adds the incident knobs (--wrong-language-share, ...).
func (s *Stack) EngineArgs(extra ...string) []string {
	return append([]string{
		"--listen", addr(s.Ports.Engine), "--model", s.Model, "--time-scale", "1",
		"--log-file", s.EngineLog, "--otlp-endpoint", addr(s.Ports.OTLPGRPC), "--otlp-protocol", "grpc",
	}, extra...)
}

// Engine is vllmsim with extra flags.
func (s *Stack) Engine(extra ...string) Service {
	return Service{Name: "vllmsim", Bin: "vllmsim", Args: s.EngineArgs(extra...), Health: url(s.Ports.Engine, "/health")}
}

// Console is the web console on the demo's database, with the demo's scaled detector rules (so
// its thresholds are the ones the demo's detector evaluates), behind ConsoleToken. It reads through
// the dev server's read-only console account, as a deployment's console does (docker-compose.yml,
// `servescope access`): SELECT on the demo's database, no captured text, nothing written.
func (s *Stack) Console() Service {
	return Service{Name: "console", Bin: "console", Health: url(s.Ports.Console, "/healthz"),
		Env: with(map[string]string{
			"SERVESCOPE_CLICKHOUSE_ADDR":          s.Dev.ClickHouseAddr,
			"SERVESCOPE_CLICKHOUSE_DATABASE":      s.Database,
			"SERVESCOPE_CLICKHOUSE_USER":          servers.DemoConsoleUser,
			"SERVESCOPE_CLICKHOUSE_PASSWORD_FILE": s.Dev.ConsolePasswordFile,
		},
			"CONSOLE_LISTEN_ADDR", addr(s.Ports.Console),
			"CONSOLE_AUTH", "token",
			"CONSOLE_TOKEN", s.ConsoleToken,
			"DETECTOR_RULES_DIR", filepath.Join(s.StateDir, "rules"))}
}

// ConsoleURL is the console's address (its login page asks for ConsoleToken; a token never
// travels in a URL, where logs and browser history would keep it).
func (s *Stack) ConsoleURL() string { return url(s.Ports.Console, "/") }

// Services are the stack's processes in start order (the engine comes from Engine).
func (s *Stack) Services() (consumer, collector, gateway, ragdemo, detector Service) {
	sh := s.shared()
	consumer = Service{Name: "consumer", Bin: "consumer", Health: url(s.Ports.Consumer, "/readyz"),
		Env: with(sh, "CONSUMER_METRICS_ADDR", addr(s.Ports.Consumer), "CONSUMER_FLUSH_INTERVAL", "500ms",
			"CONSUMER_DURABLE", "servescope-demo-writer")}
	collector = Service{Name: "collector", Bin: "collector", Args: []string{"run"}, Health: url(s.Ports.Collector, "/healthz"),
		Env: with(sh,
			"COLLECTOR_TARGETS", EngineName+"="+url(s.Ports.Engine, "/metrics"),
			"COLLECTOR_SCRAPE_INTERVAL", "500ms",
			"COLLECTOR_OTLP_GRPC_ADDR", addr(s.Ports.OTLPGRPC),
			"COLLECTOR_OTLP_HTTP_ADDR", addr(s.Ports.OTLPHTTP),
			"COLLECTOR_LOG_FILES", EngineName+"="+s.EngineLog,
			"COLLECTOR_ENGINE", EngineName,
			"COLLECTOR_METRICS_ADDR", addr(s.Ports.Collector),
			"COLLECTOR_STATE_DIR", filepath.Join(s.StateDir, "collector"),
			"COLLECTOR_SPOOL_DIR", filepath.Join(s.StateDir, "collector-spool"))}
	gateway = Service{Name: "gateway", Bin: "gateway", Health: url(s.Ports.Gateway, "/readyz"),
		Env: with(sh,
			"GATEWAY_LISTEN_ADDR", addr(s.Ports.Gateway),
			"GATEWAY_UPSTREAM_URL", url(s.Ports.Engine, ""),
			"GATEWAY_SPOOL_DIR", filepath.Join(s.StateDir, "gateway-spool"),
			"GATEWAY_NAME", "demo-gateway")}
	ragdemo = Service{Name: "ragdemo", Bin: "ragdemo", Health: url(s.Ports.RAG, "/healthz"),
		Env: with(sh,
			"RAGDEMO_LISTEN_ADDR", addr(s.Ports.RAG),
			"RAGDEMO_GATEWAY_URL", url(s.Ports.Gateway, ""),
			"RAGDEMO_MODEL", s.Model,
			"RAGDEMO_ADMIN_TOKEN", s.AdminToken,
			"RAGDEMO_SPOOL_DIR", filepath.Join(s.StateDir, "ragdemo-spool"),
			"RAGDEMO_REPORT", cmp.Or(s.AppReport, "app.record"),
			// Used when RAGDEMO_REPORT sends spans: the collector's OTLP/HTTP receiver, and a
			// batch delay well under the detector's tick so records arrive as fast as published ones.
			"OTEL_EXPORTER_OTLP_ENDPOINT", url(s.Ports.OTLPHTTP, ""),
			"OTEL_BSP_SCHEDULE_DELAY", "200")}
	detector = Service{Name: "detector", Bin: "detector", Health: url(s.Ports.Detector, "/healthz"),
		Env: with(sh,
			"DETECTOR_WEBHOOK_URLS", url(s.Ports.Webhook, "/alerts"),
			"DETECTOR_INTERVAL", "2s",
			"DETECTOR_EVAL_DELAY", "3s",
			"DETECTOR_REPEAT_INTERVAL", "1h",
			"DETECTOR_RULES_DIR", filepath.Join(s.StateDir, "rules"),
			"DETECTOR_SLOS_DIR", filepath.Join(s.StateDir, "slos"),
			"DETECTOR_ENGINES_FILE", filepath.Join(s.StateDir, "engines.yaml"),
			"DETECTOR_METRICS_ADDR", addr(s.Ports.Detector),
			"DETECTOR_EXTERNAL_URL", url(s.Ports.Detector, ""))}
	return
}

// StreamMaxBytes is the stack's events stream cap (1 GiB): the dev NATS server reserves a
// stream's max_bytes up front, and other stacks and tests share it.
const StreamMaxBytes = 1 << 30

// Setup is the stack's setup step, `servescope migrate up` as the compose file's migrate service
// runs it: the ClickHouse database and its tables, the events and dead-letter streams (7 days,
// StreamMaxBytes), and consumer's durable consumer sized by consumer's CONSUMER_* settings.
func (s *Stack) Setup(consumer Service) Service {
	env := with(s.shared(), "SERVESCOPE_STREAM_MAX_AGE", "168h", "SERVESCOPE_STREAM_MAX_BYTES", strconv.Itoa(StreamMaxBytes))
	for _, k := range []string{"CONSUMER_DURABLE", "CONSUMER_BATCH_ROWS", "CONSUMER_FLUSH_INTERVAL"} {
		if v, ok := consumer.Env[k]; ok {
			env[k] = v
		}
	}
	return Service{Name: "setup", Bin: "servescope", Args: []string{"migrate", "up"}, Env: env}
}

// RunOnce runs the one-shot svc (Setup) from binDir to its end and returns its output, or an
// error with the output when it fails.
func RunOnce(ctx context.Context, binDir string, svc Service) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, svc.Bin), svc.Args...)
	cmd.Env = os.Environ()
	for k, v := range svc.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", svc.Bin, strings.Join(svc.Args, " "), err, out)
	}
	return string(out), nil
}
