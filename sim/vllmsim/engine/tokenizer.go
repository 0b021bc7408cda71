package engine

import (
	"strings"
	"unicode/utf8"
)

// Token ids of the special tokens, as in Qwen2.5's vocabulary so that logs and token dumps look
// familiar.
const (
	TokenEndOfText = 151643
	TokenIMStart   = 151644
	TokenIMEnd     = 151645
)

// maxPieceBytes bounds the greedy longest-match search of Tokenizer.Encode.
const maxPieceBytes = 16

// commonWords are whole-word pieces of the vocabulary and the words the simulator generates.
var commonWords = strings.Fields(`the of and to in a is that for it as was with be by on not he this are or
his from at which but have an they you were her she there been one all we their has would when if so no
what out up into can more other some time could them these two may then do first any my now such like our
over man me even most made after also did many before must through back years where much your way well
down should because each just those people how too little state good very make world still own see men
work long get here between both life being under never day same another know while last might us great old
year off come since against go came right used take three model token server request latency queue batch
cache memory engine prompt output answer system load serving throughput prefill decode running waiting
metric signal trace span sample error retry slot limit capacity window baseline alert question context
retrieval passage score index store version config document user assistant response stream chunk`)

// cjkPieces are single-character pieces used by the wrong-language fault mode.
var cjkPieces = strings.Fields("的 是 在 不 了 有 和 人 这 中 大 为 上 个 国 我 以 要 他 时 来 用 们 生 到 作 地 于 出 就 分 对 成 会 可 主 发 年 动 同 工 也 能 下 过 子 说 产 种 面 而 方 后 多 定 行 学 法 所 民 得 经 模 型 推 理 服 务 请 求")

// Tokenizer is the simulator's deterministic tokenizer. It is an approximation of a BPE
// tokenizer, not a real one: the vocabulary holds 256 byte tokens, every lowercase string of one
// to three letters with and without a leading space, single capitals, digits, punctuation, a few
// hundred common English words (plain, capitalized, with a leading space), some CJK characters
// and Qwen's chat special tokens; Encode matches the longest piece greedily and falls back to
// bytes. English prose comes out at about 3.5 characters per token, close to real tokenizers, and
// the same text always gives the same ids, which is what the prefix cache and /tokenize need.
// A Tokenizer is immutable after NewTokenizer and safe for concurrent use.
type Tokenizer struct {
	ids     map[string]int
	pieces  []string // by id; "" for ids that are not assigned
	special map[string]int
	vocab   int
	words   []int // ids of " word" pieces the generator draws from
	cjk     []int
	punct   map[string]int
}

// NewTokenizer builds the vocabulary. vocabSize only bounds the ids (it must be at least 151646);
// it is reported by the engine as the logits width.
func NewTokenizer(vocabSize int) *Tokenizer {
	if vocabSize < TokenIMEnd+1 {
		vocabSize = TokenIMEnd + 1
	}
	t := &Tokenizer{
		ids:     make(map[string]int, 60000),
		pieces:  make([]string, vocabSize),
		special: map[string]int{"<|endoftext|>": TokenEndOfText, "<|im_start|>": TokenIMStart, "<|im_end|>": TokenIMEnd},
		vocab:   vocabSize,
		punct:   map[string]int{},
	}
	for s, id := range t.special {
		t.pieces[id] = s
	}
	for b := 0; b < 256; b++ {
		t.pieces[b] = string([]byte{byte(b)})
	}
	next := 256
	add := func(s string) int {
		if id, ok := t.ids[s]; ok {
			return id
		}
		if next >= TokenEndOfText {
			return -1
		}
		t.ids[s] = next
		t.pieces[next] = s
		next++
		return next - 1
	}
	for _, s := range strings.Split(".,;:!?'\"()[]{}-_/\\*#%&+=<>@$`~|", "") {
		t.punct[s] = add(s)
		add(" " + s)
	}
	add("\n")
	add("\n\n")
	add(" ")
	for d := '0'; d <= '9'; d++ {
		add(string(d))
		add(" " + string(d))
	}
	for c := 'A'; c <= 'Z'; c++ {
		add(string(c))
		add(" " + string(c))
	}
	letters := "abcdefghijklmnopqrstuvwxyz"
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		if n == 0 {
			add(prefix)
			add(" " + prefix)
			return
		}
		for _, c := range letters {
			gen(prefix+string(c), n-1)
		}
	}
	for n := 1; n <= 3; n++ {
		gen("", n)
	}
	for _, w := range commonWords {
		add(w)
		t.words = append(t.words, add(" "+w))
		cw := strings.ToUpper(w[:1]) + w[1:]
		add(cw)
		add(" " + cw)
	}
	for _, c := range cjkPieces {
		t.cjk = append(t.cjk, add(c))
	}
	return t
}

// VocabSize is the number of token ids (the logits width).
func (t *Tokenizer) VocabSize() int { return t.vocab }

// Encode tokenizes text. With special, the chat special tokens written literally in text are
// recognized as single tokens, as vLLM does for chat templates.
func (t *Tokenizer) Encode(text string, special bool) []int {
	out := make([]int, 0, len(text)/3+1)
	for i := 0; i < len(text); {
		if special && text[i] == '<' {
			matched := false
			for s, id := range t.special {
				if strings.HasPrefix(text[i:], s) {
					out = append(out, id)
					i += len(s)
					matched = true
					break
				}
			}
			if matched {
				continue
			}
		}
		n := min(maxPieceBytes, len(text)-i)
		found := false
		for ; n > 0; n-- {
			if id, ok := t.ids[text[i:i+n]]; ok {
				out = append(out, id)
				i += n
				found = true
				break
			}
		}
		if !found {
			out = append(out, int(text[i]))
			i++
		}
	}
	return out
}

// Decode turns ids back into text; ids outside the vocabulary or unassigned are skipped, and
// special tokens are dropped unless keepSpecial. Invalid UTF-8 from split byte tokens is kept as
// the replacement character.
func (t *Tokenizer) Decode(ids []int, keepSpecial bool) string {
	var sb strings.Builder
	for _, id := range ids {
		if id < 0 || id >= len(t.pieces) {
			continue
		}
		if id >= TokenEndOfText && !keepSpecial {
			continue
		}
		sb.WriteString(t.pieces[id])
	}
	s := sb.String()
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}

// Piece is the text of one token id ("" when unknown).
func (t *Tokenizer) Piece(id int) string {
	if id < 0 || id >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// ChatMessage is a role and its text, the input of ApplyChatTemplate.
type ChatMessage struct {
	Role    string
	Content string
}

// ApplyChatTemplate renders messages with Qwen2.5's ChatML template (without its default system
// prompt), adding the assistant generation prompt when addGenerationPrompt.
func ApplyChatTemplate(msgs []ChatMessage, addGenerationPrompt bool) string {
	var sb strings.Builder
	for _, m := range msgs {
		sb.WriteString("<|im_start|>")
		sb.WriteString(m.Role)
		sb.WriteString("\n")
		sb.WriteString(m.Content)
		sb.WriteString("<|im_end|>\n")
	}
	if addGenerationPrompt {
		sb.WriteString("<|im_start|>assistant\n")
	}
	return sb.String()
}
