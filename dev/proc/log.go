package proc

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// Rotation bounds a log: once it holds MaxBytes or more it is renamed to <log>.1 (the older
// files shifting to .2, .3, ...) and only the Backups newest rotated files are kept.
type Rotation struct {
	MaxBytes int64
	Backups  int
}

// DefaultRotation is the one log policy of the harness: 20 MiB a file, five rotated files kept,
// so a log takes at most 120 MiB. dev/servers gives the ClickHouse engine's own logs the same.
func DefaultRotation() Rotation { return Rotation{MaxBytes: 20 << 20, Backups: 5} }

func (r Rotation) orDefault() Rotation {
	if r.MaxBytes <= 0 {
		return DefaultRotation()
	}
	return r
}

// rotate rotates path by r when it has reached r.MaxBytes. Children append to their log through
// a descriptor of their own (see the package doc), so this runs when a process starts, before
// the new child opens the file.
func rotate(path string, r Rotation) error {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Size() < r.MaxBytes {
		return nil
	}
	if r.Backups <= 0 {
		return os.Remove(path)
	}
	if err := os.Remove(backup(path, r.Backups)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for i := r.Backups - 1; i >= 1; i-- {
		if err := os.Rename(backup(path, i), backup(path, i+1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return os.Rename(path, backup(path, 1))
}

func backup(path string, i int) string { return path + "." + strconv.Itoa(i) }

// tailBytes bounds how much of a log's end Tail reads.
const tailBytes = 256 << 10

// Tail returns the last n lines of the file at path, or why it could not be read.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	start := max(fi.Size()-tailBytes, 0)
	data, err := io.ReadAll(io.NewSectionReader(f, start, fi.Size()-start))
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", path, err)
	}
	text := strings.TrimRight(string(data), "\n")
	if text == "" {
		return "(empty)"
	}
	lines := strings.Split(text, "\n")
	if start > 0 && len(lines) > 1 {
		// The first line read is most likely cut.
		lines = lines[1:]
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tails is the "its log X ends: ..." part of an error: the tail of spec.Log, then of each of
// spec.ExtraLogs that exists.
func tails(spec *Spec) string {
	n := spec.TailLines
	if n <= 0 {
		n = DefaultTailLines
	}
	var b strings.Builder
	fmt.Fprintf(&b, "its log %s ends:\n%s", spec.Log, indent(Tail(spec.Log, n)))
	for _, extra := range spec.ExtraLogs {
		if _, err := os.Stat(extra); err != nil {
			continue
		}
		fmt.Fprintf(&b, "\n%s ends:\n%s", extra, indent(Tail(extra, n)))
	}
	return b.String()
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }
