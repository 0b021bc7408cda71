package diagnose_test

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/dev/synth"
	"github.com/servescope/servescope/dev/testclock"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/diagnose"
	"github.com/servescope/servescope/internal/postmortem"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/detector/alerting"
	"github.com/servescope/servescope/services/detector/rules"
)

// The verdict suite: testdata/verdicts.txt says, for each view (a data set and the range a user
// opens on it), the verdict every complaint page and `servescope diagnose` must give. The data
// sets below write their rows into a database of their own (synthetic traffic through
// dev/synth, vLLM 0.10's own crash log, and the detector's alerts as the detector writes them);
// each view runs diagnose as the console's complaint page does (diagnose.Run at the built-in
// rules' windows, then Report.Verdict).

// suite is one data set's database.
type suite struct {
	t    *testing.T
	ctx  context.Context
	conn driver.Conn
	// at is the evaluation time: the end of the last hour the views read.
	at time.Time
	g  *synth.Generator
}

// dataSets write each data set's rows. The normal service records prompt tokens (44, the
// reference's normal workload); its engine runs a request or two at a time (0.1 req/s).
var dataSets = map[string]func(s *suite){
	"normal": func(s *suite) {
		s.normal(-27*time.Hour, 0)
	},
	"overload": func(s *suite) {
		s.normal(-27*time.Hour, -30*time.Minute)
		s.overload(-30*time.Minute, -15*time.Minute)
		s.normal(-15*time.Minute, 0)
		eng := map[string]string{"engine": synthEngine, "model": synthModel}
		s.alert("overload_queue", with(eng, "signal", "num_requests_waiting"), -29*time.Minute, -28*time.Minute, -14*time.Minute)
		s.alert("slot_limit", eng, -29*time.Minute, -28*time.Minute, -14*time.Minute)
		s.alert("latency_p95", map[string]string{"model": synthModel, "metric": "ttft_s"}, -28*time.Minute, -26*time.Minute, -12*time.Minute)
		s.alert("latency_p95", map[string]string{"model": synthModel, "metric": "tpot_s"}, -28*time.Minute, -26*time.Minute, -12*time.Minute)
	},
	// The reference's long prompt: 2,905 tokens, 2,880 of them from the prefix cache, TTFT 0.12 s.
	"long-prompt": func(s *suite) {
		s.normal(-27*time.Hour, -30*time.Minute)
		s.incident(-30*time.Minute, -10*time.Minute, 1, func(sh *synth.Shape) {
			sh.PromptTokens, sh.CachedTokens, sh.TTFTSeconds, sh.TPOTSeconds, sh.CompletionTokens = 2905, 2880, 0.12, 0.017, 64
		}, synth.NormalEngine(synth.Constant(1), 1.2))
		s.normal(-10*time.Minute, 0)
	},
	// The reference's long output: 1,024 tokens at 0.026 s apart, TTFT normal.
	"long-output": func(s *suite) {
		s.normal(-27*time.Hour, -40*time.Minute)
		s.incident(-40*time.Minute, -10*time.Minute, 1, func(sh *synth.Shape) {
			sh.CompletionTokens, sh.TPOTSeconds, sh.TTFTSeconds = 1024, 0.026, 0.083
		}, synth.NormalEngine(synth.Constant(1), 26.6))
		s.normal(-10*time.Minute, 0)
		s.alert("latency_p95", map[string]string{"model": synthModel, "metric": "e2e_s"}, -36*time.Minute, -34*time.Minute, -5*time.Minute)
	},
	// The engine dies of the reference's out-of-memory error (vLLM 0.10's own log): 5xx answers,
	// then scrapes that fail.
	"crash": func(s *suite) {
		s.normal(-27*time.Hour, -10*time.Minute)
		s.incident(-10*time.Minute, -6*time.Minute, 0.3, func(sh *synth.Shape) { sh.Status5xxProb = 0.3 },
			synth.NormalEngine(synth.NormalRate, synth.NormalE2ES))
		s.incident(-6*time.Minute, 0, 0.2, func(sh *synth.Shape) { sh.Status5xxProb = 1 }, synth.EngineShape{})
		s.down(-6*time.Minute, 0)
		s.crashLog(-6 * time.Minute)
		s.alert("server_errors", map[string]string{"model": synthModel, "class": "5xx"}, -9*time.Minute, -9*time.Minute, 0)
	},
	// The reference's embedding switch: a version the baseline never saw, top score 0.88 → 0.12.
	"embedding-switch": func(s *suite) {
		s.normal(-27*time.Hour, -35*time.Minute)
		s.incident(-35*time.Minute, -20*time.Minute, 0.3, func(sh *synth.Shape) {
			sh.TopScore, sh.EmbeddingModelVersion = 0.12, "bge-m3@2"
		}, synth.NormalEngine(synth.NormalRate, synth.NormalE2ES))
		s.normal(-20*time.Minute, 0)
		app := map[string]string{"app": "docs-qa"}
		s.alert("retrieval_version_change", with(with(app, "kind", "embedding_model_version"), "version", "bge-m3@2"), -35*time.Minute, -35*time.Minute, -20*time.Minute)
		s.alert("retrieval_score_drift", app, -33*time.Minute, -31*time.Minute, -19*time.Minute)
	},
	// The reference's wrong language: 4 of 32 answers over 15 minutes.
	"wrong-language": func(s *suite) {
		s.normal(-27*time.Hour, -40*time.Minute)
		s.traffic(synth.LanguageErrors(4, 32)(s.g, s.t0(-40*time.Minute), s.t0(-25*time.Minute)), true)
		s.normal(-25*time.Minute, 0)
		s.alert("output_language_errors", map[string]string{"app": "docs-qa"}, -31*time.Minute, -31*time.Minute, -22*time.Minute)
	},
	// Requests keep arriving and most never finish.
	"unfinished": func(s *suite) {
		s.normal(-27*time.Hour, -20*time.Minute)
		s.incident(-20*time.Minute, -15*time.Minute, 1, func(sh *synth.Shape) { sh.UnfinishedProb = 0.8 },
			synth.NormalEngine(synth.NormalRate, synth.NormalE2ES))
		s.normal(-15*time.Minute, 0)
		s.alert("unfinished_rising", map[string]string{"kind": "in_flight"}, -17*time.Minute, -17*time.Minute, -13*time.Minute)
	},
	// The baseline's engine ran nothing (running 0 at every sample); in the window TPOT rises six
	// times for the same output, at 256 running.
	"idle-baseline": func(s *suite) {
		idle := synth.NormalEngine(synth.NormalRate, synth.NormalE2ES)
		idle.Running, idle.Noise = func(time.Time) float64 { return 0 }, 0
		s.traffic(s.g.Requests(s.t0(-27*time.Hour), s.t0(-30*time.Minute), synth.NormalRate, suiteShape()), true)
		s.traffic(s.g.Samples(s.t0(-27*time.Hour), s.t0(0), idle), false)
		busy := synth.NormalEngine(synth.NormalRate, synth.NormalE2ES)
		busy.Running, busy.Noise = func(time.Time) float64 { return 256 }, 0
		s.traffic(s.g.Requests(s.t0(-30*time.Minute), s.t0(-10*time.Minute), synth.Constant(2), with2(suiteShape(), func(sh *synth.Shape) { sh.TPOTSeconds = 0.098 })), true)
		s.traffic(s.g.Samples(s.t0(-30*time.Minute), s.t0(-10*time.Minute), busy), false)
		s.traffic(s.g.Requests(s.t0(-10*time.Minute), s.t0(0), synth.NormalRate, suiteShape()), true)
	},
	// Nothing before the window (a fresh install); an overload inside it.
	"no-baseline": func(s *suite) {
		s.normal(-1*time.Hour, -30*time.Minute)
		s.overload(-30*time.Minute, -15*time.Minute)
		s.normal(-15*time.Minute, 0)
	},
	// An overload ends two minutes before the range, another runs inside it.
	"overload-before": func(s *suite) {
		s.normal(-27*time.Hour, -70*time.Minute)
		s.overload(-70*time.Minute, -62*time.Minute)
		s.normal(-62*time.Minute, -30*time.Minute)
		s.overload(-30*time.Minute, -15*time.Minute)
		s.normal(-15*time.Minute, 0)
	},
	// Normal data, and alerts it does not show: a wrong-language alert (a signature) and a TTFT
	// alert (a symptom) inside the range, a 4xx alert no complaint reads, a retrieval alert
	// resolved before the range, a KV alert firing since before it and still firing.
	"alert-only": func(s *suite) {
		s.normal(-27*time.Hour, 0)
		s.alert("output_language_errors", map[string]string{"app": "docs-qa"}, -40*time.Minute, -40*time.Minute, -37*time.Minute)
		s.alert("latency_p95", map[string]string{"model": synthModel, "metric": "ttft_s"}, -22*time.Minute, -20*time.Minute, -18*time.Minute)
		s.alert("server_errors", map[string]string{"model": synthModel, "class": "4xx"}, -50*time.Minute, -50*time.Minute, -45*time.Minute)
		s.alert("retrieval_score_drift", map[string]string{"app": "docs-qa"}, -3*time.Hour, -3*time.Hour, -2*time.Hour)
		s.alert("kv_cache_pressure", map[string]string{"engine": synthEngine, "model": synthModel}, -2*time.Hour, -2*time.Hour, 0)
	},
}

