// Package server is the servescope console: a web page over ClickHouse showing the minimal
// dashboard of docs/measurements.md (one panel per row, each with its baseline, its "alert when" rule, the live
// state of the detector rule that watches it and the action it calls for), the alerts, one page
// per complaint of docs/measurements.md (From symptom to quantity) with `servescope diagnose`'s reading, and a crash page with
// `servescope postmortem`'s.
//
// Safety: every filter reaches ClickHouse as a query parameter; the console answers only a viewer
// holding its token (a bearer header, or the session cookie its login page sets: a random id the
// console keeps in memory, which signing out ends for good) unless CONSOLE_AUTH=proxy puts it
// behind the operator's own proxy; prompt and output text are shown only with
// CONSOLE_SHOW_CONTENT=true to a viewer who logged in with the content token. A ClickHouse outage
// is a banner on the page, not a blank page: the console starts without ClickHouse and /readyz
// says whether it answers (ready or not ready, nothing more: it answers without a token).
//
// Every link keeps the page's view: its range and filters travel in the query string, so a link
// opens the same view (View.Query).
package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	consolepanels "github.com/servescope/servescope/deploy/console"
	"github.com/servescope/servescope/internal/baseline"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/diagnose"
	"github.com/servescope/servescope/internal/panels"
	"github.com/servescope/servescope/services/console/web"
	"github.com/servescope/servescope/services/detector/rules"
	detectorservice "github.com/servescope/servescope/services/detector/service"
)

// Server is the console.
type Server struct {
	cfg     Config
	conn    driver.Conn
	panels  []*panels.Panel
	byName  map[string]*panels.Panel
	rules   []*rules.Definition
	log     *slog.Logger
	viewer  string
	content string
	pages   *pages
	now     func() time.Time
	logins  *sessions
	// resolutions keeps the evaluations of resolved alerts (the alerts page).
	resolutions resolutionCache
	// baselines keeps diagnose's baseline of the views drawn lately, for the panels' {{figure}}s.
	baselines baselines
}

// ruleWindows maps each loaded rule to its window: the resolution of diagnose's verdicts.
func (s *Server) ruleWindows() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, d := range s.rules {
		out[d.Name] = d.Window.D()
	}
	return out
}

// New builds the console on cfg. It opens the ClickHouse client without waiting for the server:
// the console serves (with a banner) through an outage.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	loaded, err := detectorservice.Load(detectorservice.Config{RulesDir: cfg.RulesDir, SLOsDir: cfg.SLOsDir})
	if err != nil {
		return nil, err
	}
	defs := loaded.Rules
	ps, err := panels.Load(consolepanels.Panels, consolepanels.PanelsDir, defs)
	if err != nil {
		return nil, err
	}
	viewer, content, err := cfg.tokens()
	if err != nil {
		return nil, err
	}
	opts, err := cfg.ClickHouse.Options()
	if err != nil {
		return nil, err
	}
	opts.ReadTimeout = cfg.QueryTimeout
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open ClickHouse at %v: %w", cfg.ClickHouse.Addr, err)
	}
	pg, err := newPages()
	if err != nil {
		conn.Close()
		return nil, err
	}
	s := &Server{cfg: cfg, conn: conn, panels: ps, byName: map[string]*panels.Panel{}, rules: defs, log: log,
		viewer: viewer, content: content, pages: pg, now: time.Now}
	s.logins = newSessions(func() time.Time { return s.now() })
	for _, p := range ps {
		s.byName[p.Name] = p
	}
	return s, nil
}

// Close closes the ClickHouse client.
func (s *Server) Close() error { return s.conn.Close() }

// Handler is the console's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /static/", http.StripPrefix("/static/", web.Static()))
	// Browsers ask for /favicon.ico on pages without an icon link (the error pages): no icon, no 404.
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	// Runbooks need no login (see runbookPage): they are what an alert's runbook_url opens.
	mux.HandleFunc("GET /runbooks", s.runbooksIndex)
	mux.HandleFunc("GET /runbooks/{rule}", s.runbookPage)
	mux.Handle("GET /{$}", s.auth(s.dashboard))
	mux.Handle("GET /alerts", s.auth(s.alertsPage))
	mux.Handle("GET /complaint/{id}", s.auth(s.complaintPage))
	mux.Handle("GET /crash", s.auth(s.crashPage))
	mux.Handle("GET /request", s.auth(s.requestLookup))
	mux.Handle("GET /request/{id}", s.auth(s.requestPage))
	mux.Handle("GET /api/request/{id}", s.auth(s.apiRequest))
	mux.Handle("GET /api/panels", s.auth(s.apiPanels))
	mux.Handle("GET /api/panel/{name}", s.auth(s.apiPanel))
	mux.Handle("GET /api/options", s.auth(s.apiOptions))
	return securityHeaders(mux)
}

