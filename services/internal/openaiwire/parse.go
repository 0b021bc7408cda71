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

// PromptText is a completion prompt: a JSON string or an array of strings, of which the first is
// kept. Token-id prompts are rejected.
type PromptText string

// UnmarshalJSON accepts the string and array-of-strings forms of a completion prompt.
func (p *PromptText) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*p = PromptText(s)
		return nil
	}
	if len(b) > 0 && b[0] == '[' {
		var ss []string
		if err := json.Unmarshal(b, &ss); err != nil {
			return errors.New("prompt must be a string or an array of strings")
		}
		if len(ss) == 0 {
			return errors.New("prompt must not be empty")
		}
		*p = PromptText(ss[0])
		return nil
	}
	return errors.New("prompt must be a string or an array of strings")
}

// MarshalJSON writes the prompt as a plain JSON string.
func (p PromptText) MarshalJSON() ([]byte, error) { return json.Marshal(string(p)) }

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
	if req.Prompt == "" {
		return nil, &RequestError{Message: "prompt must not be empty", Param: "prompt"}
	}
	if err := validateSampling(req.MaxTokens, req.Temperature, req.TopP, req.N, req.MinTokens); err != nil {
		return nil, err
	}
	return &req, nil
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
	if temperature != nil && (*temperature < 0 || *temperature > 2) {
		return &RequestError{Message: fmt.Sprintf("temperature must be in [0, 2], got %g.", *temperature), Param: "temperature"}
	}
	if topP != nil && (*topP <= 0 || *topP > 1) {
		return &RequestError{Message: fmt.Sprintf("top_p must be in (0, 1], got %g.", *topP), Param: "top_p"}
	}
	if n != nil && *n != 1 {
		return &RequestError{Message: fmt.Sprintf("only n=1 is supported, got %d.", *n), Param: "n"}
	}
	if minTokens < 0 {
		return &RequestError{Message: fmt.Sprintf("min_tokens must be non-negative, got %d.", minTokens), Param: "min_tokens"}
	}
	if maxTokens != nil && minTokens > *maxTokens {
		return &RequestError{Message: fmt.Sprintf("min_tokens must be less than or equal to max_tokens=%d, got %d.", *maxTokens, minTokens), Param: "min_tokens"}
	}
	return nil
}
