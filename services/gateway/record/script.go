package record

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ScriptCheck counts letters written in scripts other than the allowed ones: a model answering in
// the wrong language shows up as letters outside the deployment's scripts. Common and Inherited
// (digits, punctuation, combining marks) are always allowed.
type ScriptCheck struct {
	allowed []*unicode.RangeTable
	// asciiAllowed (Latin is allowed) lets ASCII letters pass without a table lookup.
	asciiAllowed bool
}

// NewScriptCheck builds a check allowing the named Unicode scripts (names as in
// unicode.Scripts, e.g. "Latin", "Cyrillic", "Han"; case-insensitive) plus Common and Inherited.
// No names means Latin.
func NewScriptCheck(names []string) (*ScriptCheck, error) {
	c := &ScriptCheck{allowed: []*unicode.RangeTable{unicode.Common, unicode.Inherited}}
	if len(names) == 0 {
		names = []string{"Latin"}
	}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		t := lookupScript(n)
		if t == nil {
			return nil, fmt.Errorf("unknown Unicode script %q (use names like Latin, Cyrillic, Greek, Han, Arabic)", n)
		}
		if t == unicode.Latin {
			c.asciiAllowed = true
		}
		c.allowed = append(c.allowed, t)
	}
	return c, nil
}

func lookupScript(name string) *unicode.RangeTable {
	if t, ok := unicode.Scripts[name]; ok {
		return t
	}
	for k, t := range unicode.Scripts {
		if strings.EqualFold(k, name) {
			return t
		}
	}
	return nil
}

// Foreign returns the number of letters (unicode.IsLetter) in s outside the allowed scripts.
func (c *ScriptCheck) Foreign(s string) uint32 {
	var n uint32
	for i := 0; i < len(s); {
		if c.asciiAllowed {
			// Eight ASCII bytes at a time: nothing in them counts.
			for i+8 <= len(s) && (uint64(s[i])|uint64(s[i+1])<<8|uint64(s[i+2])<<16|uint64(s[i+3])<<24|
				uint64(s[i+4])<<32|uint64(s[i+5])<<40|uint64(s[i+6])<<48|uint64(s[i+7])<<56)&0x8080808080808080 == 0 {
				i += 8
			}
			if i == len(s) {
				break
			}
		}
		b := s[i]
		if b < utf8.RuneSelf {
			if !c.asciiAllowed && (b|0x20 >= 'a' && b|0x20 <= 'z') {
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if !unicode.IsLetter(r) {
			continue
		}
		if !unicode.IsOneOf(c.allowed, r) {
			n++
		}
	}
	return n
}
