// Command benchstreams measures what the gateway costs per open stream when it holds thousands of
// streaming answers at once, side by side with a bare httputil.ReverseProxy, in one run
// (scripts/bench streams).
//
// Layout. This process runs the clients and the engine: a fixed trickle server answering every
// chat completion with a vLLM-shaped event stream, one content chunk every -interval until the
// round ends, then the finish chunk, the usage-only chunk when asked (the gateway asks on the
// client's behalf and removes it) and "data: [DONE]". Each content chunk carries the time it was
// written, so a client knows each chunk's delay. The two proxies run as child processes of this
// binary (-serve bare, -serve gateway), so each one's memory, goroutines and CPU are its own:
// the gateway is services/gateway/server as its binary runs it, publishing every
// request.started/request.finished to the real JetStream (SERVESCOPE_NATS_URL) on a subject
// prefix of its own; the bare proxy is httputil.NewSingleHostReverseProxy with an
// http.Transport keeping up to 1024 idle connections (as in bench-gateway). Each child answers
// /stats on a control port (after a forced GC: goroutines, live heap and stacks, RSS, CPU) and
// serves net/http/pprof there.
//
// Method. For every level (-levels, default 1000, 5000, 10000 streams) and -rounds rounds, the
// three paths — direct to the trickle server, through the bare proxy, through the gateway — each
// open that many streams at -ramp streams per second, the paths' order rotating from round to
// round so outside load falls on all alike. Once every stream has its first byte the child's idle
// and loaded /stats give memory and goroutines per open stream; then, in a steady window of
// -window with every stream open, the clients note each chunk's delay (client read time − the
// trickle server's write time) and the child's CPU; then the streams end and close. Figures:
//
//   - memory per stream: Δ(live heap + goroutine stacks) ÷ streams, measured after a forced GC
//     (what the streams hold, not what the collector has yet to free); RSS per stream beside it;
//   - goroutines per stream;
//   - added time to first byte (request sent → first event read) and added chunk delay, p50 and
//     p99: a proxy's percentile minus the direct path's in the same round, median over rounds;
//     values below -p50-resolution / -p99-resolution count as that floor in a ratio (a busy
//     shared machine's scheduling slice cannot be told from zero);
//   - CPU per streamed chunk: the proxy process's CPU in the steady window ÷ chunks it delivered.
//
// Targets (at the largest level): the gateway's memory per stream ≤ 1.5× the bare proxy's, its
// added p99 chunk delay ≤ 1.2× the bare proxy's, no failed stream. The last line is one JSON
// object with every figure, the ratios and targets_met; the exit status is 1 when a target is
// missed, 2 when the benchmark could not run.
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
}

func main() { command().Main() }

