package logship

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// MaxLineBytes is the longest line assembled; a longer run without a newline is emitted in
// pieces of this size (the event keeps the first 16 KiB of each).
const MaxLineBytes = 1 << 20

// EmitFunc receives one line (without its newline) and the byte offset of its start. An error
// stops the reader.
type EmitFunc func(line []byte, offset int64) error

// lineSplitter cuts a byte stream into lines and tracks offsets.
type lineSplitter struct {
	pending []byte
	start   int64 // offset of pending[0]
}

func (s *lineSplitter) feed(data []byte, emit EmitFunc) error {
	s.pending = append(s.pending, data...)
	for {
		i := bytes.IndexByte(s.pending, '\n')
		if i < 0 {
			break
		}
		if err := emit(s.pending[:i], s.start); err != nil {
			return err
		}
		s.start += int64(i) + 1
		s.pending = s.pending[i+1:]
	}
	for len(s.pending) >= MaxLineBytes {
		if err := emit(s.pending[:MaxLineBytes], s.start); err != nil {
			return err
		}
		s.start += MaxLineBytes
		s.pending = s.pending[MaxLineBytes:]
	}
	// Keep the buffer from growing: move the partial line to the front.
	s.pending = append(make([]byte, 0, max(len(s.pending), 4096)), s.pending...)
	return nil
}

// flush emits a last line that had no newline.
func (s *lineSplitter) flush(emit EmitFunc) error {
	if len(s.pending) == 0 {
		return nil
	}
	err := emit(s.pending, s.start)
	s.start += int64(len(s.pending))
	s.pending = s.pending[:0]
	return err
}

// committed is the offset of the first byte not yet emitted.
func (s *lineSplitter) committed() int64 { return s.start }

// ReadStream emits every line of r until EOF (a last line without newline included) or ctx ends
// (then nil: a partial line is not emitted).
// It is the reader of `collector logs -`.
func ReadStream(ctx context.Context, r io.Reader, emit EmitFunc) error {
	var sp lineSplitter
	buf := make([]byte, 64<<10)
	for {
		if ctx.Err() != nil {
			return nil
		}
		n, err := r.Read(buf)
		if n > 0 {
			if ferr := sp.feed(buf[:n], emit); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return sp.flush(emit)
		}
		if err != nil {
			return fmt.Errorf("read log stream: %w", err)
		}
	}
}

// Follower follows one log file like `tail -F`: from the saved position (or the beginning of a
// file it has not seen), through rotation by rename (the old file is read on for RotateWait, then
// the new file from its start) and truncation (reading restarts at 0), waiting for a file that
// does not exist yet.
type Follower struct {
	// Path is the file to follow.
	Path string
	// State keeps the position across restarts; required.
	State *State
	// Poll is how often to look for new data, rotation and truncation (default 250 ms).
	Poll time.Duration
	// RotateWait is how long a file renamed or removed away from Path is still read after the
	// rotation is seen (default 5 s, Fluent Bit's Rotate_Wait): a writer that has not reopened
	// yet (vLLM's stdout redirected by a shell, a logrotate without copytruncate) still appends
	// its last lines to the old file. A partial last line is emitted when the wait ends, or when
	// Run returns within it (a restart could not resume the old file: the saved position is the
	// current file's). Lines written to the old file after the wait are not read.
	RotateWait time.Duration
	// OnRotate, when set, is called with a description each time the file is replaced or
	// truncated (for logging).
	OnRotate func(what string)
}

// tailed is one open file being read: its identity, the bytes read so far and the line
// assembler whose committed offset is the file's saved position.
type tailed struct {
	f      *os.File
	id     fileID
	sp     lineSplitter
	readTo int64
	until  time.Time // for a rotated file: when reading it stops
}

// readAvailable emits the lines of what the file holds now, or up to ctx's end (a long backlog
// must not hold a shutdown); it reports whether it read anything.
func (t *tailed) readAvailable(ctx context.Context, buf []byte, emit EmitFunc, name string) (bool, error) {
	read := false
	for ctx.Err() == nil {
		n, err := t.f.Read(buf)
		if n > 0 {
			read = true
			t.readTo += int64(n)
			if ferr := t.sp.feed(buf[:n], emit); ferr != nil {
				return read, ferr
			}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return read, fmt.Errorf("read %s: %w", name, err)
		}
		if n == 0 || err != nil {
			return read, nil
		}
	}
	return read, nil
}

