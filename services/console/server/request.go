package server

import (
	"context"
	"errors"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/servescope/servescope/internal/requestview"
)

// RequestHref is the console's link to one request's page, keeping the view q (the page's range
// and filters). arrival, when set, picks the request among those reusing its id.
func RequestHref(id string, arrival time.Time, q template.URL) template.URL {
	v, _ := url.ParseQuery(string(q))
	if v == nil {
		v = url.Values{}
	}
	if !arrival.IsZero() {
		v.Set("arrival", arrival.UTC().Format(requestview.ArrivalLayout))
	}
	// The id is one escaped path segment and every value is query-encoded: the URL is safe.
	return template.URL("/request/" + url.PathEscape(id) + "?" + v.Encode())
}

// requestLookup answers the header's lookup box: /request?id=X goes to X's page, keeping the view.
func (s *Server) requestLookup(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id := strings.TrimSpace(q.Get("id"))
	q.Del("id")
	if id == "" {
		http.Redirect(w, r, "/?"+q.Encode(), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/request/"+url.PathEscape(id)+"?"+q.Encode(), http.StatusSeeOther)
}

// bar is one phase of the request's timeline drawing, in percent of its width.
type bar struct {
	Name, Label, Title string
	Left, Width        float64
}

// tick is one label of a time axis, at Left percent of its width.
type tick struct {
	Left  float64
	Label string
}

// requestDrawing is the timeline of a request as the page draws it.
type requestDrawing struct {
	Bars  []bar
	Marks []bar
	Ticks []tick
	Total float64
}

func drawRequest(req *requestview.Request, now time.Time) requestDrawing {
	total := 0.0
	for _, s := range req.Timeline {
		if s.At == nil {
			continue
		}
		end := *s.At
		if s.Seconds != nil {
			end += *s.Seconds
		}
		total = math.Max(total, end)
	}
	if !req.Finished {
		total = math.Max(total, now.Sub(req.ArrivalTS).Seconds())
	}
	if total <= 0 {
		total = 1
	}
	d := requestDrawing{Total: total}
	pct := func(v float64) float64 { return math.Min(100, math.Max(0, v/total*100)) }
	for _, s := range req.Timeline {
		if s.At == nil {
			continue
		}
		title := s.Label + " at " + strconv.FormatFloat(*s.At, 'f', 3, 64) + " s (" + s.Source + ")"
		if s.Seconds != nil {
			title = s.Label + ": " + strconv.FormatFloat(*s.Seconds, 'f', 3, 64) + " s from " + strconv.FormatFloat(*s.At, 'f', 3, 64) + " s (" + s.Source + ")"
			d.Bars = append(d.Bars, bar{Name: s.Name, Label: s.Label, Title: title, Left: pct(*s.At), Width: math.Max(0.3, pct(*s.Seconds))})
			continue
		}
		if s.Name == "arrival" {
			continue
		}
		d.Marks = append(d.Marks, bar{Name: s.Name, Label: s.Label, Title: title, Left: pct(*s.At)})
	}
	if !req.Finished {
		d.Bars = append(d.Bars, bar{Name: "open", Label: "not finished", Title: "in flight (or lost) since its arrival", Left: 0, Width: 100})
	}
	for _, t := range niceTicks(total, 6) {
		d.Ticks = append(d.Ticks, tick{Left: pct(t), Label: shortSecs(t)})
	}
	return d
}

// niceTicks are up to about n round values from 0 to max.
func niceTicks(max float64, n int) []float64 {
	raw := max / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := 0.0; v <= max+step/1000; v += step {
		out = append(out, v)
	}
	return out
}

func shortSecs(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 1:
		return strconv.FormatFloat(v*1000, 'f', -1, 64) + " ms"
	}
	return strconv.FormatFloat(v, 'f', -1, 64) + " s"
}

// requestLinks are the pages that show the request's moment.
type requestLinks struct {
	Dashboard, Alerts, Crash template.URL
}

func (s *Server) linksFor(req *requestview.Request, end time.Time) requestLinks {
	around := url.Values{}
	around.Set("from", req.ArrivalTS.Add(-15*time.Minute).Truncate(time.Second).Format(time.RFC3339))
	around.Set("to", end.Add(15*time.Minute).Truncate(time.Second).Format(time.RFC3339))
	dash := url.Values{}
	for k, v := range around {
		dash[k] = v
	}
	if req.Model != "" {
		dash.Set("model", req.Model)
	}
	l := requestLinks{Dashboard: template.URL("/?" + dash.Encode()), Alerts: template.URL("/alerts?" + around.Encode())}
	if c := req.Crash; c != nil {
		q := url.Values{}
		q.Set("from", c.TS.Add(-30*time.Minute).Truncate(time.Second).Format(time.RFC3339))
		q.Set("to", c.TS.Add(time.Minute).Truncate(time.Second).Format(time.RFC3339))
		q.Set("engine", c.Engine)
		l.Crash = template.URL("/crash?" + q.Encode())
	}
	return l
}

// requestPage is GET /request/{id}: the request the id names, or the list of those it names.
func (s *Server) requestPage(w http.ResponseWriter, r *http.Request) {
	d, ok := s.base(r, "request")
	id := r.PathValue("id")
	d.Title, d.RequestIDAsked = "Request "+id, id
	if !ok {
		s.renderStatus(w, http.StatusBadRequest, "request", d)
		return
	}
	if err := requestview.CheckID(id); err != nil {
		d.Error = err.Error()
		s.renderStatus(w, http.StatusBadRequest, "request", d)
		return
	}
	var at time.Time
	if a := r.URL.Query().Get("arrival"); a != "" {
		var err error
		if at, err = requestview.ParseArrival(a); err != nil {
			d.Error = err.Error()
			s.renderStatus(w, http.StatusBadRequest, "request", d)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
	defer cancel()
	status := http.StatusOK
	ms, err := requestview.Find(ctx, s.conn, id)
	switch {
	case errors.Is(err, requestview.ErrNotFound):
		d.NoData, status = err.Error(), http.StatusNotFound
	case err != nil:
		s.outage(&d, "the request's records", err)
	default:
		m, ok := requestview.Pick(ms, at)
		switch {
		case !ok && !at.IsZero():
			d.NoData, status = "No request with id "+id+" arrived at "+at.Format(requestview.ArrivalLayout)+": "+strconv.Itoa(len(ms))+" carry the id.", http.StatusNotFound
			d.Matches = ms
		case !ok:
			d.Matches = ms
		default:
			req, err := requestview.Load(ctx, s.conn, m, requestview.Options{Content: d.Content,
				SlotLimit: requestview.RuleSlotLimit(s.rules), Now: s.now()})
			if err != nil {
				s.outage(&d, "the request's records", err)
				break
			}
			d.Request = req
			d.Drawing = drawRequest(req, s.now())
			end := s.now()
			if req.FinishedTS != nil {
				end = *req.FinishedTS
			}
			d.Links = s.linksFor(req, end)
			d.Sources = requestview.Sources(req)
			d.Reused = len(ms) > 1
		}
	}
	s.renderStatus(w, status, "request", d)
}

// apiRequest is GET /api/request/{id}: the request as JSON (requestview.Request), or its matches.
func (s *Server) apiRequest(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := requestview.CheckID(id); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	var at time.Time
	if a := r.URL.Query().Get("arrival"); a != "" {
		var err error
		if at, err = requestview.ParseArrival(a); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
	defer cancel()
	ms, err := requestview.Find(ctx, s.conn, id)
	if errors.Is(err, requestview.ErrNotFound) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		return
	}
	if err != nil {
		s.apiError(w, "the request's records", err)
		return
	}
	m, ok := requestview.Pick(ms, at)
	if !ok {
		status := http.StatusOK
		if !at.IsZero() {
			status = http.StatusNotFound
		}
		writeJSON(w, status, map[string]any{"id": id, "matches": ms})
		return
	}
	req, err := requestview.Load(ctx, s.conn, m, requestview.Options{Content: contentAllowed(r),
		SlotLimit: requestview.RuleSlotLimit(s.rules), Now: s.now()})
	if err != nil {
		s.apiError(w, "the request's records", err)
		return
	}
	writeJSON(w, http.StatusOK, req)
}
