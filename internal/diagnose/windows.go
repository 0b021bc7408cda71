package diagnose

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
)

// A range is read at the resolution of the detector's rules as well as whole: an incident of ten
// minutes inside a day is diluted a hundredfold in the day's means, where the rule watching it saw
// it whole. Each branch is walked again on every window of its rule's length (Resolution), the
// windows overlapping by half so that an incident of half a window or more fills one of them, and
// the worst window is reported beside the whole range's reading.

// DefaultResolution is a branch's window when the rule it is read at is not among the rules given
// (Options.RuleWindows).
const DefaultResolution = 10 * time.Minute

// MinWindowRequests is the fewest requests (or retrieval scores, or checked answers, for the
// branches reading those) a window needs before its branch is walked on it: a mean or a share of
// a handful of requests is noise, and a finding from noise is worse than none.
const MinWindowRequests = 10

// Window is one window of a range, as read at a branch's resolution.
type Window struct {
	Range
	// Of and Windows say it is the Of-th (from 1) of Windows windows of Length, overlapping by
	// half, that cover the range.
	Of, Windows int
	Length      time.Duration
}

// windowed is one window's quantities.
type windowed struct {
	Window
	Stats
}

// windowLayout is how a range is cut into windows of win: win itself and the hop between window
// starts, and the index of the last window. A range no longer than win is one window.
func windowLayout(r Range, win time.Duration) (length, hop time.Duration, last int) {
	span := r.To.Sub(r.From)
	if win <= 0 || span <= win {
		return span, span, 0
	}
	hop = win / 2
	last = int(math.Ceil(float64(span-win) / float64(hop)))
	return win, hop, last
}

