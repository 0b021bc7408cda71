package enginetest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Write is one write of an engine's response body: the pause before it, its bytes, and which
// choice's token it carries (-1 for none: role chunks, usage chunks, errors, [DONE]).
type Write struct {
	Delay  time.Duration
	Data   []byte
	Choice int
}

// VLLMStream describes a streamed /v1/chat/completions or /v1/completions answer as vLLM's
// OpenAI server produces it, for tests that must meet vLLM's exact bytes:
//
//   - chat: vllm/entrypoints/openai/serving_chat.py (v0.10) chat_completion_stream_generator: on
//     the first engine output, one role chunk per choice (`"delta":{"role":"assistant",
//     "content":""}`), then one chunk per choice per engine step, the finish chunk carrying the
//     last token, the usage-only chunk (`"choices":[]`) when usage is on, then "data: [DONE]".
//   - completions: vllm/entrypoints/openai/completion/serving.py (main)
//     completion_stream_generator: one engine request per prompt, merged as their outputs come
//     (merge_async_iterators), choice index = output index + prompt index × n.
//   - stream_options.continuous_usage_stats puts a per-choice usage on every chunk.
//   - an exception inside the generator yields `data: {"error": {...}}` (Python json.dumps
//     spacing) and then "data: [DONE]".
//
// Each engine step produces one token for every unfinished choice; the steps are StepGap apart.
type VLLMStream struct {
	Chat    bool
	ID      string // "chatcmpl-<X-Request-Id>" or "cmpl-<X-Request-Id>"
	Model   string
	Created int64
	// Prompts is the number of prompts of a completion request (chat: 1).
	Prompts int
	// N is the number of choices per prompt.
	N int
	// Tokens is the number of output tokens of each choice, by choice index (len Prompts × N).
	Tokens []int
	// Finish is each choice's finish_reason, by choice index.
	Finish []string
	// PromptTokens is each prompt's length in tokens.
	PromptTokens []int
	// IncludeUsage and ContinuousUsage are what vLLM decided from stream_options.
	IncludeUsage, ContinuousUsage bool
	// CachedTokens is usage.prompt_tokens_details.cached_tokens; nil leaves the details out (vLLM
	// omits them unless --enable-prompt-tokens-details, and when nothing was cached).
	CachedTokens *int
	// Reasoning sends the first half of each chat choice's tokens as reasoning_content deltas;
	// ToolCall sends each chat choice's tokens as a tool call (a first delta naming the function,
	// argument deltas after it).
	Reasoning, ToolCall bool
	// FirstToken is the time before the first step; StepGap the time between steps.
	FirstToken, StepGap time.Duration
	// Shuffle, when non-nil, permutes the order of prompts and choices within each step (the order
	// in which the merged engine outputs arrive).
	Shuffle *rand.Rand
	// ErrorAfterSteps > 0 replaces the rest of the stream by an error event and [DONE] after
	// that many steps.
	ErrorAfterSteps int
	// CloseAfterSteps > 0 ends the engine's writes after that many steps, without usage or
	// [DONE] (the engine went away).
	CloseAfterSteps int
}

// Choices is the number of choices: prompts × n.
func (s *VLLMStream) Choices() int { return s.prompts() * s.n() }

func (s *VLLMStream) prompts() int { return max(s.Prompts, 1) }
func (s *VLLMStream) n() int       { return max(s.N, 1) }

// Token is the text of token k of choice c.
func Token(c, k int) string { return fmt.Sprintf(" c%dt%d", c, k) }

type usageInfo struct {
	PromptTokens       int            `json:"prompt_tokens"`
	TotalTokens        int            `json:"total_tokens"`
	CompletionTokens   int            `json:"completion_tokens"`
	PromptTokensDetail *cachedDetails `json:"prompt_tokens_details,omitempty"`
}

type cachedDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// Usage returns the final usage vLLM reports: prompt tokens summed over prompts, completion
// tokens summed over every choice.
func (s *VLLMStream) Usage() (prompt, completion int) {
	for p := range s.prompts() {
		prompt += s.promptTokens(p)
	}
	for c := range s.Choices() {
		completion += s.Tokens[c]
	}
	return prompt, completion
}

