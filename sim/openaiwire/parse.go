package openaiwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// MaxBodyBytes bounds a request body read by the Decode functions; larger bodies are rejected
// rather than buffered.
const MaxBodyBytes = 8 << 20

// RequestError is a client error found while decoding a request: the message is meant for the
// caller and Param names the offending field ("" when the whole body is at fault). Servers answer
// it as HTTP 400 BadRequestError.
type RequestError struct {
	Message string
	Param   string
	// TooLarge marks a body over MaxBodyBytes (answered 413, not 400).
	TooLarge bool
}

func (e *RequestError) Error() string { return e.Message }

// MessageText is a chat message content: a JSON string, an array of content parts (text parts are
// joined with no separator, others ignored), or null.
type MessageText string

// UnmarshalJSON accepts the string, array-of-parts and null forms of OpenAI message content.
func (m *MessageText) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*m = ""
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*m = MessageText(s)
		return nil
	case len(b) > 0 && b[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		var sb strings.Builder
		for _, p := range parts {
			if p.Type == "text" {
				sb.WriteString(p.Text)
			}
		}
		*m = MessageText(sb.String())
		return nil
	}
	return errors.New("content must be a string or an array of content parts")
}

// MarshalJSON writes the content as a plain JSON string.
func (m MessageText) MarshalJSON() ([]byte, error) { return json.Marshal(string(m)) }

// PromptText is the text of one completion prompt.
type PromptText string

// Prompt is one prompt of a completion or one input of an embedding request: text, or token ids
// when TokenIDs is not nil.
type Prompt struct {
	Text     string
	TokenIDs []int
}

// Prompts is a completion "prompt" (or embedding "input"): a string, an array of strings, an array
// of token ids, or an array of arrays of token ids. Each element is one engine request in vLLM.
type Prompts []Prompt

// UnmarshalJSON accepts the four forms; anything else (numbers mixed with strings, nested
// deeper, empty arrays) is an error.
func (p *Prompts) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*p = Prompts{{Text: s}}
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return errPromptForm
	}
	if len(items) == 0 {
		return errors.New("prompt must not be empty")
	}
	first := bytes.TrimSpace(items[0])
	switch {
	case len(first) > 0 && first[0] == '"':
		out := make(Prompts, len(items))
		for i, it := range items {
			if err := json.Unmarshal(it, &out[i].Text); err != nil {
				return errPromptForm
			}
		}
		*p = out
	case len(first) > 0 && first[0] == '[':
		out := make(Prompts, len(items))
		for i, it := range items {
			var ids []int
			if err := json.Unmarshal(it, &ids); err != nil {
				return errPromptForm
			}
			if ids == nil {
				ids = []int{}
			}
			out[i].TokenIDs = ids
		}
		*p = out
	default:
		var ids []int
		if err := json.Unmarshal(b, &ids); err != nil {
			return errPromptForm
		}
		*p = Prompts{{TokenIDs: ids}}
	}
	return nil
}

var errPromptForm = errors.New("prompt must be a string, an array of strings, an array of token ids or an array of token-id arrays")

// MarshalJSON writes the prompts back in the shortest of the four forms.
func (p Prompts) MarshalJSON() ([]byte, error) {
	if len(p) == 1 {
		if p[0].TokenIDs != nil {
			return json.Marshal(p[0].TokenIDs)
		}
		return json.Marshal(p[0].Text)
	}
	if len(p) > 0 && p[0].TokenIDs != nil {
		ids := make([][]int, len(p))
		for i, x := range p {
			ids[i] = x.TokenIDs
		}
		return json.Marshal(ids)
	}
	texts := make([]string, len(p))
	for i, x := range p {
		texts[i] = x.Text
	}
	return json.Marshal(texts)
}

// empty reports a prompt with neither text nor token ids.
func (x Prompt) empty() bool { return x.Text == "" && len(x.TokenIDs) == 0 }

// ResponsesInput is a Responses API "input": a string (one user message) or a list of items, of
// which messages ({"role", "content"} with or without "type": "message") are kept; content is a
// string or a list of parts whose text is joined.
type ResponsesInput []ChatMessage

