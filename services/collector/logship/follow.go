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
// file it has not seen), through rotation by rename (the old file is read to its end, then the new
// file from its start) and truncation (reading restarts at 0), waiting for a file that does not
// exist yet.
type Follower struct {
	// Path is the file to follow.
	Path string
	// State keeps the position across restarts; required.
	State *State
	// Poll is how often to look for new data, rotation and truncation (default 250 ms).
	Poll time.Duration
	// OnRotate, when set, is called with a description each time the file is replaced or
	// truncated (for logging).
	OnRotate func(what string)
}

// Run follows the file until ctx ends; it returns only on a read error or ctx's end (nil).
func (fl *Follower) Run(ctx context.Context, emit EmitFunc) error {
	poll := fl.Poll
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	note := fl.OnRotate
	if note == nil {
		note = func(string) {}
	}
	buf := make([]byte, 64<<10)
	for {
		f, id, err := openWait(ctx, fl.Path, poll)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		var sp lineSplitter
		if p, ok := fl.State.Get(fl.Path); ok && p.Dev == id.Dev && p.Ino == id.Ino {
			if size := fileSize(f); p.Offset <= size {
				sp.start = p.Offset
			} else {
				note("truncated while the collector was away")
			}
		}
		if _, err := f.Seek(sp.start, io.SeekStart); err != nil {
			f.Close()
			return fmt.Errorf("seek %s to %d: %w", fl.Path, sp.start, err)
		}
		readTo := sp.start // bytes of the file read so far
		save := func() {
			fl.State.Set(fl.Path, Position{Dev: id.Dev, Ino: id.Ino, Offset: sp.committed()})
		}
		reopen := false
		for !reopen {
			n, rerr := f.Read(buf)
			if n > 0 {
				readTo += int64(n)
				if err := sp.feed(buf[:n], emit); err != nil {
					f.Close()
					return err
				}
				save()
				continue
			}
			if rerr != nil && !errors.Is(rerr, io.EOF) {
				f.Close()
				return fmt.Errorf("read %s: %w", fl.Path, rerr)
			}
			// At the end of the data: wait, then look for rotation or truncation.
			select {
			case <-ctx.Done():
				f.Close()
				return nil
			case <-time.After(poll):
			}
			cur, cerr := os.Stat(fl.Path)
			switch {
			case cerr != nil || identity(cur) != id:
				// Rotated (renamed or removed): finish the old file, then move on.
				if err := drain(f, buf, &sp, emit); err != nil {
					f.Close()
					return err
				}
				if err := sp.flush(emit); err != nil {
					f.Close()
					return err
				}
				note("rotated")
				fl.State.Set(fl.Path, Position{})
				reopen = true
			case cur.Size() < readTo:
				note("truncated")
				if _, err := f.Seek(0, io.SeekStart); err != nil {
					f.Close()
					return fmt.Errorf("seek %s to 0 after truncation: %w", fl.Path, err)
				}
				sp = lineSplitter{}
				readTo = 0
				save()
			}
		}
		f.Close()
	}
}

func drain(f *os.File, buf []byte, sp *lineSplitter, emit EmitFunc) error {
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if ferr := sp.feed(buf[:n], emit); ferr != nil {
				return ferr
			}
		}
		if err != nil || n == 0 {
			return nil
		}
	}
}

type fileID struct{ Dev, Ino uint64 }

func identity(fi os.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{Dev: uint64(st.Dev), Ino: st.Ino}
	}
	return fileID{}
}

func fileSize(f *os.File) int64 {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	return fi.Size()
}

// openWait opens path, waiting (polling) while it does not exist; it fails only when ctx ends.
func openWait(ctx context.Context, path string, poll time.Duration) (*os.File, fileID, error) {
	for {
		f, err := os.Open(path)
		if err == nil {
			fi, serr := f.Stat()
			if serr == nil {
				return f, identity(fi), nil
			}
			f.Close()
		} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
			return nil, fileID{}, fmt.Errorf("open %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return nil, fileID{}, ctx.Err()
		case <-time.After(poll):
		}
	}
}
