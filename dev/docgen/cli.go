package docgen

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// helpTimeout bounds one --help run.
const helpTimeout = time.Minute

// BuildBinaries builds every package of Binaries from the repository at root into dir in one
// `go build`, and returns dir.
func BuildBinaries(ctx context.Context, root, dir string) error {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, b := range Binaries {
		args = append(args, "./"+b)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// CLI returns docs/cli.md from the --help of the binaries built into bin (BuildBinaries).
func CLI(ctx context.Context, bin string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header("the `--help` of every binary listed in dev/docgen/sources.go"))
	b.WriteString(`# Command-line reference

Each section is a program's ` + "`--help`" + `, as it prints it; a command's subcommands follow it. The
flags every binary takes (` + "`--log.level`, `--log.format`, `--version`" + `) are shown once, with the
program; its settings come from the environment ([configuration reference](configuration.md)).
A flag wins over its variable.

Exit status, for every binary: 0 when it ran (a service: after SIGTERM or SIGINT, whose drain a
second signal cuts short), 1 on a failure, 2 on bad usage. ` + "`servescope`" + ` differs: 1 on a usage or
operational error, 2 when the data could not be read (` + "`diagnose`, `postmortem`" + `).

`)
	for _, pkg := range Binaries {
		name := path.Base(pkg)
		if err := helpTree(ctx, &b, filepath.Join(bin, name), []string{name}); err != nil {
			return nil, err
		}
	}
	return append(bytes.TrimRight(b.Bytes(), "\n"), '\n'), nil
}

// helpTree writes the help of the command words[1:] of program exe, then of its subcommands.
func helpTree(ctx context.Context, b *bytes.Buffer, exe string, words []string) error {
	text, err := help(ctx, exe, words[1:])
	if err != nil {
		return err
	}
	level := "###"
	if len(words) == 1 {
		level = "##"
	}
	subs := subcommands(text)
	if len(words) > 1 {
		text = dropGlobalFlags(text)
	}
	fmt.Fprintf(b, "%s %s\n\n```text\n%s\n```\n\n", level, strings.Join(words, " "), text)
	for _, s := range subs {
		if err := helpTree(ctx, b, exe, append(words[:len(words):len(words)], s)); err != nil {
			return err
		}
	}
	return nil
}

// help runs exe with args and --help in an environment holding only PATH, so that no variable
// of the caller's shows up as a flag's default.
func help(ctx context.Context, exe string, args []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, helpTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, append(append([]string{}, args...), "--help")...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Dir = os.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s --help: %w\n%s", filepath.Base(exe), strings.Join(args, " "), err, out)
	}
	// The "more information" pointer says what the headings below already do.
	var keep []string
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if !strings.HasPrefix(l, "Use \"") || !strings.HasSuffix(l, "for more information about a command.") {
			keep = append(keep, strings.TrimRight(l, " "))
		}
	}
	return strings.TrimRight(strings.Join(keep, "\n"), "\n"), nil
}

// subcommands lists the "Available Commands:" of a cobra help text, without cobra's own help and
// completion commands.
func subcommands(text string) []string {
	_, rest, ok := strings.Cut(text, "\nAvailable Commands:\n")
	if !ok {
		return nil
	}
	var out []string
	for _, l := range strings.Split(rest, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || !strings.HasPrefix(l, "  ") {
			break
		}
		if f[0] != "help" && f[0] != "completion" {
			out = append(out, f[0])
		}
	}
	return out
}

// dropGlobalFlags removes a subcommand's "Global Flags:" block, which repeats its program's flags.
func dropGlobalFlags(text string) string {
	before, rest, ok := strings.Cut(text, "\nGlobal Flags:\n")
	if !ok {
		return text
	}
	_, after, _ := strings.Cut(rest, "\n\n")
	return strings.TrimRight(before+"\n"+after, "\n")
}