// viewChecks are a view's checks beyond its verdicts, by view name.
var viewChecks = map[string]func(t *testing.T, rep diagnose.Report){
	"no baseline at all": func(t *testing.T, rep diagnose.Report) {
		if rep.HasBaseline {
			t.Error("a baseline was found where nothing was written")
		}
		for _, r := range rep.Rows {
			if r.BaselineText != diagnose.NoBaselineText || r.Baseline != nil {
				t.Errorf("quantity %s: baseline %q, want %q", r.Key, r.BaselineText, diagnose.NoBaselineText)
			}
		}
	},
	"slow text against an idle baseline (running 0)": func(t *testing.T, rep diagnose.Report) {
		for _, r := range rep.Rows {
			if r.Key == "running_max" && (r.BaselineText != "0" || r.Change != "new") {
				t.Errorf("running max: baseline %q, change %q; want 0 and new", r.BaselineText, r.Change)
			}
		}
	},
	"incident just before the window": func(t *testing.T, rep diagnose.Report) {
		// The detector's baseline: the 24 h ending 1 h before the window starts, where the
		// earlier overload (two minutes before the window) is not.
		if want := (diagnose.Range{From: rep.Window.From.Add(-25 * time.Hour), To: rep.Window.From.Add(-time.Hour)}); rep.Baseline != want {
			t.Errorf("baseline %s, want %s", rep.Baseline, want)
		}
		if b := rep.Base.WaitingMax; b == nil || *b != 0 {
			t.Errorf("the baseline's waiting max is %v: the overload before the window is in it", b)
		}
	},
	"wrong language, last hour": func(t *testing.T, rep diagnose.Report) {
		// The hour's share alone is under the floor: the finding comes from the windows.
		for _, b := range rep.Branches {
			if b.ID == diagnose.BranchWrongLanguage && (b.Window == nil || b.Window.Length != 15*time.Minute) {
				t.Errorf("wrong language read at %+v, want windows of 15m (output_language_errors)", b.Window)
			}
		}
	},
}

