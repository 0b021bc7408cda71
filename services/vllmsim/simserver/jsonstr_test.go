package simserver

import (
	"encoding/json"
	"testing"
)

func TestAppendJSONStringMatchesMarshal(t *testing.T) {
	for _, s := range []string{"", " plain", `quote " and \ backslash`, "<tag> & amp", "tab\tnew\nline\r", "\x00\x1f", "模型 推理", "\u2028\u2029", "bad \xff utf8", "emoji 🚀"} {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Errorf("%q: got %s, want %s", s, got, want)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add("hello <world> & \"x\"")
	f.Add("\xff\xfe\u2028")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	})
}
