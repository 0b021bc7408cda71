package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"
)

// sessionTTL is how long a login lasts (the cookie's Max-Age).
const sessionTTL = 30 * 24 * time.Hour

// maxSessions bounds the sessions kept: past it, a login ends the session closest to expiring.
const maxSessions = 10000

// session is one login: whether it may see content, and when it ends.
type session struct {
	content bool
	expires time.Time
}

// sessions are the console's logins, kept in memory: the cookie holds a random id that proves
// nothing by itself, so signing out (or a restart) ends a session for good, and a copied cookie
// stops working with it. The store holds a SHA-256 of each id, never the id.
type sessions struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[string]session
}

func newSessions(now func() time.Time) *sessions {
	return &sessions{now: now, m: map[string]session{}}
}

func hashID(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:])
}

// create starts a session and returns its id (the cookie's value).
func (s *sessions) create(content bool) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxSessions {
		for k, v := range s.m {
			if !now.Before(v.expires) {
				delete(s.m, k)
			}
		}
	}
	if len(s.m) >= maxSessions {
		oldest := ""
		for k, v := range s.m {
			if oldest == "" || v.expires.Before(s.m[oldest].expires) {
				oldest = k
			}
		}
		delete(s.m, oldest)
	}
	s.m[hashID(id)] = session{content: content, expires: now.Add(sessionTTL)}
	return id, nil
}

// get says whether id is a live session and whether it may see content.
func (s *sessions) get(id string) (ok, content bool) {
	if id == "" {
		return false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, found := s.m[hashID(id)]
	if !found || !s.now().Before(v.expires) {
		return false, false
	}
	return true, v.content
}

// end ends the session id (signing out); an unknown id is nothing to end.
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, hashID(id))
}