// readWindows reads r's quantities per window of win (the reads of collect, grouped by window;
// neither the versions nor the engine's histograms, which the whole range's reading covers).
func readWindows(ctx context.Context, conn driver.Conn, r Range, model string, win time.Duration) ([]windowed, error) {
	length, hop, last := windowLayout(r, win)
	out := make([]windowed, last+1)
	for k := range out {
		from := r.From.Add(time.Duration(k) * hop)
		to := from.Add(length)
		if to.After(r.To) {
			to = r.To
		}
		out[k] = windowed{Window: Window{Range: Range{From: from, To: to}, Of: k + 1, Windows: last + 1, Length: length}, Stats: Stats{Sources: map[string]string{}}}
	}
	ctx = chstore.WithParams(ctx, map[string]string{
		"from_us":  fmt.Sprint(r.From.UnixMicro()),
		"to_us":    fmt.Sprint(r.To.UnixMicro()),
		"model":    chstore.StringParam(model),
		"win_us":   fmt.Sprint(length.Microseconds()),
		"hop_us":   fmt.Sprint(max(hop.Microseconds(), 1)),
		"last_k":   fmt.Sprint(last),
		"grace_us": fmt.Sprint(graceOf(Range{From: r.From, To: r.From.Add(length)}).Microseconds()),
	})
	at := func(k int64) *Stats {
		if k < 0 || int(k) > last {
			return nil
		}
		return &out[k].Stats
	}
	// each reads one windowed query into a map of its own (scan fills a window's Stats from a row
	// after its k); the maps are merged into the windows once every read is done, as the reads
	// run at once.
	var mu sync.Mutex
	var parts []map[uint64]*Stats
	each := func(name, what string, scan func(rows driver.Rows, s *Stats) error) func() error {
		return func() error {
			got := map[uint64]*Stats{}
			rows, err := conn.Query(ctx, queryWith(name, true))
			if err != nil {
				return fmt.Errorf("read %s by window of %s: %w", what, length, err)
			}
			defer rows.Close()
			for rows.Next() {
				var k uint64
				s := Stats{Sources: map[string]string{}}
				if err := scan(rowsWithK{rows, &k}, &s); err != nil {
					return fmt.Errorf("read %s by window of %s: %w", what, length, err)
				}
				got[k] = &s
			}
			if err := rows.Err(); err != nil {
				return fmt.Errorf("read %s by window of %s: %w", what, length, err)
			}
			mu.Lock()
			parts = append(parts, got)
			mu.Unlock()
			return nil
		}
	}
	var status = map[uint64]map[uint16]uint64{}
	err := concurrently(readConcurrency,
		each("requests", "request quantities", func(rows driver.Rows, s *Stats) error {
			var sampled uint64
			dest, keys := s.perRequest(true)
			if err := rows.Scan(append([]any{&sampled}, dest...)...); err != nil {
				return err
			}
			s.markSources(dest, keys, SourceRequests)
			return nil
		}),
		func() error {
			rows, err := conn.Query(ctx, queryWith("status", true))
			if err != nil {
				return fmt.Errorf("read status codes by window of %s: %w", length, err)
			}
			defer rows.Close()
			for rows.Next() {
				var k uint64
				var code uint16
				var n uint64
				if err := rows.Scan(&k, &code, &n); err != nil {
					return fmt.Errorf("read status codes by window of %s: %w", length, err)
				}
				if status[k] == nil {
					status[k] = map[uint16]uint64{}
				}
				status[k][code] = n
			}
			return rows.Err()
		},
		each("script", "output script checks", func(rows driver.Rows, s *Stats) error {
			var sc scriptScan
			if err := rows.Scan(sc.dest()...); err != nil {
				return err
			}
			sc.done(s)
			return nil
		}),
		each("retrieval", "retrieval scores", func(rows driver.Rows, s *Stats) error {
			return rows.Scan(&s.RetrievalN, &s.RetrievalTopP50)
		}),
		each("samples", "engine samples", func(rows driver.Rows, s *Stats) error {
			var sc sampleScan
			if err := rows.Scan(sc.dest(s)...); err != nil {
				return err
			}
			sc.done(s)
			return nil
		}),
		each("crash", "engine log errors", func(rows driver.Rows, s *Stats) error {
			var sc crashScan
			if err := rows.Scan(sc.dest(s)...); err != nil {
				return err
			}
			sc.done(s)
			return nil
		}),
		each("unfinished", "unfinished requests", func(rows driver.Rows, s *Stats) error {
			return rows.Scan(&s.Started, &s.Unfinished)
		}),
	)
	if err != nil {
		return nil, err
	}
	for _, got := range parts {
		for k, ws := range got {
			if w := at(int64(k)); w != nil {
				merge(w, ws)
			}
		}
	}
	for k, codes := range status {
		if w := at(int64(k)); w != nil {
			w.setStatusCodes(codes)
			for _, n := range codes {
				w.Requests += n
			}
		}
	}
	for i := range out {
		if w := &out[i]; w.Requests > 0 {
			rate := float64(w.Requests) / w.Range.Seconds()
			w.RatePerSecond = &rate
		}
	}
	return out, nil
}

// rowsWithK scans a windowed row's k into *k and its other columns into the destinations given.
type rowsWithK struct {
	driver.Rows
	k *uint64
}

func (r rowsWithK) Scan(dest ...any) error { return r.Rows.Scan(append([]any{r.k}, dest...)...) }