const (
	synthModel  = "Qwen/Qwen2.5-7B-Instruct-AWQ"
	synthEngine = "http://vllm-0:8000"
)

func suiteShape() synth.Shape {
	sh := synth.NormalShape()
	sh.PromptTokens = 44
	return sh
}

func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

func with2(sh synth.Shape, change func(*synth.Shape)) synth.Shape { change(&sh); return sh }

// t0 is the evaluation time moved by d.
func (s *suite) t0(d time.Duration) time.Time { return s.at.Add(d) }

// traffic inserts t; withPhases fills the engine's queue/prefill/decode split of each answered
// request as the gateway copies it from vLLM's timing object.
func (s *suite) traffic(t *synth.Traffic, withPhases bool) {
	s.t.Helper()
	if withPhases {
		for _, f := range t.Finished {
			if f.TTFTSeconds != nil && f.QueueSeconds != nil && f.TPOTSeconds != nil && f.CompletionTokens != nil {
				prefill := max(0.001, *f.TTFTSeconds-*f.QueueSeconds-0.004)
				decode := *f.TPOTSeconds * float64(max(1, *f.CompletionTokens)-1)
				f.PrefillSeconds, f.DecodeSeconds = &prefill, &decode
			}
		}
	}
	if err := synth.Insert(s.ctx, s.conn, t); err != nil {
		s.t.Fatal(err)
	}
}

// normal is the normal service in [at+from, at+to).
func (s *suite) normal(from, to time.Duration) {
	s.t.Helper()
	s.traffic(s.g.Requests(s.t0(from), s.t0(to), synth.NormalRate, suiteShape()), true)
	s.traffic(s.g.Samples(s.t0(from), s.t0(to), synth.NormalEngine(synth.NormalRate, synth.NormalE2ES)), false)
}

