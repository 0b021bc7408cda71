package demo

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/diagnose"
	"github.com/servescope/servescope/services/detector/rules"
)

// IncidentPage is the complaint page a user would open for one incident the demo stages, over the
// incident's window, and the verdict it must give: its status and, for a finding, the branch
// among its findings.
type IncidentPage struct {
	Window    Window
	Complaint string
	Status    string
	Finding   string
}

// IncidentPages are the pages of the demo's incidents (docs/measurements.md, From symptom to
// quantity), by window key: a normal run reads clear, each incident its own hypothesis.
var IncidentPages = map[string]IncidentPage{
	"normal":          {Complaint: "first-word", Status: diagnose.VerdictClear},
	"overload":        {Complaint: "hangs", Status: diagnose.VerdictFinding, Finding: diagnose.BranchQueueOverload},
	"long-prompt":     {Complaint: "first-word", Status: diagnose.VerdictFinding, Finding: diagnose.BranchLongPrompt},
	"long-output":     {Complaint: "answers-long", Status: diagnose.VerdictFinding, Finding: diagnose.BranchLongOutput},
	"embedding-after": {Complaint: "off-topic", Status: diagnose.VerdictFinding, Finding: diagnose.BranchRetrieval},
	"wrong-lang":      {Complaint: "mixed-language", Status: diagnose.VerdictFinding, Finding: diagnose.BranchWrongLanguage},
	"crash":           {Complaint: "server-500", Status: diagnose.VerdictFinding, Finding: diagnose.BranchEngineCrash},
}

// RuleWindows are the rules' windows by name: the resolution of the console's verdicts.
func RuleWindows(defs []*rules.Definition) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, d := range defs {
		out[d.Name] = d.Window.D()
	}
	return out
}

// verdictOf reads complaint id over w as the console's complaint page does (its Server.diagnose:
// diagnose.Run at the rules' windows, then Report.Verdict).
func verdictOf(ctx context.Context, conn driver.Conn, w diagnose.Range, id string, windows map[string]time.Duration) (diagnose.Report, diagnose.Verdict, error) {
	rep, err := diagnose.Run(ctx, conn, diagnose.Options{Window: w, RuleWindows: windows})
	if err != nil {
		return rep, diagnose.Verdict{}, fmt.Errorf("diagnose %s: %w", w, err)
	}
	v, err := rep.Verdict(id)
	return rep, v, err
}

// WritePageVerdicts prints, beside each incident, the verdict of the complaint page a user would
// open for it, and returns the checks that failed.
func WritePageVerdicts(ctx context.Context, out io.Writer, conn driver.Conn, windows []Window, ruleWindows map[string]time.Duration) ([]string, error) {
	var fails []string
	for _, w := range windows {
		pc, ok := IncidentPages[w.Key]
		if !ok {
			continue
		}
		c, _ := diagnose.ComplaintByID(pc.Complaint)
		_, v, err := verdictOf(ctx, conn, w.Range, pc.Complaint, ruleWindows)
		if err != nil {
			return fails, err
		}
		good := v.Status == pc.Status && (pc.Finding == "" || slices.Contains(v.Findings, pc.Finding))
		fmt.Fprintf(out, "  %s %-16s “%s” (/complaint/%s over its %.0f s)\n      %s: %s\n", mark(good), w.Title, c.Says, c.ID,
			w.Range.Seconds(), strings.ToUpper(v.Status), v.Text)
		if !good {
			want := pc.Status
			if pc.Finding != "" {
				want += " " + pc.Finding
			}
			fails = append(fails, fmt.Sprintf("the %s page over the %s window reads %s %v, want %s", c.ID, w.Title, v.Status, v.Findings, want))
		}
	}
	return fails, nil
}

// WriteLastHourPages prints, for every complaint page over the last hour, the alerts it names, and
// returns a failure for each rule the webhook receiver got firing that a page does not name.
func WriteLastHourPages(ctx context.Context, out io.Writer, conn driver.Conn, received []Received, ruleWindows map[string]time.Duration) ([]string, error) {
	now := time.Now().UTC()
	w := diagnose.Range{From: now.Add(-time.Hour), To: now}
	var fired []string
	for _, a := range received {
		if a.Status == "firing" && !slices.Contains(fired, a.Rule) {
			fired = append(fired, a.Rule)
		}
	}
	slices.Sort(fired)
	rep, err := diagnose.Run(ctx, conn, diagnose.Options{Window: w, RuleWindows: ruleWindows})
	if err != nil {
		return nil, fmt.Errorf("diagnose the last hour: %w", err)
	}
	var fails []string
	for _, c := range diagnose.Complaints {
		v, err := rep.Verdict(c.ID)
		if err != nil {
			return fails, err
		}
		var on, named []string
		for _, a := range v.Alerts {
			on = append(on, a.Rule)
			named = append(named, a.Rule)
		}
		for _, a := range v.Others {
			named = append(named, a.Rule)
		}
		var missing []string
		for _, r := range fired {
			if !slices.Contains(named, r) {
				missing = append(missing, r)
			}
		}
		fmt.Fprintf(out, "  %s %-15s %s; names %d alerts, on its symptom: %s\n", mark(len(missing) == 0), c.ID, strings.ToUpper(v.Status),
			len(named), listOrNoneV(slices.Compact(sorted(on))))
		if len(missing) > 0 {
			fails = append(fails, fmt.Sprintf("the %s page over the last hour does not name %s, which fired", c.ID, strings.Join(missing, ", ")))
		}
	}
	return fails, nil
}

func sorted(s []string) []string { slices.Sort(s); return s }

func listOrNoneV(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