// merge copies into w what one windowed read filled in s (each read fills its own fields).
func merge(w, s *Stats) {
	for _, p := range []struct {
		dst **float64
		src *float64
	}{
		{&w.PromptTokensMean, s.PromptTokensMean}, {&w.CompletionTokensMean, s.CompletionTokensMean},
		{&w.CachedShare, s.CachedShare}, {&w.MaxTokensMean, s.MaxTokensMean}, {&w.QueueMean, s.QueueMean},
		{&w.QueueP95, s.QueueP95}, {&w.PrefillMean, s.PrefillMean}, {&w.TTFTMean, s.TTFTMean}, {&w.TTFTP50, s.TTFTP50},
		{&w.TTFTP95, s.TTFTP95}, {&w.TPOTMean, s.TPOTMean}, {&w.TPOTP95, s.TPOTP95}, {&w.DecodeMean, s.DecodeMean},
		{&w.E2EMean, s.E2EMean}, {&w.E2EP50, s.E2EP50}, {&w.E2EP95, s.E2EP95}, {&w.LengthShare, s.LengthShare},
		{&w.RunningMax, s.RunningMax}, {&w.WaitingMax, s.WaitingMax}, {&w.KVMax, s.KVMax},
		{&w.RetrievalTopP50, s.RetrievalTopP50}, {&w.WrongScriptShare, s.WrongScriptShare},
	} {
		if p.src != nil {
			*p.dst = p.src
		}
	}
	for k, v := range s.Sources {
		w.Sources[k] = v
	}
	w.Samples += s.Samples
	w.SamplesDown += s.SamplesDown
	if s.FirstDown != nil {
		w.FirstDown, w.DownEngine = s.FirstDown, s.DownEngine
	}
	w.RetrievalN += s.RetrievalN
	w.ScriptChecked += s.ScriptChecked
	w.scriptFactor = max(w.scriptFactor, s.scriptFactor)
	w.Started += s.Started
	w.Unfinished += s.Unfinished
	w.LogLines += s.LogLines
	w.OOMLines += s.OOMLines
	w.ExceptionLines += s.ExceptionLines
	if s.LastErrorTS != nil {
		w.LastErrorTS, w.LastErrorEngine, w.LastException, w.LastOOMBytes = s.LastErrorTS, s.LastErrorEngine, s.LastException, s.LastOOMBytes
	}
}

// supported reports whether a window holds enough for branch id to be walked on it.
func supported(id string, s *Stats) bool {
	switch id {
	case BranchKVPressure:
		// The range's KV maximum and preemption sum are never diluted: its windows add nothing.
		return false
	case BranchEngineCrash:
		return true
	case BranchQueueOverload:
		return s.Requests >= MinWindowRequests || s.Samples > 0
	case BranchRetrieval:
		return s.RetrievalN >= MinWindowRequests
	case BranchWrongLanguage:
		return s.ScriptChecked >= MinWindowRequests
	case BranchUnfinished:
		return s.Started >= MinWindowRequests
	}
	return s.Requests >= MinWindowRequests
}

// severity orders a branch's windows: the higher, the worse (NaN: nothing to order by).
func severity(id string, s *Stats) float64 {
	v := func(p *float64) float64 {
		if p == nil {
			return math.NaN()
		}
		return *p
	}
	switch id {
	case BranchQueueOverload:
		if s.QueueMean != nil {
			return *s.QueueMean
		}
		return v(s.WaitingMax)
	case BranchLongPrompt:
		return v(s.PromptTokensMean)
	case BranchLongOutput:
		return v(s.CompletionTokensMean)
	case BranchGenerationContention:
		return v(s.TPOTMean)
	case BranchRetrieval:
		return -v(s.RetrievalTopP50)
	case BranchWrongLanguage:
		return v(s.WrongScriptShare)
	case BranchEngineCrash:
		return float64(s.OOMLines+s.ExceptionLines+s.SamplesDown)*1e6 + v(s.Share5xx)
	case BranchUnfinished:
		if s.Started == 0 {
			return math.NaN()
		}
		return float64(s.Unfinished) / float64(s.Started)
	}
	return math.NaN()
}

