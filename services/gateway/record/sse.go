package record

import "bytes"

// Server-sent events as the WHATWG HTML standard defines them: lines end with CRLF, LF or CR; an
// empty line ends an event; "data:" lines (one optional space after the colon) are joined with
// LF; lines starting with ':' are comments. vLLM writes "data: <json>\n\n" (and, for
// /v1/responses, an "event: <type>" line before it).

// eventEnd returns the length of the first complete event in b, up to and including the empty
// line that ends it, or -1 when b holds no complete event yet. b starts at the beginning of a
// line. A CR at the very end of b is undecided (an LF may follow in the next read).
func eventEnd(b []byte) int {
	// What vLLM writes has no CR: the LF-only scan decides unless a CR comes before the end it
	// finds. Only that event is searched for a CR, not all of b, since b may hold many events
	// and the caller calls eventEnd once for each.
	n := eventEndLF(b)
	if n >= 0 && bytes.IndexByte(b[:n], '\r') < 0 {
		return n
	}
	if n < 0 && bytes.IndexByte(b, '\r') < 0 {
		return -1
	}
	return eventEndAny(b)
}

// eventEndAny is eventEnd for text with any line ends.
func eventEndAny(b []byte) int {
	i := 0
	for i < len(b) {
		// b[i] starts a line: an empty line ends the event.
		switch b[i] {
		case '\n':
			return i + 1
		case '\r':
			if i+1 == len(b) {
				return -1
			}
			if b[i+1] == '\n' {
				return i + 2
			}
			return i + 1
		}
		j := lineBreak(b[i:])
		if j < 0 {
			return -1
		}
		i += j
		if b[i] == '\r' {
			if i+1 == len(b) {
				return -1
			}
			if b[i+1] == '\n' {
				i++
			}
		}
		i++
	}
	return -1
}

// eventEndLF is eventEnd of text where every line ends with LF, CR being an ordinary byte.
func eventEndLF(b []byte) int {
	for i := 0; i < len(b); {
		if b[i] == '\n' {
			return i + 1
		}
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
	}
	return -1
}

// lineBreak returns the index of the first CR or LF in b, -1 when there is none: two vectorized
// byte scans, where bytes.IndexAny with the two bytes walks b one byte at a time (it took 29% of
// the observer's instructions per chunk, callgrind on BenchmarkObserverFeedStream).
func lineBreak(b []byte) int {
	lf := bytes.IndexByte(b, '\n')
	end := lf
	if end < 0 {
		end = len(b)
	}
	if cr := bytes.IndexByte(b[:end], '\r'); cr >= 0 {
		return cr
	}
	return lf
}

// sseData returns the data of one complete event: its "data" lines joined with LF. joined is
// scratch space for events with several data lines. ok is false for an event without data (a
// comment or keep-alive).
func sseData(ev []byte, joined []byte) (data, scratch []byte, ok bool) {
	// What vLLM writes: "data: <json>\n\n", one line.
	if rest, found := bytes.CutPrefix(ev, []byte("data: ")); found && len(rest) >= 2 && rest[len(rest)-1] == '\n' && rest[len(rest)-2] == '\n' {
		// An event ends at its first empty line: the LF before the last is the first line end
		// unless the data holds a CR.
		if d := rest[:len(rest)-2]; bytes.IndexByte(d, '\n') < 0 && bytes.IndexByte(d, '\r') < 0 {
			return d, joined, true
		}
	}
	lines := 0
	for len(ev) > 0 {
		j := lineBreak(ev)
		line := ev
		if j >= 0 {
			line = ev[:j]
			if ev[j] == '\r' && j+1 < len(ev) && ev[j+1] == '\n' {
				j++
			}
			ev = ev[j+1:]
		} else {
			ev = nil
		}
		field, value, _ := bytes.Cut(line, []byte{':'})
		if string(field) != "data" {
			continue // comments, event:, id:, retry:, unknown fields
		}
		value = bytes.TrimPrefix(value, []byte{' '})
		lines++
		switch lines {
		case 1:
			data = value
		case 2:
			joined = append(append(append(joined[:0], data...), '\n'), value...)
			data = joined
		default:
			joined = append(append(joined, '\n'), value...)
			data = joined
		}
	}
	return data, joined, lines > 0
}
