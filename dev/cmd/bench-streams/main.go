// Command benchstreams measures what the gateway costs per open stream when it holds thousands of
// streaming answers at once, side by side with a bare httputil.ReverseProxy, in one run
// (scripts/bench streams).
//
// Layout. This process runs the clients and the engine: a fixed trickle server answering every
// chat completion with a vLLM-shaped event stream, one content chunk every -interval until the
// round ends, then the finish chunk, the usage-only chunk when asked (the gateway asks on the
// client's behalf and removes it) and "data: [DONE]". Each content chunk carries the time it was
// written, so a client knows each chunk's delay; a request with max_tokens 1 (a probe) gets the
// role chunk, one content chunk and the end at once. The proxies run as child processes of this
// binary (-serve bare, -serve gateway, -serve spooling), so each one's memory, goroutines and CPU
// are its own: the gateway is services/gateway/server as its binary runs it, publishing every
// request.started/request.finished to the real JetStream (SERVESCOPE_NATS_URL) on a subject
// prefix of its own, the spooling gateway the same with its NATS URL at a port where nothing
// listens; the bare proxy is httputil.NewSingleHostReverseProxy with an
// http.Transport keeping up to 1024 idle connections (as in bench-gateway). Each child answers
// /stats on a control port (after a forced GC: goroutines, live heap and stacks, RSS, CPU) and
// serves net/http/pprof there.
//
// Method. For every level (-levels, default 1000, 5000, 10000 streams) and -rounds rounds, the
// paths — direct to the trickle server, through the bare proxy, through the gateway, and (unless
// -spooling=false) through a second gateway whose broker is down, so every event goes to its
// spool — each open that many streams at once, in lockstep at -ramp streams per second (stream i
// of every path opened together, in an order rotating per stream and round). Once every stream
// has its first byte, each child's idle and loaded /stats give memory and goroutines per open
// stream; then, in one steady window of -window with every stream of every path open and nothing
// else asked of the proxies, the clients note each chunk's delay (client read time − the trickle
// server's write time, per chunk) and each child's CPU; then, in a window of its own
// (-ttfb-window) with every stream still open, each path's clients open -probes short streams
// one at a time (max_tokens 1: the trickle server answers at once, and the stream ends), whose
// time to first byte is a new request's on a proxy holding them all; then the streams end and
// close. Measuring the paths in the same window, rather than one after another, is what makes
// the tails comparable on a shared machine: a stall of the machine delays the chunks of every
// path in flight at that moment alike, where sequential rounds put each stall on whichever path
// happened to run (the p99s then flipped from round to round). The probes have a window of their
// own so that their requests (the gateway's recording and publishing of each) do not count in the
// CPU per chunk, and there are hundreds of them because a p99 of 50 probes (the bench's former
// count) is the second-slowest of 50: one scheduling stall decided it, and it moved between 0.9×
// and 2.5× the bare proxy's from run to run.
// Figures:
//
//   - memory per stream: Δ(live heap + goroutine stacks) ÷ streams, measured after a forced GC
//     (what the streams hold, not what the collector has yet to free); RSS per stream beside it;
//   - goroutines per stream;
//   - added time to first byte (request sent → first event read, the probes) and added chunk
//     delay, p50 and p99: a proxy's percentile minus the direct path's in the same round, per
//     round and median over rounds; values below -p50-resolution / -p99-resolution count as that
//     floor in a ratio (a busy shared machine's scheduling slice cannot be told from zero);
//   - CPU per streamed chunk: the proxy process's CPU in the steady window ÷ chunks it delivered.
//
// Targets (at the largest level), for the gateway with its broker up and with it down: memory per
// stream ≤ 1.5× the bare proxy's, added p99 chunk delay ≤ 1.2×, added p99 time to first byte
// ≤ 1.2×, CPU per chunk ≤ 1.05×, no failed stream. The last line is one JSON object with every
// figure, the ratios and targets_met; the exit status is 1 when a target is missed, 2 when the
// benchmark could not run.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	_ "net/http/pprof" // the children's control port serves the profiles
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/servescope/servescope/internal/service"

	"github.com/servescope/servescope/dev/benchkit"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/gateway/server"
)

type settings struct {
	levels        []int
	rounds        int
	ramp          float64
	interval      time.Duration
	chunkRate     float64
	window        time.Duration
	targetMem     float64
	targetP99     float64
	p50Resolution time.Duration
	p99Resolution time.Duration
	profileDir    string
	probes        int
	ttfbWindow    time.Duration
	spooling      bool
	targetTTFB    float64
	targetCPU     float64
}

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("bench-streams", "Usage: bench-streams [flags]\n\nThe engine of scripts/bench streams: many open streams through the gateway beside a bare proxy.")
	serve := c.Flags.String("serve", "", "internal: run as a child (trickle, bare or gateway)")
	upstream := c.Flags.String("upstream", "", "internal: the child's upstream URL")
	spool := c.Flags.String("spool", "", "internal: the gateway child's spool directory")
	source := c.Flags.String("source", "", "internal: the clients child's loopback source address")
	var s settings
	levels := c.Flags.String("levels", "1000,5000,10000", "concurrent streams per level, comma-separated")
	c.Flags.IntVar(&s.rounds, "rounds", 3, "interleaved rounds per level (figures are medians over rounds)")
	c.Flags.Float64Var(&s.ramp, "ramp", 1000, "streams opened per second")
	c.Flags.DurationVar(&s.interval, "interval", 0, "time between two content chunks of a stream (default: streams ÷ -chunk-rate, at least 100 ms)")
	c.Flags.Float64Var(&s.chunkRate, "chunk-rate", 2000, "content chunks per second over all open streams, when -interval is 0")
	c.Flags.DurationVar(&s.window, "window", 10*time.Second, "steady window with every stream open, where chunk delays and CPU are measured")
	c.Flags.Float64Var(&s.targetMem, "target-memory", 1.5, "max gateway/bare memory per stream")
	c.Flags.Float64Var(&s.targetP99, "target-p99", 1.2, "max gateway/bare added p99 chunk delay")
	c.Flags.DurationVar(&s.p50Resolution, "p50-resolution", 20*time.Microsecond, "added p50 below this counts as this much in a ratio")
	c.Flags.DurationVar(&s.p99Resolution, "p99-resolution", 500*time.Microsecond, "added p99 below this counts as this much in a ratio")
	c.Flags.IntVar(&s.probes, "probes", 400, "short streams opened one at a time in the time-to-first-byte window (at 400 a round's p99 is its 5th slowest)")
	c.Flags.DurationVar(&s.ttfbWindow, "ttfb-window", 10*time.Second, "window after the steady window, with every stream still open, in which the probes measure the time to first byte")
	c.Flags.BoolVar(&s.spooling, "spooling", true, "also run a gateway whose NATS is down (every event to its spool) as a fourth path")
	c.Flags.Float64Var(&s.targetTTFB, "target-ttfb-p99", 1.2, "max gateway/bare added time to first byte at p99")
	c.Flags.Float64Var(&s.targetCPU, "target-cpu", 1.05, "max gateway/bare CPU per streamed chunk")
	c.Flags.StringVar(&s.profileDir, "profile-dir", "", "write the gateway's CPU, heap and goroutine profiles of the largest level's first round here")
	c.Run = func(_ context.Context, _ *slog.Logger, _ []string) error {
		if *serve == "clients" {
			if err := clients(*upstream, net.ParseIP(*source)); err != nil {
				return service.Exit(2, fmt.Errorf("clients: %w", err))
			}
			return nil
		}
		if *serve != "" {
			if err := child(*serve, *upstream, *spool, s.interval); err != nil {
				return service.Exit(2, fmt.Errorf("child: %w", err))
			}
			return nil
		}
		var err error
		if s.levels, err = benchkit.PositiveInts("levels", *levels, "count"); err != nil {
			return err
		}
		return benchkit.Verdict(run(s))
	}
	return c
}

// ---- the child proxies ----

// procStats is what a child reports on /stats.
type procStats struct {
	Goroutines int   `json:"goroutines"`
	HeapLive   int64 `json:"heap_live_bytes"`
	Stacks     int64 `json:"stack_bytes"`
	RSS        int64 `json:"rss_bytes"`
	CPUNanos   int64 `json:"cpu_ns"`
	NumGC      int64 `json:"num_gc"`
	PauseNanos int64 `json:"gc_pause_ns"`
}

func child(kind, upstream, spool string, interval time.Duration) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	target, err := url.Parse(upstream)
	if err != nil || (upstream == "" && kind != "trickle") {
		return fmt.Errorf("-upstream %q: %v", upstream, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var addr string
	done := make(chan error, 1)
	switch kind {
	case "bare":
		bare := httputil.NewSingleHostReverseProxy(target)
		bare.Transport = &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		addr = ln.Addr().String()
		srv := &http.Server{Handler: bare, ReadHeaderTimeout: 10 * time.Second}
		go func() { done <- srv.Serve(ln) }()
		go func() { <-ctx.Done(); _ = srv.Close() }()
	case "trickle":
		tr := newTrickle(interval)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		addr = ln.Addr().String()
		srv := &http.Server{Handler: tr, ReadHeaderTimeout: 30 * time.Second}
		go func() { done <- srv.Serve(ln) }()
		go func() { <-ctx.Done(); _ = srv.Close() }()
		http.HandleFunc("/release", func(w http.ResponseWriter, _ *http.Request) { tr.releaseAll() })
		http.HandleFunc("/interval", func(w http.ResponseWriter, r *http.Request) {
			d, err := time.ParseDuration(r.URL.Query().Get("d"))
			if err != nil || d <= 0 {
				http.Error(w, "want d=<duration>", http.StatusBadRequest)
				return
			}
			tr.interval.Store(int64(d))
		})
	case "gateway", "spooling":
		natsCfg, err := config.Load[config.NATS]()
		if err != nil {
			return err
		}
		if kind == "spooling" {
			// The broker is down: nothing listens on port 1, every event goes to the spool.
			natsCfg.URL = "nats://127.0.0.1:1"
		}
		gcfg, err := config.LoadFrom[server.Config](map[string]string{
			"GATEWAY_LISTEN_ADDR": "127.0.0.1:0", "GATEWAY_UPSTREAM_URL": upstream, "GATEWAY_SPOOL_DIR": spool,
			"GATEWAY_SHUTDOWN_TIMEOUT": "5s",
		})
		if err != nil {
			return err
		}
		gcfg.NATS = natsCfg
		gw, err := server.New(gcfg, log)
		if err != nil {
			return err
		}
		addr = gw.Addr()
		go func() { done <- gw.Run(ctx) }()
	default:
		return fmt.Errorf("-serve %q: want trickle, bare, gateway or spooling", kind)
	}
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.DefaultServeMux // net/http/pprof registered there
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("gc") == "1" {
			runtime.GC()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		pid := os.Getpid()
		_ = json.NewEncoder(w).Encode(procStats{
			Goroutines: runtime.NumGoroutine(), HeapLive: int64(ms.HeapAlloc), Stacks: int64(ms.StackInuse),
			RSS: benchkit.RSSBytes(pid), CPUNanos: int64(benchkit.ProcCPU(pid)),
			NumGC: int64(ms.NumGC), PauseNanos: int64(ms.PauseTotalNs),
		})
	})
	go func() { _ = http.Serve(ctl, mux) }()
	fmt.Printf("LISTEN %s %s\n", addr, ctl.Addr())
	// The parent closes our stdin when it goes; so do we.
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }()
	err = <-done
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// proxyChild is a running child proxy.
type proxyChild struct {
	name, url, ctl string
	cmd            *exec.Cmd
	stdin          io.WriteCloser
}

