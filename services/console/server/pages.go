package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/diagnose"
	"github.com/servescope/servescope/internal/panels"
	"github.com/servescope/servescope/internal/postmortem"
	"github.com/servescope/servescope/internal/requestview"
	"github.com/servescope/servescope/services/console/web"
)

// Complaint is one row of docs/measurements.md (From symptom to quantity) as the console shows it:
// diagnose's complaint (what users say, its hypotheses, and, through diagnose.Bearings, the rules
// whose alerts bear on it) with the panels that answer it.
type Complaint struct {
	diagnose.Complaint
	Panels []string
	// SlowBy orders the slowest-requests table (a latency column), "" for none.
	SlowBy string
}

// Complaints are diagnose.Complaints, in their order, with their panels.
var Complaints = func() []Complaint {
	panels := map[string]struct {
		panels []string
		slowBy string
	}{
		"first-word":     {[]string{"ttft", "queue", "phases"}, "ttft_s"},
		"slow-text":      {[]string{"tpot", "running"}, "tpot_s"},
		"answers-long":   {[]string{"e2e", "phases"}, "e2e_s"},
		"hangs":          {[]string{"queue", "unfinished", "running"}, "queue_s"},
		"server-500":     {[]string{"errors", "running", "kv"}, ""},
		"off-topic":      {[]string{"retrieval"}, ""},
		"mixed-language": {[]string{"wrong_script", "citations"}, ""},
	}
	out := make([]Complaint, len(diagnose.Complaints))
	for i, c := range diagnose.Complaints {
		out[i] = Complaint{Complaint: c, Panels: panels[c.ID].panels, SlowBy: panels[c.ID].slowBy}
	}
	return out
}()

// labelText writes an alert's labels as k=v, sorted, without alertname, severity and empty ones.
func labelText(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		// "all" (the label contract's value for an alert not about one model, app, engine or
		// gateway) says nothing here.
		if k != "alertname" && k != "severity" && m[k] != "" && m[k] != "all" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, " ")
}

type pages struct {
	t map[string]*template.Template
}

var funcs = template.FuncMap{
	"stamp": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") },
	"stampp": func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format("01-02 15:04:05")
	},
	"num": func(v *float64) string {
		if v == nil || math.IsNaN(*v) {
			return "-"
		}
		return strconv.FormatFloat(*v, 'g', 4, 64)
	},
	"secs": func(v *float64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatFloat(*v, 'f', 3, 64)
	},
	"u32": func(v *uint32) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatUint(uint64(*v), 10)
	},
	"kvpct": func(v *float64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatFloat(*v*100, 'f', 1, 64) + "%"
	},
	"bytes": func(v *uint64) string {
		if v == nil {
			return "-"
		}
		return postmortem.FormatSize(int64(*v))
	},
	"labels":     labelText,
	"join":       strings.Join,
	"pct":        func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
	"slowOrders": func() any { return SlowOrders },
	// The request page's.
	"reqhref": RequestHref,
	"stampus": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") },
	"clock":   func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
	"deref": func(v any) any {
		rv := reflect.ValueOf(v)
		if rv.Kind() == reflect.Pointer {
			if rv.IsNil() {
				return nil
			}
			return rv.Elem().Interface()
		}
		return v
	},
	"alertspan": func(a diagnose.Alert, r diagnose.Range) string { return a.Span(r) },
	"alertname": func(a diagnose.Alert) string { return a.Name() },
	"upper":     strings.ToUpper,
	// raw is a figure in full ("" for none), for the page's data attributes.
	"raw": func(v *float64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatFloat(*v, 'g', -1, 64)
	},
	"figure": func(s requestview.Seconds) string {
		if s.Value == nil {
			return "-"
		}
		return strconv.FormatFloat(*s.Value, 'f', 3, 64) + " s (" + s.Source + ")"
	},
	"count": func(c requestview.Count) string {
		if c.Value == nil {
			return "-"
		}
		return requestview.Tok(c.Value) + " (" + c.Source + ")"
	},
	"srcnote": func(s string) string { return requestview.SourceNotes[s] },
	"offset":  requestview.Offset,
	"gauge":   requestview.Gauge,
	"fpct":    requestview.Pct,
	"score":   func(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) },
	"lang":    requestview.LanguageWords,
	"cites":   requestview.CitationWords,
}

