package docgen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// module is the repository's module path: an import path under it is a directory of the tree.
const module = "github.com/servescope/servescope"

// Variable is one environment variable a settings struct reads.
type Variable struct {
	// Name is the variable (prefixes applied), Field the Go field it fills.
	Name, Field string
	// Type is the value's kind as a reader types it: string, bool, integer, number, duration, list.
	Type string
	// Default is the envDefault tag ("" without one); Separator the list separator.
	Default, Separator string
	// HasDefault says an envDefault tag is present (it may be empty).
	HasDefault bool
	// File says the variable holds a path whose content is the value (caarlos0/env's ",file").
	File bool
	// Required says the program refuses to start without it (",required" or ",notEmpty").
	Required bool
}

// Group is the variables one doc comment describes: a commented field and the uncommented fields
// that follow it without a blank line.
type Group struct {
	Vars []Variable
	// Doc is the comment's text, paragraphs joined by spaces.
	Doc string
}

// Settings is what one settings struct reads: its own variables, in source order, and the shared
// blocks it embeds or holds.
type Settings struct {
	Groups []Group
	// Blocks are the shared blocks read, by Block.Type, in source order.
	Blocks []string
	// Fields maps every Go field name of the struct (and of nested non-shared structs) to its
	// variable, for rewriting comments that name fields.
	Fields map[string]string
}

// Vars returns every variable of s, in source order.
func (s Settings) Vars() []Variable {
	var out []Variable
	for _, g := range s.Groups {
		out = append(out, g.Vars...)
	}
	return out
}

// reader parses packages of the repository once each.
type reader struct {
	root  string
	fset  *token.FileSet
	pkgs  map[string][]*ast.File // directory → non-test files
	share map[Struct]bool        // the shared blocks, not inlined
}

func newReader(root string) *reader {
	r := &reader{root: root, fset: token.NewFileSet(), pkgs: map[string][]*ast.File{}, share: map[Struct]bool{}}
	for _, b := range Shared {
		r.share[Struct{Dir: b.Dir, Type: b.Type}] = true
	}
	return r
}

func (r *reader) files(dir string) ([]*ast.File, error) {
	if fs, ok := r.pkgs[dir]; ok {
		return fs, nil
	}
	names, err := filepath.Glob(filepath.Join(r.root, filepath.FromSlash(dir), "*.go"))
	if err != nil {
		return nil, err
	}
	var fs []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(r.fset, n, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", n, err)
		}
		fs = append(fs, f)
	}
	if len(fs) == 0 {
		return nil, fmt.Errorf("%s holds no Go source", dir)
	}
	r.pkgs[dir] = fs
	return fs, nil
}

// lookup returns the struct type named typ in dir and the file declaring it.
func (r *reader) lookup(dir, typ string) (*ast.StructType, *ast.File, error) {
	fs, err := r.files(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range fs {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, s := range gd.Specs {
				ts := s.(*ast.TypeSpec)
				if ts.Name.Name != typ {
					continue
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					return nil, nil, fmt.Errorf("%s.%s is not a struct", dir, typ)
				}
				return st, f, nil
			}
		}
	}
	return nil, nil, fmt.Errorf("no type %s in %s", typ, dir)
}

// Read returns the settings of the struct s, with prefix prepended to each variable.
func (r *reader) Read(s Struct, prefix string) (Settings, error) {
	out := Settings{Fields: map[string]string{}}
	err := r.read(s, prefix, &out)
	return out, err
}