// Run serves until ctx ends, then shuts down within 5 s.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.ListenAddr, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.log.Info("console serving", "addr", ln.Addr().String(), "auth", s.cfg.Auth, "panels", len(s.panels),
		"clickhouse", strings.Join(s.cfg.ClickHouse.Addr, ","), "database", s.cfg.ClickHouse.Database, "show_content", s.cfg.ShowContent)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		// Everything the page loads is the console's own: no CDN, no inline script.
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// readyz answers without a token, so it says ready or not and nothing else: the error, which
// names the database's address, goes to the console's log.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	w.Header().Set("Cache-Control", "no-store")
	if err := s.conn.Ping(ctx); err != nil {
		s.log.Warn("console not ready: ClickHouse does not answer", "err", err)
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// ---- authentication ---------------------------------------------------------------------------

const cookieName = "servescope_console"

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// viewerOf says whether the request may see the console and whether it may see content.
func (s *Server) viewerOf(r *http.Request) (ok, content bool) {
	ok = s.cfg.Auth == AuthProxy
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		tok := strings.TrimPrefix(h, "Bearer ")
		if s.viewer != "" && equal(tok, s.viewer) {
			ok = true
		}
		if s.content != "" && equal(tok, s.content) {
			ok, content = true, true
		}
	}
	if c, err := r.Cookie(cookieName); err == nil {
		if live, withContent := s.logins.get(c.Value); live {
			ok, content = true, content || withContent
		}
	}
	return ok, content && s.cfg.ShowContent
}

// signedIn says whether the request carries a live session (the page then offers to sign out).
func (s *Server) signedIn(r *http.Request) bool {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return false
	}
	ok, _ := s.logins.get(c.Value)
	return ok
}

type viewerKey struct{}

func (s *Server) auth(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, content := s.viewerOf(r)
		if !ok {
			if strings.HasPrefix(r.URL.Path, "/api/") {
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized: send Authorization: Bearer <CONSOLE_TOKEN> or log in at /login"})
				return
			}
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), viewerKey{}, content)))
	})
}

func contentAllowed(r *http.Request) bool {
	v, _ := r.Context().Value(viewerKey{}).(bool)
	return v
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	d := pageData{Title: "Log in", Nav: "login", Next: safeNext(r.URL.Query().Get("next")), SignedOut: r.URL.Query().Get("signed_out") != ""}
	if r.URL.Query().Get("error") != "" {
		d.Error = "That token is not valid."
	}
	s.pages.render(w, "login", d)
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	token := r.PostForm.Get("token")
	next := safeNext(r.PostForm.Get("next"))
	var content bool
	switch {
	case s.viewer != "" && equal(token, s.viewer):
	case s.content != "" && equal(token, s.content):
		content = true
	default:
		s.log.Warn("console login refused", "remote", r.RemoteAddr)
		http.Redirect(w, r, "/login?error=1&next="+url.QueryEscape(next), http.StatusSeeOther)
		return
	}
	id, err := s.logins.create(content)
	if err != nil {
		http.Error(w, "start a session: "+err.Error(), http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https",
		MaxAge: int(sessionTTL.Seconds())})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the session on the server (its cookie stops working, wherever it was copied to)
// and clears the cookie. It is a POST from the page's own form: SameSite=Strict keeps other
// sites from signing a viewer out.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(cookieName); err == nil {
		s.logins.end(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login?signed_out=1", http.StatusSeeOther)
}

// safeNext keeps a redirect target on this site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/"
	}
	return next
}

// ---- the chosen range and filters -------------------------------------------------------------