func (s *VLLMStream) promptTokens(p int) int {
	if p < len(s.PromptTokens) {
		return s.PromptTokens[p]
	}
	return 7
}

// Writes returns the engine's writes, in order.
func (s *VLLMStream) Writes() []Write {
	var out []Write
	emit := func(delay time.Duration, choice int, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		out = append(out, Write{Delay: delay, Data: []byte("data: " + string(b) + "\n\n"), Choice: choice})
	}
	raw := func(delay time.Duration, data string) {
		out = append(out, Write{Delay: delay, Data: []byte(data), Choice: -1})
	}
	object := "text_completion"
	if s.Chat {
		object = "chat.completion.chunk"
	}
	head := func(choices any, usage *usageInfo) orderedChunk {
		return orderedChunk{ID: s.ID, Object: object, Created: s.Created, Model: s.Model, Choices: choices, Usage: usage}
	}
	emitted := make([]int, s.Choices())
	steps := 0
	for c := range s.Choices() {
		steps = max(steps, s.Tokens[c])
	}
	for step := 0; step < steps; step++ {
		if s.CloseAfterSteps > 0 && step == s.CloseAfterSteps {
			return out
		}
		if s.ErrorAfterSteps > 0 && step == s.ErrorAfterSteps {
			return append(out, s.errorEvent()...)
		}
		delay := s.StepGap
		if step == 0 {
			delay = s.FirstToken
		}
		if step == 0 && s.Chat {
			for c := range s.Choices() {
				role := chatChoice{Index: c, Delta: delta{Role: "assistant", Content: ptr("")}}
				var u *usageInfo
				if s.ContinuousUsage {
					u = &usageInfo{PromptTokens: s.promptTokens(0), TotalTokens: s.promptTokens(0)}
				}
				emit(delay, -1, head([]chatChoice{role}, u))
				delay = 0
			}
		}
		order := make([]int, s.Choices())
		for i := range order {
			order[i] = i
		}
		if s.Shuffle != nil {
			s.Shuffle.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		for _, c := range order {
			if emitted[c] >= s.Tokens[c] {
				continue
			}
			k := emitted[c]
			emitted[c]++
			var finish *string
			if emitted[c] == s.Tokens[c] {
				finish = &s.Finish[c]
			}
			var u *usageInfo
			if s.ContinuousUsage {
				p := s.promptTokens(c / s.n())
				u = &usageInfo{PromptTokens: p, CompletionTokens: emitted[c], TotalTokens: p + emitted[c]}
			}
			if s.Chat {
				ch := chatChoice{Index: c, Delta: s.chatDelta(c, k), FinishReason: finish, withStop: finish != nil}
				emit(delay, c, head([]chatChoice{ch}, u))
			} else {
				ch := completionChoice{Index: c, Text: Token(c, k), FinishReason: finish}
				emit(delay, c, head([]completionChoice{ch}, u))
			}
			delay = 0
		}
	}
	if s.CloseAfterSteps > 0 && steps == s.CloseAfterSteps {
		return out
	}
	if s.ErrorAfterSteps > 0 && steps == s.ErrorAfterSteps {
		return append(out, s.errorEvent()...)
	}
	if s.IncludeUsage {
		prompt, completion := s.Usage()
		u := &usageInfo{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
		if s.CachedTokens != nil {
			u.PromptTokensDetail = &cachedDetails{CachedTokens: *s.CachedTokens}
		}
		emit(0, -1, head([]chatChoice{}, u))
	}
	raw(0, "data: [DONE]\n\n")
	return out
}

// errorEvent is what vLLM's stream generator yields when an exception escapes it: the error
// (json.dumps, so with Python's spacing) and [DONE].
func (s *VLLMStream) errorEvent() []Write {
	return []Write{
		{Delay: s.StepGap, Choice: -1, Data: []byte(`data: {"error": {"message": "engine step failed: CUDA error: an illegal memory access was encountered", "type": "BadRequestError", "param": null, "code": 400}}` + "\n\n")},
		{Choice: -1, Data: []byte("data: [DONE]\n\n")},
	}
}

func (s *VLLMStream) chatDelta(c, k int) delta {
	text := Token(c, k)
	switch {
	case s.ToolCall:
		if k == 0 {
			return delta{ToolCalls: []toolCall{{ID: fmt.Sprintf("chatcmpl-tool-%d", c), Type: "function", Index: 0,
				Function: toolFunction{Name: ptr("get_weather"), Arguments: ""}}}}
		}
		return delta{ToolCalls: []toolCall{{Index: 0, Function: toolFunction{Arguments: text}}}}
	case s.Reasoning && k < s.Tokens[c]/2:
		return delta{ReasoningContent: &text}
	}
	return delta{Content: &text}
}

func ptr[T any](v T) *T { return &v }

// orderedChunk is a stream chunk with vLLM's field order (pydantic dumps fields in declaration
// order: id, object, created, model, choices, usage).
type orderedChunk struct {
	ID      string     `json:"id"`
	Object  string     `json:"object"`
	Created int64      `json:"created"`
	Model   string     `json:"model"`
	Choices any        `json:"choices"`
	Usage   *usageInfo `json:"usage,omitempty"`
}

type delta struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCall `json:"tool_calls,omitempty"`
}

type toolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Index    int          `json:"index"`
	Function toolFunction `json:"function"`
}