func (r *reader) read(s Struct, prefix string, out *Settings) error {
	st, file, err := r.lookup(s.Dir, s.Type)
	if err != nil {
		return err
	}
	lastLine := -1 // end line of the previous field holding variables, -1 when it held none
	for _, f := range st.Fields.List {
		tag := reflect.StructTag("")
		if f.Tag != nil {
			raw, err := strconv.Unquote(f.Tag.Value)
			if err != nil {
				return fmt.Errorf("%s.%s: tag %s: %w", s.Dir, s.Type, f.Tag.Value, err)
			}
			tag = reflect.StructTag(raw)
		}
		names := fieldNames(f)
		if !slices.ContainsFunc(names, ast.IsExported) {
			lastLine = -1
			continue // caarlos0/env skips unexported fields
		}
		key, opts, _ := strings.Cut(tag.Get("env"), ",")
		if key == "" {
			lastLine = -1
			nested, ok := r.nested(s.Dir, file, f.Type)
			if !ok {
				continue // a field without an env tag that is not a struct: caarlos0/env ignores it
			}
			if r.share[nested] {
				if !slices.Contains(out.Blocks, nested.Type) {
					out.Blocks = append(out.Blocks, nested.Type)
				}
				continue
			}
			if err := r.read(nested, prefix+tag.Get("envPrefix"), out); err != nil {
				return err
			}
			continue
		}
		v := Variable{Name: prefix + key, Field: names[0], Type: typeName(f.Type)}
		v.Default, v.HasDefault = tag.Lookup("envDefault")
		if v.Type == "list" {
			v.Separator = ","
			if sep, ok := tag.Lookup("envSeparator"); ok {
				v.Separator = sep
			}
		}
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "file":
				v.File = true
			case "required", "notEmpty":
				v.Required = true
			}
		}
		for _, n := range names {
			out.Fields[n] = v.Name
		}
		start, end := r.fset.Position(f.Pos()).Line, r.fset.Position(f.End()).Line
		doc := commentText(f.Doc)
		if doc == "" {
			doc = commentText(f.Comment)
		}
		if doc == "" && lastLine >= 0 && start == lastLine+1 && len(out.Groups) > 0 && out.Groups[len(out.Groups)-1].Doc != "" {
			g := &out.Groups[len(out.Groups)-1]
			g.Vars = append(g.Vars, v)
		} else {
			out.Groups = append(out.Groups, Group{Vars: []Variable{v}, Doc: doc})
		}
		lastLine = end
	}
	return nil
}

func fieldNames(f *ast.Field) []string {
	if len(f.Names) == 0 { // embedded: the type's name
		t := f.Type
		if p, ok := t.(*ast.StarExpr); ok {
			t = p.X
		}
		switch t := t.(type) {
		case *ast.Ident:
			return []string{t.Name}
		case *ast.SelectorExpr:
			return []string{t.Sel.Name}
		}
		return nil
	}
	var out []string
	for _, n := range f.Names {
		out = append(out, n.Name)
	}
	return out
}

// nested resolves the type of a field without an env tag to a struct of the repository.
func (r *reader) nested(dir string, file *ast.File, t ast.Expr) (Struct, bool) {
	if p, ok := t.(*ast.StarExpr); ok {
		t = p.X
	}
	var s Struct
	switch t := t.(type) {
	case *ast.Ident:
		s = Struct{Dir: dir, Type: t.Name}
	case *ast.SelectorExpr:
		pkg, ok := t.X.(*ast.Ident)
		if !ok {
			return Struct{}, false
		}
		path := importPath(file, pkg.Name)
		rel, ok := strings.CutPrefix(path, module+"/")
		if !ok {
			return Struct{}, false // outside the repository (time.Duration, ...)
		}
		s = Struct{Dir: rel, Type: t.Sel.Name}
	default:
		return Struct{}, false
	}
	if _, _, err := r.lookup(s.Dir, s.Type); err != nil {
		return Struct{}, false
	}
	return s, true
}

// importPath returns the import path file refers to as name.
func importPath(file *ast.File, name string) string {
	for _, im := range file.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if im.Name != nil {
			if im.Name.Name == name {
				return p
			}
			continue
		}
		if p == name || strings.HasSuffix(p, "/"+name) {
			return p
		}
	}
	return ""
}