// Presets are the range presets, relative to now.
var Presets = []struct {
	Name string
	D    time.Duration
}{{"15m", 15 * time.Minute}, {"1h", time.Hour}, {"6h", 6 * time.Hour}, {"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}}

// View is a page's range and filters, as its URL says them (shareable).
type View struct {
	From, To time.Time
	Preset   string
	Filters  map[string]string
	Step     time.Duration
}

// parseView reads range=<preset> (default 1h) or from=/to= (RFC 3339 or Unix milliseconds), and
// the model, app and engine filters.
func (s *Server) parseView(q url.Values) (View, error) {
	v := View{Filters: map[string]string{}}
	now := s.now().UTC().Truncate(time.Second)
	for _, f := range panels.Filters {
		val := q.Get(f)
		if len(val) > 256 {
			return v, fmt.Errorf("%s: longer than 256 bytes", f)
		}
		v.Filters[f] = val
	}
	if q.Get("from") != "" || q.Get("to") != "" {
		from, err := parseTime(q.Get("from"))
		if err != nil {
			return v, fmt.Errorf("from: %w", err)
		}
		to := now
		if q.Get("to") != "" {
			if to, err = parseTime(q.Get("to")); err != nil {
				return v, fmt.Errorf("to: %w", err)
			}
		}
		if !to.After(from) {
			return v, errors.New("the range's end must be after its start")
		}
		if to.Sub(from) > 31*24*time.Hour {
			return v, errors.New("the range is longer than 31 days")
		}
		v.From, v.To = from.UTC(), to.UTC()
	} else {
		name := q.Get("range")
		if name == "" {
			name = "1h"
		}
		found := false
		for _, p := range Presets {
			if p.Name == name {
				v.From, v.To, v.Preset, found = now.Add(-p.D), now, name, true
			}
		}
		if !found {
			return v, fmt.Errorf("range %q: want one of 15m, 1h, 6h, 24h, 7d, or from/to", name)
		}
	}
	v.Step = StepFor(v.To.Sub(v.From))
	// The first bucket starts where the range does, so that every interval drawn is whole.
	v.From = v.From.Truncate(v.Step)
	return v, nil
}

func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	var ms int64
	if _, err := fmt.Sscanf(s, "%d", &ms); err == nil && fmt.Sprint(ms) == s {
		return time.UnixMilli(ms), nil
	}
	if t, err := time.ParseInLocation("2006-01-02T15:04", s, time.UTC); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q: want RFC 3339, 2006-01-02T15:04 (UTC) or Unix milliseconds", s)
}

// steps are the bucket widths a chart may use.
var steps = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second,
	30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute,
	30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour}

// StepFor is the smallest step that draws a range in at most 120 buckets.
func StepFor(d time.Duration) time.Duration {
	for _, s := range steps {
		if d/s <= 120 {
			return s
		}
	}
	return steps[len(steps)-1]
}

func (v View) request() panels.Request {
	return panels.Request{From: v.From, To: v.To, Step: v.Step, Filters: v.Filters}
}

// Query is the view as URL parameters.
func (v View) Query() url.Values {
	q := url.Values{}
	if v.Preset != "" {
		q.Set("range", v.Preset)
	} else {
		q.Set("from", v.From.Format(time.RFC3339))
		q.Set("to", v.To.Format(time.RFC3339))
	}
	for k, val := range v.Filters {
		if val != "" {
			q.Set(k, val)
		}
	}
	return q
}

// ---- API ----------------------------------------------------------------------------------------

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// apiError answers a failed read: ClickHouse unreachable is 503 with clickhouse_down, so the page
// shows the outage banner; anything else is 500 with the error.
func (s *Server) apiError(w http.ResponseWriter, what string, err error) {
	if chstore.ShardUnavailable(err) {
		// One shard of a cluster: this read cannot be answered whole, the console and the
		// other shards can; the page says so in the panel rather than as an outage.
		s.log.Warn("console read failed: a shard does not answer", "what", what, "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": shardDown(what, err), "shard_down": true, "clickhouse_down": false,
			"clickhouse": strings.Join(s.cfg.ClickHouse.Addr, ",")})
		return
	}
	down := isOutage(err)
	s.log.Warn("console read failed", "what", what, "err", err, "clickhouse_down", down)
	status := http.StatusInternalServerError
	if down {
		status = http.StatusServiceUnavailable
	}
	msg := err.Error()
	if what != "" {
		msg = what + ": " + msg
	}
	writeJSON(w, status, map[string]any{"error": msg, "clickhouse_down": down,
		"clickhouse": strings.Join(s.cfg.ClickHouse.Addr, ",")})
}

