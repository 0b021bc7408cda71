package postmortem

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText prints the report in the order a crash is read (docs/measurements.md, The crash): the
// timeline, the last words, the frames, the reasoning with its arithmetic, the verdict and the fix.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "postmortem of engine %s (%s, %d lines)\n", orDash(r.Engine), r.Source, r.Lines)
	if r.Model != "" || r.GPUMemoryUtilization != "" || r.MaxNumSeqs != "" {
		fmt.Fprintf(&b, "model %s, dtype %s, gpu_memory_utilization %s, max_num_seqs %s\n", orDash(r.Model), orDash(r.DType), orDash(r.GPUMemoryUtilization), orDash(r.MaxNumSeqs))
	}
	if !r.Crashed {
		b.WriteString("\nno crash found: no out-of-memory or fatal exception line")
		if n := len(r.Timeline); n > 0 {
			fmt.Fprintf(&b, "; the last stats line (%s) said running %s, KV %s", r.Timeline[n-1].TS.Format(time.DateTime), u32Text(r.Timeline[n-1].Running), kvText(r.Timeline[n-1].KVCacheUsagePerc))
		}
		b.WriteString("\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	switch {
	case r.EngineIndex != "" && r.Engines > 1:
		fmt.Fprintf(&b, "engine %s of the server's %d died (its own numbers below)\n", r.EngineIndex, r.Engines)
	case r.EngineIndex != "":
		fmt.Fprintf(&b, "engine %s of the server died (its own stats lines below)\n", r.EngineIndex)
	case r.Engines > 1:
		fmt.Fprintf(&b, "one of the server's %d engines died; the log does not say which\n", r.Engines)
	}
	b.WriteString("\nbefore the death (the engine's periodic stats lines):\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TIME\tRUNNING\tWAITING\tKV CACHE\tFROM")
	for _, p := range r.Timeline {
		from := "stats line"
		switch {
		case p.Dump:
			from = "scheduler state at the failing step"
		case p.Engines > 0:
			from = fmt.Sprintf("%d engines aggregated: sums, KV their mean", p.Engines)
		case p.Metrics:
			from = "/metrics sample"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", p.TS.Format(time.DateTime), u32Text(p.Running), u32Text(p.Waiting), kvText(p.KVCacheUsagePerc), from)
	}
	fmt.Fprintf(tw, "  %s\tdeath\t\t\n", r.LastWords.TS.Format(time.DateTime))
	if err := tw.Flush(); err != nil {
		return err
	}
	lw := r.LastWords
	fmt.Fprintf(&b, "\nlast words (%s", lw.TS.Format(time.DateTime))
	if lw.Process != "" {
		fmt.Fprintf(&b, ", %s", lw.Process)
	}
	fmt.Fprintf(&b, "):\n  %s\n", lw.Message)
	var sizes []string
	if lw.BytesRequested != nil {
		sizes = append(sizes, fmt.Sprintf("requested %s (%s B)", FormatSize(int64(*lw.BytesRequested)), group(int64(*lw.BytesRequested))))
	}
	if lw.CapacityBytes != nil {
		sizes = append(sizes, "capacity "+FormatSize(int64(*lw.CapacityBytes)))
	}
	if lw.FreeBytes != nil {
		sizes = append(sizes, "free "+FormatSize(int64(*lw.FreeBytes)))
	}
	if len(sizes) > 0 {
		fmt.Fprintf(&b, "  %s\n", strings.Join(sizes, ", "))
	}
	if len(r.Frames) > 0 {
		b.WriteString("\ninnermost frames (innermost last):\n")
		for _, f := range r.Frames {
			fmt.Fprintf(&b, "  %s\n", f)
		}
		if r.CodeLine != "" {
			fmt.Fprintf(&b, "      %s\n", r.CodeLine)
		}
	}
	b.WriteString("\nreasoning:\n")
	for i, s := range r.Reasoning {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, s)
	}
	fmt.Fprintf(&b, "\nverdict: %s\n", r.Verdict)
	if r.NotRuledOut != "" {
		fmt.Fprintf(&b, "not ruled out: %s\n", r.NotRuledOut)
	}
	if len(r.Fix) > 0 {
		b.WriteString("fix:\n")
		for _, f := range r.Fix {
			fmt.Fprintf(&b, "  - %s\n", f)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func u32Text(p *uint32) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func kvText(p *float64) string {
	if p == nil {
		return "-"
	}
	return pct(*p)
}