type toolFunction struct {
	Name      *string `json:"name,omitempty"`
	Arguments string  `json:"arguments"`
}

// chatChoice is ChatCompletionResponseStreamChoice as dumped with exclude_unset: stop_reason
// appears only on the finish chunk, where vLLM sets it.
type chatChoice struct {
	Index        int
	Delta        delta
	FinishReason *string
	withStop     bool
}

func (c chatChoice) MarshalJSON() ([]byte, error) {
	d, err := json.Marshal(c.Delta)
	if err != nil {
		return nil, err
	}
	fin, _ := json.Marshal(c.FinishReason)
	s := fmt.Sprintf(`{"index":%d,"delta":%s,"logprobs":null,"finish_reason":%s`, c.Index, d, fin)
	if c.withStop {
		s += `,"stop_reason":null`
	}
	return []byte(s + "}"), nil
}

type completionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     *int    `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   *int    `json:"stop_reason"`
	PromptTokens *int    `json:"prompt_token_ids"`
	TokenIDs     *int    `json:"token_ids"`
}

// Bytes is the concatenation of the writes.
func Bytes(ws []Write) []byte {
	var b strings.Builder
	for _, w := range ws {
		b.Write(w.Data)
	}
	return []byte(b.String())
}

// Replay is an engine that answers every request with the same writes, pausing before each, and
// remembers when it wrote each choice's tokens. With Abort, it drops the connection after the
// last write instead of ending the response.
type Replay struct {
	Writes      []Write
	ContentType string
	Abort       bool

	mu      sync.Mutex
	written map[int][]time.Time
}

// ServeHTTP implements http.Handler.
func (e *Replay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ct := e.ContentType
	if ct == "" {
		ct = "text/event-stream; charset=utf-8"
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fl.Flush()
	for _, wr := range e.Writes {
		if wr.Delay > 0 {
			t := time.NewTimer(wr.Delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		if wr.Choice >= 0 {
			// Stamped just before the write: the engine's own time of the token.
			e.mu.Lock()
			if e.written == nil {
				e.written = map[int][]time.Time{}
			}
			e.written[wr.Choice] = append(e.written[wr.Choice], time.Now())
			e.mu.Unlock()
		}
		if _, err := w.Write(wr.Data); err != nil {
			return
		}
		fl.Flush()
	}
	if e.Abort {
		panic(http.ErrAbortHandler)
	}
}

// InterTokenTime is the engine's own mean time between two tokens of the same choice, over every
// choice of the requests it answered: Σ(last − first) ÷ Σ(tokens − 1), from its write times.
func (e *Replay) InterTokenTime() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	var span time.Duration
	gaps := 0
	for _, ts := range e.written {
		if len(ts) < 2 {
			continue
		}
		span += ts[len(ts)-1].Sub(ts[0])
		gaps += len(ts) - 1
	}
	if gaps == 0 {
		return 0
	}
	return span / time.Duration(gaps)
}
