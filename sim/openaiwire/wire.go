// Package openaiwire holds the OpenAI-compatible wire types that vLLM's API server speaks and that
// vllmsim serves: chat and text completion, embeddings and Responses requests, the non-streaming
// responses and SSE chunks of the completion endpoints, usage, and the error envelope.
//
// Field names and JSON shapes follow vLLM's OpenAI server (vllm/entrypoints/openai/protocol.py up
// to v0.10, split into chat_completion/, completion/ and engine/protocol.py on main); vLLM-only
// extensions that servescope relies on are included (ignore_eos, min_tokens, request_id, the
// per-request metrics object). Durations in the metrics object are milliseconds as vLLM sends them.
// The response structs here are a convenience for test engines; vllmsim writes its bodies
// byte-for-byte per vLLM version itself.
package openaiwire

import "encoding/json"

// ChatMessage is one message of a chat request. Content is a string or, as OpenAI allows, an array
// of content parts; only text parts are kept (joined), which is all a text-only model reads.
type ChatMessage struct {
	Role    string      `json:"role"`
	Content MessageText `json:"content"`
	Name    string      `json:"name,omitempty"`
}

// StreamOptions is OpenAI's stream_options. IncludeUsage asks for a final chunk with usage and
// "choices": []; as in vLLM (StreamOptions.include_usage defaults to True) it is true when the
// object is present without the field. ContinuousUsageStats (vLLM only) adds cumulative usage to
// every chunk, and only counts together with IncludeUsage.
type StreamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats,omitempty"`
}

// UnmarshalJSON applies vLLM's defaults: include_usage true, continuous_usage_stats false; a JSON
// null leaves either at its default.
func (o *StreamOptions) UnmarshalJSON(b []byte) error {
	var raw struct {
		IncludeUsage         *bool `json:"include_usage"`
		ContinuousUsageStats *bool `json:"continuous_usage_stats"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*o = StreamOptions{IncludeUsage: raw.IncludeUsage == nil || *raw.IncludeUsage}
	if raw.ContinuousUsageStats != nil {
		o.ContinuousUsageStats = *raw.ContinuousUsageStats
	}
	return nil
}

// ChatCompletionRequest is the body of POST /v1/chat/completions. Pointer fields are optional and
// nil when absent, so the server can tell "absent" from zero (vLLM defaults max_tokens to
// max_model_len minus the prompt when absent).
type ChatCompletionRequest struct {
	Model               string         `json:"model"`
	Messages            []ChatMessage  `json:"messages"`
	Stream              bool           `json:"stream,omitempty"`
	StreamOptions       *StreamOptions `json:"stream_options,omitempty"`
	MaxTokens           *int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int           `json:"max_completion_tokens,omitempty"`
	Temperature         *float64       `json:"temperature,omitempty"`
	TopP                *float64       `json:"top_p,omitempty"`
	N                   *int           `json:"n,omitempty"`
	Seed                *int64         `json:"seed,omitempty"`
	FrequencyPenalty    *float64       `json:"frequency_penalty,omitempty"`
	IgnoreEOS           bool           `json:"ignore_eos,omitempty"`
	MinTokens           int            `json:"min_tokens,omitempty"`
	User                string         `json:"user,omitempty"`
	// RequestID (vLLM only) is the base of the response id when no X-Request-Id header is sent.
	RequestID string `json:"request_id,omitempty"`
}

// CompletionRequest is the body of POST /v1/completions. Prompts holds every prompt of the
// "prompt" field (a string, an array of strings, an array of token ids or an array of such
// arrays): vLLM runs one engine request per prompt. Prompt is the first prompt's text (empty for
// a token-id prompt), kept for callers that serve one prompt.
type CompletionRequest struct {
	Model            string         `json:"model"`
	Prompts          Prompts        `json:"prompt"`
	Prompt           PromptText     `json:"-"`
	Stream           bool           `json:"stream,omitempty"`
	StreamOptions    *StreamOptions `json:"stream_options,omitempty"`
	MaxTokens        *int           `json:"max_tokens,omitempty"`
	Temperature      *float64       `json:"temperature,omitempty"`
	TopP             *float64       `json:"top_p,omitempty"`
	N                *int           `json:"n,omitempty"`
	Seed             *int64         `json:"seed,omitempty"`
	FrequencyPenalty *float64       `json:"frequency_penalty,omitempty"`
	IgnoreEOS        bool           `json:"ignore_eos,omitempty"`
	MinTokens        int            `json:"min_tokens,omitempty"`
	User             string         `json:"user,omitempty"`
	RequestID        string         `json:"request_id,omitempty"`
}

// EmbeddingRequest is the body of POST /v1/embeddings. Input has the forms of a completion
// prompt; each input is one engine request.
type EmbeddingRequest struct {
	Model          string  `json:"model"`
	Input          Prompts `json:"input"`
	EncodingFormat string  `json:"encoding_format,omitempty"` // "float" (default) or "base64"
	Dimensions     *int    `json:"dimensions,omitempty"`
	User           string  `json:"user,omitempty"`
}

// ResponsesRequest is the body of POST /v1/responses, as far as a text model serves it: Input is
// a string or a list of message items, Instructions a system message.
type ResponsesRequest struct {
	Model           string         `json:"model"`
	Input           ResponsesInput `json:"input"`
	Instructions    *string        `json:"instructions,omitempty"`
	Stream          bool           `json:"stream,omitempty"`
	MaxOutputTokens *int           `json:"max_output_tokens,omitempty"`
	Temperature     *float64       `json:"temperature,omitempty"`
	TopP            *float64       `json:"top_p,omitempty"`
	Store           *bool          `json:"store,omitempty"`
	User            string         `json:"user,omitempty"`
	// RequestID is vLLM's request_id field; the response id is this value (vLLM defaults it to
	// "resp_" and a random uuid hex).
	RequestID string `json:"request_id,omitempty"`
}

// Usage is OpenAI's usage object; PromptTokensDetails is present only when some prompt tokens came
// from the prefix cache (vLLM sends it when --enable-prompt-tokens-details is on).
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// PromptTokensDetails carries the number of prompt tokens served from the prefix cache.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// RequestMetrics is the per-request timing object vLLM main adds to responses with
// --enable-per-request-metrics (build_per_request_timing_metrics). Durations are milliseconds of
// engine time: TimeToFirstTokenMs runs from first scheduling to the first token (it excludes
// QueueTimeMs), GenerationTimeMs from the first to the last token, TokensPerSecond is output
// tokens over scheduling-to-last-token. vLLM sends null for a field whose timestamps it lacks.
type RequestMetrics struct {
	QueueTimeMs        float64 `json:"queue_time_ms"`
	TimeToFirstTokenMs float64 `json:"time_to_first_token_ms"`
	GenerationTimeMs   float64 `json:"generation_time_ms"`
	MeanITLMs          float64 `json:"mean_itl_ms"`
	TokensPerSecond    float64 `json:"tokens_per_second"`
}

// Delta is the incremental message of a streaming chat chunk.
type Delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// ChatChunkChoice is one choice of a streaming chat chunk. FinishReason is null until the last
// content chunk of the choice.
type ChatChunkChoice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   any     `json:"stop_reason,omitempty"`
}

// ChatCompletionChunk is one SSE event of a streaming chat completion.
type ChatCompletionChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *Usage            `json:"usage,omitempty"`
	Metrics *RequestMetrics   `json:"metrics,omitempty"`
}

// ResponseMessage is the assistant message of a non-streaming chat completion.
type ResponseMessage struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []any  `json:"tool_calls"`
}

// ChatChoice is one choice of a non-streaming chat completion.
type ChatChoice struct {
	Index        int             `json:"index"`
	Message      ResponseMessage `json:"message"`
	Logprobs     any             `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
	StopReason   any             `json:"stop_reason"`
}

// ChatCompletion is the non-streaming response of /v1/chat/completions.
type ChatCompletion struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Choices []ChatChoice    `json:"choices"`
	Usage   Usage           `json:"usage"`
	Metrics *RequestMetrics `json:"metrics,omitempty"`
}

