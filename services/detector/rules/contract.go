package rules

import (
	"fmt"
	"regexp"
	"strings"
)

// ContractColumn is one column of the rule contract (see the package documentation): the name a
// rule's query must give it, and what it holds.
type ContractColumn struct {
	Name string
	// Holds says the column's type and meaning, as errors quote it.
	Holds string
	// Required is false for columns a query may leave out (keep_firing without hysteresis, details).
	Required bool
}

// Contract lists the rule contract's columns in the order the package documentation gives them;
// keep_firing is required with `hysteresis: true` only.
var Contract = []ContractColumn{
	{"labels", "Map(String, String): what the alert is about", true},
	{"value", "Float64: the window's figure", true},
	{"baseline", "Nullable(Float64): the same figure over the baseline period, NULL when unknown", true},
	{"threshold", "Float64: the limit value was compared with", true},
	{"firing", "UInt8 or Bool: 1 when the row breaches the threshold", true},
	{"baseline_ok", "UInt8 or Bool: 0 when the baseline lacked data and an absolute floor was used", true},
	{"keep_firing", "UInt8 or Bool: with hysteresis, 1 while the row's resolve condition is not met", false},
	{"details", "Map(String, String): annotations of the alert that do not identify it (e.g. request_id)", false},
}

// ContractError says which item of the rule contract a query breaks.
type ContractError struct {
	// Item is the contract's column ("firing") or "columns" for the query's shape.
	Item string
	// Problem says what is wrong.
	Problem string
}

func (e *ContractError) Error() string {
	return "rule contract (" + e.Item + "): " + e.Problem
}

// checkContract checks, without ClickHouse, that the expanded query q names every column of the
// rule contract in its result (and keep_firing with hysteresis), so that a missing column is said
// in the contract's words rather than as an unknown identifier of the wrapping query. A result
// whose names cannot be read from the text (SELECT *, an expression without an alias) is left to
// the dry run. The error's line is the query's line of the SELECT at fault, counted from 1.
func checkContract(q string, hysteresis bool) (line int, err error) {
	sel, ok := outputColumns(q)
	if !ok || len(sel) == 0 {
		return 0, nil
	}
	first := sel[0]
	for i, s := range sel[1:] {
		if len(s.names) != len(first.names) {
			return s.line, &ContractError{Item: "columns", Problem: fmt.Sprintf(
				"SELECT %d of the UNION gives %d columns, the first gives %d: every SELECT gives the contract's columns in the same order",
				i+2, len(s.names), len(first.names))}
		}
	}
	if !first.known {
		return 0, nil
	}
	have := map[string]bool{}
	for _, n := range first.names {
		have[n] = true
	}
	for _, c := range Contract {
		need := c.Required || (c.Name == "keep_firing" && hysteresis)
		if need && !have[c.Name] {
			why := ""
			if c.Name == "keep_firing" {
				why = " (the rule sets hysteresis: true)"
			}
			return first.line, &ContractError{Item: c.Name, Problem: fmt.Sprintf(
				"the query's result has no column %s%s: want %s; the result has %s",
				c.Name, why, c.Holds, strings.Join(first.names, ", "))}
		}
	}
	return 0, nil
}

// hasOutputColumn reports whether the query's result (its first SELECT) names col.
func hasOutputColumn(q, col string) bool {
	sel, ok := outputColumns(q)
	if !ok || len(sel) == 0 {
		return false
	}
	for _, n := range sel[0].names {
		if n == col {
			return true
		}
	}
	return false
}

// selectList is one SELECT of a query's outermost level (several with UNION): the names of its
// result columns, known when each item has an alias or is a bare column.
type selectList struct {
	names []string
	known bool
	line  int
}

// token is one lexical element of SQL text at a nesting depth.
type token struct {
	text  string
	depth int
	line  int
	ident bool // a word: keyword or identifier
}

var identTokenRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// tokens splits SQL into words, quoted names, literals and punctuation, dropping comments,
// with each token's parenthesis depth and line. Strings become one token "'…'"; query
// parameters ({name:Type}) one token "{…}".
func tokens(q string) []token {
	var out []token
	depth, line := 0, 1
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == '-' && i+1 < len(q) && q[i+1] == '-', c == '#':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				end = len(q) - i - 2
			}
			line += strings.Count(q[i:i+2+end], "\n")
			i += end + 4
		case c == '\'' || c == '"' || c == '`':
			j := i + 1
			for j < len(q) && q[j] != c {
				if q[j] == '\\' {
					j++
				}
				j++
			}
			text := q[i:min(j+1, len(q))]
			tok := token{text: text, depth: depth, line: line}
			if c != '\'' {
				// A quoted name is an identifier.
				tok.text, tok.ident = strings.Trim(text, string(c)), true
			}
			out = append(out, tok)
			line += strings.Count(text, "\n")
			i = j + 1
		case c == '{':
			j := strings.IndexByte(q[i:], '}')
			if j < 0 {
				j = len(q) - i - 1
			}
			out = append(out, token{text: q[i : i+j+1], depth: depth, line: line})
			i += j + 1
		case c == '(' || c == '[':
			out = append(out, token{text: string(c), depth: depth, line: line})
			depth++
			i++
		case c == ')' || c == ']':
			depth--
			out = append(out, token{text: string(c), depth: depth, line: line})
			i++
		case isWordByte(c):
			j := i
			for j < len(q) && (isWordByte(q[j]) || q[j] == '.') {
				j++
			}
			out = append(out, token{text: q[i:j], depth: depth, line: line, ident: identTokenRE.MatchString(q[i:j]) || strings.Contains(q[i:j], ".")})
			i = j
		default:
			out = append(out, token{text: string(c), depth: depth, line: line})
			i++
		}
	}
	return out
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// selectEnd are the keywords that end a select list at its level. Words that also name
// functions (left, array) are not among them: a join or ARRAY JOIN comes after FROM.
var selectEnd = map[string]bool{
	"FROM": true, "WHERE": true, "GROUP": true, "HAVING": true, "ORDER": true, "LIMIT": true,
	"SETTINGS": true, "UNION": true, "EXCEPT": true, "INTERSECT": true, "FORMAT": true, "WINDOW": true,
	"QUALIFY": true, "INTO": true, "PREWHERE": true,
}