// readByWindow reads the report's window again at each branch's resolution (Resolution of the
// rules' windows) and folds into each branch its worst window and the alerts of its own signature
// that fired in the range: a branch is clear only when the whole range, every window and every
// such alert agree.
func (rep *Report) readByWindow(ctx context.Context, conn driver.Conn, opts Options) error {
	res := map[string]time.Duration{}
	byLength := map[time.Duration][]windowed{}
	for _, b := range rep.Branches {
		if !slices.Contains(BranchOrder, b.ID) {
			continue // read from the engines' own health (engines.go), not by window
		}
		win := Resolution(b.ID, opts.RuleWindows)
		res[b.ID] = win
		if _, ok := byLength[win]; ok || rep.Window.To.Sub(rep.Window.From) <= win {
			continue // a range no longer than the window is the one window, read whole already
		}
		ws, err := readWindows(ctx, conn, rep.Window, opts.Model, win)
		if err != nil {
			return err
		}
		byLength[win] = ws
	}
	for i, b := range rep.Branches {
		b.Resolution = res[b.ID]
		if wb, w, ok := worstWindow(b.ID, byLength[res[b.ID]], &rep.Base, rep.HasBaseline); ok {
			b.Window = &w
			if b.ID == BranchRetrieval && b.Conclusion == retrievalVersionsOnly && wb.Status == StatusFinding && wb.Conclusion != retrievalVersionsOnly {
				// The versions changed over the range (a window's stats carry no versions) and
				// the score fell in its worst window: together, the incompatible encoder or
				// index, not "the median has not fallen".
				whole := b.Evidence
				wb.Resolution, wb.Window, wb.FromWindow = b.Resolution, &w, true
				wb.Conclusion, wb.NotRuledOut = retrievalFellWithVersion, retrievalFellWithVersionNotRuledOut
				for _, e := range whole {
					wb.Evidence = append(wb.Evidence, "over the whole range: "+e)
				}
				b = wb
			} else if (b.Status != StatusFinding && wb.Status == StatusFinding) || (b.Status == StatusClear && wb.Status == StatusCannotTell) {
				whole := b.Conclusion
				wb.Resolution, wb.Window, wb.FromWindow = b.Resolution, &w, true
				wb.Evidence = append(wb.Evidence, "over the whole range: "+whole)
				b = wb
			}
		}
		if sig := signatureAlerts(b.ID, rep.Alerts); len(sig) > 0 {
			b.Alerts = sig
			var ev, names []string
			for _, a := range sig {
				ev = append(ev, "alert "+a.Text(rep.Window))
				names = append(names, a.Name())
			}
			b.Evidence = append(ev, b.Evidence...)
			if b.Status != StatusFinding {
				b.Conclusion = fmt.Sprintf("the detector's %s fired in this range, although diagnose's own reading does not show the signature (%s)",
					strings.Join(names, ", "), b.Conclusion)
				b.Status, b.FromWindow = StatusFinding, false
				b.NotRuledOut = "a threshold of the rule that diagnose's own does not share: compare the alert's figures with the quantities"
				if b.Action == "" {
					b.Action = branchActions[b.ID]
				}
			}
		}
		b.At = b.WindowText(rep.Window)
		rep.Branches[i] = b
	}
	return nil
}

// worstWindow walks branch id on every supported window and returns the worst: the worst of the
// windows where the branch finds its signature, or, when none does, the worst by severity; ok is
// false when no window was supported.
func worstWindow(id string, windows []windowed, base *Stats, hasBase bool) (Branch, Window, bool) {
	type walked struct {
		b   Branch
		w   Window
		sev float64
	}
	if !slices.Contains(BranchOrder, id) {
		return Branch{}, Window{}, false // an engine branch: not walked by window
	}
	var all []walked
	for i := range windows {
		w := &windows[i]
		if !supported(id, &w.Stats) {
			continue
		}
		all = append(all, walked{walkOne(id, &w.Stats, base, hasBase), w.Window, severity(id, &w.Stats)})
	}
	if len(all) == 0 {
		return Branch{}, Window{}, false
	}
	// Findings first, then windows the data cannot decide, then by severity (NaN last), then
	// the earliest.
	rank := map[string]int{StatusFinding: 2, StatusCannotTell: 1}
	sort.SliceStable(all, func(i, j int) bool {
		if ri, rj := rank[all[i].b.Status], rank[all[j].b.Status]; ri != rj {
			return ri > rj
		}
		si, sj := all[i].sev, all[j].sev
		if math.IsNaN(si) != math.IsNaN(sj) {
			return !math.IsNaN(si)
		}
		return si > sj
	})
	return all[0].b, all[0].w, true
}
