package proxy

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/enginetest"
)

func TestTraceparent(t *testing.T) {
	valid := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	unsampled := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	tests := []struct {
		in        string
		keep      bool // the client's trace id, flags and parent are kept
		wantTrace string
		flags     string
		sampled   bool
	}{
		{valid, true, "4bf92f3577b34da6a3ce929d0e0e4736", "01", true},
		{unsampled, true, "4bf92f3577b34da6a3ce929d0e0e4736", "00", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", true, "4bf92f3577b34da6a3ce929d0e0e4736", "03", true},
		{"", false, "", "01", true},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false, "", "01", true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false, "", "01", true},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false, "", "01", true}, // upper case is invalid
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", false, "", "01", true},
	}
	for _, tc := range tests {
		tr := traceparent(tc.in)
		if !validTraceparent(tr.header) || tr.header[3:35] != tr.id || tr.header[36:52] != tr.span || tr.header[53:] != tc.flags || tr.sampled != tc.sampled {
			t.Errorf("%q: got %+v, want a valid header with flags %s (sampled %v) whose ids it records", tc.in, tr, tc.flags, tc.sampled)
		}
		if tc.keep {
			// The gateway is a participant: the client's trace and decision, its own parent-id.
			if tr.id != tc.wantTrace || tr.parent != tc.in[36:52] || tr.span == tr.parent || tr.replaced {
				t.Errorf("%q: got %+v, want the client's trace and flags with the gateway's span as parent", tc.in, tr)
			}
			continue
		}
		if tr.header == tc.in || tr.parent != "" || !tr.replaced {
			t.Errorf("%q: made %+v, want a new valid sampled header", tc.in, tr)
		}
	}
	// Two requests of one client span (the same traceparent, perhaps the same X-Request-Id) get
	// two gateway spans: the engine's span of each names its own request.
	if a, b := traceparent(valid), traceparent(valid); a.span == b.span || a.id != b.id {
		t.Errorf("two requests of one client span: %+v, %+v, want one trace and two spans", a, b)
	}
	if a, b := traceparent(""), traceparent(""); a.header == b.header {
		t.Error("two new traceparents are equal")
	}
}

// A client's traceparent with the sampled flag off goes to the engine with its trace id and flag
// (the gateway's span id as parent): vLLM's parent-based sampling then records no span, and
// request.finished says why (trace_sampled false). A traceparent the gateway makes is sampled, and
// the client's tracestate, which belonged to an invalid traceparent, is dropped. request.finished
// carries the span id the engine got as parent, and the client's.
func TestTraceContextForwarded(t *testing.T) {
	var got http.Header
	h, pub := newHandler(t, engineFunc(func(req *http.Request, _ []byte) *http.Response {
		got = req.Header.Clone()
		return jsonResponse(200, "application/json", []byte(`{"id":"chatcmpl-t","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"total_tokens":2,"completion_tokens":1}}`))
	}), nil)
	unsampled := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	call(h, "/v1/chat/completions", "t-1", `{"model":"m","messages":[]}`, map[string]string{"Traceparent": unsampled, "Tracestate": "vendor=1"})
	sent1 := got.Get("Traceparent")
	if !validTraceparent(sent1) || sent1[:36] != unsampled[:36] || sent1[52:] != "-00" || sent1[36:52] == "00f067aa0ba902b7" || got.Get("Tracestate") != "vendor=1" {
		t.Fatalf("engine got traceparent %q tracestate %q, want the client's trace, flags and tracestate with the gateway's parent-id", sent1, got.Get("Tracestate"))
	}
	call(h, "/v1/chat/completions", "t-2", `{"model":"m","messages":[]}`, map[string]string{"Traceparent": "garbage", "Tracestate": "vendor=1"})
	sent2 := got.Get("Traceparent")
	if !validTraceparent(sent2) || !strings.HasSuffix(sent2, "-01") || got.Get("Tracestate") != "" {
		t.Fatalf("engine got traceparent %q tracestate %q, want a new sampled one and no tracestate", sent2, got.Get("Tracestate"))
	}
	if got.Get(HeaderRequestID) != "t-2" {
		t.Fatalf("engine got X-Request-Id %q", got.Get(HeaderRequestID))
	}
	settle(h)
	if f := pub.finished(t, "t-1"); f.TraceSampled == nil || *f.TraceSampled || f.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		f.SpanID != sent1[36:52] || f.ParentSpanID != "00f067aa0ba902b7" {
		t.Fatalf("t-1: trace_sampled %v trace_id %q span_id %q parent_span_id %q, want false, the client's trace, the parent-id sent (%s) and the client's",
			f.TraceSampled, f.TraceID, f.SpanID, f.ParentSpanID, sent1[36:52])
	}
	if f := pub.finished(t, "t-2"); f.TraceSampled == nil || !*f.TraceSampled || f.ResponseID != "chatcmpl-t" || f.SpanID != sent2[36:52] || f.ParentSpanID != "" {
		t.Fatalf("t-2: trace_sampled %v response_id %q span_id %q parent_span_id %q", f.TraceSampled, f.ResponseID, f.SpanID, f.ParentSpanID)
	}
}