func command() *service.Command {
	c := service.NewCommand("bench-streams", "Usage: bench-streams [flags]\n\nThe engine of scripts/bench streams: many open streams through the gateway beside a bare proxy.")
	serve := c.Flags.String("serve", "", "internal: run as a child (trickle, bare or gateway)")
	upstream := c.Flags.String("upstream", "", "internal: the child's upstream URL")
	spool := c.Flags.String("spool", "", "internal: the gateway child's spool directory")
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
	c.Flags.IntVar(&s.probes, "probes", 50, "streams opened one at a time during the steady window, for the time to first byte")
	c.Flags.StringVar(&s.profileDir, "profile-dir", "", "write the gateway's CPU, heap and goroutine profiles of the largest level's first round here")
	c.Run = func(_ context.Context, _ *slog.Logger, _ []string) error {
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
	case "gateway":
		natsCfg, err := config.Load[config.NATS]()
		if err != nil {
			return err
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
		return fmt.Errorf("-serve %q: want trickle, bare or gateway", kind)
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

const chunkHead = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1764460000,"model":"m","choices":[`

func (t *trickle) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	usage := bytes.Contains(body, []byte(`"include_usage":true`))
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
	tick := time.NewTicker(time.Duration(t.interval.Load()))
	defer tick.Stop()
	n := 0
	var buf []byte
	for {
		select {
		case <-r.Context().Done():
			return
		case <-release:
			tail := chunkHead + `{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}` + "\n\n"
			if usage {
				tail += chunkHead + fmt.Sprintf(`],"usage":{"prompt_tokens":9,"total_tokens":%d,"completion_tokens":%d}}`, 9+n, n) + "\n\n"
			}
			write(tail + "data: [DONE]\n\n")
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

var reqBody = []byte(`{"model":"m","messages":[{"role":"user","content":"Tell me a long story."}],"max_tokens":4096,"stream":true}`)

// openStream sends one streaming request and reads it to its end; opened is called once the
// first event arrived (or the stream failed).
func openStream(client *http.Client, base string, opened func()) (res streamResult) {
	once := sync.Once{}
	defer once.Do(opened)
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(reqBody))
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
}

// runRound opens n streams on one path and measures them; child is nil for the direct path.
func runRound(s settings, engine *proxyChild, base string, child *proxyChild, n, round int, profile string) (*pathRound, error) {
	var idle procStats
	var err error
	if child != nil {
		if idle, err = child.stats(true); err != nil {
			return nil, fmt.Errorf("%s stats: %w", child.name, err)
		}
	}
	// A fresh client per round, from a loopback source address of its own: the previous round's
	// closed connections (TIME_WAIT) never take this round's ports.
	src := net.IPv4(127, 0, byte(1+round/250), byte(2+round%250))
	tr0 := &http.Transport{
		DialContext:         (&net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: -1, DisableKeepAlives: true, DisableCompression: true,
	}
	defer tr0.CloseIdleConnections()
	client := &http.Client{Transport: tr0}

	results := make([]streamResult, n)
	var opened sync.WaitGroup
	var finished sync.WaitGroup
	opened.Add(n)
	finished.Add(n)
	every := time.Duration(float64(time.Second) / s.ramp)
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * every)); d > 0 {
			time.Sleep(d)
		}
		go func() {
			defer finished.Done()
			results[i] = openStream(client, base, opened.Done)
		}()
	}
	waitOrTimeout(&opened, 2*time.Minute)
	time.Sleep(time.Second) // let the last opened streams get a chunk through
	pr := &pathRound{}
	var loaded procStats
	if child != nil {
		if loaded, err = child.stats(true); err != nil {
			return nil, fmt.Errorf("%s stats: %w", child.name, err)
		}
		pr.memPerStr = float64(loaded.HeapLive+loaded.Stacks-idle.HeapLive-idle.Stacks) / float64(n)
		pr.rssPerStr = float64(loaded.RSS-idle.RSS) / float64(n)
		pr.gorPerStr = float64(loaded.Goroutines-idle.Goroutines) / float64(n)
	}
	// The steady window starts after the forced GC above settled.
	time.Sleep(s.interval)
	var stopProfile func()
	if child != nil && profile != "" {
		stopProfile = fetchProfiles(child, profile, s.window)
	}
	winStart := time.Now()
	cpu0 := int64(0)
	if child != nil {
		cpu0 = int64(benchkit.ProcCPU(child.cmd.Process.Pid))
	}
	// Probe streams, opened one at a time through the window while the n others stay open,
	// measure the time to first byte of a new stream on a proxy holding n: the ramp above opens
	// streams faster than a loaded machine can set them up, so its own times to first byte
	// measure the queue, not the proxy.
	probes := make([]streamResult, s.probes)
	finished.Add(s.probes)
	go func() {
		for i := range s.probes {
			time.Sleep(s.window / time.Duration(s.probes+1))
			var opened sync.WaitGroup
			opened.Add(1)
			go func() {
				defer finished.Done()
				probes[i] = openStream(client, base, opened.Done)
			}()
			opened.Wait()
		}
	}()
	time.Sleep(time.Until(winStart.Add(s.window)))
	winEnd := time.Now()
	cpu1 := int64(0)
	if child != nil {
		cpu1 = int64(benchkit.ProcCPU(child.cmd.Process.Pid))
	}
	if stopProfile != nil {
		stopProfile()
	}
	if err := engine.release(); err != nil {
		return nil, err
	}
	waitOrTimeout(&finished, 2*time.Minute)
	lo, hi := winStart.UnixNano(), winEnd.UnixNano()
	for _, r := range probes {
		if r.err == nil {
			pr.ttfb = append(pr.ttfb, r.ttfb)
		}
	}
	for _, r := range append(results, probes...) {
		if r.err != nil {
			pr.failed++
			if pr.failed <= 3 {
				fmt.Fprintf(os.Stderr, "stream via %s failed: %v\n", base, r.err)
			}
		}
	}
	for _, r := range results {
		if r.err != nil {
			continue
		}
		for k, ts := range r.sendTS {
			if ts >= lo && ts < hi {
				pr.delays = append(pr.delays, time.Duration(r.delayNS[k]))
				pr.chunks++
			}
		}
	}
	if child != nil && pr.chunks > 0 {
		pr.cpuPerChk = float64(cpu1-cpu0) / 1e3 / float64(pr.chunks)
	}
	slices.Sort(pr.ttfb)
	slices.Sort(pr.delays)
	return pr, nil
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
	// IntervalMs is the time between two chunks of a stream; WindowSeconds the steady window.
	IntervalMs    int64   `json:"interval_ms"`
	WindowSeconds float64 `json:"window_s"`
	// Per open stream, in the proxy process.
	BareMemoryBytes       float64 `json:"bare_memory_bytes_per_stream"`
	GatewayMemoryBytes    float64 `json:"gateway_memory_bytes_per_stream"`
	BareRSSBytes          float64 `json:"bare_rss_bytes_per_stream"`
	GatewayRSSBytes       float64 `json:"gateway_rss_bytes_per_stream"`
	BareGoroutines        float64 `json:"bare_goroutines_per_stream"`
	GatewayGoroutines     float64 `json:"gateway_goroutines_per_stream"`
	DirectTTFBP50Ms       float64 `json:"direct_ttfb_p50_ms"`
	DirectTTFBP99Ms       float64 `json:"direct_ttfb_p99_ms"`
	BareAddedTTFBP50Ms    float64 `json:"bare_added_ttfb_p50_ms"`
	BareAddedTTFBP99Ms    float64 `json:"bare_added_ttfb_p99_ms"`
	GatewayAddedTTFBP50Ms float64 `json:"gateway_added_ttfb_p50_ms"`
	GatewayAddedTTFBP99Ms float64 `json:"gateway_added_ttfb_p99_ms"`
	DirectChunkP50Ms      float64 `json:"direct_chunk_delay_p50_ms"`
	DirectChunkP99Ms      float64 `json:"direct_chunk_delay_p99_ms"`
	BareAddedChunkP50Ms   float64 `json:"bare_added_chunk_p50_ms"`
	BareAddedChunkP99Ms   float64 `json:"bare_added_chunk_p99_ms"`
	GwAddedChunkP50Ms     float64 `json:"gateway_added_chunk_p50_ms"`
	GwAddedChunkP99Ms     float64 `json:"gateway_added_chunk_p99_ms"`
	BareCPUUsPerChunk     float64 `json:"bare_cpu_us_per_chunk"`
	GatewayCPUUsPerChunk  float64 `json:"gateway_cpu_us_per_chunk"`
	MemoryRatio           float64 `json:"memory_ratio"`
	ChunkP99Ratio         float64 `json:"added_chunk_p99_ratio"`
	TTFBP99Ratio          float64 `json:"added_ttfb_p99_ratio"`
	CPURatio              float64 `json:"cpu_per_chunk_ratio"`
	ChunksPerRound        int64   `json:"gateway_chunks_per_round"`
	Failed                int     `json:"failed_streams"`
	LoadAvg               float64 `json:"load_avg_1m"`
	// Per round, to show the spread behind the medians.
	GatewayAddedChunkP99Rounds []float64 `json:"gateway_added_chunk_p99_rounds_ms"`
	BareAddedChunkP99Rounds    []float64 `json:"bare_added_chunk_p99_rounds_ms"`
}

func run(s settings) (bool, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	maxN := slices.Max(s.levels)
	// Every stream is a client socket and an engine socket here, and two sockets in a proxy.
	limit, err := benchkit.RaiseOpenFiles(uint64(2*maxN + 1024))
	if err != nil {
		return false, err
	}
	// A proxy holds two sockets per stream (client and engine) besides a few of its own: a level
	// beyond what the open-file limit allows is held at the most that fits, and says so.
	fit := (int(limit)-fdReserve)/2 - s.probes
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

	// The engine, in a process of its own: every stream is a socket there.
	engine, err := startChild("trickle", "", "", 100*time.Millisecond)
	if err != nil {
		return false, err
	}
	defer engine.stop()
	engineURL := engine.url

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

	bare, err := startChild("bare", engineURL, "", 0)
	if err != nil {
		return false, err
	}
	defer bare.stop()
	gw, err := startChild("gateway", engineURL, spool, 0)
	if err != nil {
		return false, err
	}
	defer gw.stop()
	log.Info("proxies", "bare", bare.url, "bare_control", bare.ctl, "gateway", gw.url, "gateway_control", gw.ctl)

	type path struct {
		name  string
		url   string
		child *proxyChild
	}
	paths := []path{{"direct", engineURL, nil}, {"bare", bare.url, bare}, {"gateway", gw.url, gw}}
	// Warm up every path (connections, code, the gateway's NATS).
	for _, p := range paths {
		if _, err := runRound(settings{ramp: s.ramp, interval: 100 * time.Millisecond, window: 300 * time.Millisecond, probes: 3}, engine, p.url, p.child, 50, 0, ""); err != nil {
			return false, err
		}
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
		if err := engine.setInterval(ls.interval); err != nil {
			return false, err
		}
		rs := map[string][]*pathRound{}
		lr := &levelResult{Streams: n, IntervalMs: ls.interval.Milliseconds(), WindowSeconds: ls.window.Seconds()}
		var levelLoads []float64
		for round := range s.rounds {
			for k := range paths {
				p := paths[(k+round)%len(paths)]
				profile := ""
				if p.name == "gateway" && n == maxN && round == 0 && s.profileDir != "" {
					if err := os.MkdirAll(s.profileDir, 0o755); err != nil {
						return false, err
					}
					profile = fmt.Sprintf("%s/gateway-%d", s.profileDir, n)
				}
				levelLoads = append(levelLoads, benchkit.LoadAvg())
				pr, err := runRound(ls, engine, p.url, p.child, n, roundNo, profile)
				roundNo++
				if err != nil {
					return false, err
				}
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
		lr.BareMemoryBytes = benchkit.Round(med("bare", func(r *pathRound) float64 { return r.memPerStr }), 0)
		lr.GatewayMemoryBytes = benchkit.Round(med("gateway", func(r *pathRound) float64 { return r.memPerStr }), 0)
		lr.BareRSSBytes = benchkit.Round(med("bare", func(r *pathRound) float64 { return r.rssPerStr }), 0)
		lr.GatewayRSSBytes = benchkit.Round(med("gateway", func(r *pathRound) float64 { return r.rssPerStr }), 0)
		lr.BareGoroutines = benchkit.Round(med("bare", func(r *pathRound) float64 { return r.gorPerStr }), 2)
		lr.GatewayGoroutines = benchkit.Round(med("gateway", func(r *pathRound) float64 { return r.gorPerStr }), 2)
		lr.DirectTTFBP50Ms = med("direct", func(r *pathRound) float64 { return benchkit.Ms(benchkit.PctSorted(r.ttfb, 50)) })
		lr.DirectTTFBP99Ms = med("direct", func(r *pathRound) float64 { return benchkit.Ms(benchkit.PctSorted(r.ttfb, 99)) })
		lr.DirectChunkP50Ms = med("direct", func(r *pathRound) float64 { return benchkit.Ms(benchkit.PctSorted(r.delays, 50)) })
		lr.DirectChunkP99Ms = med("direct", func(r *pathRound) float64 { return benchkit.Ms(benchkit.PctSorted(r.delays, 99)) })
		lr.BareAddedTTFBP50Ms, _ = added("bare", ttfb, 50)
		lr.BareAddedTTFBP99Ms, _ = added("bare", ttfb, 99)
		lr.GatewayAddedTTFBP50Ms, _ = added("gateway", ttfb, 50)
		lr.GatewayAddedTTFBP99Ms, _ = added("gateway", ttfb, 99)
		lr.BareAddedChunkP50Ms, _ = added("bare", delay, 50)
		lr.BareAddedChunkP99Ms, lr.BareAddedChunkP99Rounds = added("bare", delay, 99)
		lr.GwAddedChunkP50Ms, _ = added("gateway", delay, 50)
		lr.GwAddedChunkP99Ms, lr.GatewayAddedChunkP99Rounds = added("gateway", delay, 99)
		lr.BareCPUUsPerChunk = benchkit.Round(med("bare", func(r *pathRound) float64 { return r.cpuPerChk }), 2)
		lr.GatewayCPUUsPerChunk = benchkit.Round(med("gateway", func(r *pathRound) float64 { return r.cpuPerChk }), 2)
		lr.ChunksPerRound = int64(med("gateway", func(r *pathRound) float64 { return float64(r.chunks) }))
		lr.MemoryRatio = benchkit.Ratio(lr.GatewayMemoryBytes, lr.BareMemoryBytes, 1)
		lr.ChunkP99Ratio = benchkit.Ratio(lr.GwAddedChunkP99Ms, lr.BareAddedChunkP99Ms, benchkit.Ms(s.p99Resolution))
		lr.TTFBP99Ratio = benchkit.Ratio(lr.GatewayAddedTTFBP99Ms, lr.BareAddedTTFBP99Ms, benchkit.Ms(s.p99Resolution))
		lr.CPURatio = benchkit.Ratio(lr.GatewayCPUUsPerChunk, lr.BareCPUUsPerChunk, 0.01)
		lr.LoadAvg = benchkit.Round(benchkit.Median(levelLoads), 2)
		loads = append(loads, levelLoads...)
		results = append(results, lr)
		fmt.Printf("%6d streams | memory/stream bare %.1f KiB gateway %.1f KiB (×%.2f) | goroutines/stream bare %.2f gateway %.2f | "+
			"added chunk delay p50/p99 bare %.3f/%.3f ms gateway %.3f/%.3f ms (p99 ×%.2f) | added TTFB p99 bare %.2f gateway %.2f ms | "+
			"CPU/chunk bare %.1f µs gateway %.1f µs | load %.1f\n",
			n, lr.BareMemoryBytes/1024, lr.GatewayMemoryBytes/1024, lr.MemoryRatio, lr.BareGoroutines, lr.GatewayGoroutines,
			lr.BareAddedChunkP50Ms, lr.BareAddedChunkP99Ms, lr.GwAddedChunkP50Ms, lr.GwAddedChunkP99Ms, lr.ChunkP99Ratio,
			lr.BareAddedTTFBP99Ms, lr.GatewayAddedTTFBP99Ms, lr.BareCPUUsPerChunk, lr.GatewayCPUUsPerChunk, lr.LoadAvg)
	}
	top := results[len(results)-1]
	met := top.MemoryRatio <= s.targetMem && top.ChunkP99Ratio <= s.targetP99 && top.Failed == 0
	out := map[string]any{
		"bench":                 "streams",
		"levels":                results,
		"memory_ratio":          top.MemoryRatio,
		"added_chunk_p99_ratio": top.ChunkP99Ratio,
		"target_memory_ratio":   s.targetMem,
		"target_chunk_p99":      s.targetP99,
		"chunk_rate_per_s":      s.chunkRate,
		"rounds":                s.rounds,
		"p99_resolution_ms":     benchkit.Ms(s.p99Resolution),
		"load_avg_1m":           benchkit.Round(benchkit.Median(loads), 2),
		"targets_met":           met,
		"open_file_limit":       limit,
		"notes":                 notes,
	}
	return met, benchkit.PrintResult(out)
}