// finish reads what the file still holds, emits its partial last line and closes it: the end of
// a rotated file, which nothing will resume.
func (t *tailed) finish(buf []byte, emit EmitFunc, name string) error {
	defer t.f.Close()
	if _, err := t.readAvailable(context.Background(), buf, emit, name); err != nil {
		return err
	}
	return t.sp.flush(emit)
}

// Run follows the file until ctx ends; it returns only on a read error or ctx's end (nil).
func (fl *Follower) Run(ctx context.Context, emit EmitFunc) error {
	poll := fl.Poll
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	rotateWait := fl.RotateWait
	if rotateWait <= 0 {
		rotateWait = 5 * time.Second
	}
	note := fl.OnRotate
	if note == nil {
		note = func(string) {}
	}
	buf := make([]byte, 64<<10)
	var cur *tailed
	var rotated []*tailed
	defer func() {
		if cur != nil {
			cur.f.Close()
		}
		for _, r := range rotated {
			r.f.Close()
		}
	}()
	save := func() {
		fl.State.Set(fl.Path, Position{Dev: cur.id.Dev, Ino: cur.id.Ino, Offset: cur.sp.committed()})
	}
	rotatedName := fl.Path + " (rotated)"
	// finish is Run's end at ctx's: a rotated file cannot be resumed after a restart (the saved
	// position is the current file's), so what it holds goes out now, a partial last line
	// included.
	finish := func() error {
		for len(rotated) > 0 {
			r := rotated[0]
			rotated = rotated[1:]
			if err := r.finish(buf, emit, rotatedName); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		if ctx.Err() != nil {
			return finish()
		}
		if cur == nil {
			t, err := fl.open(note)
			if err != nil {
				return err
			}
			cur = t
		}
		// Rotated files first (their lines are older), read on until their wait ends, then their
		// last partial line goes out.
		progressed := false
		kept := rotated[:0]
		for _, r := range rotated {
			if time.Now().After(r.until) {
				if err := r.finish(buf, emit, rotatedName); err != nil {
					return err
				}
				continue
			}
			kept = append(kept, r)
			read, err := r.readAvailable(ctx, buf, emit, rotatedName)
			if err != nil {
				return err
			}
			progressed = progressed || read
		}
		clear(rotated[len(kept):])
		rotated = kept
		if cur != nil {
			read, err := cur.readAvailable(ctx, buf, emit, fl.Path)
			if read {
				save()
			}
			if err != nil {
				return err
			}
			progressed = progressed || read
		}
		if progressed {
			continue
		}
		// At the end of the data: wait, then look for rotation or truncation.
		select {
		case <-ctx.Done():
			return finish()
		case <-time.After(poll):
		}
		if cur == nil {
			continue
		}
		st, err := os.Stat(fl.Path)
		switch {
		case err != nil || identity(st) != cur.id:
			// Rotated (renamed or removed): the old file is read on for a while, the new one
			// (when it exists) from its start.
			note("rotated")
			cur.until = time.Now().Add(rotateWait)
			rotated = append(rotated, cur)
			cur = nil
			fl.State.Set(fl.Path, Position{})
		case st.Size() < cur.readTo:
			note("truncated")
			if _, err := cur.f.Seek(0, io.SeekStart); err != nil {
				return fmt.Errorf("seek %s to 0 after truncation: %w", fl.Path, err)
			}
			cur.sp = lineSplitter{}
			cur.readTo = 0
			save()
		}
	}
}

// open opens Path at its saved position (or its start); nil, nil when it does not exist (yet).
func (fl *Follower) open(note func(string)) (*tailed, error) {
	f, err := os.Open(fl.Path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", fl.Path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil // replaced between open and stat: try again at the next poll
	}
	t := &tailed{f: f, id: identity(fi)}
	if p, ok := fl.State.Get(fl.Path); ok && p.Dev == t.id.Dev && p.Ino == t.id.Ino {
		if p.Offset <= fi.Size() {
			t.sp.start = p.Offset
		} else {
			note("truncated while the collector was away")
		}
	}
	if _, err := f.Seek(t.sp.start, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("seek %s to %d: %w", fl.Path, t.sp.start, err)
	}
	t.readTo = t.sp.start
	return t, nil
}

type fileID struct{ Dev, Ino uint64 }

func identity(fi os.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{Dev: uint64(st.Dev), Ino: st.Ino}
	}
	return fileID{}
}
