package load

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/segmentio/ksuid"
)

// Error kinds counted besides HTTP status codes.
const (
	ErrKindConnection  = "connection"       // could not connect, or the connection broke
	ErrKindTimeout     = "timeout"          // the request exceeded RequestTimeout
	ErrKindStreamError = "stream_error"     // an error event inside a 200 stream
	ErrKindTruncated   = "stream_truncated" // the stream ended without [DONE]
	ErrKindBadResponse = "bad_response"     // a 200 answer that does not parse
)

// result is what one request produced. Durations are wall seconds.
type result struct {
	errKind          string // "" on success; an HTTP status ("400") or one of ErrKind*
	errMessage       string
	ttft             float64 // first non-empty content, from the send; 0 when unknown
	e2e              float64
	promptTokens     int
	completionTokens int
	finishReason     string
}

type streamChunk struct {
	Choices []struct {
		Delta struct {
			Content *string `json:"content"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
		Message      *struct {
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Code    any    `json:"code"`
	} `json:"error"`
}

// send performs one request and classifies its outcome. It never returns an error: failures
// are part of the result.
func (r *resolved) send(ctx context.Context, model string, p prompt, stream bool) result {
	ctx, cancel := context.WithTimeout(ctx, r.RequestTimeout)
	defer cancel()
	body := map[string]any{"model": model, "max_tokens": r.scenario.MaxTokens, "stream": stream}
	path := "/v1/chat/completions"
	if r.Endpoint == "completions" {
		path = "/v1/completions"
		body["prompt"] = p.content
	} else {
		body["messages"] = []map[string]string{{"role": "user", "content": p.content}}
	}
	if stream {
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	if r.ignoreEOS {
		body["ignore_eos"] = true
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.Target+path, bytes.NewReader(b))
	if err != nil {
		return result{errKind: ErrKindConnection, errMessage: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", ksuid.New().String())
	start := time.Now()
	resp, err := r.HTTPClient.Do(req)
	if err != nil {
		return result{errKind: classify(ctx, err), errMessage: err.Error(), e2e: time.Since(start).Seconds()}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return result{errKind: strconv.Itoa(resp.StatusCode), errMessage: string(msg), e2e: time.Since(start).Seconds()}
	}
	if !stream {
		return readWhole(ctx, resp.Body, start)
	}
	return readStream(ctx, resp.Body, start)
}

func classify(ctx context.Context, err error) string {
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded {
		return ErrKindTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrKindTimeout
	}
	return ErrKindConnection
}

func readWhole(ctx context.Context, body io.Reader, start time.Time) result {
	raw, err := io.ReadAll(body)
	res := result{e2e: time.Since(start).Seconds()}
	if err != nil {
		res.errKind, res.errMessage = classify(ctx, err), err.Error()
		return res
	}
	var c streamChunk
	if err := json.Unmarshal(raw, &c); err != nil || len(c.Choices) == 0 {
		res.errKind, res.errMessage = ErrKindBadResponse, fmt.Sprintf("unparseable completion: %.200s", raw)
		return res
	}
	if c.Choices[0].FinishReason != nil {
		res.finishReason = *c.Choices[0].FinishReason
	}
	if c.Usage != nil {
		res.promptTokens, res.completionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
	}
	return res
}

// readStream consumes an SSE stream: TTFT at the first non-empty content, usage from the usage
// chunk (falling back to counting content chunks), end at [DONE].
func readStream(ctx context.Context, body io.Reader, start time.Time) result {
	var res result
	br := bufio.NewReaderSize(body, 64<<10)
	chunks := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil && !(errors.Is(err, bufio.ErrBufferFull)) {
			res.e2e = time.Since(start).Seconds()
			if errors.Is(err, io.EOF) {
				res.errKind, res.errMessage = ErrKindTruncated, "stream ended without [DONE]"
			} else {
				res.errKind, res.errMessage = classify(ctx, err), err.Error()
			}
			return res
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			// An event larger than the buffer: read the rest of the line.
			rest, rerr := br.ReadBytes('\n')
			line = append(append([]byte{}, line...), rest...)
			if rerr != nil {
				res.e2e = time.Since(start).Seconds()
				res.errKind, res.errMessage = ErrKindTruncated, rerr.Error()
				return res
			}
		}
		line = bytes.TrimRight(line, "\r\n")
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if bytes.Equal(data, []byte("[DONE]")) {
			res.e2e = time.Since(start).Seconds()
			if res.completionTokens == 0 {
				res.completionTokens = chunks
			}
			if res.errKind == "" && res.finishReason == "" && chunks == 0 {
				res.errKind, res.errMessage = ErrKindBadResponse, "stream carried no content"
			}
			// Read the (empty) rest so the server sees the response end cleanly rather than a
			// client hanging up right after [DONE].
			_, _ = io.Copy(io.Discard, io.LimitReader(br, 64<<10))
			return res
		}
		if nonEmpty, ok := plainContentChunk(data); ok {
			if nonEmpty {
				if res.ttft == 0 {
					res.ttft = time.Since(start).Seconds()
				}
				chunks++
			}
			continue
		}
		var c streamChunk
		if err := json.Unmarshal(data, &c); err != nil {
			res.errKind, res.errMessage = ErrKindBadResponse, fmt.Sprintf("unparseable event: %.200s", data)
			continue
		}
		if c.Error != nil {
			res.errKind, res.errMessage = ErrKindStreamError, c.Error.Message
			continue
		}
		if c.Usage != nil {
			res.promptTokens, res.completionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
		}
		for _, ch := range c.Choices {
			text := ""
			if ch.Delta.Content != nil {
				text = *ch.Delta.Content
			} else if ch.Text != nil {
				text = *ch.Text
			}
			if text != "" {
				if res.ttft == 0 {
					res.ttft = time.Since(start).Seconds()
				}
				chunks++
			}
			if ch.FinishReason != nil {
				res.finishReason = *ch.FinishReason
			}
		}
	}
}

var (
	keyFinishNull = []byte(`"finish_reason":null`)
	keyUsage      = []byte(`"usage":{`)
	keyError      = []byte(`"error"`)
	keyContent    = []byte(`"content":"`)
	keyText       = []byte(`"text":"`)
)

// plainContentChunk recognizes, without decoding, the common event that carries only content:
// its finish_reason is null and it has no usage or error object (keys cannot be forged by
// content, where quotes are escaped). It reports whether the content is non-empty; ok is false
// for any other event, which then takes the full JSON decode. Decoding every token's event
// dominated loadgen's CPU at hundreds of concurrent streams.
func plainContentChunk(data []byte) (nonEmpty, ok bool) {
	if !bytes.Contains(data, keyFinishNull) || bytes.Contains(data, keyUsage) || bytes.Contains(data, keyError) {
		return false, false
	}
	if bytes.Count(data, keyFinishNull) != 1 {
		return false, false // several choices: decode fully
	}
	i := bytes.Index(data, keyContent)
	k := len(keyContent)
	if i < 0 {
		i, k = bytes.Index(data, keyText), len(keyText)
	}
	if i < 0 {
		return false, true // role-only or null content
	}
	j := i + k
	return j < len(data) && data[j] != '"', true
}