func TestCopyHeadersDropsHopByHop(t *testing.T) {
	src := http.Header{
		"Connection":    {"keep-alive, X-Secret-Hop"},
		"X-Secret-Hop":  {"1"},
		"Keep-Alive":    {"timeout=5"},
		"Upgrade":       {"h2c"},
		"Authorization": {"Bearer k"},
		"Content-Type":  {"application/json"},
	}
	dst := http.Header{}
	copyHeaders(dst, src)
	for _, k := range []string{"Connection", "X-Secret-Hop", "Keep-Alive", "Upgrade"} {
		if _, ok := dst[k]; ok {
			t.Errorf("%s forwarded", k)
		}
	}
	for _, k := range []string{"Authorization", "Content-Type"} {
		if dst.Get(k) != src.Get(k) {
			t.Errorf("%s not forwarded", k)
		}
	}
}

func TestBalancer(t *testing.T) {
	urls, err := ParseUpstreams("http://a:8000, http://b:8000/,http://c:8000")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseUpstreams("ftp://x"); err == nil {
		t.Error("ftp upstream accepted")
	}
	if _, err := ParseUpstreams(" , "); err == nil {
		t.Error("empty upstream list accepted")
	}
	rr, _ := newBalancer(urls, PolicyRoundRobin)
	seen := map[string]int{}
	for range 30 {
		u := rr.pick()
		seen[u.url.Host]++
		u.release()
	}
	if seen["a:8000"] != 10 || seen["b:8000"] != 10 || seen["c:8000"] != 10 {
		t.Errorf("round robin spread %v", seen)
	}
	lf, _ := newBalancer(urls, PolicyLeastInFlight)
	held := []*upstream{lf.pick(), lf.pick()} // two engines busy
	free := lf.pick()
	for _, h := range held {
		if h == free {
			t.Fatalf("least-in-flight picked a busy engine %s", free.url.Host)
		}
	}
	free.release()
	for range 5 {
		u := lf.pick()
		if u != free {
			t.Fatalf("least-in-flight picked %s, want the idle %s", u.url.Host, free.url.Host)
		}
		u.release()
	}
	if _, err := newBalancer(urls, "random"); err == nil {
		t.Error("unknown policy accepted")
	}
}

