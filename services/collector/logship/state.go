package logship

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// Position is how far a file has been shipped: the file's identity (device and inode, so a
// rotated-away file is not mistaken for its successor) and the offset of the first byte not yet
// shipped.
type Position struct {
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	Offset int64  `json:"offset"`
}

// State keeps the shipped position of each followed file in a small JSON file, so a restarted
// collector continues where it stopped instead of re-sending whole logs. Lines between the last
// save and a crash are sent again (at-least-once); they are the same lines at the same offsets,
// so `source`, `offset` and `line` show them as repeats. Safe for concurrent use.
type State struct {
	path string
	mu   sync.Mutex
	m    map[string]Position
	// dirty is set when m changed since the last save.
	dirty bool
}

// OpenState reads the state file at path (a missing file is an empty state). An empty path gives
// a state that is never saved, for `collector logs -`.
func OpenState(path string) (*State, error) {
	s := &State{path: path, m: map[string]Position{}}
	if path == "" {
		return s, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read log offsets %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &s.m); err != nil {
		// A torn file from a crash during the very first save: start over rather than refuse
		// to run; the cost is lines sent twice.
		s.m = map[string]Position{}
	}
	return s, nil
}

// Get returns the saved position of source.
func (s *State) Get(source string) (Position, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.m[source]
	return p, ok
}

// Set records the position of source (saved by the next Save).
func (s *State) Set(source string, p Position) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[source] != p {
		s.m[source] = p
		s.dirty = true
	}
}

// Save writes the state atomically (temporary file, fsync, rename) when it changed.
func (s *State) Save() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.path == "" || !s.dirty {
		return nil
	}
	b, err := json.Marshal(s.m)
	if err != nil {
		return fmt.Errorf("encode log offsets: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return fmt.Errorf("create log offsets directory: %w", err)
	}
	tmp := s.path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("write log offsets: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write log offsets %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync log offsets %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close log offsets %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("replace log offsets %s: %w", s.path, err)
	}
	s.dirty = false
	return nil
}