func newPages() (*pages, error) {
	base, err := fs.ReadFile(web.Templates, "templates/base.html")
	if err != nil {
		return nil, fmt.Errorf("console templates: %w", err)
	}
	p := &pages{t: map[string]*template.Template{}}
	for _, name := range []string{"login", "dashboard", "alerts", "complaint", "crash", "request", "runbook"} {
		body, err := fs.ReadFile(web.Templates, "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console templates: %w", err)
		}
		t, err := template.New(name).Funcs(funcs).Parse(string(base))
		if err == nil {
			_, err = t.Parse(string(body))
		}
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		p.t[name] = t
	}
	return p, nil
}

// pageData is what every page template sees.
type pageData struct {
	Title string
	Nav   string
	View  View
	// Query is the view as a URL query (range and filters): every link of the page carries it.
	Query      template.URL
	Presets    []string
	Complaints []Complaint
	// Down is set when ClickHouse did not answer: the banner says so.
	Down  string
	Error string
	// Bad is set when the page's own parameters are wrong (a range it cannot parse): the page
	// shows the error and nothing it would have read.
	Bad      bool
	NoData   string
	Next     string
	Content  bool
	SignedIn bool
	// SignedOut is the login page after a sign-out.
	SignedOut bool
	Panels    []PanelInfo
	Rows      []panelRow
	Alerts    []AlertRow
	Latest    []AlertRow
	Lanes     []lane
	Axis      []tick
	RuleName  string
	// Complaint page, and the dashboard's slowest requests.
	Complaint *Complaint
	Diagnosis *diagnose.Report
	Verdict   *diagnose.Verdict
	Focus     []diagnose.Branch
	Others    []diagnose.Branch
	Slow      []requestview.Slow
	SlowBy    string
	SlowHrefs map[string]template.URL
	SlowError string
	// Runbook pages: one rule's, or the index.
	Runbook  *RunbookPage
	Runbooks []*RunbookPage
	// Crash page.
	Postmortem *postmortem.Report
	PMText     string
	Engine     string
	Caught     []requestview.Match
	From, To   string
	// Request page.
	RequestIDAsked string
	Request        *requestview.Request
	Matches        []requestview.Match
	Drawing        requestDrawing
	Links          requestLinks
	Sources        []string
	Reused         bool
}

type panelRow struct {
	Row    string
	Panels []PanelInfo
}

func (p *pages) render(w http.ResponseWriter, name string, d pageData) {
	p.renderStatus(w, http.StatusOK, name, d)
}

