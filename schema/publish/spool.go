package publish

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// FsyncPolicy says when the spool forces its writes to stable storage.
type FsyncPolicy string

const (
	// FsyncAlways syncs after every spooled event: nothing acknowledged to the spool is lost on a
	// power cut, at the cost of one fsync per event while NATS is away.
	FsyncAlways FsyncPolicy = "always"
	// FsyncInterval syncs every Config.FsyncInterval: a power cut loses at most that much; a process
	// crash loses nothing (the data is in the page cache).
	FsyncInterval FsyncPolicy = "interval"
	// FsyncNever leaves syncing to the operating system.
	FsyncNever FsyncPolicy = "never"
)

// errSpoolFull is returned by append when the spool's size cap would be exceeded.
var errSpoolFull = errors.New("spool is full")

const (
	segmentSuffix = ".seg"
	cursorFile    = "cursor"
)

// segment is one append-only file of the spool, named by a zero-padded sequence number.
type segment struct {
	id   uint64
	size int64
}

// cursor is a replay position: the next record to replay is at off in segment seg.
type cursor struct {
	seg uint64
	off int64
}

// spool is an on-disk FIFO of records: append-only segment files plus a persisted replay cursor.
// Records before the cursor were delivered; a segment wholly before it is deleted.
type spool struct {
	dir          string
	policy       FsyncPolicy
	maxBytes     int64
	segmentBytes int64
	log          *slog.Logger

	mu      sync.Mutex
	segs    []segment // oldest first; the last one is written to
	w       *os.File  // the last segment, open for appending; nil until the first append
	buf     []byte
	dirty   bool
	bytes   int64 // sum of segment sizes on disk
	pending int64 // records after the cursor
	cur     cursor
}

// openSpool opens (creating when needed) the spool in dir and recovers it: a record cut short at
// the end of a segment (a crash mid-write) is logged and cut off; a corrupt record ends its
// segment's readable part, logged as an error with the bytes lost.
func openSpool(dir string, policy FsyncPolicy, maxBytes, segmentBytes int64, log *slog.Logger) (*spool, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create spool directory %s: %w", dir, err)
	}
	s := &spool{dir: dir, policy: policy, maxBytes: maxBytes, segmentBytes: segmentBytes, log: log}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list spool directory %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, segmentSuffix) {
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSuffix(name, segmentSuffix), 10, 64)
		if err != nil {
			continue
		}
		s.segs = append(s.segs, segment{id: id})
	}
	sort.Slice(s.segs, func(i, j int) bool { return s.segs[i].id < s.segs[j].id })
	cur, err := s.readCursor()
	if err != nil {
		return nil, err
	}
	kept := s.segs[:0]
	for _, seg := range s.segs {
		if seg.id < cur.seg {
			// Delivered before the last shutdown; the delete did not happen.
			if err := os.Remove(s.path(seg.id)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("remove delivered spool segment %s: %w", s.path(seg.id), err)
			}
			continue
		}
		size, records, err := s.recover(seg.id, cur)
		if err != nil {
			return nil, err
		}
		seg.size = size
		s.bytes += size
		s.pending += records
		kept = append(kept, seg)
	}
	s.segs = kept
	if len(s.segs) == 0 || cur.seg < s.segs[0].id {
		cur = cursor{}
		if len(s.segs) > 0 {
			cur.seg = s.segs[0].id
		}
	}
	s.cur = cur
	return s, nil
}

// recover scans segment id, cuts off a truncated or corrupt tail, and returns the valid size and
// the number of records at or after the cursor.
func (s *spool) recover(id uint64, cur cursor) (size, records int64, err error) {
	path := s.path(id)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("open spool segment %s: %w", path, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("stat spool segment %s: %w", path, err)
	}
	rr := &recordReader{r: bufio.NewReaderSize(f, 64<<10)}
	var off int64
	for {
		_, n, err := rr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			lost := info.Size() - off
			if errors.Is(err, errTruncated) {
				s.log.Warn("spool segment ends in a partly written record; skipping it",
					"segment", path, "offset", off, "bytes_skipped", lost)
			} else {
				s.log.Error("spool segment holds a corrupt record; the rest of the segment is lost",
					"segment", path, "offset", off, "bytes_lost", lost, "error", err)
			}
			if terr := f.Truncate(off); terr != nil {
				return 0, 0, fmt.Errorf("cut bad tail of spool segment %s at %d: %w", path, off, terr)
			}
			break
		}
		if id > cur.seg || off >= cur.off {
			records++
		}
		off += n
	}
	return off, records, nil
}

