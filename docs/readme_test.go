package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readme returns the repository root and the README's text.
func readme(t *testing.T) (root, text string) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return root, string(raw)
}

// topLevel lists the names at the repository root a path in the README can start with.
func topLevel(t *testing.T, root string) []string {
	t.Helper()
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); n != ".git" && n != ".cache" {
			out = append(out, n)
		}
	}
	return out
}

// repoPaths returns every token of text that names a file or directory of the repository: a path
// that starts with a name at the root, with or without a leading "./", without a trailing "/...".
func repoPaths(text string, top []string) []string {
	alt := make([]string, len(top))
	for i, n := range top {
		alt[i] = regexp.QuoteMeta(n)
	}
	re := regexp.MustCompile(`(?:^|[\s` + "`" + `(\[="'])(?:\./)?((?:` + strings.Join(alt, "|") + `)(?:/[A-Za-z0-9_.-]+)*/?)`)
	seen := map[string]bool{}
	var out []string
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		p := strings.TrimSuffix(m[1], "/...")
		p = strings.TrimRight(p, ".,;:")
		if p == "" || seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	return out
}

func TestREADMEPathsExist(t *testing.T) {
	root, text := readme(t)
	paths := repoPaths(text, topLevel(t, root))
	if len(paths) < 20 {
		t.Fatalf("found only %d repository paths in README.md: the extraction is broken", len(paths))
	}
	for _, p := range paths {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("README.md names %s, which does not exist", p)
		}
	}
}

func TestREADMEScriptsRunnable(t *testing.T) {
	root, text := readme(t)
	names := regexp.MustCompile(`(?m)(?:^|[\s`+"`"+`(])scripts/([a-z][a-z-]*)`).FindAllStringSubmatch(text, -1)
	if len(names) == 0 {
		t.Fatal("README.md names no script")
	}
	for _, m := range names {
		fi, err := os.Stat(filepath.Join(root, "scripts", m[1]))
		if err != nil {
			t.Errorf("README.md runs scripts/%s, which does not exist", m[1])
			continue
		}
		if fi.Mode()&0o111 == 0 {
			t.Errorf("scripts/%s is not executable", m[1])
		}
	}
	// `scripts/bench NAME` runs scripts/bench-NAME for each benchmark the README lists.
	bench := regexp.MustCompile("`scripts/bench NAME`[^\n]*\n[^\n]*\\(([^)]*)\\)").FindStringSubmatch(text)
	if bench == nil {
		t.Fatal("README.md does not list the benchmarks of `scripts/bench NAME`")
	}
	for _, n := range regexp.MustCompile("`([a-z]+)`").FindAllStringSubmatch(bench[1], -1) {
		if _, err := os.Stat(filepath.Join(root, "scripts", "bench-"+n[1])); err != nil {
			t.Errorf("README.md lists benchmark %s, but scripts/bench-%s does not exist", n[1], n[1])
		}
	}
}

// slug is the anchor GitHub gives a heading.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(t *testing.T, file string) []string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inFence := false
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if !inFence && strings.HasPrefix(line, "#") {
			out = append(out, slug(strings.TrimLeft(line, "#")))
		}
	}
	return out
}

// TestLinksReachHeadings: every relative link of the README and of docs/*.md reaches a file, and
// a heading of it when the link names one.
func TestLinksReachHeadings(t *testing.T) {
	root, _ := readme(t)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	links := 0
	for _, from := range append([]string{filepath.Join(root, "README.md")}, docs...) {
		raw, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, from)
		for _, m := range regexp.MustCompile(`\]\(([^)\s]*)\)`).FindAllStringSubmatch(string(raw), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, anchor, _ := strings.Cut(target, "#")
			path := from
			if file != "" {
				path = filepath.Join(filepath.Dir(from), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links %s, which does not exist", name, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !slices.Contains(anchors(t, path), anchor) {
				t.Errorf("%s links %s, but %s has no heading with anchor #%s", name, target, filepath.Base(path), anchor)
			}
		}
	}
	if links < 5 {
		t.Fatalf("found only %d links: the extraction is broken", links)
	}
}

// codeMap returns the directories the README's "Code map" section names: each list item's first
// path, and the relative subdirectories ("proxy/") it lists after it.
func codeMap(t *testing.T, text string) map[string]bool {
	t.Helper()
	_, sec, ok := strings.Cut(text, "\n## Code map\n")
	if !ok {
		t.Fatal(`README.md has no "## Code map" section`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	item := regexp.MustCompile(`^\s*- ` + "`" + `([^` + "`" + `]+)` + "`")
	tick := regexp.MustCompile("`([^`]+)`")
	named := map[string]bool{}
	for _, line := range strings.Split(sec, "\n") {
		m := item.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		base := strings.TrimSuffix(m[1], "/")
		for _, tk := range tick.FindAllStringSubmatch(line, -1) {
			p := strings.TrimSuffix(tk[1], "/")
			if !strings.HasSuffix(tk[1], "/") || strings.Contains(p, " ") {
				continue
			}
			if !strings.Contains(p, "/") && p != base && strings.Contains(base, "/") {
				p = base + "/" + p // a subdirectory listed relative to its line's directory
			}
			named[p] = true
		}
	}
	return named
}

// TestCodeMapCoversTree: the code map has a line for every directory at the root and one level
// below internal/, services/, sim/, dev/, dev/cmd/ and schema/, and every directory it names exists.
func TestCodeMapCoversTree(t *testing.T) {
	root, text := readme(t)
	named := codeMap(t, text)
	for p := range named {
		if fi, err := os.Stat(filepath.Join(root, p)); err != nil || !fi.IsDir() {
			t.Errorf("the code map names %s/, which is not a directory", p)
		}
	}
	want := func(dir string) {
		ents, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			n := e.Name()
			if !e.IsDir() || n == "testdata" || n == ".git" || n == ".cache" || n == ".github" {
				continue
			}
			p := filepath.ToSlash(filepath.Join(dir, n))
			if !named[p] {
				t.Errorf("the README's code map has no line for %s/", p)
			}
		}
	}
	for _, dir := range []string{".", "internal", "services", "sim", "dev", "dev/cmd", "schema"} {
		want(dir)
	}
	for _, bin := range []string{"services/gateway", "services/collector", "services/consumer", "services/detector"} {
		want(bin)
	}
}
