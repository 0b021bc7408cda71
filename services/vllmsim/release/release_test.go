package release

import "testing"

func TestParse(t *testing.T) {
	for _, r := range All {
		if got, err := Parse(string(r)); err != nil || got != r {
			t.Errorf("Parse(%q) = %q, %v", r, got, err)
		}
	}
	if got, err := Parse(""); err != nil || got != Main {
		t.Errorf(`Parse("") = %q, %v; want main`, got, err)
	}
	if _, err := Parse("0.9"); err == nil {
		t.Error("an unknown release was accepted")
	}
	if V08V0.V1() || !V08.V1() {
		t.Error("V1() wrong")
	}
}
