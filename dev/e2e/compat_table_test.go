package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCompatibilityTableNamesRealTests keeps docs/vllm-compatibility.md honest: every Test or Fuzz
// function a row names as its evidence is defined in a test file of the repository, so a renamed
// or deleted test cannot leave a row pointing at nothing.
func TestCompatibilityTableNamesRealTests(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	table, err := os.ReadFile(filepath.Join(root, "docs", "vllm-compatibility.md"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]*)\(`)
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".cache" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]*)(?:/[^`]*)?`")
	seen := 0
	for _, m := range named.FindAllStringSubmatch(string(table), -1) {
		seen++
		if !defined[m[1]] {
			t.Errorf("docs/vllm-compatibility.md names %s, which no test file defines", m[1])
		}
	}
	if seen < 50 {
		t.Errorf("found only %d test names in the table; the pattern no longer matches how rows name tests", seen)
	}
}
