package scriptcheck

import "testing"

func TestForeignLetters(t *testing.T) {
	latin, err := New()
	if err != nil {
		t.Fatal(err)
	}
	cyr, err := New("latin", "Cyrillic")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		c    *Checker
		text string
		want int
	}{
		{latin, "The KV cache is 28% used, café naïve — ok!", 0},
		{latin, "The answer is 缓存 hit", 2},
		{latin, "Привет", 6},
		{cyr, "Привет, world", 0},
		{latin, "emoji 🚀 and digits ١٢٣ are not letters", 0},
		{latin, "e\u0301 combining mark", 0},
		{latin, "", 0},
		{latin, "日本語のテキスト", 8},
	}
	for _, c := range cases {
		if got := c.c.ForeignLetters(c.text); got != c.want {
			t.Errorf("ForeignLetters(%q) with %v = %d, want %d", c.text, c.c.Scripts(), got, c.want)
		}
	}
}

func TestUnknownScript(t *testing.T) {
	if _, err := New("Latin", "Klingon"); err == nil {
		t.Fatal("want an error for an unknown script")
	}
}

func FuzzForeignLetters(f *testing.F) {
	c, _ := New()
	f.Add("hello 世界")
	f.Add("\xff\xfe")
	f.Fuzz(func(t *testing.T, s string) {
		if n := c.ForeignLetters(s); n < 0 || n > len(s) {
			t.Fatalf("count %d out of range for %d bytes", n, len(s))
		}
	})
}