// UnmarshalJSON accepts the string and item-list forms.
func (in *ResponsesInput) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*in = ResponsesInput{{Role: "user", Content: MessageText(s)}}
		return nil
	}
	var items []struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(b, &items); err != nil {
		return errors.New("input must be a string or a list of input items")
	}
	out := make(ResponsesInput, 0, len(items))
	for _, it := range items {
		if it.Type != "" && it.Type != "message" {
			continue
		}
		var text string
		if err := json.Unmarshal(it.Content, &text); err != nil {
			var parts []struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(it.Content, &parts); err != nil {
				return errors.New("input item content must be a string or a list of content parts")
			}
			var sb strings.Builder
			for _, p := range parts {
				sb.WriteString(p.Text)
			}
			text = sb.String()
		}
		out = append(out, ChatMessage{Role: it.Role, Content: MessageText(text)})
	}
	*in = out
	return nil
}

// DecodeChatCompletionRequest reads and validates a chat completion body. It returns a
// *RequestError for any malformed or out-of-range input, and a wrapped I/O error otherwise.
func DecodeChatCompletionRequest(r io.Reader) (*ChatCompletionRequest, error) {
	var req ChatCompletionRequest
	if err := decodeBody(r, &req); err != nil {
		return nil, err
	}
	if len(req.Messages) == 0 {
		return nil, &RequestError{Message: "messages must contain at least one message", Param: "messages"}
	}
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "user", "assistant", "developer", "tool":
		default:
			return nil, &RequestError{Message: fmt.Sprintf("messages[%d].role %q is not one of system, user, assistant, developer, tool", i, m.Role), Param: "messages"}
		}
	}
	if req.MaxCompletionTokens != nil && req.MaxTokens == nil {
		req.MaxTokens = req.MaxCompletionTokens
	}
	if err := validateStream(req.Stream, req.StreamOptions); err != nil {
		return nil, err
	}
	if err := validateSampling(req.MaxTokens, req.Temperature, req.TopP, req.N, req.MinTokens); err != nil {
		return nil, err
	}
	return &req, nil
}

// DecodeCompletionRequest reads and validates a text completion body, with the same error
// contract as DecodeChatCompletionRequest.
func DecodeCompletionRequest(r io.Reader) (*CompletionRequest, error) {
	var req CompletionRequest
	if err := decodeBody(r, &req); err != nil {
		return nil, err
	}
	if len(req.Prompts) == 0 {
		return nil, &RequestError{Message: "prompt must not be empty", Param: "prompt"}
	}
	for _, p := range req.Prompts {
		if p.empty() {
			return nil, &RequestError{Message: "prompt must not be empty", Param: "prompt"}
		}
	}
	req.Prompt = PromptText(req.Prompts[0].Text)
	if err := validateStream(req.Stream, req.StreamOptions); err != nil {
		return nil, err
	}
	if err := validateSampling(req.MaxTokens, req.Temperature, req.TopP, req.N, req.MinTokens); err != nil {
		return nil, err
	}
	if n := len(req.Prompts) * nOr1(req.N); n > MaxSequences {
		return nil, &RequestError{Message: fmt.Sprintf("%d prompts × n = %d sequences exceeds %d.", len(req.Prompts), n, MaxSequences), Param: "n"}
	}
	return &req, nil
}

// DecodeEmbeddingRequest reads a /v1/embeddings body; input must hold at least one non-empty
// prompt.
func DecodeEmbeddingRequest(r io.Reader) (*EmbeddingRequest, error) {
	var req EmbeddingRequest
	if err := decodeBody(r, &req); err != nil {
		return nil, err
	}
	if len(req.Input) == 0 {
		return nil, &RequestError{Message: "input must not be empty", Param: "input"}
	}
	for _, p := range req.Input {
		if p.empty() {
			return nil, &RequestError{Message: "input must not be empty", Param: "input"}
		}
	}
	if len(req.Input) > MaxSequences {
		return nil, &RequestError{Message: fmt.Sprintf("%d inputs exceed %d.", len(req.Input), MaxSequences), Param: "input"}
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		return nil, &RequestError{Message: fmt.Sprintf("encoding_format %q is not one of float, base64", req.EncodingFormat), Param: "encoding_format"}
	}
	if req.Dimensions != nil && *req.Dimensions < 1 {
		return nil, &RequestError{Message: fmt.Sprintf("dimensions must be at least 1, got %d.", *req.Dimensions), Param: "dimensions"}
	}
	return &req, nil
}