// typeName names the kind of value a field of type t takes.
func typeName(t ast.Expr) string {
	switch t := t.(type) {
	case *ast.Ident:
		switch t.Name {
		case "string":
			return "string"
		case "bool":
			return "bool"
		case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
			return "integer"
		case "float32", "float64":
			return "number"
		}
		return t.Name
	case *ast.SelectorExpr:
		if x, ok := t.X.(*ast.Ident); ok && x.Name == "time" && t.Sel.Name == "Duration" {
			return "duration"
		}
		return t.Sel.Name
	case *ast.ArrayType:
		return "list"
	case *ast.StarExpr:
		return typeName(t.X)
	}
	return "value"
}

// commentText is a comment group's text on one line.
func commentText(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return strings.Join(strings.Fields(g.Text()), " ")
}

// word matches identifiers, for rewriting field names in comments; variable a variable's name
// (or a family of them, SERVESCOPE_NATS_*), possibly with a value (CONSOLE_AUTH=token).
var (
	word     = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*\b`)
	metric   = regexp.MustCompile("(^|[^`A-Za-z0-9_])(servescope_[a-z0-9_]+)")
	variable = regexp.MustCompile("(^|[^`A-Za-z0-9_])([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+(?:_\\*)?(?:=[a-z0-9_]+)?)")
)

// describe rewrites the comment of a group for a reader of the environment. Go field names become
// the variables they fill: a compound name (ListenAddr, TokenFile) anywhere, a plain word (URL,
// TLS, Password) where it opens the comment or names a field of the group, once. A comment on one
// variable loses its opening field name ("ListenAddr is where ..." is "Where ..."). Variables
// named in the text are set as code.
func describe(g Group, fields map[string]string) string {
	doc := g.Doc
	if len(g.Vars) == 1 {
		if rest, ok := strings.CutPrefix(doc, g.Vars[0].Field+" "); ok && rest != "" && rest[0] >= 'a' && rest[0] <= 'z' {
			for _, verb := range []string{"is ", "are "} {
				rest = strings.TrimPrefix(rest, verb)
			}
			if first, _, _ := strings.Cut(rest, " "); first == strings.ToLower(first) {
				doc = strings.ToUpper(rest[:1]) + rest[1:] // not "vLLM", which stays as it is
			} else {
				doc = rest
			}
		}
	}
	doc = variable.ReplaceAllString(doc, "$1`$2`")
	doc = metric.ReplaceAllString(doc, "$1`$2`")
	own := map[string]bool{}
	for _, v := range g.Vars {
		own[v.Field] = true
	}
	used := map[string]bool{}
	var b strings.Builder
	last := 0
	for _, m := range word.FindAllStringIndex(doc, -1) {
		w := doc[m[0]:m[1]]
		v, ok := fields[w]
		if !ok || m[0] > 0 && doc[m[0]-1] == '`' {
			continue
		}
		if !compound(w) {
			if used[w] || m[0] > 0 && !own[w] {
				continue
			}
			used[w] = true
		}
		b.WriteString(doc[last:m[0]])
		b.WriteString("`" + v + "`")
		last = m[1]
	}
	b.WriteString(doc[last:])
	return b.String()
}

// compound says w joins several words: it has a lower-case letter and two upper-case ones
// (TokenFile, TLSCert), unlike a plain word (Token) or an acronym (URL, TLSCA).
func compound(w string) bool {
	upper, lower := 0, false
	for _, r := range w {
		switch {
		case r >= 'A' && r <= 'Z':
			upper++
		case r >= 'a' && r <= 'z':
			lower = true
		}
	}
	return lower && upper >= 2
}

// settingsStructs returns every struct of the repository's non-test Go files that has a field
// with an `env` tag, as Dir and Type.
func settingsStructs(root string) ([]Struct, error) {
	var out []Struct
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, fl := range st.Fields.List {
				if fl.Tag != nil && strings.Contains(fl.Tag.Value, `env:"`) {
					out = append(out, Struct{Dir: filepath.ToSlash(dir), Type: ts.Name.Name})
					break
				}
			}
			return true
		})
		return nil
	})
	return out, err
}