// incident is traffic of a changed shape at rate in [at+from, at+to), with the engine's samples
// (none for the zero EngineShape).
func (s *suite) incident(from, to time.Duration, rate float64, change func(*synth.Shape), es synth.EngineShape) {
	s.t.Helper()
	s.traffic(s.g.Requests(s.t0(from), s.t0(to), synth.Constant(rate), with2(suiteShape(), change)), true)
	if es.Every > 0 {
		s.traffic(s.g.Samples(s.t0(from), s.t0(to), es), false)
	}
}

// overload is the reference's overload: queue wait 0.47 s, TPOT 0.147 s, 256 running, 44 waiting,
// KV cache 28%, at 14 requests a second.
func (s *suite) overload(from, to time.Duration) {
	s.t.Helper()
	eng := synth.NormalEngine(synth.NormalRate, synth.NormalE2ES)
	eng.Running = func(time.Time) float64 { return 256 }
	eng.Waiting = func(time.Time) float64 { return 44 }
	eng.KVCache = func(time.Time) float64 { return 0.28 }
	eng.Noise, eng.Every = 0, 10*time.Second
	s.incident(from, to, 14, func(sh *synth.Shape) {
		sh.QueueProb, sh.QueueSeconds, sh.TTFTSeconds, sh.TPOTSeconds = 1, 0.47, 0.38, 0.147
	}, eng)
}

// down writes failed scrapes (up = 0) every 15 s in [at+from, at+to).
func (s *suite) down(from, to time.Duration) {
	s.t.Helper()
	t := &synth.Traffic{}
	for at := s.t0(from); at.Before(s.t0(to)); at = at.Add(15 * time.Second) {
		e := schema.NewEngineSample(synthEngine, at)
		e.Up, e.ScrapeError = false, "connection refused"
		t.Samples = append(t.Samples, e)
	}
	s.traffic(t, false)
}

