package vllmversion

import "testing"

func TestParse(t *testing.T) {
	for in, want := range map[string]Version{"0.8-v0": V0_8V0, "0.8": V0_8, "v0.8.5": V0_8, "0.10": V0_10, "0.10.2": V0_10, "main": Main, " MAIN ": Main} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0.9", "1.0", "0.100", "vmain2", "0.80"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) accepted", in)
		}
	}
	for _, v := range All {
		if back, err := Parse(v.String()); err != nil || back != v {
			t.Errorf("%v does not round-trip through its flag spelling", v)
		}
	}
}