// outputColumns reads the select lists of q's outermost level: one per SELECT joined by UNION,
// EXCEPT or INTERSECT, after any WITH. ok is false when q has no SELECT at its outermost level.
func outputColumns(q string) (lists []selectList, ok bool) {
	toks := tokens(q)
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.depth != 0 || !strings.EqualFold(t.text, "SELECT") {
			continue
		}
		s := selectList{known: true, line: t.line}
		j := i + 1
		if j < len(toks) && strings.EqualFold(toks[j].text, "DISTINCT") {
			j++
		}
		var item []token
		flush := func() {
			name, ok := itemName(item)
			if !ok {
				s.known = false
			}
			s.names = append(s.names, name)
			item = nil
		}
		for ; j < len(toks); j++ {
			u := toks[j]
			if u.depth == 0 && u.ident && selectEnd[strings.ToUpper(u.text)] {
				break
			}
			if u.depth == 0 && u.text == "," {
				flush()
				continue
			}
			item = append(item, u)
		}
		if len(item) > 0 {
			flush()
		}
		lists = append(lists, s)
		i = j - 1
	}
	return lists, len(lists) > 0
}

// itemName is the result name of one select item: its alias (`expr AS name`), or the column it
// names when it is one (`value`, `t.value`, a quoted name); ok is false otherwise.
func itemName(item []token) (string, bool) {
	n := len(item)
	switch {
	case n >= 3 && strings.EqualFold(item[n-2].text, "AS") && item[n-1].ident && item[n-1].depth == item[n-2].depth:
		return item[n-1].text, true
	case n == 1 && item[0].ident:
		name := item[0].text
		if k := strings.LastIndexByte(name, '.'); k >= 0 {
			name = name[k+1:]
		}
		return name, true
	}
	return "", false
}

// placeholderRE matches a query parameter, {name:Type}.
var placeholderRE = regexp.MustCompile(`\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*([^{}]+?)\s*\}`)

// placeholder is one {name:Type} of a query, with the line it is on.
type placeholder struct {
	name, typ string
	line      int
}

func placeholders(q string) []placeholder {
	var out []placeholder
	for _, m := range placeholderRE.FindAllStringSubmatchIndex(q, -1) {
		out = append(out, placeholder{name: q[m[2]:m[3]], typ: q[m[4]:m[5]], line: 1 + strings.Count(q[:m[0]], "\n")})
	}
	return out
}

// paramFits reports whether a params value can be bound as ClickHouse type typ, and says what
// the type wants when it cannot. Values reach ClickHouse as text (paramText), so a number fits a
// String; the checks are those a value's YAML type decides.
func paramFits(v any, typ string) (bool, string) {
	t := strings.TrimSpace(typ)
	for _, wrap := range []string{"Nullable(", "LowCardinality("} {
		if strings.HasPrefix(t, wrap) && strings.HasSuffix(t, ")") {
			t = strings.TrimSpace(t[len(wrap) : len(t)-1])
		}
	}
	isInt := func() (int64, bool) {
		switch x := v.(type) {
		case int:
			return int64(x), true
		case int64:
			return x, true
		case float64:
			if x == float64(int64(x)) {
				return int64(x), true
			}
		}
		return 0, false
	}
	switch {
	case strings.HasPrefix(t, "UInt"):
		if n, ok := isInt(); ok && n >= 0 {
			return true, ""
		}
		return false, "a whole number of 0 or more"
	case strings.HasPrefix(t, "Int"):
		if _, ok := isInt(); ok {
			return true, ""
		}
		return false, "a whole number"
	case strings.HasPrefix(t, "Float"), strings.HasPrefix(t, "Decimal"):
		switch v.(type) {
		case int, int64, float64:
			return true, ""
		}
		return false, "a number"
	case t == "Bool":
		if _, ok := v.(bool); ok {
			return true, ""
		}
		return false, "true or false"
	case t == "String":
		switch v.(type) {
		case string, int, int64, float64:
			return true, ""
		}
		return false, "a string"
	}
	// Dates, arrays and other types: left to ClickHouse.
	return true, ""
}
