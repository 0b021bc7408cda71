package simserver

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestAppendPyString(t *testing.T) {
	tests := map[string]string{
		"":                     `""`,
		"<tag> & amp":          `"<tag> & amp"`, // pydantic does not HTML-escape
		`quote " and \ slash`:  `"quote \" and \\ slash"`,
		"tab\tnew\nline\r\b\f": `"tab\tnew\nline\r\b\f"`,
		"\x00\x1f\x7f":         "\"\\u0000\\u001f\x7f\"",
		"模型 🚀 \u2028":          "\"模型 🚀 \u2028\"",
		"bad \xff utf8":        "\"bad \uFFFD utf8\"",
	}
	for in, want := range tests {
		if got := string(appendPyString(nil, in)); got != want {
			t.Errorf("%q: got %s, want %s", in, got, want)
		}
	}
	if got := string(appendPyASCIIString(nil, "é 模 🚀 \"x\"\n")); got != `"\u00e9 \u6a21 \ud83d\ude80 \"x\"\n"` {
		t.Errorf("ensure_ascii form: %s", got)
	}
}

func TestAppendPyFloat(t *testing.T) {
	tests := map[float64]string{
		500: "500.0", 0: "0.0", 0.5: "0.5", 1000.0 / 9: "111.11111111111111", 1e-05: "1e-05", 0.0001: "0.0001",
		123456789: "123456789.0", 1e16: "1e+16", 1.5e16: "1.5e+16", -2.25: "-2.25", 6.666666666666667: "6.666666666666667",
	}
	for in, want := range tests {
		if got := string(appendPyFloat(nil, in)); got != want {
			t.Errorf("%v: got %s, want %s", in, got, want)
		}
	}
}

func TestPyDumpsError(t *testing.T) {
	p := "n"
	got := string(pyDumpsError(false, "n must be at least 1, got 0.", "BadRequestError", &p, 400))
	want := `{"error": {"message": "n must be at least 1, got 0.", "type": "BadRequestError", "param": "n", "code": 400}}`
	if got != want {
		t.Errorf("nested: %s", got)
	}
	got = string(pyDumpsError(true, "EngineCore died", "BadRequestError", nil, 400))
	want = `{"error": {"object": "error", "message": "EngineCore died", "type": "BadRequestError", "param": null, "code": 400}}`
	if got != want {
		t.Errorf("flat: %s", got)
	}
}

func FuzzAppendPyString(f *testing.F) {
	f.Add("hello <world> & \"x\"")
	f.Add("\xff\xfe\u2028\x00")
	f.Fuzz(func(t *testing.T, s string) {
		for _, enc := range []func([]byte, string) []byte{appendPyString, appendPyASCIIString} {
			b := enc(nil, s)
			var back string
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("%q encodes to invalid JSON %s: %v", s, b, err)
			}
			var want strings.Builder
			for _, r := range s { // one U+FFFD per invalid byte, as the encoders write it
				want.WriteRune(r)
			}
			if back != want.String() {
				t.Fatalf("%q decoded to %q", s, back)
			}
		}
	})
}

func FuzzAppendPyFloat(f *testing.F) {
	f.Add(500.0)
	f.Add(1e-7)
	f.Fuzz(func(t *testing.T, x float64) {
		b := appendPyFloat(nil, x)
		var back float64
		if err := json.Unmarshal(b, &back); err != nil {
			if string(b) == "null" {
				return
			}
			t.Fatalf("%v encodes to %s: %v", x, b, err)
		}
		if back != x {
			t.Fatalf("%v encodes to %s which reads back as %v", x, b, back)
		}
	})
}
