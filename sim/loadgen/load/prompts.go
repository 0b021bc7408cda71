package load

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"
)

// corpus is the prose prompts are cut from. Requests get different starting points so their
// prompts differ from the first token on (no accidental prefix-cache hits between requests).
const corpus = `Serving a language model well means watching what each request went through. ` +
	`A request waits in the queue, its prompt is prefilled, and then tokens are generated one step at a time. ` +
	`When many requests share a batch every step gets slower, and when the batch is full new requests wait. ` +
	`The key value cache holds the attention state of every running sequence; when it fills, the engine preempts. ` +
	`Operators read the time to first token, the time between tokens and the end to end latency, ` +
	`and they compare them with a normal day of the same system rather than with numbers from a book. ` +
	`Retrieval quality, answer language and citation rules are checked by the application, because the engine cannot see them. ` +
	`A good load test counts every error per request and builds its prompts by measured token count. ` +
	`Explain briefly how continuous batching trades latency for throughput, and when adding machines is the right fix. `

var corpusWords = strings.Fields(corpus)

// promptText is the text request i starts from, long enough for about tokens tokens.
func promptText(i, tokens int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Question %d: ", i+1)
	start := (i * 17) % len(corpusWords)
	for k := 0; sb.Len() < tokens*8+64; k++ {
		sb.WriteString(corpusWords[(start+k)%len(corpusWords)])
		sb.WriteByte(' ')
	}
	return sb.String()
}

// tokenizer counts tokens with the server's POST /tokenize, in the form the request will use
// (chat messages, so the count includes the chat template, or a plain prompt).
type tokenizer struct {
	client *http.Client
	url    string
	model  string
	chat   bool
	calls  int
}

func (t *tokenizer) count(ctx context.Context, content string) (int, error) {
	body := map[string]any{"model": t.model}
	if t.chat {
		body["messages"] = []map[string]string{{"role": "user", "content": content}}
		body["add_generation_prompt"] = true
	} else {
		body["prompt"] = content
	}
	b, err := json.Marshal(body)
	if err != nil {
		return 0, fmt.Errorf("encode tokenize request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(b))
	if err != nil {
		return 0, fmt.Errorf("build tokenize request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("tokenize at %s: %w", t.url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, fmt.Errorf("read tokenize response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("tokenize at %s: HTTP %d: %s", t.url, resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	var out struct {
		Count  *int  `json:"count"`
		Tokens []int `json:"tokens"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return 0, fmt.Errorf("decode tokenize response: %w", err)
	}
	t.calls++
	if out.Count != nil {
		return *out.Count, nil
	}
	return len(out.Tokens), nil
}

// fit returns the longest prefix of text (cut on a rune boundary, trailing space trimmed)
// whose token count is at most target, with that count. It gallops from hint (a character
// length, 0 for none) and then bisects, so successive prompts of similar text cost a few calls.
func (t *tokenizer) fit(ctx context.Context, text string, target, hint int) (string, int, error) {
	cut := func(n int) string {
		for n > 0 && n < len(text) && !utf8.RuneStart(text[n]) {
			n--
		}
		return strings.TrimRight(text[:n], " ")
	}
	countAt := func(n int) (int, error) { return t.count(ctx, cut(n)) }
	base, err := countAt(0)
	if err != nil {
		return "", 0, err
	}
	if base > target {
		return "", 0, fmt.Errorf("the chat template alone takes %d tokens, more than the %d asked", base, target)
	}
	// lo: known count <= target; hi: known count > target (or past the end).
	lo, loCount, hi := 0, base, len(text)+1
	if hint > 0 && hint < len(text) {
		step := 8
		n := hint
		c, err := countAt(n)
		if err != nil {
			return "", 0, err
		}
		if c <= target {
			lo, loCount = n, c
			for {
				n = min(lo+step, len(text))
				if n == lo {
					break
				}
				if c, err = countAt(n); err != nil {
					return "", 0, err
				}
				if c > target {
					hi = n
					break
				}
				lo, loCount = n, c
				step *= 2
			}
		} else {
			hi = n
			for {
				n = max(hi-step, 0)
				if c, err = countAt(n); err != nil {
					return "", 0, err
				}
				if c <= target {
					lo, loCount = n, c
					break
				}
				hi = n
				step *= 2
			}
		}
	}
	for hi-lo > 1 && loCount < target {
		mid := (lo + hi) / 2
		c, err := countAt(mid)
		if err != nil {
			return "", 0, err
		}
		if c <= target {
			lo, loCount = mid, c
		} else {
			hi = mid
		}
	}
	if hi > len(text) && loCount < target {
		return "", 0, fmt.Errorf("prompt text too short for %d tokens", target)
	}
	return cut(lo), loCount, nil
}

// prompt is one prepared request prompt.
type prompt struct {
	content string
	tokens  int
}

// buildPrompts prepares n prompts of target tokens each (one shared prompt when same).
func buildPrompts(ctx context.Context, t *tokenizer, n, target int, same bool) ([]prompt, error) {
	if same {
		c, k, err := t.fit(ctx, promptText(0, target), target, 0)
		if err != nil {
			return nil, fmt.Errorf("build the %d-token prompt: %w", target, err)
		}
		out := make([]prompt, n)
		for i := range out {
			out[i] = prompt{c, k}
		}
		return out, nil
	}
	out := make([]prompt, n)
	hint := 0
	for i := range out {
		c, k, err := t.fit(ctx, promptText(i, target), target, hint)
		if err != nil {
			return nil, fmt.Errorf("build prompt %d of %d tokens: %w", i+1, target, err)
		}
		out[i] = prompt{c, k}
		hint = len(c)
	}
	return out, nil
}
