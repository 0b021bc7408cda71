package engine

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzTokenizerRoundTrip(f *testing.F) {
	tok := NewTokenizer(152064)
	f.Add("The quick brown fox.")
	f.Add("模型 <|im_start|>user\nhi<|im_end|>")
	f.Add("\xff\x00 bytes")
	f.Fuzz(func(t *testing.T, s string) {
		special := strings.Contains(s, "<|")
		ids := tok.Encode(s, special)
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				t.Fatalf("id %d out of range", id)
			}
		}
		got := tok.Decode(ids, true)
		if utf8.ValidString(s) && got != s {
			t.Fatalf("round trip %q -> %q", s, got)
		}
	})
}