// CompletionChoice is one choice of a text completion, streaming or not. In a stream FinishReason
// is null until the last chunk.
type CompletionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   any     `json:"stop_reason,omitempty"`
}

// Completion is the response of /v1/completions and, with object "text_completion", each of its
// SSE chunks.
type Completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
	Metrics *RequestMetrics    `json:"metrics,omitempty"`
}

// ErrorBody is the inner object of vLLM's error envelope. Code equals the HTTP status.
type ErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// ErrorResponse is vLLM's error envelope {"error": {...}}, used as an HTTP body and, after a
// stream began, as an SSE data event.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	Created     int64   `json:"created"`
	OwnedBy     string  `json:"owned_by"`
	Root        string  `json:"root"`
	Parent      *string `json:"parent"`
	MaxModelLen int     `json:"max_model_len"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// TokenizeRequest is the body of vLLM's POST /tokenize: either Prompt or Messages (chat form, to
// which the chat template is applied).
type TokenizeRequest struct {
	Model               string        `json:"model,omitempty"`
	Prompt              *string       `json:"prompt,omitempty"`
	Messages            []ChatMessage `json:"messages,omitempty"`
	AddSpecialTokens    *bool         `json:"add_special_tokens,omitempty"`
	AddGenerationPrompt *bool         `json:"add_generation_prompt,omitempty"`
}

// TokenizeResponse is the body answered by POST /tokenize.
type TokenizeResponse struct {
	Count       int   `json:"count"`
	MaxModelLen int   `json:"max_model_len"`
	Tokens      []int `json:"tokens"`
	TokenStrs   any   `json:"token_strs"`
}

// DetokenizeRequest is the body of POST /detokenize.
type DetokenizeRequest struct {
	Model  string `json:"model,omitempty"`
	Tokens []int  `json:"tokens"`
}

// DetokenizeResponse is the body answered by POST /detokenize.
type DetokenizeResponse struct {
	Prompt string `json:"prompt"`
}
