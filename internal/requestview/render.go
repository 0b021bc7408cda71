package requestview

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Num prints seconds with three decimals, "-" when unknown.
func Num(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 3, 64)
}

// Tok prints a token count, "-" when unknown.
func Tok(v *uint32) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatUint(uint64(*v), 10)
}

// Gauge prints a gauge's value, "-" when unknown.
func Gauge(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', -1, 64)
}

// Pct prints a fraction as a percentage, "-" when unknown.
func Pct(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v*100, 'f', 1, 64) + "%"
}

// Offset prints seconds relative to the arrival: "0.31 s before", "0.20 s after".
func Offset(s float64) string {
	switch {
	case math.Abs(s) < 0.0005:
		return "at its arrival"
	case s < 0:
		return shortSeconds(-s) + " before"
	}
	return shortSeconds(s) + " after"
}

// WriteMatches prints the requests an id names, for a user to pick one.
func WriteMatches(w io.Writer, id string, ms []Match) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%d requests carry the id %s (a caller's X-Request-Id can repeat); pick one with --arrival:\n\n", len(ms), id)
	fmt.Fprintln(tw, "arrival (UTC)\trequest_id\tmatched by\tmodel\tstatus\tresponse_id\ttrace_id")
	for _, m := range ms {
		status := "in flight"
		if m.StatusCode != nil {
			status = strconv.Itoa(int(*m.StatusCode))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Key(), m.RequestID, m.MatchedBy, dash(m.Model), status, dash(m.ResponseID), dash(m.TraceID))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteText prints the request as `servescope request` shows it.
func (r *Request) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "request %s\n", r.RequestID)
	fmt.Fprintf(&b, "  arrived   %s   %s %s   model %s\n", r.ArrivalTS.Format("2006-01-02 15:04:05.000000 UTC"), dash(r.Endpoint), streamWord(r.Client.Stream), dash(r.Model))
	fmt.Fprintf(&b, "  ids       response_id %s   trace_id %s   (matched by %s)\n", dash(r.ResponseID), dash(r.TraceID), r.MatchedBy)
	if r.Gateway != "" || r.Upstream != "" || r.App != "" {
		fmt.Fprintf(&b, "  route     gateway %s -> engine %s   app %s\n", dash(r.Gateway), dash(r.Upstream), dash(r.App))
	}
	if r.Status != nil {
		fmt.Fprintf(&b, "  status    %d", r.Status.Code)
		if r.Status.Layer != "" {
			fmt.Fprintf(&b, "   error layer %s (%s)", r.Status.Layer, r.Status.LayerNote)
		}
		if r.Status.ErrorCode != "" {
			fmt.Fprintf(&b, "   code %s", r.Status.ErrorCode)
		}
		b.WriteString("\n")
		if r.Status.Message != "" {
			fmt.Fprintf(&b, "            %s\n", oneLine(r.Status.Message, 300))
		}
	} else {
		b.WriteString("  status    not finished\n")
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note      %s\n", n)
	}

	b.WriteString("\nTimeline (seconds after arrival at the gateway)\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  step\tat\tlasts\tsource")
	for _, s := range r.Timeline {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", s.Label, Num(s.At), Num(s.Seconds), s.Source+noteText(s.Note))
	}
	tw.Flush()

	b.WriteString("\nThe client's view\n")
	c := r.Client
	fmt.Fprintf(&b, "  TTFT %s   TPOT %s   E2E %s   %s\n", figure(c.TTFT), figure(c.TPOT), figure(c.E2E), clientWords(r))
	if c.EngineTTFT.Value != nil || c.EngineTPOT.Value != nil {
		fmt.Fprintf(&b, "  engine: TTFT %s   TPOT %s\n", figure(c.EngineTTFT), figure(c.EngineTPOT))
	}

	t := r.Tokens
	b.WriteString("\nTokens\n")
	fmt.Fprintf(&b, "  in %s   out %s   cached %s   max_tokens %s\n", count2(t.Prompt), count2(t.Completion), count2(t.Cached), Tok(t.MaxTokens))
	fmt.Fprintf(&b, "  stop reason %s", dash(t.FinishReason))
	if len(t.FinishReasons) > 1 {
		fmt.Fprintf(&b, "   every choice %s", strings.Join(t.FinishReasons, ","))
	}
	if len(t.EngineFinishReasons) > 0 {
		fmt.Fprintf(&b, "   engine %s", strings.Join(t.EngineFinishReasons, ","))
	}
	b.WriteString("\n")

	b.WriteString("\nThe engine\n")
	if e := r.Engine; e != nil {
		fmt.Fprintf(&b, "  %s, %d span(s) of %d prompt(s): queue %s  prefill %s  decode %s  TTFT %s  E2E %s  (%s)\n",
			e.Name, e.Children, e.Prompts, Num(e.Queue), Num(e.Prefill), Num(e.Decode), Num(e.TTFT), Num(e.E2E), SourceEngineSpan)
		for _, s := range e.Spans {
			other := ""
			if s.Other {
				other = "   (another request's trace)"
			}
			fmt.Fprintf(&b, "    %s  queue %s  prefill %s  decode %s  out %s  %s%s\n", s.EngineRequestID, Num(s.Queue), Num(s.Prefill),
				Num(s.Decode), Tok(s.CompletionTokens), dash(s.FinishReason), other)
		}
	} else if r.EngineNote != "" {
		fmt.Fprintf(&b, "  %s\n", r.EngineNote)
	}
	if s := r.State; s != nil {
		fmt.Fprintf(&b, "  at its arrival, engine %s (%s):\n", dash(s.Engine), s.EngineSource)
		for _, smp := range []*Sample{s.Before, s.After} {
			if smp != nil {
				fmt.Fprintf(&b, "    /metrics %s: running %s  waiting %s  KV %s\n", Offset(smp.OffsetS), Gauge(smp.Running), Gauge(smp.Waiting), Pct(smp.KV))
			}
		}
		if l := s.Stats; l != nil {
			fmt.Fprintf(&b, "    stats line %s: running %s  waiting %s  KV %s\n", Offset(l.OffsetS), Tok(l.Running), Tok(l.Waiting), Pct(l.KV))
		}
		if s.SlotLimit != nil {
			fmt.Fprintf(&b, "    slot limit (max_num_seqs) %d, from the %s\n", *s.SlotLimit, s.SlotLimitSource)
		} else {
			b.WriteString("    slot limit unknown: no start-up line naming max_num_seqs in the engine's log, and no slot_limit rule\n")
		}
		for _, f := range s.Facts {
			fmt.Fprintf(&b, "    - %s\n", f)
		}
	}
	if c := r.Crash; c != nil {
		fmt.Fprintf(&b, "\nCaught in a crash: engine %s died at %s: %s\n", c.Engine, c.TS.Format("15:04:05.000"), c.Relation)
		if rep := c.Report; rep != nil {
			if rep.Verdict != "" {
				fmt.Fprintf(&b, "  verdict: %s\n", rep.Verdict)
			}
			if lw := rep.LastWords; lw != nil {
				fmt.Fprintf(&b, "  last words: %s\n", oneLine(lw.Message, 300))
			}
			fmt.Fprintf(&b, "  servescope postmortem --engine %s --at %s\n", c.Engine, c.TS.Format(time.RFC3339))
		}
	}
	if len(r.Logs) > 0 {
		fmt.Fprintf(&b, "\nEngine log (%d line(s) of its span", len(r.Logs))
		if r.LogsCapped {
			b.WriteString(", the first ones")
		}
		b.WriteString(")\n")
		for _, l := range r.Logs {
			mark := " "
			if l.NamesRequest {
				mark = ">"
			}
			if l.Fatal {
				mark = "!"
			}
			fmt.Fprintf(&b, "  %s %s %s %s\n", mark, l.TS.Format("15:04:05.000"), dash(l.Level), oneLine(l.Message, 200))
		}
	}

	b.WriteString("\nThe application\n")
	if len(r.Records) == 0 {
		b.WriteString("  no app.record for this request or its trace\n")
	}
	for _, a := range r.Records {
		fmt.Fprintf(&b, "  %s app %s (by %s): top score %s, %d passages, retrieval %s s; embedding %s, index %s, prompt %s, config %s\n",
			a.TS.Format("15:04:05.000"), dash(a.App), a.JoinedBy, Gauge(a.TopScore), len(a.Passages), Num(a.RetrievalS),
			dash(a.Versions.EmbeddingModel), dash(a.Versions.Index), dash(a.Versions.Prompt), dash(a.Versions.Config))
		for _, p := range a.Passages {
			fmt.Fprintf(&b, "    %d. %s  %.3f  %s\n", p.Rank, p.ID, p.Score, p.Source)
		}
		fmt.Fprintf(&b, "    language check: %s   citations: %s\n", LanguageWords(a.OutputScriptViolation, a.OutputForeignChars), CitationWords(a.CitationCount, a.CitationsMissing))
		if a.ErrorLayer != "" || a.ErrorMessage != "" {
			fmt.Fprintf(&b, "    error (%s): %s\n", dash(a.ErrorLayer), oneLine(a.ErrorMessage, 200))
		}
	}
	if r.Check.ScriptViolation != nil {
		fmt.Fprintf(&b, "  gateway's language check: %s\n", LanguageWords(r.Check.ScriptViolation, r.Check.ForeignChars))
	}
	if r.Content != nil {
		fmt.Fprintf(&b, "\nPrompt\n%s\n\nOutput\n%s\n", r.Content.Prompt, r.Content.Output)
	}
	b.WriteString("\nSources: ")
	b.WriteString(sourcesUsed(r))
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func streamWord(stream bool) string {
	if stream {
		return "(stream)"
	}
	return "(not streamed)"
}

func noteText(n string) string {
	if n == "" {
		return ""
	}
	return "; " + n
}

func figure(s Seconds) string {
	if s.Value == nil {
		return "-"
	}
	return Num(s.Value) + " s (" + s.Source + ")"
}

func count2(c Count) string {
	if c.Value == nil {
		return "-"
	}
	return Tok(c.Value) + " (" + c.Source + ")"
}

func clientWords(r *Request) string {
	switch {
	case !r.Finished:
		return "not finished"
	case r.Client.Aborted:
		return "aborted: the client went away"
	case r.Client.Broken:
		return "the stream broke off after the 200"
	case r.Status != nil && r.Status.Code >= 400:
		return fmt.Sprintf("failed with %d", r.Status.Code)
	}
	return "not aborted"
}

// LanguageWords says what an output check found.
func LanguageWords(violation *bool, foreign *uint32) string {
	switch {
	case violation == nil:
		return "not checked"
	case *violation:
		return fmt.Sprintf("letters outside the allowed scripts (%s)", Tok(foreign))
	}
	return "in the allowed scripts"
}

// CitationWords says what a citation check found.
func CitationWords(n *uint32, missing *bool) string {
	switch {
	case missing != nil && *missing:
		return "missing"
	case n != nil:
		return Tok(n)
	case missing != nil:
		return "present"
	}
	return "not checked"
}

// Sources are the sources r's figures came from, with what each is.
func Sources(r *Request) []string {
	seen := map[string]bool{}
	add := func(s string) {
		if s != "" {
			seen[s] = true
		}
	}
	for _, s := range r.Timeline {
		add(s.Source)
	}
	for _, s := range []Seconds{r.Client.TTFT, r.Client.TPOT, r.Client.E2E, r.Client.EngineTTFT, r.Client.EngineTPOT} {
		add(s.Source)
	}
	for _, c := range []Count{r.Tokens.Prompt, r.Tokens.Completion, r.Tokens.Cached} {
		add(c.Source)
	}
	if r.State != nil {
		if r.State.Before != nil || r.State.After != nil {
			add(SourceEngineMetrics)
		}
		if r.State.Stats != nil || len(r.Logs) > 0 {
			add(SourceEngineLog)
		}
		if r.State.SlotLimitSource == SourceSlotRule {
			add(SourceSlotRule)
		}
	}
	var out []string
	for s := range seen {
		if SourceNotes[s] != "" {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func sourcesUsed(r *Request) string {
	var parts []string
	for _, s := range Sources(r) {
		parts = append(parts, s+" = "+SourceNotes[s])
	}
	return strings.Join(parts, "; ")
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}
