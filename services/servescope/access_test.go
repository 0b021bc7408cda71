package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAccessUsersXML checks the CLI reads the passwords (one from a _FILE), never prints them, and
// prints their SHA-256 with every account (the console's only when its password is set); a missing password is refused.
func TestAccessUsersXML(t *testing.T) {
	file := filepath.Join(t.TempDir(), "consumer-pw")
	if err := os.WriteFile(file, []byte("c0nsumer-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SERVESCOPE_DETECTOR_CLICKHOUSE_PASSWORD", "det3ctor-secret")
	t.Setenv("SERVESCOPE_CONSUMER_CLICKHOUSE_PASSWORD_FILE", file)
	var out bytes.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"access", "users-xml"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, secret := range []string{"det3ctor-secret", "c0nsumer-secret"} {
		if strings.Contains(s, secret) {
			t.Errorf("users.xml holds the clear-text password %q", secret)
		}
		sum := sha256.Sum256([]byte(secret))
		if !strings.Contains(s, hex.EncodeToString(sum[:])) {
			t.Errorf("users.xml lacks the SHA-256 of %q", secret)
		}
	}
	if !strings.Contains(s, "<servescope_detector>") || !strings.Contains(s, "<servescope_consumer>") {
		t.Errorf("users.xml lacks an account:\n%s", s)
	}

	if strings.Contains(s, "servescope_console") {
		t.Errorf("users.xml holds the console's account though its password is unset:\n%s", s)
	}

	// With its password set, the console's read-only account comes too, without the content.
	t.Setenv("SERVESCOPE_CONSOLE_CLICKHOUSE_PASSWORD", "c0nsole-secret")
	out.Reset()
	cmd = newRootCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"access", "users-xml"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	s = out.String()
	sum := sha256.Sum256([]byte("c0nsole-secret"))
	if strings.Contains(s, "c0nsole-secret") || !strings.Contains(s, "<servescope_console>") || !strings.Contains(s, hex.EncodeToString(sum[:])) ||
		!strings.Contains(s, "REVOKE SELECT(prompt_text, output_text)") {
		t.Errorf("users.xml: the console's account is missing, shows its password or may read content:\n%s", s)
	}

	t.Setenv("SERVESCOPE_DETECTOR_CLICKHOUSE_PASSWORD", "")
	cmd = newRootCmd()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetArgs([]string{"access", "users-xml"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "no password") {
		t.Errorf("missing detector password: err = %v", err)
	}
}
