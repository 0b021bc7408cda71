package record

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/servescope/servescope/schema"
)

// Redacted replaces every match of a redaction pattern in captured text.
const Redacted = "[REDACTED]"

// Capture prepares prompt and output text for storage: redaction patterns first, then truncation
// to a byte limit on a rune boundary, so a secret cut in half by truncation is still removed.
type Capture struct {
	patterns []*regexp.Regexp
	maxBytes int
}

// NewCapture compiles the redaction patterns (Go RE2 syntax). maxBytes bounds each stored text
// (at most schema.MaxContentBytes).
func NewCapture(patterns []string, maxBytes int) (*Capture, error) {
	if maxBytes <= 0 || maxBytes > schema.MaxContentBytes {
		return nil, fmt.Errorf("capture size %d bytes: must be between 1 and %d", maxBytes, schema.MaxContentBytes)
	}
	c := &Capture{maxBytes: maxBytes}
	for _, p := range patterns {
		if strings.TrimSpace(p) == "" {
			continue
		}
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("redaction pattern %q: %w", p, err)
		}
		c.patterns = append(c.patterns, re)
	}
	return c, nil
}

// MaxBytes is the stored size limit; collecting a little more than it before redaction lets a
// pattern that straddles the limit still match.
func (c *Capture) MaxBytes() int { return c.maxBytes }

// Apply redacts then truncates s.
func (c *Capture) Apply(s string) string {
	for _, re := range c.patterns {
		s = re.ReplaceAllString(s, Redacted)
	}
	return Truncate(s, c.maxBytes)
}

// Truncate cuts s to at most n bytes without splitting a UTF-8 sequence, and replaces invalid
// UTF-8 so the result always passes the schema's checks.
func Truncate(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
