package servers

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/servescope/servescope/internal/access"
)

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// DemoConsoleUser is the demo console's read-only ClickHouse account on the dev server: the
// console account `servescope access` makes (access.ConsoleRole's grants: SELECT on the demo's
// database without captured text), under its conventional name.
const DemoConsoleUser = "servescope_console"

// ConsolePasswordFile is where scripts/dev-services keeps DemoConsoleUser's password: a random one
// made at the first start, in the ClickHouse directory of the cache (mode 0600).
func ConsolePasswordFile(cacheDir string) string {
	return filepath.Join(cacheDir, "clickhouse", "console-password")
}

// ConsolePassword reads DemoConsoleUser's password, making and saving one when there is none.
func ConsolePassword(cacheDir string) (string, error) {
	path := ConsolePasswordFile(cacheDir)
	b, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read the demo console's ClickHouse password: %w", err)
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(raw)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("save the demo console's ClickHouse password: %w", err)
	}
	return pw, nil
}

// DevUsersXML is the users file of the dev ClickHouse server (ClickHouse.UsersFile): the
// passwordless administrator `default` that every test and tool logs in as — what the engine has
// without a users file — and DemoConsoleUser with consolePassword, holding access.ConsoleRole's
// grants on database demoDB (the demo's, SERVESCOPE_DEMO_DATABASE), so that the demo's console
// reads as a deployment's does: through the read-only account. The dev engine takes users from
// this file only at start (it has no writable user storage and does not reload the file).
func DevUsersXML(demoDB, consolePassword string) (string, error) {
	if !identRE.MatchString(demoDB) {
		return "", fmt.Errorf("dev ClickHouse users: demo database %q is not a plain identifier", demoDB)
	}
	a := access.Access{Database: demoDB, Console: access.Account{User: DemoConsoleUser, Password: consolePassword}}
	grants := a.RoleGrants()[access.ConsoleRole]
	if len(grants) == 0 || consolePassword == "" {
		return "", fmt.Errorf("dev ClickHouse users: no console grants for database %q", demoDB)
	}
	var b strings.Builder
	b.WriteString("<!-- Written by servescope's dev/servers (scripts/dev-services); edits are overwritten. -->\n<clickhouse>\n")
	b.WriteString("  <profiles><default></default></profiles>\n  <quotas><default></default></quotas>\n")
	fmt.Fprintf(&b, "  <roles>\n    <%s>\n      <grants>\n", access.ConsoleRole)
	for _, g := range grants {
		fmt.Fprintf(&b, "        <query>%s</query>\n", xmlText(g))
	}
	fmt.Fprintf(&b, "      </grants>\n    </%s>\n  </roles>\n", access.ConsoleRole)
	b.WriteString("  <users>\n")
	b.WriteString("    <default>\n      <password></password>\n      <networks><ip>::/0</ip></networks>\n" +
		"      <profile>default</profile>\n      <quota>default</quota>\n    </default>\n")
	sum := sha256.Sum256([]byte(consolePassword))
	fmt.Fprintf(&b, "    <%s>\n      <password_sha256_hex>%s</password_sha256_hex>\n", DemoConsoleUser, hex.EncodeToString(sum[:]))
	b.WriteString("      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>\n      <profile>default</profile>\n      <quota>default</quota>\n")
	fmt.Fprintf(&b, "      <default_database>%s</default_database>\n", xmlText(demoDB))
	fmt.Fprintf(&b, "      <grants>\n        <query>GRANT %s</query>\n      </grants>\n    </%s>\n", access.ConsoleRole, DemoConsoleUser)
	b.WriteString("  </users>\n</clickhouse>\n")
	return b.String(), nil
}
