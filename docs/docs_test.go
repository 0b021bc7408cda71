package docs

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root returns the repository's root.
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// page is one Markdown file the checks read: the README or a page of docs/.
type page struct {
	path string // relative to the repository root, slash-separated
	text string
}

// pages returns every Markdown file of the repository: the README, the pages of docs/, and the
// READMEs of packages (test data's excepted).
func pages(t *testing.T) []page {
	t.Helper()
	r := root(t)
	var out []page
	err := filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n := d.Name(); d.IsDir() && p != r && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(r, p)
			out = append(out, read(t, r, filepath.ToSlash(rel)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 15 {
		t.Fatalf("found only %d pages: the walk is broken", len(out))
	}
	return out
}

func read(t *testing.T, root, rel string) page {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return page{path: rel, text: string(raw)}
}

func (p page) is(name string) bool { return p.path == name }

// topLevel lists the names at the repository root a path in a page can start with.
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

// TestPathsExist: every repository path the README and the pages name exists.
func TestPathsExist(t *testing.T) {
	r := root(t)
	top := topLevel(t, r)
	n := 0
	for _, p := range pages(t) {
		for _, path := range repoPaths(p.text, top) {
			n++
			if _, err := os.Stat(filepath.Join(r, path)); err != nil {
				t.Errorf("%s names %s, which does not exist", p.path, path)
			}
		}
	}
	if n < 100 {
		t.Fatalf("found only %d repository paths: the extraction is broken", n)
	}
}

// TestScriptsRunnable: every script a page tells to run exists and is executable.
func TestScriptsRunnable(t *testing.T) {
	r := root(t)
	re := regexp.MustCompile(`(?m)(?:^|[\s` + "`" + `(])scripts/([a-z][a-z-]*)`)
	n := 0
	for _, p := range pages(t) {
		for _, m := range re.FindAllStringSubmatch(p.text, -1) {
			n++
			fi, err := os.Stat(filepath.Join(r, "scripts", m[1]))
			if err != nil {
				t.Errorf("%s runs scripts/%s, which does not exist", p.path, m[1])
				continue
			}
			if fi.Mode()&0o111 == 0 {
				t.Errorf("scripts/%s (named by %s) is not executable", m[1], p.path)
			}
		}
	}
	if n < 10 {
		t.Fatalf("found only %d scripts named: the extraction is broken", n)
	}
}

// TestREADME: the README stays a short overview that names the two local commands (CI greps it
// for scripts/test) and leads into docs/.
func TestREADME(t *testing.T) {
	p := read(t, root(t), "README.md")
	if lines := strings.Count(p.text, "\n"); lines > 250 {
		t.Errorf("README.md has %d lines; keep it under 250 and move reference material into docs/", lines)
	}
	for _, want := range []string{"scripts/test", "scripts/demo --once", "docker compose", "](docs/README.md)", "docs/images/console-dashboard.jpg", "docs/images/data-flow.svg"} {
		if !strings.Contains(p.text, want) {
			t.Errorf("README.md does not contain %q", want)
		}
	}
}

// TestBenchesDocumented: the performance page's table has one row per scripts/bench-NAME, and
// each row names one that exists.
func TestBenchesDocumented(t *testing.T) {
	r := root(t)
	text := read(t, r, "docs/performance.md").text
	_, table, ok := strings.Cut(text, "\n## What each benchmark measures\n")
	if !ok {
		t.Fatal(`docs/performance.md has no "## What each benchmark measures" section`)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z]+)` \\|").FindAllStringSubmatch(table, -1) {
		listed = append(listed, m[1])
	}
	scripts, err := filepath.Glob(filepath.Join(r, "scripts", "bench-*"))
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, s := range scripts {
		have = append(have, strings.TrimPrefix(filepath.Base(s), "bench-"))
	}
	slices.Sort(listed)
	slices.Sort(have)
	if len(have) == 0 || !slices.Equal(listed, have) {
		t.Errorf("docs/performance.md lists the benches %q; scripts/ has %q", listed, have)
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

// headings returns the anchors of text's headings, outside code blocks.
func headings(text string) []string {
	var out []string
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if !inFence && strings.HasPrefix(line, "#") {
			out = append(out, slug(strings.TrimLeft(line, "#")))
		}
	}
	return out
}

// TestLinksReachHeadings: every relative link of the README and of the pages reaches a file or a
// directory, and a heading of it when the link names one.
func TestLinksReachHeadings(t *testing.T) {
	r := root(t)
	links := 0
	for _, p := range pages(t) {
		from := filepath.Join(r, filepath.FromSlash(p.path))
		for _, m := range regexp.MustCompile(`\]\(([^)\s]*)\)`).FindAllStringSubmatch(p.text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, anchor, _ := strings.Cut(target, "#")
			path := from
			if file != "" {
				path = filepath.Join(filepath.Dir(from), filepath.FromSlash(file))
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links %s, which does not exist", p.path, target)
				continue
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(headings(string(raw)), anchor) {
				t.Errorf("%s links %s, but %s has no heading with anchor #%s", p.path, target, filepath.Base(path), anchor)
			}
		}
	}
	if links < 100 {
		t.Fatalf("found only %d links: the extraction is broken", links)
	}
}

// codeMap returns the directories the architecture page's "Code map" section names: each list
// item's first path, and the relative subdirectories ("proxy/") it lists after it.
func codeMap(t *testing.T, text string) map[string]bool {
	t.Helper()
	_, sec, ok := strings.Cut(text, "\n## Code map\n")
	if !ok {
		t.Fatal(`docs/architecture.md has no "## Code map" section`)
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
	r := root(t)
	named := codeMap(t, read(t, r, "docs/architecture.md").text)
	for p := range named {
		if fi, err := os.Stat(filepath.Join(r, p)); err != nil || !fi.IsDir() {
			t.Errorf("the code map names %s/, which is not a directory", p)
		}
	}
	want := func(dir string) {
		ents, err := os.ReadDir(filepath.Join(r, dir))
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
				t.Errorf("the code map of docs/architecture.md has no line for %s/", p)
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

// variableRE matches the names of servescope's environment variables and families of them
// (SERVESCOPE_NATS_*, or an abbreviated tail: `_PASSWORD_FILE`).
var variableRE = regexp.MustCompile(`\b(?:SERVESCOPE|GATEWAY|CONSUMER|COLLECTOR|DETECTOR|CONSOLE|RAGDEMO|VLLMSIM)_[A-Z0-9_]*[A-Z0-9*]`)

// TestVariablesExist: every variable the README and the pages name is one the code reads: a
// program's (the generated configuration page), the compose file's .env (deploy/env.example), or
// one the scripts, the development harness or the runtime read (their sources name it). A
// family (SERVESCOPE_STREAM_*) must match at least one.
func TestVariablesExist(t *testing.T) {
	r := root(t)
	known := map[string]bool{}
	add := func(text string) {
		for _, v := range variableRE.FindAllString(text, -1) {
			known[v] = true
		}
	}
	add(read(t, r, "docs/configuration.md").text)
	add(read(t, r, "deploy/env.example").text)
	// The harness's and the runtime's own variables (SERVESCOPE_DEV_*, SERVESCOPE_DEMO_*,
	// SERVESCOPE_LOG_*, ...), and NATS resources named like variables (SERVESCOPE_DLQ), are named
	// by the code that reads or creates them.
	for _, dir := range []string{"scripts", "dev", "internal", ".ci"} {
		err := filepath.WalkDir(filepath.Join(r, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") || strings.HasSuffix(p, ".md") {
				return err
			}
			raw, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			add(string(raw))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(known) < 100 {
		t.Fatalf("found only %d variable names in the code: the extraction is broken", len(known))
	}
	// The demo's streams: the upper-cased subject prefix servescope_demo (bus.Topology).
	known["SERVESCOPE_DEMO"], known["SERVESCOPE_DEMO_DLQ"] = true, true
	checked := 0
	for _, p := range pages(t) {
		if p.is("docs/configuration.md") {
			continue
		}
		for _, v := range variableRE.FindAllString(p.text, -1) {
			checked++
			if known[v] {
				continue
			}
			if prefix, ok := strings.CutSuffix(v, "*"); ok && slices.ContainsFunc(slices.Collect(mapsKeys(known)), func(k string) bool { return strings.HasPrefix(k, prefix) && !strings.HasSuffix(k, "*") }) {
				continue
			}
			t.Errorf("%s names %s, which no program, script or .env reads: a variable renamed or removed (docs/configuration.md lists them all)", p.path, v)
		}
	}
	if checked < 100 {
		t.Fatalf("checked only %d variable names: the extraction is broken", checked)
	}
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestServescopeCommandsExist: every `servescope` command the README and the pages name (in code
// spans and shell blocks) is a command of the command-line reference, which is the binary's help.
func TestServescopeCommandsExist(t *testing.T) {
	r := root(t)
	cmds := map[string]bool{}
	for _, h := range regexp.MustCompile(`(?m)^#{2,3} (servescope(?: [a-z][a-z-]*)*)$`).FindAllStringSubmatch(read(t, r, "docs/cli.md").text, -1) {
		cmds[h[1]] = true
	}
	if len(cmds) < 15 {
		t.Fatalf("docs/cli.md has only %d servescope commands: the extraction is broken", len(cmds))
	}
	invocation := regexp.MustCompile(`(?:^|[\s` + "`" + `(])(?:go run \./services/)?servescope((?: [a-z][a-z|-]*)+)`)
	checked := 0
	for _, p := range pages(t) {
		var code []string
		for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(p.text, -1) {
			code = append(code, m[1])
		}
		for _, m := range regexp.MustCompile("(?s)```(?:sh|bash)\n(.*?)```").FindAllStringSubmatch(p.text, -1) {
			code = append(code, strings.Split(m[1], "\n")...)
		}
		for _, c := range code {
			for _, m := range invocation.FindAllStringSubmatch(c, -1) {
				checked++
				checkCommand(t, p.path, strings.Fields(m[1]), "servescope", cmds)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d servescope invocations: the extraction is broken", checked)
	}
}

// checkCommand follows words down the command tree from cmd: each word is a subcommand (or
// alternatives a|b) until one is not a command of cmd's, which must then have no subcommand
// at all or be an argument.
func checkCommand(t *testing.T, page string, words []string, cmd string, cmds map[string]bool) {
	t.Helper()
	if len(words) == 0 {
		return
	}
	hasSubs := false
	for c := range cmds {
		if strings.HasPrefix(c, cmd+" ") {
			hasSubs = true
			break
		}
	}
	if !hasSubs {
		return // a leaf: what follows is arguments
	}
	for _, w := range strings.Split(words[0], "|") {
		next := cmd + " " + w
		if !cmds[next] {
			t.Errorf("%s names `%s`, but the command-line reference has no such command", page, next)
			continue
		}
		checkCommand(t, page, words[1:], next, cmds)
	}
}

// TestSQLOnlyWhereItRuns: a ```sql block appears only on a page whose SQL a test runs
// (SQLPages), so no documented query goes stale unnoticed.
func TestSQLOnlyWhereItRuns(t *testing.T) {
	for _, p := range pages(t) {
		rel := strings.TrimPrefix(p.path, "docs/")
		if strings.Contains(p.text, "```sql") && (!strings.HasPrefix(p.path, "docs/") || !slices.Contains(SQLPages, rel)) {
			t.Errorf("%s has a ```sql block, but only the SQL of %q runs in a test: move the query to docs/sql-cookbook.md, or fence it as text", p.path, SQLPages)
		}
	}
	for _, name := range SQLPages {
		if _, err := Statements(name); err != nil {
			t.Error(err)
		}
	}
}

// TestQuickStartFillsTheSecrets runs the quick start's lines before `docker compose` (the copy of
// deploy/env.example and the loop that generates the secrets) in a scratch directory, and checks
// that .env then sets every variable docker-compose.yml requires (${NAME:?...}).
func TestQuickStartFillsTheSecrets(t *testing.T) {
	r := root(t)
	compose, err := os.ReadFile(filepath.Join(r, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var required []string
	for _, m := range regexp.MustCompile(`\$\{([A-Z0-9_]+):\?`).FindAllStringSubmatch(string(compose), -1) {
		if !slices.Contains(required, m[1]) {
			required = append(required, m[1])
		}
	}
	if len(required) < 5 {
		t.Fatalf("docker-compose.yml requires only %d variables: the extraction is broken", len(required))
	}
	for _, name := range []string{"README.md", "docs/getting-started.md"} {
		text := read(t, r, name).text
		block := regexp.MustCompile("(?s)```sh\n(cp deploy/env.example .env.*?)```").FindStringSubmatch(text)
		if block == nil {
			t.Errorf("%s has no shell block starting with cp deploy/env.example .env", name)
			continue
		}
		script, _, _ := strings.Cut(block[1], "\ndocker compose")
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "deploy"), 0o755); err != nil {
			t.Fatal(err)
		}
		example, err := os.ReadFile(filepath.Join(r, "deploy", "env.example"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "deploy", "env.example"), example, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s's quick start fails: %v\n%s\n%s", name, err, script, out)
			continue
		}
		env := map[string]string{}
		f, err := os.Open(filepath.Join(dir, ".env"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok && !strings.HasPrefix(k, "#") {
				env[k] = v
			}
		}
		f.Close()
		for _, v := range required {
			if env[v] == "" {
				t.Errorf("after %s's quick start, .env leaves %s empty, which docker-compose.yml requires", name, v)
			}
		}
		if leftovers, _ := filepath.Glob(filepath.Join(dir, ".env.*")); len(leftovers) > 0 {
			t.Errorf("%s's quick start leaves %q behind", name, leftovers)
		}
	}
}
