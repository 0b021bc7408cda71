// Package scriptcheck counts the letters of a text that fall outside the Unicode scripts an
// answer is allowed to use — the output check behind servescope's wrong-language signal
// ("answers mixed with Chinese": docs/measurements.md, Incidents no engine metric shows).
// Applications use it to fill
// schema.OutputCheck; the gateway runs it on every generated answer.
package scriptcheck

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
)

// DefaultScripts are the scripts allowed when none are configured: Latin, plus Common (digits,
// punctuation, symbols) and Inherited (combining marks), which every script's text contains.
var defaultScripts = []string{"Latin"}

// Checker counts letters outside a set of allowed scripts. It is safe for concurrent use.
type Checker struct {
	allowed []*unicode.RangeTable
	names   []string
}

// New returns a Checker allowing the named Unicode scripts (as in unicode.Scripts: "Latin",
// "Cyrillic", "Han", ...; case-insensitive) plus Common and Inherited. No names means Latin.
// An unknown name is an error that lists it.
func New(names ...string) (*Checker, error) {
	if len(names) == 0 {
		names = defaultScripts
	}
	byLower := make(map[string]string, len(unicode.Scripts))
	for n := range unicode.Scripts {
		byLower[strings.ToLower(n)] = n
	}
	c := &Checker{allowed: []*unicode.RangeTable{unicode.Common, unicode.Inherited}}
	seen := map[string]bool{"Common": true, "Inherited": true}
	for _, raw := range names {
		name := strings.TrimSpace(raw)
		if name == "" {
			continue
		}
		canon, ok := byLower[strings.ToLower(name)]
		if !ok {
			return nil, fmt.Errorf("unknown Unicode script %q (examples: Latin, Cyrillic, Greek, Han, Arabic)", name)
		}
		if !seen[canon] {
			seen[canon] = true
			c.allowed = append(c.allowed, unicode.Scripts[canon])
		}
	}
	for n := range seen {
		c.names = append(c.names, n)
	}
	sort.Strings(c.names)
	return c, nil
}

// Scripts returns the allowed script names, sorted.
func (c *Checker) Scripts() []string { return append([]string(nil), c.names...) }

// ForeignLetters returns how many letters of s belong to no allowed script. Non-letters (digits,
// punctuation, spaces, emoji) never count.
func (c *Checker) ForeignLetters(s string) int {
	n := 0
	for _, r := range s {
		if r < 0x80 {
			continue // ASCII letters are Latin, the rest is Common
		}
		if unicode.IsLetter(r) && !unicode.IsOneOf(c.allowed, r) {
			n++
		}
	}
	return n
}