// DecodeResponsesRequest reads a /v1/responses body; the input must hold at least one message.
func DecodeResponsesRequest(r io.Reader) (*ResponsesRequest, error) {
	var req ResponsesRequest
	if err := decodeBody(r, &req); err != nil {
		return nil, err
	}
	if len(req.Input) == 0 {
		return nil, &RequestError{Message: "input must contain at least one message", Param: "input"}
	}
	if err := validateSampling(req.MaxOutputTokens, req.Temperature, req.TopP, nil, 0); err != nil {
		if re, ok := err.(*RequestError); ok && re.Param == "max_tokens" {
			re.Param = "max_output_tokens"
		}
		return nil, err
	}
	return &req, nil
}

// MaxSequences bounds prompts × n of one request. vLLM has no such limit; the simulator keeps one
// so a single body cannot allocate without bound.
const MaxSequences = 1024

func nOr1(n *int) int {
	if n == nil {
		return 1
	}
	return *n
}

// validateStream rejects stream_options on a non-streaming request, as vLLM's request models do
// (check_stream_options).
func validateStream(stream bool, opts *StreamOptions) error {
	if opts != nil && !stream {
		return &RequestError{Message: "Stream options can only be defined when `stream=True`.", Param: "stream_options"}
	}
	return nil
}

// DecodeTokenizeRequest reads a /tokenize body; exactly one of prompt and messages must be set.
func DecodeTokenizeRequest(r io.Reader) (*TokenizeRequest, error) {
	var req TokenizeRequest
	if err := decodeBody(r, &req); err != nil {
		return nil, err
	}
	if (req.Prompt == nil) == (len(req.Messages) == 0) {
		return nil, &RequestError{Message: "exactly one of prompt and messages must be given"}
	}
	return &req, nil
}

// DecodeDetokenizeRequest reads a /detokenize body.
func DecodeDetokenizeRequest(r io.Reader) (*DetokenizeRequest, error) {
	var req DetokenizeRequest
	if err := decodeBody(r, &req); err != nil {
		return nil, err
	}
	return &req, nil
}

func decodeBody(r io.Reader, v any) error {
	body, err := io.ReadAll(io.LimitReader(r, MaxBodyBytes+1))
	if err != nil {
		return fmt.Errorf("read request body: %w", err)
	}
	if len(body) > MaxBodyBytes {
		return &RequestError{Message: fmt.Sprintf("request body exceeds %d bytes", MaxBodyBytes), TooLarge: true}
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &RequestError{Message: fmt.Sprintf("field %s: expected %s, got JSON %s", te.Field, te.Type, te.Value), Param: te.Field}
		}
		return &RequestError{Message: "invalid JSON body: " + err.Error()}
	}
	return nil
}

func validateSampling(maxTokens *int, temperature, topP *float64, n *int, minTokens int) error {
	if maxTokens != nil && *maxTokens < 1 {
		return &RequestError{Message: fmt.Sprintf("max_tokens must be at least 1, got %d.", *maxTokens), Param: "max_tokens"}
	}
	if temperature != nil && *temperature < 0 {
		return &RequestError{Message: fmt.Sprintf("temperature must be non-negative, got %g.", *temperature), Param: "temperature"}
	}
	if topP != nil && (*topP <= 0 || *topP > 1) {
		return &RequestError{Message: fmt.Sprintf("top_p must be in (0, 1], got %g.", *topP), Param: "top_p"}
	}
	if n != nil && *n < 1 {
		return &RequestError{Message: fmt.Sprintf("n must be at least 1, got %d.", *n), Param: "n"}
	}
	if n != nil && *n > MaxSequences {
		return &RequestError{Message: fmt.Sprintf("n must be at most %d, got %d.", MaxSequences, *n), Param: "n"}
	}
	if minTokens < 0 {
		return &RequestError{Message: fmt.Sprintf("min_tokens must be non-negative, got %d.", minTokens), Param: "min_tokens"}
	}
	if maxTokens != nil && minTokens > *maxTokens {
		return &RequestError{Message: fmt.Sprintf("min_tokens must be less than or equal to max_tokens=%d, got %d.", *maxTokens, minTokens), Param: "min_tokens"}
	}
	return nil
}