func (p *pages) renderStatus(w http.ResponseWriter, status int, name string, d pageData) {
	var b bytes.Buffer
	if err := p.t[name].ExecuteTemplate(&b, "base", d); err != nil {
		http.Error(w, "render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

func (s *Server) renderStatus(w http.ResponseWriter, status int, name string, d pageData) {
	s.pages.renderStatus(w, status, name, d)
}

// base is what every page starts from: its view from the URL. ok is false when the URL's range or
// filters cannot be read: the page then says so (Bad) with status 400 and reads nothing, and its
// links carry the default view.
func (s *Server) base(r *http.Request, nav string) (pageData, bool) {
	d := pageData{Nav: nav, Complaints: Complaints, Content: contentAllowed(r), SignedIn: s.signedIn(r)}
	for _, p := range Presets {
		d.Presets = append(d.Presets, p.Name)
	}
	v, err := s.parseView(r.URL.Query())
	if err != nil {
		d.Error, d.Bad = err.Error(), true
		v, _ = s.parseView(nil)
	}
	// url.Values.Encode escapes every name and value: the text is a safe query string, which
	// html/template must not escape again (it would turn "range=1h&model=x" into one value).
	d.View, d.Query = v, template.URL(v.Query().Encode())
	d.From, d.To = v.From.Format("2006-01-02T15:04"), v.To.Format("2006-01-02T15:04")
	return d, err == nil
}

func (s *Server) outage(d *pageData, what string, err error) {
	if chstore.ShardUnavailable(err) {
		d.Error = shardDown(what, err)
		return
	}
	if isOutage(err) {
		d.Down = fmt.Sprintf("ClickHouse at %s is not answering (%v): %s cannot be read.", strings.Join(s.cfg.ClickHouse.Addr, ","), err, what)
		return
	}
	d.Error = what + ": " + err.Error()
}

// SlowOrders are the orders of the dashboard's slowest-requests list, by its `slow` parameter.
var SlowOrders = []struct{ Column, Label string }{
	{"e2e_s", "E2E"}, {"ttft_s", "TTFT"}, {"queue_s", "queue wait"}, {"tpot_s", "TPOT"},
}

func (s *Server) dashboard(w http.ResponseWriter, r *http.Request) {
	d, ok := s.base(r, "dashboard")
	d.Title = "Dashboard"
	if !ok {
		s.renderStatus(w, http.StatusBadRequest, "dashboard", d)
		return
	}
	var rows []panelRow
	for _, p := range s.panels {
		pi := info(p)
		if n := len(rows); n > 0 && rows[n-1].Row == p.Row {
			rows[n-1].Panels = append(rows[n-1].Panels, pi)
			continue
		}
		rows = append(rows, panelRow{Row: p.Row, Panels: []PanelInfo{pi}})
	}
	d.Rows = rows
	d.SlowBy = "e2e_s"
	d.SlowHrefs = map[string]template.URL{}
	for _, o := range SlowOrders {
		if r.URL.Query().Get("slow") == o.Column {
			d.SlowBy = o.Column
		}
		d.SlowHrefs[o.Label] = template.URL("/?" + string(d.Query) + "&" + url.Values{"slow": {o.Column}}.Encode() + "#slowest")
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
	defer cancel()
	slow, err := requestview.Slowest(ctx, s.conn, d.View.From, d.View.To, d.View.Filters["model"], d.View.Filters["app"], d.SlowBy, d.Content, 10)
	switch {
	case err != nil && isOutage(err):
		s.outage(&d, "the slowest requests", err)
	case err != nil:
		d.SlowError = err.Error()
	}
	d.Slow = slow
	s.pages.render(w, "dashboard", d)
}

// lane is one alert's states over the page's range, as segments in percent of its width.
type lane struct {
	Rule, Labels, Fingerprint string
	Segments                  []segment
	Last                      AlertRow
}

type segment struct {
	State       string
	Left, Width float64
	From, To    string
	Href        template.URL
}

func lanes(history []AlertRow, from, to time.Time) []lane {
	by := map[string][]AlertRow{}
	var keys []string
	for _, a := range history {
		k := a.Rule + "/" + a.Fingerprint
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], a)
	}
	sort.Strings(keys)
	span := to.Sub(from).Seconds()
	var out []lane
	for _, k := range keys {
		rows := by[k]
		sort.Slice(rows, func(i, j int) bool { return rows[i].TS.Before(rows[j].TS) })
		l := lane{Rule: rows[0].Rule, Fingerprint: rows[0].Fingerprint, Labels: labelText(rows[0].Labels), Last: rows[len(rows)-1]}
		for i, a := range rows {
			if a.State == "resolved" {
				continue
			}
			end := to
			if i+1 < len(rows) {
				end = rows[i+1].TS
			}
			left := math.Max(0, a.TS.Sub(from).Seconds()/span*100)
			width := math.Max(0.4, math.Min(100-left, end.Sub(a.TS).Seconds()/span*100))
			l.Segments = append(l.Segments, segment{State: a.State, Left: left, Width: width,
				From: a.TS.UTC().Format("15:04:05"), To: end.UTC().Format("15:04:05"), Href: a.DashHref})
		}
		out = append(out, l)
	}
	return out
}

// timeAxis are the labels of a time axis over [from, to]: about six round instants, as HH:MM
// (with the day when the range spans days).
func timeAxis(from, to time.Time) []tick {
	span := to.Sub(from)
	if span <= 0 {
		return nil
	}
	var step time.Duration
	for _, s := range []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute,
		30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 48 * time.Hour} {
		step = s
		if span/s <= 7 {
			break
		}
	}
	layout := "15:04"
	if span > 24*time.Hour {
		layout = "01-02 15:04"
	}
	var out []tick
	for t := from.Truncate(step); !t.After(to); t = t.Add(step) {
		if t.Before(from) {
			continue
		}
		out = append(out, tick{Left: t.Sub(from).Seconds() / span.Seconds() * 100, Label: t.UTC().Format(layout)})
	}
	return out
}

// dashboardAt is the dashboard around a moment (half an hour either side), filtered to what the
// alert's labels name and scrolled to panel (when set).
func dashboardAt(ts time.Time, labels map[string]string, panel string) template.URL {
	q := url.Values{}
	q.Set("from", ts.Add(-30*time.Minute).UTC().Truncate(time.Second).Format(time.RFC3339))
	q.Set("to", ts.Add(30*time.Minute).UTC().Truncate(time.Second).Add(time.Second).Format(time.RFC3339))
	for _, f := range panels.Filters {
		if v := labels[f]; v != "" && v != "all" {
			q.Set(f, v)
		}
	}
	href := "/?" + q.Encode()
	if panel != "" {
		href += "#panel-" + panel
	}
	return template.URL(href)
}

// panelOf is the panel watched by rule whose rule_labels the labels match, "" when none.
func (s *Server) panelOf(rule string, labels map[string]string) string {
	for _, p := range s.panels {
		if p.Rule == rule && labelsMatch(labels, p.RuleLabels) {
			return p.Name
		}
	}
	for _, p := range s.panels {
		if contains(p.AlsoRules, rule) {
			return p.Name
		}
	}
	return ""
}

func (s *Server) alertsPage(w http.ResponseWriter, r *http.Request) {
	d, ok := s.base(r, "alerts")
	d.Title = "Alerts"
	d.RuleName = r.URL.Query().Get("rule")
	if len(d.RuleName) > 64 {
		d.Error, d.Bad, ok = "rule: longer than 64 bytes", true, false
	}
	if !ok {
		s.renderStatus(w, http.StatusBadRequest, "alerts", d)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
	defer cancel()
	hist, err := alertHistory(ctx, s.conn, d.View.From, d.View.To, d.RuleName, 2000)
	if err != nil {
		s.outage(&d, "the alerts table", err)
		s.pages.render(w, "alerts", d)
		return
	}
	// The resolutions' evaluations get half the page's time at most: the rest reads the alerts.
	resCtx, resCancel := context.WithTimeout(ctx, s.cfg.QueryTimeout/2)
	defer resCancel()
	resolved := 0
	for i := range hist {
		a := &hist[i]
		a.DashHref = dashboardAt(a.TS, a.Labels, s.panelOf(a.Rule, a.Labels))
		a.Requests = requestsOf(a, d.Query)
		if a.State == "resolved" {
			// The figures a resolved row holds are the last firing evaluation's: what the value
			// came back to is the rule's evaluation at the resolution (the latest rows first).
			if resolved < maxResolutions {
				res := s.resolution(resCtx, *a)
				a.Resolution = &res
			} else {
				a.Resolution = &Resolution{Note: fmt.Sprintf("not evaluated: the page evaluates the %d latest resolutions; narrow the range or pick the rule", maxResolutions)}
			}
			resolved++
		}
	}
	d.Alerts = hist
	d.Lanes = lanes(hist, d.View.From, d.View.To)
	d.Axis = timeAxis(d.View.From, d.View.To)
	latest, err := latestAlerts(ctx, s.conn, d.View.To, nil)
	if err != nil {
		s.outage(&d, "the alerts table", err)
	}
	for _, a := range latest {
		if (a.State == "firing" || a.State == "pending") && (d.RuleName == "" || a.Rule == d.RuleName) {
			a.DashHref = dashboardAt(a.TS, a.Labels, s.panelOf(a.Rule, a.Labels))
			a.Requests = requestsOf(&a, d.Query)
			d.Latest = append(d.Latest, a)
		}
	}
	s.pages.render(w, "alerts", d)
}

func (s *Server) complaintPage(w http.ResponseWriter, r *http.Request) {
	d, ok := s.base(r, "complaint")
	var c *Complaint
	for i := range Complaints {
		if Complaints[i].ID == r.PathValue("id") {
			c = &Complaints[i]
		}
	}
	if c == nil {
		http.NotFound(w, r)
		return
	}
	d.Complaint, d.Title = c, "“"+c.Says+"”"
	for _, name := range c.Panels {
		if p := s.byName[name]; p != nil {
			d.Panels = append(d.Panels, info(p))
		}
	}
	if !ok {
		s.renderStatus(w, http.StatusBadRequest, "complaint", d)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
	defer cancel()
	rep, err := s.diagnose(ctx, d.View)
	switch {
	case errors.Is(err, diagnose.ErrNoData):
		d.NoData = err.Error()
	case err != nil:
		s.outage(&d, "diagnose's reading", err)
	default:
		d.Diagnosis = &rep
		v, err := rep.Verdict(c.ID)
		if err != nil {
			d.Error = err.Error()
		} else {
			d.Verdict, d.Focus = &v, v.Branches
		}
		for _, b := range rep.Branches {
			if !contains(c.Branches, b.ID) {
				d.Others = append(d.Others, b)
			}
		}
	}
	if c.SlowBy != "" && d.Down == "" {
		slow, err := requestview.Slowest(ctx, s.conn, d.View.From, d.View.To, d.View.Filters["model"], d.View.Filters["app"], c.SlowBy, d.Content, 10)
		if err != nil {
			d.SlowError = err.Error()
		}
		d.Slow = slow
	}
	s.pages.render(w, "complaint", d)
}

// diagnose runs diagnose on the view's range, at the loaded rules' windows, and keeps its baseline
// figures for the page's panels (baselines.put): the panels then draw the numbers the complaint
// table shows.
func (s *Server) diagnose(ctx context.Context, v View) (diagnose.Report, error) {
	rep, err := diagnose.Run(ctx, s.conn, diagnose.Options{
		Window: diagnose.Range{From: v.From, To: v.To}, Model: v.Filters["model"], RuleWindows: s.ruleWindows()})
	if err == nil {
		s.baselines.put(v, &rep)
	}
	return rep, err
}

func (s *Server) crashPage(w http.ResponseWriter, r *http.Request) {
	d, ok := s.base(r, "crash")
	d.Title = "Crash"
	d.Engine = d.View.Filters["engine"]
	if !ok {
		s.renderStatus(w, http.StatusBadRequest, "crash", d)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
	defer cancel()
	lines, model, err := postmortem.Load(ctx, s.conn, d.Engine, d.View.To)
	switch {
	case errors.Is(err, postmortem.ErrNoData):
		d.NoData = err.Error()
	case err != nil:
		s.outage(&d, "the engine's log (engine_logs)", err)
	default:
		// The engines' own running counts, for a data-parallel server whose log has only their
		// sum; without them the report says what it lacks.
		samples, err := postmortem.LoadSamples(ctx, s.conn, lines[0].Engine, lines)
		if err != nil {
			s.log.Warn("crash page: engine samples unreadable", "engine", lines[0].Engine, "error", err)
		}
		rep := postmortem.Analyze(lines, postmortem.Options{At: d.View.To, Model: model, Samples: samples})
		rep.Source = "engine_logs"
		d.Postmortem = &rep
		var b strings.Builder
		if err := rep.WriteText(&b); err == nil {
			d.PMText = b.String()
		}
		if rep.Crashed && rep.LastWords != nil {
			caught, err := requestview.Caught(ctx, s.conn, rep.LastWords.TS, 50)
			if err != nil {
				s.outage(&d, "the requests caught in the crash", err)
			}
			d.Caught = caught
		}
	}
	s.pages.render(w, "crash", d)
}