func startChild(kind, upstream, spool string, interval time.Duration) (*proxyChild, error) {
	cmd := exec.Command(os.Args[0], "-serve", kind, "-upstream", upstream, "-spool", spool, "-interval", interval.String())
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 3 || f[0] != "LISTEN" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("child %s did not start (%q): %v", kind, line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return &proxyChild{name: kind, url: "http://" + f[1], ctl: "http://" + f[2], cmd: cmd, stdin: stdin}, nil
}

func (c *proxyChild) stats(gc bool) (procStats, error) {
	var st procStats
	u := c.ctl + "/stats"
	if gc {
		u += "?gc=1"
	}
	resp, err := http.Get(u)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// setInterval sets the time between content chunks of the streams a trickle child opens next.
func (c *proxyChild) setInterval(d time.Duration) error {
	resp, err := http.Post(c.ctl+"/interval?d="+d.String(), "", nil)
	if err != nil {
		return fmt.Errorf("set the engine's chunk interval: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("set the engine's chunk interval: status %d", resp.StatusCode)
	}
	return nil
}

// release ends the streams a trickle child holds open.
func (c *proxyChild) release() error {
	resp, err := http.Post(c.ctl+"/release", "", nil)
	if err != nil {
		return fmt.Errorf("release the engine's streams: %w", err)
	}
	resp.Body.Close()
	return nil
}

func (c *proxyChild) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	_ = c.stdin.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// ---- the trickle engine ----

// trickle answers chat completions with an endless vLLM-shaped stream until the current round is
// released.
type trickle struct {
	interval atomic.Int64 // nanoseconds between content chunks of streams opened from now on
	release  atomic.Pointer[chan struct{}]
}

func newTrickle(interval time.Duration) *trickle {
	t := &trickle{}
	t.interval.Store(int64(interval))
	rel := make(chan struct{})
	t.release.Store(&rel)
	return t
}

// releaseAll ends every stream open now; later ones wait for the next release.
func (t *trickle) releaseAll() {
	next := make(chan struct{})
	close(*t.release.Swap(&next))
}

// fdReserve is the descriptors a proxy child needs besides its streams' sockets: listeners,
// control port, NATS, epoll, standard streams, the spool, profiles.
const fdReserve = 64

// probeFDs bounds the probe streams open at a time (one is opened once the last has its first
// byte, and each ends at once).
const probeFDs = 16

const chunkHead = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1764460000,"model":"m","choices":[`

func (t *trickle) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	usage := bytes.Contains(body, []byte(`"include_usage":true`))
	// A probe (max_tokens 1) gets its whole short answer at once: it measures the time to first
	// byte and leaves, adding no stream to the round.
	probe := bytes.Contains(body, []byte(`"max_tokens":1,`))
	release := *t.release.Load()
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	// Each stream has its engine connection to itself and closes it at its end, so a proxy's
	// pool of idle connections never carries one round's connections into the next round's
	// memory and goroutine counts.
	w.Header().Set("Connection", "close")
	fl := w.(http.Flusher)
	write := func(s string) bool {
		if _, err := io.WriteString(w, s); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	if !write(chunkHead + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n") {
		return
	}
	finish := func(n int) {
		tail := chunkHead + `{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}` + "\n\n"
		if usage {
			tail += chunkHead + fmt.Sprintf(`],"usage":{"prompt_tokens":9,"total_tokens":%d,"completion_tokens":%d}}`, 9+n, n) + "\n\n"
		}
		write(tail + "data: [DONE]\n\n")
	}
	if probe {
		write(chunkHead + `{"index":0,"delta":{"content":" probe"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
		finish(1)
		return
	}
	tick := time.NewTicker(time.Duration(t.interval.Load()))
	defer tick.Stop()
	n := 0
	var buf []byte
	for {
		select {
		case <-r.Context().Done():
			return
		case <-release:
			finish(n)
			return
		case <-tick.C:
			n++
			// The content is the write time in Unix nanoseconds, for the client's delay.
			buf = append(buf[:0], chunkHead...)
			buf = append(buf, `{"index":0,"delta":{"content":" t`...)
			buf = strconv.AppendInt(buf, time.Now().UnixNano(), 10)
			buf = append(buf, `"},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
			if _, err := w.Write(buf); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

// ---- the clients ----

// streamResult is one client stream's measurements.
type streamResult struct {
	ttfb    time.Duration
	sendTS  []int64 // each content chunk's write time (Unix ns)
	delayNS []int64 // and its delay to the client's read
	err     error
}

// reqBody opens a stream that lasts the round; probeBody a short one (the trickle server answers
// max_tokens 1 at once) for the time to first byte.
var (
	reqBody   = []byte(`{"model":"m","messages":[{"role":"user","content":"Tell me a long story."}],"max_tokens":4096,"stream":true}`)
	probeBody = []byte(`{"model":"m","messages":[{"role":"user","content":"Say one word."}],"max_tokens":1,"stream":true}`)
)

// openStream sends one streaming request with body and reads it to its end; opened is called
// once the first event arrived (or the stream failed).
func openStream(client *http.Client, base string, body []byte, opened func()) (res streamResult) {
	once := sync.Once{}
	defer once.Do(opened)
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		res.err = err
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		res.err = fmt.Errorf("status %d", resp.StatusCode)
		return res
	}
	br := bufio.NewReaderSize(resp.Body, 4096)
	done := false
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			now := time.Now()
			if res.ttfb == 0 {
				res.ttfb = now.Sub(start)
				once.Do(opened)
			}
			if i := bytes.Index(line, []byte(`"content":" t`)); i >= 0 {
				rest := line[i+len(`"content":" t`):]
				if j := bytes.IndexByte(rest, '"'); j > 0 {
					if ts, perr := strconv.ParseInt(string(rest[:j]), 10, 64); perr == nil {
						res.sendTS = append(res.sendTS, ts)
						res.delayNS = append(res.delayNS, now.UnixNano()-ts)
					}
				}
			}
			if bytes.HasPrefix(line, []byte("data: [DONE]")) {
				done = true
			}
		}
		if err != nil {
			if err != io.EOF {
				res.err = err
			} else if !done {
				res.err = errors.New("stream ended without data: [DONE]")
			}
			return res
		}
	}
}

// ---- one round ----

type pathRound struct {
	ttfb      []time.Duration // the probe streams' (opened in the steady window)
	delays    []time.Duration // chunks written inside the steady window
	chunks    int64           // chunks delivered in the window
	failed    int
	memPerStr float64 // bytes, Go live heap + stacks
	rssPerStr float64
	gorPerStr float64
	cpuPerChk float64 // µs
	// Garbage collections in the proxy during the probes' window, and their stop-the-world
	// pauses: what the collector could add to a time to first byte.
	ttfbGCs     int64
	ttfbPauseMs float64
}

// path is one way to an engine: direct (child nil), through the bare proxy or the gateway. Each
// path has a trickle engine of its own, so that no process holds more than two sockets per
// stream of one path (the open-file limit).
type path struct {
	name   string
	url    string
	child  *proxyChild
	engine *proxyChild
}

// clientCmd is one command the parent sends a clients child, a JSON line on its stdin: "open" n
// streams at ramp per second from T0 (Unix ns) on, then "window" (open probes one at a time
// between From and To), then "collect" (wait for every stream's end and report the chunks
// written between From and To).
type clientCmd struct {
	Op     string  `json:"op"`
	N      int     `json:"n,omitempty"`
	Ramp   float64 `json:"ramp,omitempty"`
	T0     int64   `json:"t0,omitempty"`
	From   int64   `json:"from,omitempty"`
	To     int64   `json:"to,omitempty"`
	Probes int     `json:"probes,omitempty"`
}

// clientReport is a clients child's answer to "collect".
type clientReport struct {
	TTFBNanos  []int64  `json:"ttfb_ns"`  // the probes'
	DelayNanos []int64  `json:"delay_ns"` // chunks written in the window
	Failed     int      `json:"failed"`
	Errors     []string `json:"errors,omitempty"` // the first few
}

// clients runs the streams of one path in a process of its own (-serve clients), one round, as
// its parent commands on stdin; it answers each command with a line on stdout. src is the
// loopback address its connections come from, so that a round never meets the previous round's
// closed connections (TIME_WAIT).
func clients(base string, src net.IP) error {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: -1, DisableKeepAlives: true, DisableCompression: true,
	}
	client := &http.Client{Transport: tr}
	in := json.NewDecoder(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	var results, probes []streamResult
	var finished, probing sync.WaitGroup
	for {
		var c clientCmd
		if err := in.Decode(&c); err != nil {
			return fmt.Errorf("read command: %w", err)
		}
		switch c.Op {
		case "open":
			results = make([]streamResult, c.N)
			var opened sync.WaitGroup
			opened.Add(c.N)
			finished.Add(c.N)
			every := time.Duration(float64(time.Second) / c.Ramp)
			t0 := time.Unix(0, c.T0)
			for i := range c.N {
				if d := time.Until(t0.Add(time.Duration(i) * every)); d > 0 {
					time.Sleep(d)
				}
				go func() {
					defer finished.Done()
					results[i] = openStream(client, base, reqBody, opened.Done)
				}()
			}
			waitOrTimeout(&opened, 2*time.Minute)
		case "window":
			// Probe streams, short answers opened one at a time through the window while the
			// round's streams stay open, measure the time to first byte of a new request on a
			// proxy holding them all: the ramp opens streams faster than a loaded machine can set
			// them up, so its own times to first byte measure the queue, not the proxy.
			probes = make([]streamResult, c.Probes)
			finished.Add(c.Probes)
			probing.Add(1)
			go func() {
				defer probing.Done()
				from := time.Unix(0, c.From)
				step := time.Duration(c.To-c.From) / time.Duration(c.Probes+1)
				for i := range c.Probes {
					time.Sleep(time.Until(from.Add(time.Duration(i+1) * step)))
					var opened sync.WaitGroup
					opened.Add(1)
					go func() {
						defer finished.Done()
						probes[i] = openStream(client, base, probeBody, opened.Done)
					}()
					opened.Wait()
				}
			}()
			// A probe still waiting for its first byte when the streams are released would
			// wait for the next round's release instead: the parent waits for this answer.
			time.Sleep(time.Until(time.Unix(0, c.To)))
			waitOrTimeout(&probing, 2*time.Minute)
		case "collect":
			waitOrTimeout(&finished, 2*time.Minute)
			var rep clientReport
			for _, r := range probes {
				if r.err == nil {
					rep.TTFBNanos = append(rep.TTFBNanos, int64(r.ttfb))
				}
			}
			for _, r := range append(results, probes...) {
				if r.err != nil {
					rep.Failed++
					if len(rep.Errors) < 3 {
						rep.Errors = append(rep.Errors, r.err.Error())
					}
				}
			}
			for _, r := range results {
				if r.err != nil {
					continue
				}
				for k, ts := range r.sendTS {
					if ts >= c.From && ts < c.To {
						rep.DelayNanos = append(rep.DelayNanos, r.delayNS[k])
					}
				}
			}
			return out.Encode(rep)
		default:
			return fmt.Errorf("unknown command %q", c.Op)
		}
		if err := out.Encode(map[string]string{"done": c.Op}); err != nil {
			return err
		}
	}
}

// clientsChild is a running clients child.
type clientsChild struct {
	cmd *exec.Cmd
	in  *json.Encoder
	out *json.Decoder
}

func startClients(base string, src net.IP) (*clientsChild, error) {
	cmd := exec.Command(os.Args[0], "-serve", "clients", "-upstream", base, "-source", src.String())
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &clientsChild{cmd: cmd, in: json.NewEncoder(stdin), out: json.NewDecoder(stdout)}, nil
}

// do sends c and reads the answer into v.
func (c *clientsChild) do(cmd clientCmd, v any) error {
	if err := c.in.Encode(cmd); err != nil {
		return fmt.Errorf("clients %s: %w", cmd.Op, err)
	}
	if err := c.out.Decode(v); err != nil {
		return fmt.Errorf("clients %s: %w", cmd.Op, err)
	}
	return nil
}

func (c *clientsChild) wait() { _ = c.cmd.Wait() }

// doAll runs f for every state at once and returns the first error.
func doAll(states []*pathState, f func(*pathState) error) error {
	errs := make([]error, len(states))
	var wg sync.WaitGroup
	for i, st := range states {
		wg.Go(func() { errs[i] = f(st) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pathState is one path's clients and counters during a round.
type pathState struct {
	path
	clients *clientsChild
	idle    procStats
	cpu0    int64
	pr      *pathRound
	profile string
}

// runRound opens n streams on every path at once, in lockstep (stream i of each path opened at
// the same moment by the path's clients process), and measures them in one steady window: every
// path's chunks are delayed by the same moments of outside load, so a proxy's added delay (its
// chunk delays minus the direct path's, both from the same window) reflects the proxy, not when
// it ran. profile, when set, is where the gateway's profiles go.
func runRound(s settings, paths []path, n, round int, profile string) (map[string]*pathRound, error) {
	states := make([]*pathState, len(paths))
	for k, p := range paths {
		st := &pathState{path: p, pr: &pathRound{}}
		if p.name == "gateway" {
			st.profile = profile
		}
		if p.child != nil {
			var err error
			if st.idle, err = p.child.stats(true); err != nil {
				return nil, fmt.Errorf("%s stats: %w", p.name, err)
			}
		}
		c, err := startClients(p.url, net.IPv4(127, byte(1+k), byte(1+round/250), byte(2+round%250)))
		if err != nil {
			return nil, fmt.Errorf("%s clients: %w", p.name, err)
		}
		defer c.wait()
		st.clients = c
		states[k] = st
	}
	// The paths' clients start together, a little after every one of them is running.
	t0 := time.Now().Add(200 * time.Millisecond).UnixNano()
	if err := doAll(states, func(st *pathState) error {
		var a map[string]string
		return st.clients.do(clientCmd{Op: "open", N: n, Ramp: s.ramp, T0: t0}, &a)
	}); err != nil {
		return nil, err
	}
	time.Sleep(time.Second) // let the last opened streams get a chunk through
	for _, st := range states {
		if st.child == nil {
			continue
		}
		loaded, err := st.child.stats(true)
		if err != nil {
			return nil, fmt.Errorf("%s stats: %w", st.name, err)
		}
		st.pr.memPerStr = float64(loaded.HeapLive+loaded.Stacks-st.idle.HeapLive-st.idle.Stacks) / float64(n)
		st.pr.rssPerStr = float64(loaded.RSS-st.idle.RSS) / float64(n)
		st.pr.gorPerStr = float64(loaded.Goroutines-st.idle.Goroutines) / float64(n)
	}
	// The steady window starts after the forced GCs above settled.
	time.Sleep(s.interval)
	var stopProfiles []func()
	for _, st := range states {
		if st.child != nil && st.profile != "" {
			stopProfiles = append(stopProfiles, fetchProfiles(st.child, st.profile, s.window))
		}
	}
	winStart := time.Now()
	winEnd := winStart.Add(s.window)
	for _, st := range states {
		if st.child != nil {
			st.cpu0 = int64(benchkit.ProcCPU(st.child.cmd.Process.Pid))
		}
	}
	// The steady window has the round's streams alone: its CPU per chunk carries no probe's
	// request. The probes follow in a window of their own, every stream still open.
	time.Sleep(time.Until(winEnd))
	cpu1 := map[string]int64{}
	for _, st := range states {
		if st.child != nil {
			cpu1[st.name] = int64(benchkit.ProcCPU(st.child.cmd.Process.Pid))
		}
	}
	for _, stop := range stopProfiles {
		stop()
	}
	ttfbStart := time.Now().Add(10 * time.Millisecond)
	ttfbEnd := ttfbStart.Add(s.ttfbWindow)
	gc0 := map[string]procStats{}
	for _, st := range states {
		if st.child != nil {
			g, err := st.child.stats(false)
			if err != nil {
				return nil, fmt.Errorf("%s stats: %w", st.name, err)
			}
			gc0[st.name] = g
		}
	}
	if err := doAll(states, func(st *pathState) error {
		// Answered once the window is over and every probe has its first byte.
		var a map[string]string
		return st.clients.do(clientCmd{Op: "window", From: ttfbStart.UnixNano(), To: ttfbEnd.UnixNano(), Probes: s.probes}, &a)
	}); err != nil {
		return nil, err
	}
	for _, st := range states {
		if st.child != nil {
			gc1, err := st.child.stats(false)
			if err != nil {
				return nil, fmt.Errorf("%s stats: %w", st.name, err)
			}
			st.pr.ttfbGCs = gc1.NumGC - gc0[st.name].NumGC
			st.pr.ttfbPauseMs = float64(gc1.PauseNanos-gc0[st.name].PauseNanos) / 1e6
		}
	}
	for _, st := range states {
		if err := st.engine.release(); err != nil {
			return nil, err
		}
	}
	out := map[string]*pathRound{}
	var mu sync.Mutex
	if err := doAll(states, func(st *pathState) error {
		var rep clientReport
		if err := st.clients.do(clientCmd{Op: "collect", From: winStart.UnixNano(), To: winEnd.UnixNano()}, &rep); err != nil {
			return err
		}
		pr := st.pr
		for _, d := range rep.TTFBNanos {
			pr.ttfb = append(pr.ttfb, time.Duration(d))
		}
		for _, d := range rep.DelayNanos {
			pr.delays = append(pr.delays, time.Duration(d))
		}
		pr.chunks, pr.failed = int64(len(rep.DelayNanos)), rep.Failed
		for _, e := range rep.Errors {
			fmt.Fprintf(os.Stderr, "stream via %s failed: %s\n", st.name, e)
		}
		if st.child != nil && pr.chunks > 0 {
			pr.cpuPerChk = float64(cpu1[st.name]-st.cpu0) / 1e3 / float64(pr.chunks)
		}
		slices.Sort(pr.ttfb)
		slices.Sort(pr.delays)
		mu.Lock()
		out[st.name] = pr
		mu.Unlock()
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// fetchProfiles takes the child's CPU profile over the window and, at the window's end, its heap
// and goroutine profiles; the returned func waits for them.
func fetchProfiles(c *proxyChild, prefix string, window time.Duration) func() {
	var wg sync.WaitGroup
	get := func(path, file string) {
		defer wg.Done()
		resp, err := http.Get(c.ctl + path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "profile:", err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "profile:", err)
			return
		}
		defer f.Close()
		_, _ = io.Copy(f, resp.Body)
	}
	wg.Add(1)
	go get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(window.Seconds())), prefix+".cpu.pprof")
	return func() {
		wg.Add(2)
		get("/debug/pprof/heap", prefix+".heap.pprof")
		get("/debug/pprof/goroutine", prefix+".goroutine.pprof")
		wg.Wait()
	}
}

func waitOrTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		fmt.Fprintf(os.Stderr, "bench-streams: streams still pending after %s\n", d)
	}
}

// ---- the run ----

// levelResult is one level's figures, medians over rounds.
type levelResult struct {
	Streams int `json:"streams"`
	// IntervalMs is the time between two chunks of a stream; WindowSeconds the steady window
	// (chunk delays, CPU per chunk), TTFBWindowSeconds the probes' window after it, Probes the
	// probes a path opens in it per round.
	IntervalMs        int64   `json:"interval_ms"`
	WindowSeconds     float64 `json:"window_s"`
	TTFBWindowSeconds float64 `json:"ttfb_window_s"`
	Probes            int     `json:"probes_per_round"`
	DirectTTFBP50Ms   float64 `json:"direct_ttfb_p50_ms"`
	DirectTTFBP99Ms   float64 `json:"direct_ttfb_p99_ms"`
	DirectChunkP50Ms  float64 `json:"direct_chunk_delay_p50_ms"`
	DirectChunkP99Ms  float64 `json:"direct_chunk_delay_p99_ms"`
	// Bare is httputil.ReverseProxy; Gateway the gateway publishing to JetStream; Spooling the
	// gateway with its broker down (every event to its spool), when run.
	Bare           proxyFigures  `json:"bare"`
	Gateway        proxyFigures  `json:"gateway"`
	Spooling       *proxyFigures `json:"spooling,omitempty"`
	ChunksPerRound int64         `json:"gateway_chunks_per_round"`
	Failed         int           `json:"failed_streams"`
	LoadAvg        float64       `json:"load_avg_1m"`
}

// proxyFigures are one proxy's figures at a level: medians over rounds, the per-round values
// behind them, and (for the gateway) the ratios to the bare proxy's.
type proxyFigures struct {
	// Per open stream, in the proxy process.
	MemoryBytes float64 `json:"memory_bytes_per_stream"`
	RSSBytes    float64 `json:"rss_bytes_per_stream"`
	Goroutines  float64 `json:"goroutines_per_stream"`
	// Added to the direct path's in the same round: time to first byte, and delay between
	// chunks.
	AddedTTFBP50Ms  float64 `json:"added_ttfb_p50_ms"`
	AddedTTFBP99Ms  float64 `json:"added_ttfb_p99_ms"`
	AddedChunkP50Ms float64 `json:"added_chunk_p50_ms"`
	AddedChunkP99Ms float64 `json:"added_chunk_p99_ms"`
	CPUUsPerChunk   float64 `json:"cpu_us_per_chunk"`
	// Rounds.
	AddedTTFBP50Rounds  []float64 `json:"added_ttfb_p50_rounds_ms"`
	AddedTTFBP99Rounds  []float64 `json:"added_ttfb_p99_rounds_ms"`
	AddedChunkP99Rounds []float64 `json:"added_chunk_p99_rounds_ms"`
	CPUUsPerChunkRounds []float64 `json:"cpu_us_per_chunk_rounds"`
	// Garbage collections during each round's probe window, and their total pause.
	TTFBWindowGCRounds      []int64   `json:"ttfb_window_gc_rounds"`
	TTFBWindowGCPauseRounds []float64 `json:"ttfb_window_gc_pause_rounds_ms"`
	// Ratios to the bare proxy's figures (0 for the bare proxy).
	MemoryRatio   float64 `json:"memory_ratio,omitempty"`
	ChunkP99Ratio float64 `json:"added_chunk_p99_ratio,omitempty"`
	TTFBP99Ratio  float64 `json:"added_ttfb_p99_ratio,omitempty"`
	CPURatio      float64 `json:"cpu_per_chunk_ratio,omitempty"`
}

// met says whether a gateway's figures meet the targets of s.
func (f proxyFigures) met(s settings) bool {
	return f.MemoryRatio <= s.targetMem && f.ChunkP99Ratio <= s.targetP99 && f.TTFBP99Ratio <= s.targetTTFB && f.CPURatio <= s.targetCPU
}

func run(s settings) (bool, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	maxN := slices.Max(s.levels)
	// The three paths run at once, each with a clients process and an engine of its own: a proxy
	// holds two sockets per stream, the others one.
	limit, err := benchkit.RaiseOpenFiles(uint64(2*(maxN+probeFDs) + 1024))
	if err != nil {
		return false, err
	}
	// A level beyond what the open-file limit allows is held at the most that fits, and says so.
	fit := (int(limit)-fdReserve)/2 - probeFDs
	var notes []string
	for i, n := range s.levels {
		if n > fit {
			notes = append(notes, fmt.Sprintf("%d streams asked, %d held: a proxy needs 2 sockets per stream and the open-file limit is %d (its hard limit, which this process lacks the privilege to raise)", n, fit, limit))
			s.levels[i] = fit
		}
	}
	for _, n := range notes {
		log.Warn(n)
	}
	maxN = slices.Max(s.levels)
	ctx := context.Background()

	// The engines, one per path, each in a process of its own: every stream is a socket there.
	var engines []*proxyChild
	nPaths := 3
	if s.spooling {
		nPaths = 4
	}
	for range nPaths {
		e, err := startChild("trickle", "", "", 100*time.Millisecond)
		if err != nil {
			return false, err
		}
		defer e.stop()
		engines = append(engines, e)
	}

	// NATS for the gateway: a subject prefix and streams of this run's own.
	streams, err := benchkit.OpenStreams(ctx, "bench-streams", fmt.Sprintf("bench_streams_%d", time.Now().UnixNano()), 1<<30)
	if err != nil {
		return false, err
	}
	defer streams.Close()
	spool, err := streams.Spool("bench-streams")
	if err != nil {
		return false, err
	}
	os.Setenv("SERVESCOPE_SUBJECT_PREFIX", streams.NATS.SubjectPrefix)
	os.Setenv("SERVESCOPE_STREAM_MAX_BYTES", strconv.FormatInt(streams.NATS.StreamMaxBytes, 10))

	bare, err := startChild("bare", engines[1].url, "", 0)
	if err != nil {
		return false, err
	}
	defer bare.stop()
	gw, err := startChild("gateway", engines[2].url, spool, 0)
	if err != nil {
		return false, err
	}
	defer gw.stop()
	log.Info("proxies", "bare", bare.url, "bare_control", bare.ctl, "gateway", gw.url, "gateway_control", gw.ctl)

	paths := []path{{"direct", engines[0].url, nil, engines[0]}, {"bare", bare.url, bare, engines[1]}, {"gateway", gw.url, gw, engines[2]}}
	if s.spooling {
		spoolDir, err := streams.Spool("bench-streams-down")
		if err != nil {
			return false, err
		}
		down, err := startChild("spooling", engines[3].url, spoolDir, 0)
		if err != nil {
			return false, err
		}
		defer down.stop()
		paths = append(paths, path{"spooling", down.url, down, engines[3]})
	}
	// Warm up every path (connections, code, the gateway's NATS).
	if _, err := runRound(settings{ramp: s.ramp, interval: 100 * time.Millisecond, window: 300 * time.Millisecond, probes: 3, ttfbWindow: 300 * time.Millisecond}, paths, 50, 0, ""); err != nil {
		return false, err
	}
	results := []*levelResult{}
	roundNo := 1
	loads := []float64{}
	for _, n := range s.levels {
		// The engine's chunks per second over all streams stay the same at every level (unless
		// -interval fixes the pace per stream): the proxies' cost per open stream is what grows
		// with the level, not the throughput a shared 2-core machine can push.
		ls := s
		if ls.interval <= 0 {
			ls.interval = max(100*time.Millisecond, time.Duration(float64(n)/s.chunkRate*float64(time.Second)))
		}
		ls.window = max(s.window, 3*ls.interval)
		for _, e := range engines {
			if err := e.setInterval(ls.interval); err != nil {
				return false, err
			}
		}
		rs := map[string][]*pathRound{}
		lr := &levelResult{Streams: n, IntervalMs: ls.interval.Milliseconds(), WindowSeconds: ls.window.Seconds()}
		var levelLoads []float64
		for round := range s.rounds {
			profile := ""
			if n == maxN && round == 0 && s.profileDir != "" {
				if err := os.MkdirAll(s.profileDir, 0o755); err != nil {
					return false, err
				}
				profile = fmt.Sprintf("%s/gateway-%d", s.profileDir, n)
			}
			levelLoads = append(levelLoads, benchkit.LoadAvg())
			prs, err := runRound(ls, paths, n, roundNo, profile)
			roundNo++
			if err != nil {
				return false, err
			}
			for _, p := range paths {
				pr := prs[p.name]
				rs[p.name] = append(rs[p.name], pr)
				lr.Failed += map[bool]int{true: pr.failed}[p.name != "direct"]
				log.Info("round", "streams", n, "round", round, "path", p.name, "failed", pr.failed,
					"ttfb_p50_ms", benchkit.Ms(benchkit.PctSorted(pr.ttfb, 50)), "ttfb_p99_ms", benchkit.Ms(benchkit.PctSorted(pr.ttfb, 99)),
					"chunk_p50_ms", benchkit.Ms(benchkit.PctSorted(pr.delays, 50)),
					"chunk_p99_ms", benchkit.Ms(benchkit.PctSorted(pr.delays, 99)),
					"mem_per_stream", int(pr.memPerStr), "rss_per_stream", int(pr.rssPerStr),
					"goroutines_per_stream", benchkit.Round(pr.gorPerStr, 2), "cpu_us_per_chunk", benchkit.Round(pr.cpuPerChk, 2),
					"chunks", pr.chunks, "load", benchkit.LoadAvg())
			}
		}
		med := func(path string, f func(*pathRound) float64) float64 {
			var v []float64
			for _, r := range rs[path] {
				v = append(v, f(r))
			}
			return benchkit.Median(v)
		}
		added := func(path string, pick func(*pathRound) []time.Duration, p float64) (float64, []float64) {
			var v []float64
			for i, r := range rs[path] {
				v = append(v, benchkit.Ms(benchkit.PctSorted(pick(r), p)-benchkit.PctSorted(pick(rs["direct"][i]), p)))
			}
			return benchkit.Median(v), v
		}
		ttfb := func(r *pathRound) []time.Duration { return r.ttfb }
		delay := func(r *pathRound) []time.Duration { return r.delays }
		figures := func(path string) proxyFigures {
			var f proxyFigures
			f.MemoryBytes = benchkit.Round(med(path, func(r *pathRound) float64 { return r.memPerStr }), 0)
			f.RSSBytes = benchkit.Round(med(path, func(r *pathRound) float64 { return r.rssPerStr }), 0)
			f.Goroutines = benchkit.Round(med(path, func(r *pathRound) float64 { return r.gorPerStr }), 2)
			f.AddedTTFBP50Ms, f.AddedTTFBP50Rounds = added(path, ttfb, 50)
			f.AddedTTFBP99Ms, f.AddedTTFBP99Rounds = added(path, ttfb, 99)
			f.AddedChunkP50Ms, _ = added(path, delay, 50)
			f.AddedChunkP99Ms, f.AddedChunkP99Rounds = added(path, delay, 99)
			f.CPUUsPerChunk = benchkit.Round(med(path, func(r *pathRound) float64 { return r.cpuPerChk }), 2)
			for _, r := range rs[path] {
				f.CPUUsPerChunkRounds = append(f.CPUUsPerChunkRounds, benchkit.Round(r.cpuPerChk, 2))
				f.TTFBWindowGCRounds = append(f.TTFBWindowGCRounds, r.ttfbGCs)
				f.TTFBWindowGCPauseRounds = append(f.TTFBWindowGCPauseRounds, benchkit.Round(r.ttfbPauseMs, 3))
			}
			return f
		}
		ratios := func(f *proxyFigures, bare proxyFigures) {
			f.MemoryRatio = benchkit.Ratio(f.MemoryBytes, bare.MemoryBytes, 1)
			f.ChunkP99Ratio = benchkit.Ratio(f.AddedChunkP99Ms, bare.AddedChunkP99Ms, benchkit.Ms(s.p99Resolution))
			f.TTFBP99Ratio = benchkit.Ratio(f.AddedTTFBP99Ms, bare.AddedTTFBP99Ms, benchkit.Ms(s.p99Resolution))
			f.CPURatio = benchkit.Ratio(f.CPUUsPerChunk, bare.CPUUsPerChunk, 0.01)
		}
		lr.TTFBWindowSeconds, lr.Probes = ls.ttfbWindow.Seconds(), s.probes
		lr.DirectTTFBP50Ms = med("direct", func(r *pathRound) float64 { return benchkit.Ms(benchkit.PctSorted(r.ttfb, 50)) })
		lr.DirectTTFBP99Ms = med("direct", func(r *pathRound) float64 { return benchkit.Ms(benchkit.PctSorted(r.ttfb, 99)) })
		lr.DirectChunkP50Ms = med("direct", func(r *pathRound) float64 { return benchkit.Ms(benchkit.PctSorted(r.delays, 50)) })
		lr.DirectChunkP99Ms = med("direct", func(r *pathRound) float64 { return benchkit.Ms(benchkit.PctSorted(r.delays, 99)) })
		lr.Bare, lr.Gateway = figures("bare"), figures("gateway")
		ratios(&lr.Gateway, lr.Bare)
		if s.spooling {
			f := figures("spooling")
			ratios(&f, lr.Bare)
			lr.Spooling = &f
		}
		lr.ChunksPerRound = int64(med("gateway", func(r *pathRound) float64 { return float64(r.chunks) }))
		lr.LoadAvg = benchkit.Round(benchkit.Median(levelLoads), 2)
		loads = append(loads, levelLoads...)
		results = append(results, lr)
		line := func(name string, f proxyFigures) string {
			out := fmt.Sprintf("%-8s memory/stream %5.1f KiB, goroutines %.2f | added TTFB p50/p99 %.3f/%.3f ms (p99 by round %v; GCs in the window %v, pauses %v ms) | added chunk delay p50/p99 %.3f/%.3f ms | CPU/chunk %.1f µs",
				name, f.MemoryBytes/1024, f.Goroutines, f.AddedTTFBP50Ms, f.AddedTTFBP99Ms, f.AddedTTFBP99Rounds, f.TTFBWindowGCRounds, f.TTFBWindowGCPauseRounds,
				f.AddedChunkP50Ms, f.AddedChunkP99Ms, f.CPUUsPerChunk)
			if f.CPURatio > 0 {
				out += fmt.Sprintf(" | ×bare: memory %.2f, TTFB p99 %.2f, chunk p99 %.2f, CPU %.2f", f.MemoryRatio, f.TTFBP99Ratio, f.ChunkP99Ratio, f.CPURatio)
			}
			return out
		}
		fmt.Printf("%6d streams (chunk every %v, %d probes a round, load %.1f): direct TTFB p50/p99 %.3f/%.3f ms, chunk delay p50/p99 %.3f/%.3f ms\n",
			n, ls.interval, s.probes, lr.LoadAvg, lr.DirectTTFBP50Ms, lr.DirectTTFBP99Ms, lr.DirectChunkP50Ms, lr.DirectChunkP99Ms)
		fmt.Println("  " + line("bare", lr.Bare))
		fmt.Println("  " + line("gateway", lr.Gateway))
		if lr.Spooling != nil {
			fmt.Println("  " + line("spooling", *lr.Spooling))
		}
	}
	top := results[len(results)-1]
	met := top.Gateway.met(s) && (top.Spooling == nil || top.Spooling.met(s)) && top.Failed == 0
	out := map[string]any{
		"bench":                 "streams",
		"levels":                results,
		"memory_ratio":          top.Gateway.MemoryRatio,
		"added_chunk_p99_ratio": top.Gateway.ChunkP99Ratio,
		"added_ttfb_p99_ratio":  top.Gateway.TTFBP99Ratio,
		"cpu_per_chunk_ratio":   top.Gateway.CPURatio,
		"target_memory_ratio":   s.targetMem,
		"target_chunk_p99":      s.targetP99,
		"target_ttfb_p99":       s.targetTTFB,
		"target_cpu_per_chunk":  s.targetCPU,
		"chunk_rate_per_s":      s.chunkRate,
		"rounds":                s.rounds,
		"p99_resolution_ms":     benchkit.Ms(s.p99Resolution),
		"load_avg_1m":           benchkit.Round(benchkit.Median(loads), 2),
		"targets_met":           met,
		"open_file_limit":       limit,
		"notes":                 notes,
	}
	if top.Spooling != nil {
		out["spooling_added_ttfb_p99_ratio"] = top.Spooling.TTFBP99Ratio
		out["spooling_cpu_per_chunk_ratio"] = top.Spooling.CPURatio
	}
	return met, benchkit.PrintResult(out)
}
