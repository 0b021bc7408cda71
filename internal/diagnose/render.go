package diagnose

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/servescope/servescope/internal/baseline"
)

// WriteText prints the report for a terminal: the quantities side by side, the versions seen, then
// every branch walked with its evidence, and a one-line summary.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "window   %s\nbaseline %s\n         %s\n", r.Window, r.Baseline, r.BaselineStatement())
	if r.Model != "" {
		fmt.Fprintf(&b, "model    %s\n", r.Model)
	}
	b.WriteString("\n")
	r.writeAlerts(&b, r.Alerts, "alerts that fired in this window")
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUANTITY\tBASELINE\tWINDOW\tCHANGE\tSOURCE")
	for _, row := range r.Rows {
		if row.Window == nil && row.Baseline == nil {
			continue
		}
		src := row.Source
		if src == SourceRequests {
			src = ""
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", row.Label, row.BaselineText, row.WindowText, row.Change, src)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if codes := codesText(r.Current.StatusCodes); codes != "" {
		fmt.Fprintf(&b, "\nstatus codes in window: %s", codes)
		if base := codesText(r.Base.StatusCodes); base != "" {
			fmt.Fprintf(&b, " (baseline: %s)", base)
		}
		b.WriteString("\n")
	}
	for _, kind := range []string{"model", "prompt_version", "config_version", "embedding_model_version", "index_version"} {
		cur, base := r.Current.Versions[kind], r.Base.Versions[kind]
		if len(cur) == 0 && len(base) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s: window %s; baseline %s\n", kind, versionsText(cur, r.Current.estimated()), versionsText(base, r.Base.estimated()))
	}
	if f := max(r.Current.SampleFactor, r.Base.SampleFactor); f > 1 {
		fmt.Fprintf(&b, "≈: estimated from the requests with xxh3(request_id) %% %d = 0 (a range of over 100,000 requests is sampled)\n", f)
	}
	if r.Base.CountsByHour && (len(r.Base.Versions) > 0 || r.Base.ScriptChecked > 0) {
		b.WriteString("≈: the baseline's counts are summed over its hours (a request with records in two hours counts in each)\n")
	}
	b.WriteString("\n")
	for _, br := range r.Branches {
		mark := map[string]string{StatusFinding: "FINDING", StatusClear: "clear", StatusNoData: "no data", StatusCannotTell: "cannot tell"}[br.Status]
		fmt.Fprintf(&b, "[%s] %s\n  %s\n", mark, br.Title, br.Conclusion)
		if br.At != "" {
			fmt.Fprintf(&b, "  %s\n", br.At)
		}
		for _, e := range br.Evidence {
			fmt.Fprintf(&b, "    - %s\n", e)
		}
		if br.NotRuledOut != "" {
			fmt.Fprintf(&b, "  not ruled out: %s\n", br.NotRuledOut)
		}
		if br.Action != "" {
			fmt.Fprintf(&b, "  next: %s\n", br.Action)
		}
	}
	b.WriteString("\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if len(r.Findings) == 0 {
		b.WriteString("no finding: none of the incident signatures is in this window\n")
	} else {
		fmt.Fprintf(&b, "findings: %s\n", strings.Join(r.Findings, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// BaselineStatement says which baseline the window was compared with, how that period was chosen
// and where it was read from, in a sentence.
func (r *Report) BaselineStatement() string {
	var s string
	switch r.BaselineRule {
	case "", "given":
		s = "the baseline given"
	default:
		s = r.BaselineRule + " (the detector's rules' baseline)"
	}
	switch {
	case !r.HasBaseline:
		s += ": it holds no records, so every quantity reads \"no baseline\" and the branches use absolute floors"
	case r.BaselineSource == BaselineHourly:
		s += "; its whole hours, merged from diagnose_hourly (engine samples and logs read live)"
	default:
		s += "; read live from the landing tables"
	}
	return s
}

// WindowText says at which resolution a branch was read and which window was the worst, e.g.
// "read at windows of 15m: the worst, 12:00:00 → 12:15:00, is the 3rd of 7"; "" when the range was
// read whole only.
func (b Branch) WindowText(r Range) string {
	if b.Window == nil {
		if b.Resolution > 0 && r.To.Sub(r.From) <= b.Resolution {
			return fmt.Sprintf("read as one window (the range is no longer than its rules' %s)", baseline.Short(b.Resolution))
		}
		return ""
	}
	s := fmt.Sprintf("read at windows of %s overlapping by half: the worst, %s → %s, is window %d of %d",
		baseline.Short(b.Window.Length), clockIn(b.Window.From, r), clockIn(b.Window.To, r), b.Window.Of, b.Window.Windows)
	if b.FromWindow {
		s += "; the conclusion is that window's"
	}
	return s
}

// writeAlerts lists alerts under a heading, or says there were none.
func (r *Report) writeAlerts(b *strings.Builder, as []Alert, heading string) {
	switch {
	case r.AlertsError != "":
		fmt.Fprintf(b, "%s: cannot tell, the alerts table could not be read (%s)\n", heading, r.AlertsError)
	case len(as) == 0:
		fmt.Fprintf(b, "%s: none\n", heading)
	default:
		fmt.Fprintf(b, "%s:\n", heading)
		for _, a := range as {
			fmt.Fprintf(b, "  - %s\n", a.Text(r.Window))
		}
	}
}

// WriteVerdict prints a complaint's verdict for a terminal: the verdict, the alerts on its
// symptom, then the other alerts of the window.
func (r *Report) WriteVerdict(w io.Writer, v Verdict) error {
	var b strings.Builder
	c, _ := ComplaintByID(v.Complaint)
	fmt.Fprintf(&b, "complaint \"%s\" (%s)\nverdict  %s: %s\n", c.Says, c.ID, strings.ToUpper(v.Status), v.Text)
	r.writeAlerts(&b, v.Alerts, "alerts on this symptom")
	if len(v.Others) > 0 {
		r.writeAlerts(&b, v.Others, "other alerts in this window")
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func codesText(m map[uint16]uint64) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for code := uint16(100); code < 600; code++ {
		if n, ok := m[code]; ok {
			parts = append(parts, fmt.Sprintf("%d×%d", code, n))
		}
	}
	return strings.Join(parts, " ")
}

// estimated reports whether the counts read from records (versions, script checks) are estimates.
func (s *Stats) estimated() bool { return s.SampleFactor > 1 || s.CountsByHour }

func versionsText(m map[string]uint64, estimated bool) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, v := range sortedValues(m) {
		parts = append(parts, fmt.Sprintf("%s (%s)", v, countText(m[v], estimated)))
	}
	return strings.Join(parts, ", ")
}

// countText prints n, marked "≈" when it is an estimate.
func countText(n uint64, estimated bool) string {
	if estimated {
		return fmt.Sprintf("≈%d", n)
	}
	return fmt.Sprintf("%d", n)
}