func (s *spool) path(id uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%020d%s", id, segmentSuffix))
}

func (s *spool) readCursor() (cursor, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, cursorFile))
	if errors.Is(err, os.ErrNotExist) {
		return cursor{}, nil
	}
	if err != nil {
		return cursor{}, fmt.Errorf("read spool cursor: %w", err)
	}
	var c cursor
	if _, err := fmt.Sscanf(string(b), "%d %d", &c.seg, &c.off); err != nil {
		// A torn cursor only costs re-sending events that JetStream's duplicate window and the
		// tables' keys absorb; start from the oldest segment.
		s.log.Warn("spool cursor unreadable; replaying from the oldest segment", "error", err)
		return cursor{}, nil
	}
	return c, nil
}

func (s *spool) writeCursorLocked() error {
	tmp := filepath.Join(s.dir, cursorFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("write spool cursor: %w", err)
	}
	if _, err := fmt.Fprintf(f, "%d %d\n", s.cur.seg, s.cur.off); err != nil {
		f.Close()
		return fmt.Errorf("write spool cursor: %w", err)
	}
	if s.policy == FsyncAlways {
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("sync spool cursor: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write spool cursor: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, cursorFile)); err != nil {
		return fmt.Errorf("replace spool cursor: %w", err)
	}
	return nil
}

// append writes r at the end of the spool. It returns errSpoolFull when the size cap would be
// exceeded, and wrapped I/O errors.
func (s *spool) append(r *record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bytes+r.size() > s.maxBytes {
		return errSpoolFull
	}
	if s.w == nil || s.segs[len(s.segs)-1].size >= s.segmentBytes {
		if err := s.rotateLocked(); err != nil {
			return err
		}
	}
	var err error
	s.buf, err = appendRecord(s.buf[:0], r)
	if err != nil {
		return err
	}
	last := &s.segs[len(s.segs)-1]
	n, err := s.w.Write(s.buf)
	if err != nil {
		// Cut a partial write off so the segment stays readable.
		if n > 0 {
			_ = s.w.Truncate(last.size)
		}
		return fmt.Errorf("append to spool segment %s: %w", s.w.Name(), err)
	}
	last.size += int64(n)
	s.bytes += int64(n)
	s.pending++
	if s.policy == FsyncAlways {
		if err := s.w.Sync(); err != nil {
			return fmt.Errorf("sync spool segment %s: %w", s.w.Name(), err)
		}
	} else {
		s.dirty = true
	}
	return nil
}

// rotateLocked starts a new segment after the last one (or reopens a last segment that is
// still below the size limit, after a restart).
func (s *spool) rotateLocked() error {
	if s.w != nil {
		if err := s.w.Sync(); err != nil {
			return fmt.Errorf("sync spool segment %s: %w", s.w.Name(), err)
		}
		if err := s.w.Close(); err != nil {
			return fmt.Errorf("close spool segment %s: %w", s.w.Name(), err)
		}
		s.w = nil
	}
	if n := len(s.segs); n > 0 && s.segs[n-1].size < s.segmentBytes {
		f, err := os.OpenFile(s.path(s.segs[n-1].id), os.O_WRONLY|os.O_APPEND, 0o640)
		if err != nil {
			return fmt.Errorf("open spool segment: %w", err)
		}
		s.w = f
		return nil
	}
	var id uint64 = 1
	if n := len(s.segs); n > 0 {
		id = s.segs[n-1].id + 1
	} else if s.cur.seg > 0 {
		id = s.cur.seg
	}
	f, err := os.OpenFile(s.path(id), os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("create spool segment: %w", err)
	}
	if len(s.segs) == 0 {
		s.cur = cursor{seg: id}
	}
	s.segs = append(s.segs, segment{id: id})
	s.w = f
	return nil
}

// read returns up to max records from the cursor on, and the cursor after the last of them. The
// records are copies, safe to keep.
func (s *spool) read(max int) ([]record, cursor, error) {
	s.mu.Lock()
	cur := s.cur
	segs := append([]segment(nil), s.segs...)
	s.mu.Unlock()

	var out []record
	for _, seg := range segs {
		if len(out) >= max {
			break
		}
		if seg.id < cur.seg {
			continue
		}
		if seg.id > cur.seg {
			cur = cursor{seg: seg.id}
		}
		if cur.off >= seg.size {
			continue
		}
		f, err := os.Open(s.path(seg.id))
		if err != nil {
			return nil, cur, fmt.Errorf("open spool segment for replay: %w", err)
		}
		rr := &recordReader{r: bufio.NewReaderSize(io.NewSectionReader(f, cur.off, seg.size-cur.off), 64<<10)}
		for len(out) < max {
			r, n, err := rr.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				return nil, cur, fmt.Errorf("read spool segment %s at %d: %w", f.Name(), cur.off, err)
			}
			out = append(out, record{subject: r.subject, msgID: r.msgID, data: append([]byte(nil), r.data...)})
			cur.off += n
		}
		f.Close()
	}
	return out, cur, nil
}