func TestRouteOf(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/chat/completions": "/v1/chat/completions", "/v1/completions": "/v1/completions",
		"/v1/responses": "/v1/responses", "/v1/embeddings": "/v1/embeddings",
		"/v1/models": RouteOther, "/v1/chat/completions/x": RouteOther, "/v1/responses/resp_1": RouteOther,
	} {
		if got := routeOf(path); got != want {
			t.Errorf("routeOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// The reproducer: streamed /v1/completions with three prompts. vLLM runs one engine request per
// prompt and interleaves their chunks; the gateway used to end the client's stream with its own
// [DONE] once choice 0 finished, and the client lost the other prompts' text (2,118 of 5,276
// bytes with this stream).
func TestSeveralPromptsReachTheClientWhole(t *testing.T) {
	s := enginetest.VLLMStream{ID: "cmpl-x", Model: "m", Created: 1, Prompts: 3, N: 1,
		Tokens: []int{4, 9, 12}, Finish: []string{"length", "stop", "length"}, IncludeUsage: true}
	ws := s.Writes()
	one := func(data []byte) [][]byte { // one write per event, as vLLM sends them
		return bytes.SplitAfter(data, []byte("\n\n"))
	}
	h, pub := newHandler(t, replay(ws, one, errEOF), nil)
	rec, _ := call(h, "/v1/completions", "mp", `{"model":"m","prompt":["a","b","c"],"stream":true}`, nil)
	settle(h)
	want := bytes.Replace(enginetest.Bytes(ws), usageChunkOf(ws), nil, 1)
	if !bytes.Equal(rec.Body.Bytes(), want) || len(want) != 5276 {
		t.Fatalf("client received %d bytes, engine sent %d (without the usage chunk)", rec.Body.Len(), len(want))
	}
	fin := pub.finished(t, "mp")
	if fin.CompletionTokens == nil || *fin.CompletionTokens != 25 || *fin.PromptTokens != 21 || fmt.Sprint(fin.FinishReasons) != "[length stop length]" || fin.FinishReason != "length" {
		t.Fatalf("recorded tokens %v/%v finish %q %q", fin.PromptTokens, fin.CompletionTokens, fin.FinishReason, fin.FinishReasons)
	}
}

// The gateway asks for usage only when the request as sent would get none, and removes only the
// chunk it asked for.
func TestUsageChunkRemovedOnlyWhenAsked(t *testing.T) {
	s := enginetest.VLLMStream{Chat: true, ID: "chatcmpl-u", Model: "m", Created: 1, N: 1, Tokens: []int{3}, Finish: []string{"stop"}, IncludeUsage: true}
	ws := s.Writes()
	for _, tc := range []struct {
		body   string
		remove bool
	}{
		{`{"model":"m","messages":[],"stream":true}`, true},
		{`{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":false}}`, true},
		{`{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}`, false},
		// vLLM's StreamOptions.include_usage defaults to True: this client gets usage without the gateway.
		{`{"model":"m","messages":[],"stream":true,"stream_options":{}}`, false},
	} {
		h, pub := newHandler(t, replay(ws, nil, errEOF), nil)
		rec, _ := call(h, "/v1/chat/completions", "u", tc.body, nil)
		settle(h)
		want := enginetest.Bytes(ws)
		if tc.remove {
			want = bytes.Replace(want, usageChunkOf(ws), nil, 1)
		}
		if !bytes.Equal(rec.Body.Bytes(), want) {
			t.Errorf("%s: client got %q, want %q", tc.body, rec.Body.Bytes(), want)
		}
		if fin := pub.finished(t, "u"); fin.CompletionTokens == nil || *fin.CompletionTokens != 3 || fin.TokensEstimated {
			t.Errorf("%s: completion tokens %v estimated %v", tc.body, fin.CompletionTokens, fin.TokensEstimated)
		}
	}
}

// An engine that breaks off mid-stream breaks off the client's connection too, after every byte
// it sent: a truncated answer must not look complete.
func TestEngineGoingAwayAbortsTheClient(t *testing.T) {
	s := enginetest.VLLMStream{Chat: true, ID: "chatcmpl-g", Model: "m", Created: 1, N: 1, Tokens: []int{6}, Finish: []string{"stop"}, CloseAfterSteps: 3}
	ws := s.Writes()
	h, pub := newHandler(t, replay(ws, cutter(9), errEngineGone), nil)
	rec, aborted := call(h, "/v1/chat/completions", "g", `{"model":"m","messages":[],"stream":true}`, nil)
	settle(h)
	if !aborted || !bytes.Equal(rec.Body.Bytes(), enginetest.Bytes(ws)) {
		t.Fatalf("aborted %v, client got %q", aborted, rec.Body.Bytes())
	}
	if fin := pub.finished(t, "g"); fin.ErrorCode != "stream_interrupted" || fin.ErrorLayer != "upstream" || fin.StatusCode != 200 {
		t.Fatalf("recorded %d %q %q", fin.StatusCode, fin.ErrorLayer, fin.ErrorCode)
	}
	// A body broken off the same way.
	h, _ = newHandler(t, engineFunc(func(*http.Request, []byte) *http.Response {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: &pieces{parts: [][]byte{[]byte(`{"id":"x","choi`)}, err: errEngineGone}}
	}), nil)
	rec, aborted = call(h, "/v1/chat/completions", "g2", `{"model":"m","messages":[]}`, nil)
	settle(h)
	if !aborted || rec.Body.String() != `{"id":"x","choi` {
		t.Fatalf("body: aborted %v, client got %q", aborted, rec.Body.String())
	}
}

// failingWriter is a client that hangs up once it has read the given marker.
type failingWriter struct {
	*bytesRecorder
	after []byte
	gone  bool
}

type bytesRecorder struct {
	hdr    http.Header
	body   bytes.Buffer
	status int
}

func (r *bytesRecorder) Header() http.Header { return r.hdr }
func (r *bytesRecorder) WriteHeader(s int)   { r.status = s }
func (r *bytesRecorder) Flush()              {}

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.gone {
		return 0, fmt.Errorf("write: broken pipe")
	}
	w.body.Write(p)
	if bytes.Contains(w.body.Bytes(), w.after) {
		w.gone = true
	}
	return len(p), nil
}

// A client that hangs up right after data: [DONE] (most SDKs do) had its whole answer: not a 499.
// One that hangs up before it is.
func TestClientHangingUp(t *testing.T) {
	s := enginetest.VLLMStream{Chat: true, ID: "chatcmpl-h", Model: "m", Created: 1, N: 2, Tokens: []int{3, 5}, Finish: []string{"stop", "length"}, IncludeUsage: true}
	ws := s.Writes()
	for _, tc := range []struct {
		after  string
		status uint16
	}{
		{"data: [DONE]\n\n", 200},
		{Token(0, 1), 499},
	} {
		perEvent := func(data []byte) [][]byte { return bytes.SplitAfter(data, []byte("\n\n")) }
		h, pub := newHandler(t, replay(ws, perEvent, errEOF), nil)
		req, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[],"stream":true}`))
		req.Header.Set(HeaderRequestID, "hang")
		w := &failingWriter{bytesRecorder: &bytesRecorder{hdr: http.Header{}}, after: []byte(tc.after)}
		h.ServeHTTP(w, req)
		settle(h)
		fin := pub.finished(t, "hang")
		if fin.StatusCode != tc.status {
			t.Errorf("hang-up after %q: status %d (%s %s), want %d", tc.after, fin.StatusCode, fin.ErrorLayer, fin.ErrorMessage, tc.status)
		}
	}
}

// Token is the token text the generated streams use.
func Token(c, k int) string { return enginetest.Token(c, k) }

// Errors before and inside a stream, in every shape vLLM has used, on every recorded endpoint.
func TestErrorsInEveryShape(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "record", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name        string
		path        string
		status      int
		contentType string
		body        []byte
		code, msg   string
	}{
		{"nested (0.10.2 and later)", "/v1/chat/completions", 400, "application/json", read("error_nested.json"), "BadRequestError", "This model's maximum context length is 4096 tokens."},
		{"flat (up to 0.10)", "/v1/completions", 404, "application/json", read("error_flat.json"), "NotFoundError", "The model `nope` does not exist."},
		{"api key middleware", "/v1/embeddings", 401, "application/json", read("error_unauthorized.json"), "http_401", "Unauthorized"},
		{"FastAPI detail", "/v1/responses", 404, "application/json", read("error_detail.json"), "http_404", "Not Found"},
		{"plain text 500", "/v1/chat/completions", 500, "text/plain; charset=utf-8", read("error_text.txt"), "http_500", "Internal Server Error"},
		{"no body", "/v1/completions", 503, "application/json", nil, "http_503", "Service Unavailable"},
		{"error event in a 200 stream", "/v1/chat/completions", 200, "text/event-stream", read("chat_stream_error.sse"), "InternalServerError", "The engine crashed"},
		{"0.8 error event in a 200 stream", "/v1/chat/completions", 200, "text/event-stream", read("chat_stream_error_v08.sse"), "BadRequestError", "Out of KV cache"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, pub := newHandler(t, engineFunc(func(*http.Request, []byte) *http.Response {
				return jsonResponse(tc.status, tc.contentType, tc.body)
			}), nil)
			rec, _ := call(h, tc.path, "e", `{"model":"m","stream":true}`, nil)
			settle(h)
			if rec.Code != tc.status || !bytes.Equal(rec.Body.Bytes(), tc.body) {
				t.Fatalf("client got %d %q, want the engine's %d %q", rec.Code, rec.Body.Bytes(), tc.status, tc.body)
			}
			fin := pub.finished(t, "e")
			if int(fin.StatusCode) != tc.status || fin.ErrorLayer != "upstream" || fin.ErrorCode != tc.code || !strings.HasPrefix(fin.ErrorMessage, tc.msg) {
				t.Fatalf("recorded %d %q %q %q, want %d upstream %q %q", fin.StatusCode, fin.ErrorLayer, fin.ErrorCode, fin.ErrorMessage, tc.status, tc.code, tc.msg)
			}
		})
	}
	// The gateway's own errors are in vLLM's nested shape.
	h, pub := newHandler(t, engineFunc(func(*http.Request, []byte) *http.Response { return nil }), nil)
	rec, _ := call(h, "/v1/chat/completions", "down", `{"model":"m"}`, nil)
	settle(h)
	if rec.Code != 502 || !strings.HasPrefix(rec.Body.String(), `{"error":{"message":"engine http://engine.test:8000: `) || !strings.HasSuffix(rec.Body.String(), `"type":"upstream_unreachable","param":null,"code":502}}`) {
		t.Fatalf("gateway error %d %s", rec.Code, rec.Body.String())
	}
	if fin := pub.finished(t, "down"); fin.ErrorLayer != "upstream" || fin.ErrorCode != "upstream_unreachable" {
		t.Fatalf("recorded %q %q", fin.ErrorLayer, fin.ErrorCode)
	}
}

// cached_tokens stays unknown (absent) when the usage has no prompt_tokens_details, unless every
// engine runs with --enable-prompt-tokens-details: vLLM then omits the details exactly when no
// prompt token came from the cache, which is a known 0.
func TestCachedTokensUnknownUnlessEnginesReportDetails(t *testing.T) {
	body := []byte(`{"id":"cmpl-c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":5,"total_tokens":6,"completion_tokens":1,"prompt_tokens_details":null}}`)
	engine := engineFunc(func(*http.Request, []byte) *http.Response { return jsonResponse(200, "application/json", body) })
	for _, details := range []bool{false, true} {
		h, pub := newHandler(t, engine, func(o *Options) { o.PromptTokensDetails = details })
		call(h, "/v1/completions", "c", `{"model":"m","prompt":"a"}`, nil)
		settle(h)
		fin := pub.finished(t, "c")
		switch {
		case !details && fin.CachedTokens != nil:
			t.Errorf("without the engines' flag: cached_tokens %d, want unknown", *fin.CachedTokens)
		case details && (fin.CachedTokens == nil || *fin.CachedTokens != 0):
			t.Errorf("with the engines' flag: cached_tokens %v, want 0", fin.CachedTokens)
		}
	}
}

// /v1/responses and /v1/embeddings are recorded with their own usage vocabularies; a streamed
// response's TTFT comes from its first output delta.
func TestResponsesAndEmbeddingsRecorded(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "record", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	stream := read("responses_stream.sse")
	events := bytes.SplitAfter(stream, []byte("\n\n"))
	h, pub := newHandler(t, engineFunc(func(_ *http.Request, _ []byte) *http.Response {
		return sseResponse(200, &slowPieces{parts: events, delay: 2 * time.Millisecond})
	}), nil)
	rec, _ := call(h, "/v1/responses", "r", `{"model":"Qwen/Qwen3-0.6B","input":"Hi","stream":true,"max_output_tokens":64}`, nil)
	if !bytes.Equal(rec.Body.Bytes(), stream) {
		t.Fatalf("client got %q", rec.Body.Bytes())
	}
	body := read("embeddings.json")
	h2, pub2 := newHandler(t, engineFunc(func(*http.Request, []byte) *http.Response { return jsonResponse(200, "application/json", body) }), nil)
	rec, _ = call(h2, "/v1/embeddings", "emb", `{"model":"BAAI/bge-small-en-v1.5","input":["one","two"]}`, nil)
	settle(h)
	settle(h2)
	if !bytes.Equal(rec.Body.Bytes(), body) {
		t.Fatalf("client got %q", rec.Body.Bytes())
	}
	fin := pub.finished(t, "r")
	if fin.Endpoint != "/v1/responses" || !fin.Stream || fin.ResponseID != "resp_9f3c2a71b0e84d5f8a1e6c4b2d7f0a93" || fin.FinishReason != "stop" ||
		*fin.PromptTokens != 11 || *fin.CompletionTokens != 6 || *fin.CachedTokens != 0 || fin.TokensEstimated || *fin.MaxTokens != 64 {
		t.Fatalf("responses record %+v", fin)
	}
	// The first delta is the fourth event, at least three reads after arrival.
	if fin.TTFTSeconds == nil || *fin.TTFTSeconds < (6*time.Millisecond).Seconds() || fin.TPOTSeconds == nil {
		t.Fatalf("responses TTFT %v TPOT %v", fin.TTFTSeconds, fin.TPOTSeconds)
	}
	emb := pub2.finished(t, "emb")
	if emb.Endpoint != "/v1/embeddings" || emb.ResponseID != "embd-2Iq3zZNkYd3wBpRc6Z6pW0Y1yTd" || *emb.PromptTokens != 9 || *emb.CompletionTokens != 0 ||
		emb.TTFTSeconds != nil || emb.TokensEstimated || emb.Model != "BAAI/bge-small-en-v1.5" {
		t.Fatalf("embeddings record %+v", emb)
	}
}
