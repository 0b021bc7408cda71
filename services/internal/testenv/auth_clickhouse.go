package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// StartClickHouseUsers starts a private ClickHouse server like [StartClickHouse] whose users and
// roles come from a users.xml file: usersXML is a whole <clickhouse> document with <users>,
// <roles>, <profiles> and <quotas> sections (see security.UsersXML). It must keep a `default` user
// without password, which the readiness check and the test's admin connection use.
//
// The engine in libchdb.so only has the read-only users_xml access storage (CREATE USER and CREATE
// ROLE fail with ACCESS_STORAGE_FOR_INSERTION_NOT_FOUND), so file-defined users are the way to test
// privileges on it. It reads config.xml from its working directory; chlaunch has no flag for a
// config file, so the server runs from a directory holding config.xml (pointing at users.xml).
func StartClickHouseUsers(t testing.TB, usersXML string) *ClickHouseServer {
	t.Helper()
	root := procRepoRootOrFatal(t)
	bin := filepath.Join(root, ".cache", "bin", "chlaunch")
	lib := filepath.Join(root, ".cache", "chdb", "node_modules", "@chdb", "lib-linux-x64-gnu", "libchdb.so")
	procRequireFile(t, bin)
	procRequireFile(t, lib)
	dir := t.TempDir()
	confDir := filepath.Join(dir, "conf")
	if err := os.Mkdir(confDir, 0o700); err != nil {
		t.Fatalf("create ClickHouse config directory: %v", err)
	}
	const config = "<clickhouse>\n  <user_directories>\n    <users_xml><path>users.xml</path></users_xml>\n" +
		"  </user_directories>\n</clickhouse>\n"
	if err := os.WriteFile(filepath.Join(confDir, "config.xml"), []byte(config), 0o600); err != nil {
		t.Fatalf("write ClickHouse config.xml: %v", err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "users.xml"), []byte(usersXML), 0o600); err != nil {
		t.Fatalf("write ClickHouse users.xml: %v", err)
	}
	s := &ClickHouseServer{
		tcpPort:  procFreePort(t),
		httpPort: procFreePort(t),
		dataDir:  filepath.Join(dir, "data"),
	}
	s.proc = &serverProcess{
		t:    t,
		name: "clickhouse",
		// exec keeps the launcher's pid, so the process-group signals reach the engine itself.
		path: "/bin/sh",
		args: []string{
			"-c", `cd "$0" && exec "$@"`, confDir,
			bin,
			"--lib", lib,
			"--path", s.dataDir,
			"--tcp-port", strconv.Itoa(s.tcpPort),
			"--http-port", strconv.Itoa(s.httpPort),
			"--listen-host", "127.0.0.1",
		},
		logPath: filepath.Join(dir, "clickhouse.log"),
		ready: func(ctx context.Context) error {
			body, err := procHTTPGet(ctx, s.HTTPURL()+"/?query=SELECT%20count()%20FROM%20system.users")
			if err != nil {
				return err
			}
			if n, err := strconv.Atoi(strings.TrimSpace(body)); err != nil || n < 1 {
				return fmt.Errorf("SELECT count() FROM system.users answered %q", body)
			}
			return nil
		},
	}
	t.Cleanup(s.proc.cleanup)
	s.proc.start()
	return s
}
