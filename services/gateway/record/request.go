// Package record extracts what the gateway records from vLLM's OpenAI-compatible traffic: the
// request fields (model, stream flag, token limit, versions, prompt size) and, incrementally, the
// response fields (output timing per choice, usage, finish reasons, the engine's per-request
// timing object, errors in every shape vLLM used, output script check) of chat completions, text
// completions, the Responses API and embeddings. It reads only the fields it needs, without
// decoding whole bodies into structs, because it runs on every chunk of every stream.
package record

import (
	"net/http"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/servescope/servescope/schema"
)

// Endpoint is a recorded OpenAI-compatible endpoint; its value is the request path.
type Endpoint string

// The recorded endpoints.
const (
	Chat        Endpoint = "/v1/chat/completions"
	Completions Endpoint = "/v1/completions"
	Responses   Endpoint = "/v1/responses"
	Embeddings  Endpoint = "/v1/embeddings"
)

// EndpointOf returns the recorded endpoint of a request path, and false for any other path.
func EndpointOf(path string) (Endpoint, bool) {
	switch e := Endpoint(path); e {
	case Chat, Completions, Responses, Embeddings:
		return e, true
	}
	return "", false
}

// Version headers: each sets one field of schema.Versions.
const (
	HeaderApp            = "X-Servescope-App"
	HeaderPromptVersion  = "X-Servescope-Prompt-Version"
	HeaderConfigVersion  = "X-Servescope-Config-Version"
	HeaderIndexVersion   = "X-Servescope-Index-Version"
	HeaderEmbeddingModel = "X-Servescope-Embedding-Model"
)

// Request is what the gateway reads from a request body and its headers.
type Request struct {
	// Model is the request's `model`.
	Model string
	// Stream is true when the request's `stream` is the JSON value true.
	Stream bool
	// MaxTokens is the output token limit: max_tokens, or max_completion_tokens when only that is
	// set (chat), max_output_tokens (/v1/responses); nil when none is a non-negative integer.
	MaxTokens *uint32
	// Versions come from the X-Servescope-* headers first and OpenAI `metadata` second (keys app,
	// prompt_version, config_version, index_version, embedding_model_version).
	Versions schema.Versions
	// PromptBytes is the size in bytes of the prompt text: every message's text for chat, every
	// prompt string for completions, instructions and input text for /v1/responses, every input
	// string for embeddings; nil when the body has none of them.
	PromptBytes *uint32
	// PromptText is the prompt text (several prompts or messages joined by "\n"), filled only
	// when capture was asked for.
	PromptText string
}

// bstr views b as a string without copying; the string must not outlive b's contents.
func bstr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// promptText accumulates prompt pieces.
type promptText struct {
	capture bool
	seen    bool
	bytes   int
	b       strings.Builder
}

func (p *promptText) add(s string) {
	p.seen = true
	p.bytes += len(s)
	if p.capture {
		if p.b.Len() > 0 {
			p.b.WriteByte('\n')
		}
		p.b.WriteString(s)
	}
}

// ParseRequest reads the recorded fields of a request body to endpoint e. A body that is not a
// JSON object yields a zero Request (the engine will answer the error). With capture, PromptText
// holds the prompt.
func ParseRequest(e Endpoint, body []byte, h http.Header, capture bool) Request {
	var req Request
	root := gjson.Parse(bstr(body))
	if root.IsObject() {
		var metadata gjson.Result
		prompt := promptText{capture: capture}
		var maxCompletion *uint32
		root.ForEach(func(key, v gjson.Result) bool {
			switch key.Str {
			case "model":
				req.Model = strings.Clone(v.String())
			case "stream":
				req.Stream = v.Type == gjson.True
			case "max_tokens":
				if e != Responses {
					req.MaxTokens = tokenLimit(v)
				}
			case "max_completion_tokens":
				if e == Chat {
					maxCompletion = tokenLimit(v)
				}
			case "max_output_tokens":
				if e == Responses {
					req.MaxTokens = tokenLimit(v)
				}
			case "metadata":
				metadata = v
			case "messages":
				if e == Chat {
					v.ForEach(func(_, m gjson.Result) bool {
						addContent(&prompt, m.Get("content"))
						return true
					})
				}
			case "prompt":
				if e == Completions {
					addStrings(&prompt, v)
				}
			case "instructions":
				if e == Responses && v.Type == gjson.String {
					prompt.add(v.Str)
				}
			case "input":
				switch e {
				case Embeddings:
					addStrings(&prompt, v)
				case Responses:
					addResponsesInput(&prompt, v)
				}
			}
			return true
		})
		if req.MaxTokens == nil {
			req.MaxTokens = maxCompletion
		}
		if prompt.seen {
			n := clampU32(int64(prompt.bytes))
			req.PromptBytes = &n
		}
		req.PromptText = prompt.b.String()
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

// addContent adds a chat message's content: a string, or the text of its parts of type "text".
func addContent(p *promptText, c gjson.Result) {
	switch {
	case c.Type == gjson.String:
		p.add(c.Str)
	case c.IsArray():
		c.ForEach(func(_, part gjson.Result) bool {
			if t := part.Get("type").Str; t == "text" || t == "input_text" {
				p.add(part.Get("text").String())
			}
			return true
		})
	}
}

// addStrings adds a prompt or input that is a string or an array of strings (token-id arrays
// carry no text).
func addStrings(p *promptText, v gjson.Result) {
	switch {
	case v.Type == gjson.String:
		p.add(v.Str)
	case v.IsArray():
		v.ForEach(func(_, s gjson.Result) bool {
			if s.Type == gjson.String {
				p.add(s.Str)
			}
			return true
		})
	}
}

// addResponsesInput adds a Responses API input: a string, or items whose content is a string or
// input_text parts.
func addResponsesInput(p *promptText, v gjson.Result) {
	if v.Type == gjson.String {
		p.add(v.Str)
		return
	}
	v.ForEach(func(_, item gjson.Result) bool {
		addContent(p, item.Get("content"))
		return true
	})
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
