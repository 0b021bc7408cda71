package simserver

import (
	"bytes"
	"encoding/json"
	"errors"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/servescope/servescope/services/internal/openaiwire"
	"github.com/servescope/servescope/services/vllmsim/engine"
)

// sseWriter frames SSE events as vLLM does ("data: <json>\n\n") into a buffer that is written
// and flushed once per engine step, so a 256-sequence batch costs one write per stream per step.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	buf     bytes.Buffer
	scratch []byte
}

// chunkPrefix is a content chunk up to the content string, as json.Marshal writes it.
func chunkPrefix(j *job, created int64) []byte {
	b := append([]byte(nil), `{"id":`...)
	b = appendJSONString(b, j.id)
	if j.chat {
		b = append(b, `,"object":"chat.completion.chunk","created":`...)
	} else {
		b = append(b, `,"object":"text_completion","created":`...)
	}
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, j.model)
	if j.chat {
		return append(b, `,"choices":[{"index":0,"delta":{"content":`...)
	}
	return append(b, `,"choices":[{"index":0,"text":`...)
}

func (sw *sseWriter) event(v any) {
	sw.buf.WriteString("data: ")
	b, _ := json.Marshal(v)
	sw.buf.Write(b)
	sw.buf.WriteString("\n\n")
}

func (sw *sseWriter) done() { sw.buf.WriteString("data: [DONE]\n\n") }

func (sw *sseWriter) flush() error {
	if sw.buf.Len() == 0 {
		return nil
	}
	if _, err := sw.w.Write(sw.buf.Bytes()); err != nil {
		return err
	}
	sw.buf.Reset()
	return sw.rc.Flush()
}

// stream answers a streaming request: a role chunk (chat), one chunk per token with the finish
// reason on the last, an optional usage chunk with "choices": [], then [DONE]. An engine failure
// after the stream began is sent as an error event followed by [DONE].
func (s *Server) stream(w http.ResponseWriter, r *http.Request, j *job, seq *engine.Seq) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
	created := time.Now().Unix()
	dropAfter := -1
	if s.cfg.DropShare > 0 && mrand.Float64() < s.cfg.DropShare {
		dropAfter = max(1, j.maxTokens/2)
	}
	if j.chat {
		empty := ""
		sw.event(openaiwire.ChatCompletionChunk{ID: j.id, Object: "chat.completion.chunk", Created: created, Model: j.model,
			Choices: []openaiwire.ChatChunkChoice{{Delta: openaiwire.Delta{Role: "assistant", Content: &empty}}}})
	}
	sent := 0
	buf := make([]engine.Token, 0, 16)
	for {
		toks, fin, done, err := seq.Wait(r.Context(), buf[:0])
		if err != nil && r.Context().Err() != nil {
			s.eng.Abort(seq)
			return
		}
		for i, t := range toks {
			var reason *string
			var metrics *openaiwire.RequestMetrics
			if done && fin != nil && i == len(toks)-1 {
				reason = &fin.FinishReason
				metrics = s.requestMetrics(fin)
			}
			s.tokenChunk(sw, j, created, t.Text, reason, metrics)
			sent++
			if sent == dropAfter {
				if sw.flush() == nil {
					s.eng.Abort(seq)
					s.cfg.Log.Info("dropping connection mid-stream", "request_id", j.id, "tokens_sent", sent)
					panic(http.ErrAbortHandler)
				}
			}
		}
		if done && fin != nil && len(toks) == 0 {
			s.tokenChunk(sw, j, created, "", &fin.FinishReason, s.requestMetrics(fin))
		}
		if done {
			if err != nil {
				status := http.StatusInternalServerError
				msg := err.Error()
				if errors.Is(err, engine.ErrAborted) {
					msg = "request aborted"
				}
				sw.event(errorBody(status, "InternalServerError", msg, ""))
			} else if j.includeUsage {
				u := usageOf(fin)
				if j.chat {
					sw.event(openaiwire.ChatCompletionChunk{ID: j.id, Object: "chat.completion.chunk", Created: created, Model: j.model,
						Choices: []openaiwire.ChatChunkChoice{}, Usage: &u})
				} else {
					sw.event(openaiwire.Completion{ID: j.id, Object: "text_completion", Created: created, Model: j.model,
						Choices: []openaiwire.CompletionChoice{}, Usage: &u})
				}
			}
			sw.done()
			_ = sw.flush()
			return
		}
		if err := sw.flush(); err != nil {
			s.eng.Abort(seq)
			return
		}
	}
}

// tokenChunk writes one token's chunk. Chunks that only carry content (all but the last) are
// assembled from a per-request prefix instead of being marshalled: at 256 running sequences this
// is the simulator's hottest path, and the bytes are identical to the marshalled form.
func (s *Server) tokenChunk(sw *sseWriter, j *job, created int64, text string, reason *string, metrics *openaiwire.RequestMetrics) {
	if reason == nil && metrics == nil {
		if j.chunkPrefix == nil {
			j.chunkPrefix = chunkPrefix(j, created)
		}
		b := append(sw.scratch[:0], "data: "...)
		b = append(b, j.chunkPrefix...)
		b = appendJSONString(b, text)
		if j.chat {
			b = append(b, `},"logprobs":null,"finish_reason":null}]}`...)
		} else {
			b = append(b, `,"logprobs":null,"finish_reason":null}]}`...)
		}
		b = append(b, "\n\n"...)
		sw.buf.Write(b)
		sw.scratch = b
		return
	}
	if j.chat {
		sw.event(openaiwire.ChatCompletionChunk{ID: j.id, Object: "chat.completion.chunk", Created: created, Model: j.model,
			Choices: []openaiwire.ChatChunkChoice{{Delta: openaiwire.Delta{Content: &text}, FinishReason: reason}}, Metrics: metrics})
		return
	}
	sw.event(openaiwire.Completion{ID: j.id, Object: "text_completion", Created: created, Model: j.model,
		Choices: []openaiwire.CompletionChoice{{Text: text, FinishReason: reason}}, Metrics: metrics})
}
