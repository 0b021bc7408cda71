// Package record extracts what the gateway records from OpenAI-compatible traffic: the request
// fields (model, stream flag, max_tokens, versions, prompt size) and, incrementally, the response
// fields (content timing, usage, finish_reason, the engine's per-request metrics, errors, output
// script check). It reads only the fields it needs, without decoding whole bodies into structs,
// because it runs on every chunk of every stream.
package record

import (
	"errors"
	"net/http"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/servescope/servescope/schema"
)

// Version headers: each sets one field of schema.Versions.
const (
	HeaderApp            = "X-Servescope-App"
	HeaderPromptVersion  = "X-Servescope-Prompt-Version"
	HeaderConfigVersion  = "X-Servescope-Config-Version"
	HeaderIndexVersion   = "X-Servescope-Index-Version"
	HeaderEmbeddingModel = "X-Servescope-Embedding-Model"
)

// Request is what the gateway reads from a completion request body and its headers.
type Request struct {
	// Model is the request's `model`.
	Model string
	// Stream is the request's `stream` flag.
	Stream bool
	// IncludeUsage is stream_options.include_usage as the client sent it.
	IncludeUsage bool
	// ContinuousUsage is vLLM's stream_options.continuous_usage_stats: with include_usage on,
	// every chunk would carry usage, so the gateway must not turn include_usage on for the client.
	ContinuousUsage bool
	// N is the number of choices asked for (`n`, default 1).
	N int64
	// MaxTokens is max_tokens, or max_completion_tokens when only that is set; nil when neither
	// is a non-negative integer.
	MaxTokens *uint32
	// Versions come from the X-Servescope-* headers first and OpenAI `metadata` second (keys app,
	// prompt_version, config_version, index_version, embedding_model_version).
	Versions schema.Versions
	// PromptBytes is the size in bytes of the prompt text: every message's text content for chat,
	// `prompt` for completions; nil when the body has neither.
	PromptBytes *uint32
	// PromptText is the prompt text, filled only when capture was asked for.
	PromptText string
}

// bstr views b as a string without copying; the string must not outlive b's contents.
func bstr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// ParseRequest reads the recorded fields of a chat or text completion body. A body that is not a
// JSON object yields a zero Request (the engine will answer the error). With capture, PromptText
// holds the prompt.
func ParseRequest(body []byte, h http.Header, capture bool) Request {
	req := Request{N: 1}
	root := gjson.Parse(bstr(body))
	if root.IsObject() {
		var metadata gjson.Result
		var prompt strings.Builder
		var promptBytes int
		var havePrompt bool
		root.ForEach(func(key, v gjson.Result) bool {
			switch key.Str {
			case "model":
				req.Model = strings.Clone(v.String())
			case "stream":
				req.Stream = v.Type == gjson.True
			case "stream_options":
				req.IncludeUsage = v.Get("include_usage").Type == gjson.True
				req.ContinuousUsage = v.Get("continuous_usage_stats").Type == gjson.True
			case "max_tokens":
				req.MaxTokens = tokenLimit(v)
			case "n":
				req.N = v.Int()
			case "max_completion_tokens":
				if req.MaxTokens == nil {
					req.MaxTokens = tokenLimit(v)
				}
			case "metadata":
				metadata = v
			case "messages":
				havePrompt = true
				v.ForEach(func(_, m gjson.Result) bool {
					c := m.Get("content")
					if c.IsArray() {
						c.ForEach(func(_, part gjson.Result) bool {
							if part.Get("type").Str == "text" {
								t := part.Get("text").String()
								promptBytes += len(t)
								if capture {
									prompt.WriteString(t)
								}
							}
							return true
						})
						return true
					}
					t := c.String()
					promptBytes += len(t)
					if capture {
						if prompt.Len() > 0 {
							prompt.WriteByte('\n')
						}
						prompt.WriteString(t)
					}
					return true
				})
			case "prompt":
				havePrompt = true
				t := v.String()
				if v.IsArray() {
					t = v.Get("0").String()
				}
				promptBytes += len(t)
				if capture {
					prompt.WriteString(t)
				}
			}
			return true
		})
		if havePrompt {
			n := clampU32(int64(promptBytes))
			req.PromptBytes = &n
		}
		if capture {
			req.PromptText = prompt.String()
		}
		if metadata.IsObject() {
			req.Versions = schema.Versions{
				App:                   strings.Clone(metadata.Get("app").String()),
				PromptVersion:         strings.Clone(metadata.Get("prompt_version").String()),
				ConfigVersion:         strings.Clone(metadata.Get("config_version").String()),
				IndexVersion:          strings.Clone(metadata.Get("index_version").String()),
				EmbeddingModelVersion: strings.Clone(metadata.Get("embedding_model_version").String()),
			}
		}
	}
	headerWins(&req.Versions.App, h.Get(HeaderApp))
	headerWins(&req.Versions.PromptVersion, h.Get(HeaderPromptVersion))
	headerWins(&req.Versions.ConfigVersion, h.Get(HeaderConfigVersion))
	headerWins(&req.Versions.IndexVersion, h.Get(HeaderIndexVersion))
	headerWins(&req.Versions.EmbeddingModelVersion, h.Get(HeaderEmbeddingModel))
	return req
}

func headerWins(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

func tokenLimit(v gjson.Result) *uint32 {
	if v.Type != gjson.Number || v.Num < 0 {
		return nil
	}
	n := clampU32(v.Int())
	return &n
}

func clampU32(n int64) uint32 {
	switch {
	case n < 0:
		return 0
	case n > 1<<32-1:
		return 1<<32 - 1
	}
	return uint32(n)
}

// InjectIncludeUsage returns body with stream_options.include_usage set to true, so the engine
// sends its final usage chunk even to a client that did not ask for it (the gateway removes that
// chunk again before the client sees it). Other bytes of the body are kept as they were.
func InjectIncludeUsage(body []byte) ([]byte, error) {
	// An invalid body goes to the engine untouched, for the engine to refuse.
	if !gjson.ValidBytes(body) || !gjson.Parse(bstr(body)).IsObject() {
		return nil, errors.New("request body is not a JSON object")
	}
	return sjson.SetBytes(body, "stream_options.include_usage", true)
}
