package docgen

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/servescope/servescope/internal/config"
	collector "github.com/servescope/servescope/services/collector/collector"
	console "github.com/servescope/servescope/services/console/server"
	consumer "github.com/servescope/servescope/services/consumer/app"
	detector "github.com/servescope/servescope/services/detector/service"
	gateway "github.com/servescope/servescope/services/gateway/server"
)

// root is the repository's root (this package is two levels below it).
const root = "../.."

// TestPagesAreCurrent fails when a generated page differs from what the code generates now: a
// setting, a flag or a command changed and the pages were not regenerated.
func TestPagesAreCurrent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pages, err := Pages(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) != 2 {
		t.Fatalf("generated %d pages, want the configuration and the command-line reference", len(pages))
	}
	for name, want := range pages {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatalf("%v: run %s from the repository root", err, Command)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the code generates (first difference at line %d): run %s from the repository root",
				name, firstDiff(got, want), Command)
		}
	}
}

func firstDiff(a, b []byte) int {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return i + 1
		}
	}
	return min(len(la), len(lb)) + 1
}

// TestEverySettingsStructIsListed: every struct with `env` tags outside tests is a program's
// settings or a shared block of sources.go, so no variable is left out of the configuration page.
func TestEverySettingsStructIsListed(t *testing.T) {
	found, err := settingsStructs(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 10 {
		t.Fatalf("found only %d settings structs: the walk is broken", len(found))
	}
	listed := map[Struct]bool{}
	for _, b := range Shared {
		listed[Struct{Dir: b.Dir, Type: b.Type}] = true
	}
	for _, p := range Programs {
		for _, s := range p.Structs {
			listed[Struct{Dir: s.Dir, Type: s.Type}] = true
		}
	}
	r := newReader(root)
	for s := range listed {
		if _, _, err := r.lookup(s.Dir, s.Type); err != nil {
			t.Errorf("dev/docgen/sources.go lists %s.%s: %v", s.Dir, s.Type, err)
		}
	}
	for _, s := range found {
		if !listed[s] && !nestedInListed(t, r, s, listed) {
			t.Errorf("%s.%s has `env` tags but no program of dev/docgen/sources.go reads it: add it there and run %s", s.Dir, s.Type, Command)
		}
	}
}

// nestedInListed says s is held by a listed struct (its variables are read through it).
func nestedInListed(t *testing.T, r *reader, s Struct, listed map[Struct]bool) bool {
	t.Helper()
	for l := range listed {
		set, err := r.Read(l, "")
		if err != nil {
			t.Fatal(err)
		}
		inner, err := r.Read(s, "")
		if err != nil {
			t.Fatal(err)
		}
		outer := map[string]bool{}
		for _, v := range set.Vars() {
			outer[v.Name] = true
		}
		all := len(inner.Vars()) > 0
		for _, v := range inner.Vars() {
			all = all && outer[v.Name]
		}
		if all {
			return true
		}
	}
	return false
}

// TestReadAgreesWithCaarlos0Env: for every settings struct a test can import, the variables and
// defaults read from the source are the ones caarlos0/env parses (nested blocks included).
func TestReadAgreesWithCaarlos0Env(t *testing.T) {
	values := map[Struct]any{
		{Dir: "services/gateway/server", Type: "Config"}:      &gateway.Config{},
		{Dir: "services/collector/collector", Type: "Config"}: &collector.Config{},
		{Dir: "services/consumer/app", Type: "Config"}:        &consumer.Config{},
		{Dir: "services/detector/service", Type: "Config"}:    &detector.Config{},
		{Dir: "services/console/server", Type: "Config"}:      &console.Config{},
		{Dir: "internal/config", Type: "NATS"}:                &config.NATS{},
		{Dir: "internal/config", Type: "ClickHouse"}:          &config.ClickHouse{},
		{Dir: "internal/config", Type: "Consumer"}:            &config.Consumer{},
	}
	r := newReader(root)
	for s, v := range values {
		want := map[string]string{}
		params, err := env.GetFieldParams(v)
		if err != nil {
			t.Fatalf("%s.%s: %v", s.Dir, s.Type, err)
		}
		for _, p := range params {
			want[p.Key] = p.DefaultValue
		}
		got := map[string]string{}
		set, err := r.Read(s, "")
		if err != nil {
			t.Fatal(err)
		}
		vars := set.Vars()
		for _, blk := range set.Blocks {
			for _, b := range Shared {
				if b.Type == blk {
					bs, err := r.Read(b.Struct, "")
					if err != nil {
						t.Fatal(err)
					}
					vars = append(vars, bs.Vars()...)
				}
			}
		}
		for _, v := range vars {
			got[v.Name] = v.Default
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s.%s: read from the source %v\ncaarlos0/env parses %v", s.Dir, s.Type, got, want)
		}
	}
}

// TestProductionVariablesAreDescribed: every variable of a production program has a comment the
// configuration page shows.
func TestProductionVariablesAreDescribed(t *testing.T) {
	r := newReader(root)
	structs := slices.Clone(Shared)
	for _, p := range Programs {
		if p.Sim {
			continue
		}
		for _, s := range p.Structs {
			structs = append(structs, Block{Struct: s, Title: p.Name})
		}
	}
	for _, s := range structs {
		set, err := r.Read(s.Struct, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range set.Groups {
			if g.Doc == "" {
				t.Errorf("%s.%s: field %s (%s) has no doc comment: say what it does, then run %s", s.Dir, s.Type, g.Vars[0].Field, g.Vars[0].Name, Command)
			}
		}
	}
}

func TestDescribe(t *testing.T) {
	fields := map[string]string{"ListenAddr": "X_LISTEN_ADDR", "TLS": "X_TLS", "TLSCA": "X_TLS_CA", "TLSCert": "X_TLS_CERT",
		"Token": "X_TOKEN", "TokenFile": "X_TOKEN_FILE", "URL": "X_URL"}
	one := func(field, doc string) Group {
		return Group{Vars: []Variable{{Field: field, Name: fields[field]}}, Doc: doc}
	}
	for _, c := range []struct {
		g    Group
		want string
	}{
		{one("ListenAddr", "ListenAddr is where it listens."), "Where it listens."},
		{one("URL", "URL is one or more URLs, see Y_URL."), "One or more URLs, see `Y_URL`."},
		{one("Token", "Token, when set, is a token; TokenFile is read instead."), "`X_TOKEN`, when set, is a token; `X_TOKEN_FILE` is read instead."},
		{Group{Vars: []Variable{{Field: "TLS"}, {Field: "TLSCA"}, {Field: "TLSCert"}}, Doc: "TLS turns on TLS; TLSCA and TLSCert are files (TLSCert for mutual TLS)."},
			"`X_TLS` turns on TLS; `X_TLS_CA` and `X_TLS_CERT` are files (`X_TLS_CERT` for mutual TLS)."},
		{one("URL", "URL needs CONSOLE_AUTH=token and SERVESCOPE_NATS_*, not `A_B`."), "Needs `CONSOLE_AUTH=token` and `SERVESCOPE_NATS_*`, not `A_B`."},
		{one("Token", "Token is vLLM's token; servescope_x_total counts it."), "vLLM's token; `servescope_x_total` counts it."},
	} {
		if got := describe(c.g, fields); got != c.want {
			t.Errorf("describe(%q) = %q, want %q", c.g.Doc, got, c.want)
		}
	}
}

func TestCell(t *testing.T) {
	if got, want := cell("key scrape.<engine> and `a<b>|c` or d|e"), "key scrape.&lt;engine&gt; and `a<b>\\|c` or d\\|e"; got != want {
		t.Errorf("cell = %q, want %q", got, want)
	}
}

func TestHelpParsing(t *testing.T) {
	text := "Short\n\nUsage:\n  x [command]\n\nAvailable Commands:\n  completion  Generate\n  help        Help\n  migrate     Apply\n  up          Set up\n\nFlags:\n  -h, --help   help for x\n\nGlobal Flags:\n      --log.level string   least level\n\nExamples:\n  x up"
	if got := subcommands(text); !slices.Equal(got, []string{"migrate", "up"}) {
		t.Errorf("subcommands = %q", got)
	}
	if got := dropGlobalFlags(text); strings.Contains(got, "log.level") || !strings.HasSuffix(got, "Examples:\n  x up") {
		t.Errorf("dropGlobalFlags kept the global flags or lost what follows them:\n%s", got)
	}
}
