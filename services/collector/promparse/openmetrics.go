package promparse

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
)

// openMetricsToText rewrites an OpenMetrics 1.0 exposition into the Prometheus text format, for
// the text parser. expfmt's own OpenMetrics decoder (prometheus/common v0.73) runs a general ABNF
// parser on every line: over ten seconds for one vLLM exposition where the text parser takes a
// millisecond, longer than a scrape interval. The two formats differ only in what is rewritten
// here:
//   - a counter family is named without "_total" in its TYPE/HELP lines and its sample carries it:
//     the family is renamed to the sample's name;
//   - "_created" samples (creation timestamps) and "# UNIT" lines are dropped (servescope keeps
//     neither), and so are exemplars ("value # {labels} value") and sample timestamps;
//   - "info", "stateset" and "unknown" families become untyped; "gaugehistogram" families too,
//     since their "_gcount"/"_gsum" samples are not a histogram's;
//   - HELP texts escape '"' in OpenMetrics and not in the text format;
//   - "# EOF" ends the exposition; text after it is an error, as OpenMetrics requires.
func openMetricsToText(r io.Reader) (io.Reader, error) {
	var out bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLineBytes)
	// A family's HELP line comes before its TYPE line, which decides the family's text name: it is
	// held until then.
	var helpName, helpText string
	flushHelp := func(name string) {
		if helpName != "" {
			out.WriteString("# HELP " + name + " " + strings.ReplaceAll(helpText, `\"`, `"`) + "\n")
			helpName = ""
		}
	}
	eof := false
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if eof {
			if strings.TrimSpace(line) != "" {
				return nil, fmt.Errorf("openmetrics line %d: text after # EOF", n)
			}
			continue
		}
		switch {
		case line == "# EOF":
			flushHelp(helpName)
			eof = true
			continue
		case strings.HasPrefix(line, "# HELP "):
			flushHelp(helpName)
			helpName, helpText, _ = strings.Cut(line[len("# HELP "):], " ")
			continue
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			if len(f) != 4 {
				return nil, fmt.Errorf("openmetrics line %d: malformed TYPE line", n)
			}
			name, typ := f[2], f[3]
			switch typ {
			case "counter":
				typ, name = "counter", name+"_total"
			case "gauge", "histogram", "summary":
			default:
				typ = "untyped"
			}
			if helpName == f[2] {
				flushHelp(name)
			} else {
				flushHelp(helpName)
			}
			line = "# TYPE " + name + " " + typ
		case strings.HasPrefix(line, "#"):
			// "# UNIT" and any other comment.
			flushHelp(helpName)
			continue
		default:
			flushHelp(helpName)
			sample, ok := sampleWithoutExtras(line)
			if !ok {
				return nil, fmt.Errorf("openmetrics line %d: malformed sample", n)
			}
			name := sample
			if i := strings.IndexAny(name, "{ "); i >= 0 {
				name = name[:i]
			}
			if strings.HasSuffix(name, "_created") {
				continue
			}
			line = sample
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read openmetrics: %w", err)
	}
	if !eof {
		return nil, fmt.Errorf("openmetrics exposition without # EOF (truncated)")
	}
	return &out, nil
}

// sampleWithoutExtras returns "name{labels} value" of an OpenMetrics sample line, without its
// timestamp and exemplar; ok is false when the label block is not closed.
func sampleWithoutExtras(line string) (string, bool) {
	i := 0
	for i < len(line) && line[i] != '{' && line[i] != ' ' {
		i++
	}
	if i < len(line) && line[i] == '{' {
		inQuote := false
		for i++; i < len(line); i++ {
			c := line[i]
			if inQuote {
				if c == '\\' {
					i++
				} else if c == '"' {
					inQuote = false
				}
				continue
			}
			if c == '"' {
				inQuote = true
			} else if c == '}' {
				break
			}
		}
		if i >= len(line) {
			return "", false
		}
		i++
	}
	head := line[:i]
	fields := strings.Fields(line[i:])
	if len(fields) == 0 {
		return "", false
	}
	return head + " " + fields[0], true
}
