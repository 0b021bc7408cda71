package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// unshipped matches citations of documents a reader of the repository does not have: sections of
// a design document or of an outside reference, issue numbers, a brief. A standard's section
// ("RFC 9110 §7.6.1") names a document anyone can open and is allowed.
var unshipped = regexp.MustCompile(`(?i)\breference\s+(?:§|section\s*\d|lesson\s*\d)|\bDESIGN(?:\.md)?\s*§|(?:^|[^C0-9]\s)§\s*\d|\bissue\s+#?\d+\b|\blesson\s+\d|\bthe brief\b`)

// TestNoUnshippedCitations: comments, docs, SQL, rules and scripts cite only what the repository
// holds (its files, vLLM's files at a version, published standards).
func TestNoUnshippedCitations(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]bool{".go": true, ".sql": true, ".yaml": true, ".yml": true, ".md": true, ".sh": true, ".c": true, ".html": true}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == ".git" || rel == ".cache" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if !texts[filepath.Ext(rel)] && dir != "scripts" && dir != ".ci" || rel == filepath.Join("docs", "citations_test.go") {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		lower := strings.ToLower(string(raw))
		if !strings.Contains(lower, "§") && !strings.Contains(lower, "issue") && !strings.Contains(lower, "brief") && !strings.Contains(lower, "reference") {
			return nil // none of the patterns can match: spare the regexp (slow under -race)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			if m := unshipped.FindString(line); m != "" && !strings.Contains(line, "RFC") {
				t.Errorf("%s:%d cites %q, which a reader of the repository cannot open: %s", rel, i+1, strings.TrimSpace(m), strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read only %d files: the walk is broken", files)
	}
}

func TestUnshippedPattern(t *testing.T) {
	for _, s := range []string{"as reference §3 says", "(DESIGN §5)", "DESIGN.md §4", "Targets from issue 5.", "see issue #12", "per the brief", "the §3 table", "Reference section 4", "reference lesson 10", "(lesson 07)"} {
		if !unshipped.MatchString(s) {
			t.Errorf("%q is not caught", s)
		}
	}
	for _, s := range []string{"RFC 9110 §11.1", "EngineCore encountered an issue. See stack trace", "issue certificate for %s", "parameter references"} {
		if unshipped.MatchString(s) && !strings.Contains(s, "RFC") {
			t.Errorf("%q is caught", s)
		}
	}
}

// sectionCitation matches a citation of a page's section: README, "Heading" or
// docs/page.md, "Heading" (a comment may break it over lines).
var sectionCitation = regexp.MustCompile(`\b(README(?:\.md)?|docs/[A-Za-z0-9/_-]+\.md)(?:'s)?,? "([^"]{3,100})"`)

// commentBreak is a line break inside a comment, with the next line's comment marker.
var commentBreak = regexp.MustCompile(`\n[ \t]*(?://|--|#)?[ \t]*`)

// TestSectionCitationsResolve: a comment, script or page that cites a section of the README or of
// a docs page by its heading names a heading that exists, so moving a section cannot leave the
// citations behind.
func TestSectionCitationsResolve(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]bool{".go": true, ".sql": true, ".yaml": true, ".yml": true, ".md": true, ".sh": true}
	cited := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == ".git" || rel == ".cache" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if !texts[filepath.Ext(rel)] && dir != "scripts" && dir != ".ci" && rel != "docker-compose.yml" || strings.HasSuffix(rel, "citations_test.go") {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(raw), "README") && !strings.Contains(string(raw), "docs/") {
			return nil
		}
		for _, m := range sectionCitation.FindAllStringSubmatch(commentBreak.ReplaceAllString(string(raw), " "), -1) {
			cited++
			page := m[1]
			if page == "README" {
				page = "README.md"
			}
			target, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
			if err != nil {
				t.Errorf("%s cites %s, which does not exist", rel, page)
				continue
			}
			if !slices.Contains(headings(string(target)), slug(m[2])) {
				t.Errorf("%s cites %s, %q, but %s has no such heading", rel, m[1], m[2], page)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cited < 3 {
		t.Fatalf("found only %d section citations: the extraction is broken", cited)
	}
}