// crashLog writes vLLM 0.10's log of the reference's out-of-memory death, its last words moved to
// at+death.
func (s *suite) crashLog(death time.Duration) {
	s.t.Helper()
	f, err := os.Open("../postmortem/testdata/v0_10_type_one.log")
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	lines, err := postmortem.ReadLog(f, synthEngine, "vllm.log", s.t0(death), time.UTC)
	if err != nil {
		s.t.Fatal(err)
	}
	rep := postmortem.Analyze(lines, postmortem.Options{})
	if !rep.Crashed {
		s.t.Fatal("the crash fixture holds no crash")
	}
	shift := s.t0(death).Sub(rep.LastWords.TS)
	b, err := s.conn.PrepareBatch(s.ctx, `INSERT INTO engine_logs (event_id, ts, engine, source, offset, line, level, process, logger,
		message, prompt_throughput_tps, generation_throughput_tps, running, waiting, kv_cache_usage_perc, prefix_cache_hit_rate,
		exception_type, oom_bytes_requested, oom_total_capacity_bytes, oom_free_bytes, frames)`)
	if err != nil {
		s.t.Fatal(err)
	}
	for i, l := range lines {
		frames := l.Frames
		if frames == nil {
			frames = []string{}
		}
		if err := b.Append(fmt.Sprintf("crash-%d", i), l.TS.Add(shift), l.Engine, l.Source, l.Offset, l.Line, l.Level, l.Process,
			l.Logger, l.Message, l.PromptThroughputTPS, l.GenerationThroughputTPS, l.Running, l.Waiting, l.KVCacheUsagePerc,
			l.PrefixCacheHitRate, l.ExceptionType, l.OOMBytesRequested, l.OOMTotalCapacityBytes, l.OOMFreeBytes, frames); err != nil {
			s.t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		s.t.Fatalf("insert the crash log: %v", err)
	}
}

// alert writes one alert's rows as the detector writes them (alerting.CHStore): pending at
// at+pending, firing at at+fired, resolved at at+resolved (0: still firing at the evaluation
// time, when nothing is written for it).
func (s *suite) alert(rule string, labels map[string]string, pending, fired, resolved time.Duration) {
	s.t.Helper()
	labels = with(with(labels, "alertname", rule), "severity", "warning")
	a := &alerting.Alert{Rule: rule, Fingerprint: alerting.Fingerprint(labels), Labels: labels, Severity: "warning",
		Value: 1, Baseline: math.NaN(), Threshold: 0.5, ActiveAt: s.t0(pending),
		Annotations: map[string]string{"summary": rule + " fired (suite)"}}
	store := alerting.CHStore{Conn: s.conn}
	save := func(ts time.Time) {
		if err := store.Save(s.ctx, ts, []*alerting.Alert{a}); err != nil {
			s.t.Fatal(err)
		}
	}
	if pending < fired {
		a.State = alerting.StatePending
		save(s.t0(pending))
	}
	a.State, a.FiredAt = alerting.StateFiring, s.t0(fired)
	save(s.t0(fired))
	if resolved != 0 {
		a.State, a.ResolvedAt = alerting.StateInactive, s.t0(resolved)
		save(s.t0(resolved))
	}
}

// view is one section of testdata/verdicts.txt.
type view struct {
	name, data string
	from, to   time.Duration
	// want maps each complaint ID and "diagnose" to the expected verdict.
	want map[string]expected
	line int
}

// expected is one cell: a status (a Verdict's, or for diagnose "finding" or "none"), the branches
// that found, the alerts named (rules, as a sorted multiset) and texts the verdict must contain.
type expected struct {
	status   string
	findings []string
	alerts   []string
	texts    []string
	raw      string
}

func (e expected) String() string { return e.raw }

// readViews parses testdata/verdicts.txt.
func readViews(t *testing.T, path string) []view {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []view
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			out = append(out, view{name: line[1 : len(line)-1], want: map[string]expected{}, line: n})
			continue
		}
		if len(out) == 0 {
			t.Fatalf("%s:%d: %q before the first [section]", path, n, line)
		}
		v := &out[len(out)-1]
		key, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch key {
		case "data":
			v.data = rest
		case "window":
			parts := strings.Fields(rest)
			if len(parts) != 2 {
				t.Fatalf("%s:%d: window wants two offsets", path, n)
			}
			for i, p := range parts {
				d, err := time.ParseDuration(p)
				if err != nil {
					t.Fatalf("%s:%d: window: %v", path, n, err)
				}
				if i == 0 {
					v.from = d
				} else {
					v.to = d
				}
			}
		default:
			e, err := parseExpected(rest)
			if err != nil {
				t.Fatalf("%s:%d: %s: %v", path, n, key, err)
			}
			v.want[key] = e
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// statuses are the words a cell starts with: a complaint's verdict status, or diagnose's "none".
var statuses = map[string]string{
	"finding": diagnose.VerdictFinding, "unexplained": diagnose.VerdictUnexplained, "clear": diagnose.VerdictClear,
	"cannot-tell": diagnose.VerdictCannotTell, "none": "none",
}

// parseExpected reads a cell: [status] [branch ...] [@rule,...] [~"text" ...]. A diagnose cell
// names its findings without a status ("none" for none); its status is then "finding".
func parseExpected(s string) (expected, error) {
	e := expected{raw: s}
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		if strings.HasPrefix(s, `~"`) {
			end := strings.Index(s[2:], `"`)
			if end < 0 {
				return e, fmt.Errorf("unterminated text in %q", e.raw)
			}
			e.texts = append(e.texts, s[2:2+end])
			s = s[2+end+1:]
			continue
		}
		var tok string
		tok, s, _ = strings.Cut(s, " ")
		switch st, isStatus := statuses[tok]; {
		case strings.HasPrefix(tok, "@"):
			e.alerts = append(e.alerts, strings.Split(tok[1:], ",")...)
		case isStatus && e.status == "" && len(e.findings) == 0:
			e.status = st
		default:
			e.findings = append(e.findings, tok)
		}
	}
	if e.status == "" && len(e.findings) > 0 {
		e.status = "finding"
	}
	if e.status == "" {
		return e, fmt.Errorf("%q: no status and no finding", e.raw)
	}
	slices.Sort(e.alerts)
	return e, nil
}

// TestVerdicts runs testdata/verdicts.txt: every complaint page's verdict and diagnose's findings on
// each view must be the expected ones.
func TestVerdicts(t *testing.T) {
	t.Parallel()
	at := testclock.EvalTime(t, 2*time.Hour)
	views := readViews(t, "testdata/verdicts.txt")
	defs, err := rules.Load(builtin.Rules, builtin.RulesDir)
	if err != nil {
		t.Fatal(err)
	}
	windows := map[string]time.Duration{}
	for _, d := range defs {
		windows[d.Name] = d.Window.D()
	}
	columns := append(complaintIDs(), "diagnose")
	for _, v := range views {
		if dataSets[v.data] == nil {
			t.Fatalf("testdata/verdicts.txt:%d: [%s]: no data set %q", v.line, v.name, v.data)
		}
		for _, c := range columns {
			if _, ok := v.want[c]; !ok {
				t.Fatalf("testdata/verdicts.txt:%d: [%s] says nothing for %s: every page and diagnose need a verdict", v.line, v.name, c)
			}
		}
	}
	for _, d := range groupByData(views) {
		t.Run(d.data, func(t *testing.T) {
			t.Parallel()
			// One database per data set, shared by its views.
			conn, _ := testenv.ClickHouse(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			s := &suite{t: t, ctx: ctx, conn: conn, at: at, g: synth.New(7)}
			dataSets[d.data](s)
			for _, v := range d.views {
				t.Run(v.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
					defer cancel()
					rep, err := diagnose.Run(ctx, s.conn, diagnose.Options{
						Window: diagnose.Range{From: at.Add(v.from), To: at.Add(v.to)}, RuleWindows: windows})
					if err != nil {
						t.Fatal(err)
					}
					failed := false
					var verdicts strings.Builder
					for _, c := range columns {
						got := gotVerdict(t, &rep, c)
						fmt.Fprintf(&verdicts, "%-15s %s: %s\n", c, strings.ToUpper(got.status), got.text)
						if msg := mismatch(v.want[c], got); msg != "" {
							failed = true
							t.Errorf("testdata/verdicts.txt [%s] %s: want %s; %s\n  verdict: %s", v.name, c, v.want[c], msg, got.text)
						}
					}
					if check := viewChecks[v.name]; check != nil {
						check(t, rep)
					}
					if failed || testing.Verbose() {
						var b strings.Builder
						_ = rep.WriteText(&b)
						t.Logf("[%s] verdicts:\n%s\ndiagnose over %s:\n%s", v.name, verdicts.String(), rep.Window, b.String())
					}
				})
			}
		})
	}
}

// got is a verdict as the cells compare it.
type got struct {
	status   string
	findings []string
	alerts   []string
	text     string
}

func gotVerdict(t *testing.T, rep *diagnose.Report, column string) got {
	t.Helper()
	if column == "diagnose" {
		g := got{status: "none", findings: rep.Findings}
		if len(rep.Findings) > 0 {
			g.status = "finding"
		}
		var texts []string
		for _, b := range rep.Branches {
			if b.Status == diagnose.StatusFinding {
				texts = append(texts, b.ID+": "+b.Conclusion)
			}
		}
		for _, a := range rep.Alerts {
			g.alerts = append(g.alerts, a.Rule)
		}
		slices.Sort(g.alerts)
		g.text = strings.Join(texts, "; ")
		return g
	}
	v, err := rep.Verdict(column)
	if err != nil {
		t.Fatal(err)
	}
	g := got{status: v.Status, findings: v.Findings, text: v.Text}
	for _, a := range v.Alerts {
		g.alerts = append(g.alerts, a.Rule)
	}
	slices.Sort(g.alerts)
	return g
}

// mismatch says how g differs from e, "" when it does not.
func mismatch(e expected, g got) string {
	var probs []string
	if g.status != e.status {
		probs = append(probs, fmt.Sprintf("status %q", g.status))
	}
	if !slices.Equal(g.findings, e.findings) && len(g.findings)+len(e.findings) > 0 {
		probs = append(probs, fmt.Sprintf("findings %v", g.findings))
	}
	if !slices.Equal(g.alerts, e.alerts) && len(g.alerts)+len(e.alerts) > 0 {
		probs = append(probs, fmt.Sprintf("alerts %v", g.alerts))
	}
	for _, txt := range e.texts {
		if !strings.Contains(g.text, txt) {
			probs = append(probs, fmt.Sprintf("no %q in the verdict", txt))
		}
	}
	return strings.Join(probs, ", ")
}

type dataViews struct {
	data  string
	views []view
}

func groupByData(views []view) []dataViews {
	var out []dataViews
	idx := map[string]int{}
	for _, v := range views {
		i, ok := idx[v.data]
		if !ok {
			i = len(out)
			idx[v.data] = i
			out = append(out, dataViews{data: v.data})
		}
		out[i].views = append(out[i].views, v)
	}
	return out
}

func complaintIDs() []string {
	var out []string
	for _, c := range diagnose.Complaints {
		out = append(out, c.ID)
	}
	return out
}
