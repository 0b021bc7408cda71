package proxy

import (
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"strings"
)

// Headers the gateway reads and sets.
const (
	// HeaderRequestID carries the request id: the client's, or a KSUID the gateway made.
	HeaderRequestID = "X-Request-Id"
	// HeaderTraceparent and HeaderTracestate are the W3C Trace Context headers.
	HeaderTraceparent = "Traceparent"
	HeaderTracestate  = "Tracestate"
)

// hopHeaders are connection-level headers a proxy must not forward (RFC 9110 §7.6.1).
var hopHeaders = map[string]bool{
	"Connection":          true,
	"Proxy-Connection":    true,
	"Keep-Alive":          true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
}

// copyHeaders copies src into dst without hop-by-hop headers, including those that src's
// Connection header names.
func copyHeaders(dst, src http.Header) {
	var named []string
	if c := src["Connection"]; len(c) > 0 {
		for _, v := range c {
			for _, f := range strings.Split(v, ",") {
				if f = strings.TrimSpace(f); f != "" {
					named = append(named, http.CanonicalHeaderKey(f))
				}
			}
		}
	}
	for k, vv := range src {
		if hopHeaders[k] {
			continue
		}
		skip := false
		for _, n := range named {
			if n == k {
				skip = true
				break
			}
		}
		if skip {
			continue
		}
		dst[k] = vv
	}
}

// traceContext is the trace context the gateway forwards to the engine.
type traceContext struct {
	// header is the traceparent value.
	header string
	// id is its trace id (32 hex).
	id string
	// span is its parent-id (16 hex): the gateway's own span id for this request, new for every
	// request, so the engine's span for this request names it as its parent and no other
	// request's span does (a caller's X-Request-Id, which vLLM's span also carries, may repeat).
	span string
	// parent is the parent-id of the client's valid traceparent (the client's span), "" when the
	// client sent none.
	parent string
	// sampled is its sampled flag (bit 0 of trace-flags).
	sampled bool
	// replaced is set when the client's traceparent was absent or invalid and the gateway made
	// this one; the client's tracestate belongs to no valid traceparent then and is not forwarded.
	replaced bool
}

// traceparent returns the trace context to forward. The gateway takes part in the trace as W3C
// Trace Context says a participant does: it keeps the trace id and the trace-flags of the client's
// valid version-00 traceparent (whatever its sampled flag: the gateway does not overrule the
// client's sampling decision; request.finished records it as trace_sampled) and puts its own span
// id in the parent-id; without a valid one it starts a trace with random ids, sampled.
func traceparent(in string) traceContext {
	var b [24]byte
	for {
		putUint64(b[0:8], rand.Uint64())
		putUint64(b[8:16], rand.Uint64())
		putUint64(b[16:24], rand.Uint64())
		// All-zero trace or span ids are invalid; astronomically unlikely, but cheap to rule out.
		if !allZero(b[0:16]) && !allZero(b[16:24]) {
			break
		}
	}
	var out [55]byte
	copy(out[0:3], "00-")
	out[35] = '-'
	hex.Encode(out[36:52], b[16:24])
	out[52] = '-'
	tc := traceContext{}
	if validTraceparent(in) {
		flags, _ := hex.DecodeString(in[53:55])
		copy(out[3:35], in[3:35])
		copy(out[53:55], in[53:55])
		tc.sampled = flags[0]&1 == 1
		tc.parent = in[36:52]
	} else {
		hex.Encode(out[3:35], b[0:16])
		copy(out[53:55], "01")
		tc.sampled, tc.replaced = true, true
	}
	tc.header = string(out[:])
	tc.id, tc.span = tc.header[3:35], tc.header[36:52]
	return tc
}

// validTraceparent checks the W3C shape 00-<32 hex>-<16 hex>-<2 hex> with non-zero ids.
func validTraceparent(s string) bool {
	if len(s) != 55 || s[0:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return false
	}
	for i, c := range []byte(s) {
		if i == 2 || i == 35 || i == 52 {
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s[3:35] != strings.Repeat("0", 32) && s[36:52] != strings.Repeat("0", 16)
}

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (56 - 8*i))
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