// shardDown says that what (a panel, a page's reading: "" when err names it) cannot be read
// because a shard of the cluster does not answer, naming the shard when the error does, and why
// nothing partial is shown instead.
func shardDown(what string, err error) string {
	shard := "a shard of the ClickHouse cluster"
	if addr := chstore.UnavailableShard(err); addr != "" {
		shard = "the ClickHouse shard at " + addr
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	if what == "" {
		// readPanel's errors start with the panel's name: "panel ttft: series rows: ...".
		what = "this panel"
		if name, _, ok := strings.Cut(msg, ":"); ok && strings.HasPrefix(name, "panel ") {
			what = name
		}
	}
	return fmt.Sprintf("%s cannot be read: %s does not answer, and figures without its rows would mislead (%s)", what, shard, msg)
}

// isOutage tells a ClickHouse server that does not answer from a query it refused.
func isOutage(err error) bool {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		return false
	}
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &oe) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "EOF") ||
		strings.Contains(err.Error(), "broken pipe") || strings.Contains(err.Error(), "connection reset")
}

// PanelInfo is a panel's description for the page.
type PanelInfo struct {
	Name      string            `json:"name"`
	Row       string            `json:"row"`
	Title     string            `json:"title"`
	Unit      string            `json:"unit"`
	UnitRight string            `json:"unit_right,omitempty"`
	Stack     bool              `json:"stack"`
	Rule      string            `json:"rule,omitempty"`
	Rules     []string          `json:"rules"`
	Labels    map[string]string `json:"rule_labels,omitempty"`
	AlertWhen string            `json:"alert_when"`
	Why       string            `json:"why"`
	Action    string            `json:"action"`
	Window    string            `json:"window,omitempty"`
}

func info(p *panels.Panel) PanelInfo {
	pi := PanelInfo{Name: p.Name, Row: p.Row, Title: p.Title, Unit: p.Unit, UnitRight: p.UnitRight, Stack: p.Stack,
		Rule: p.Rule, Rules: []string{}, Labels: p.RuleLabels, AlertWhen: p.AlertWhenText, Why: p.Why, Action: strings.Join(strings.Fields(p.Action), " ")}
	if p.Rule != "" {
		pi.Rules = append([]string{p.Rule}, p.AlsoRules...)
		pi.Window = p.Window().String()
	}
	return pi
}

func (s *Server) apiPanels(w http.ResponseWriter, r *http.Request) {
	out := make([]PanelInfo, 0, len(s.panels))
	for _, p := range s.panels {
		out = append(out, info(p))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) apiPanel(w http.ResponseWriter, r *http.Request) {
	p := s.byName[r.PathValue("name")]
	if p == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such panel"})
		return
	}
	v, err := s.parseView(r.URL.Query())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
	defer cancel()
	req := v.request()
	// The panel's baseline is the range's (internal/baseline), as diagnose read it; its figures
	// are diagnose's, unless an app or engine filter narrows the panel beyond diagnose's reading.
	b := s.baselines.get(ctx, s.conn, v)
	if b.err != nil {
		s.apiError(w, "the baseline of panel "+p.Name, b.err)
		return
	}
	req.Baseline = baseline.Default.Of(v.From, v.To)
	req.Baseline.From, req.Baseline.To = b.read.From, b.read.To
	figures := v.Filters["app"] == "" && v.Filters["engine"] == ""
	if figures {
		req.Figures = b.figures
	}
	data, err := readPanel(ctx, s.conn, p, req)
	if err != nil {
		s.apiError(w, "", err) // readPanel's errors name the panel
		return
	}
	data.Baseline = baselineInfo(v, b, figures)
	rules := append([]string{p.Rule}, p.AlsoRules...)
	latest, err := latestAlerts(ctx, s.conn, v.To, rules)
	if err != nil {
		s.apiError(w, "rule state of panel "+p.Name, err)
		return
	}
	data.Rule = ruleState(p, latest, v.Filters)
	if p.Rule != "" {
		fired, err := diagnose.ReadAlerts(ctx, s.conn, diagnose.Range{From: v.From, To: v.To})
		if err != nil {
			s.apiError(w, "alerts of panel "+p.Name, err)
			return
		}
		data.Rule.InRange = firedOn(p, fired, v.Filters)
	}
	writeJSON(w, http.StatusOK, data)
}

func (s *Server) apiOptions(w http.ResponseWriter, r *http.Request) {
	v, err := s.parseView(r.URL.Query())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
	defer cancel()
	o, err := readOptions(ctx, s.conn, v.From, v.To)
	if err != nil {
		s.apiError(w, "filter values", err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}