// commit moves the cursor to c after records up to it were delivered (n of them), deletes the
// segments before it, and reports whether the spool is now empty. An empty spool deletes all its
// files, so the next append starts a fresh segment.
func (s *spool) commit(c cursor, n int64) (empty bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A cursor at the end of a segment that has a successor points at the successor's start, so
	// the finished segment can go.
	for i := 0; i+1 < len(s.segs); i++ {
		if s.segs[i].id == c.seg && c.off >= s.segs[i].size {
			c = cursor{seg: s.segs[i+1].id}
		}
	}
	s.cur = c
	s.pending -= n
	if s.pending < 0 {
		s.pending = 0
	}
	for len(s.segs) > 1 && s.segs[0].id < c.seg {
		if err := os.Remove(s.path(s.segs[0].id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("remove replayed spool segment: %w", err)
		}
		s.bytes -= s.segs[0].size
		s.segs = s.segs[1:]
	}
	last := len(s.segs) - 1
	if last >= 0 && s.segs[last].id == c.seg && c.off >= s.segs[last].size {
		// Everything was delivered: start over.
		if s.w != nil {
			_ = s.w.Close()
			s.w = nil
		}
		for _, seg := range s.segs {
			if err := os.Remove(s.path(seg.id)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return false, fmt.Errorf("remove replayed spool segment: %w", err)
			}
		}
		s.cur = cursor{seg: s.segs[last].id + 1}
		s.segs = s.segs[:0]
		s.bytes = 0
		s.pending = 0
		s.dirty = false
		return true, s.writeCursorLocked()
	}
	return len(s.segs) == 0, s.writeCursorLocked()
}

// isEmpty reports whether every spooled record was delivered.
func (s *spool) isEmpty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending == 0
}

// stats returns the records waiting for replay and the bytes on disk.
func (s *spool) stats() (pending, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending, s.bytes
}

// sync forces appended records to stable storage when some are not yet.
func (s *spool) sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dirty || s.w == nil {
		return nil
	}
	s.dirty = false
	if err := s.w.Sync(); err != nil {
		return fmt.Errorf("sync spool segment %s: %w", s.w.Name(), err)
	}
	return nil
}

// close syncs (unless the policy is never) and closes the spool.
func (s *spool) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return nil
	}
	var err error
	if s.policy != FsyncNever {
		err = s.w.Sync()
	}
	if cerr := s.w.Close(); err == nil {
		err = cerr
	}
	s.w = nil
	if err != nil {
		return fmt.Errorf("close spool: %w", err)
	}
	return nil
}
