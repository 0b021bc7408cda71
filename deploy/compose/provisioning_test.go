package compose

import (
	"context"
	"encoding/xml"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"go.yaml.in/yaml/v3"

	"github.com/servescope/servescope/dev/grafanagen"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/access"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
)

const consoleUsersFile = "deploy/clickhouse/users.d/servescope-console.xml"

// consoleUsers is the part of the console's users.d file the tests read.
type consoleUsers struct {
	Roles struct {
		Role struct {
			XMLName xml.Name
			Grants  []string `xml:"grants>query"`
		} `xml:",any"`
	} `xml:"roles"`
	Users struct {
		User struct {
			XMLName  xml.Name
			Password struct {
				FromEnv string `xml:"from_env,attr"`
			} `xml:"password"`
			DefaultDatabase string   `xml:"default_database"`
			Grants          []string `xml:"grants>query"`
		} `xml:",any"`
	} `xml:"users"`
}

func readConsoleUsers(t *testing.T, root string) (consoleUsers, []byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, consoleUsersFile))
	if err != nil {
		t.Fatal(err)
	}
	var u consoleUsers
	if err := xml.Unmarshal(raw, &u); err != nil {
		t.Fatalf("%s: %v", consoleUsersFile, err)
	}
	return u, raw
}

// TestConsoleAccountProvisioned checks the read-only account the console and Grafana use in the
// compose file: the ClickHouse service mounts its users.d file and gets its password from .env;
// the file grants exactly what `servescope access` grants the console's role on the database the
// services use; the console logs in with it, on loopback, behind its token.
func TestConsoleAccountProvisioned(t *testing.T) {
	c, root := load(t)
	u, _ := readConsoleUsers(t, root)
	db := c.Services["migrate"].Environment["SERVESCOPE_CLICKHOUSE_DATABASE"]
	if db == "" {
		t.Fatal("migrate has no SERVESCOPE_CLICKHOUSE_DATABASE")
	}
	a := access.Access{Database: db, Console: access.Account{User: u.Users.User.XMLName.Local, Password: "x"}}
	if got, want := u.Roles.Role.Grants, a.RoleGrants()[access.ConsoleRole]; u.Roles.Role.XMLName.Local != access.ConsoleRole || !slices.Equal(got, want) {
		t.Errorf("%s: role %s grants %q; servescope access grants %s %q", consoleUsersFile, u.Roles.Role.XMLName.Local, got, access.ConsoleRole, want)
	}
	if got := u.Users.User.Grants; !slices.Equal(got, []string{"GRANT " + access.ConsoleRole}) || u.Users.User.DefaultDatabase != db {
		t.Errorf("%s: user grants %q, default database %q", consoleUsersFile, got, u.Users.User.DefaultDatabase)
	}
	pwEnv := u.Users.User.Password.FromEnv
	ch := c.Services["clickhouse"]
	if !strings.HasPrefix(ch.Environment[pwEnv], "${"+pwEnv+":?") {
		t.Errorf("clickhouse does not take %s from .env: %q", pwEnv, ch.Environment[pwEnv])
	}
	if !slices.ContainsFunc(ch.Volumes, func(v string) bool {
		return strings.HasPrefix(v, "./"+consoleUsersFile+":/etc/clickhouse-server/users.d/") && strings.HasSuffix(v, ":ro")
	}) {
		t.Errorf("clickhouse does not mount %s into users.d read-only: %q", consoleUsersFile, ch.Volumes)
	}

	console, ok := c.Services["console"]
	if !ok {
		t.Fatal("no console service")
	}
	env := console.Environment
	if env["SERVESCOPE_CLICKHOUSE_USER"] != u.Users.User.XMLName.Local || env["SERVESCOPE_CLICKHOUSE_DATABASE"] != db ||
		!strings.HasPrefix(env["SERVESCOPE_CLICKHOUSE_PASSWORD"], "${"+pwEnv+":?") {
		t.Errorf("console does not log in as %s on %s with %s: %v", u.Users.User.XMLName.Local, db, pwEnv, env)
	}
	if env["CONSOLE_AUTH"] != "token" || env["CONSOLE_TOKEN"] == "" {
		t.Errorf("console does not ask for a token: %v", env)
	}
	for _, p := range console.Ports {
		if !strings.HasPrefix(p, "127.0.0.1:") {
			t.Errorf("console port %q is published beyond loopback", p)
		}
	}
}

// TestConsoleAccountOnClickHouse runs a ClickHouse server with the console's users.d file as the
// compose file mounts it (password from the environment): the account reads servescope's tables
// and views, and is refused captured text and every write.
func TestConsoleAccountOnClickHouse(t *testing.T) {
	root := repoRoot(t)
	_, raw := readConsoleUsers(t, root)
	body := string(raw)
	body = body[strings.Index(body, "<clickhouse>")+len("<clickhouse>") : strings.LastIndex(body, "</clickhouse>")]
	body = strings.Replace(body, "<users>", "<users>\n    <default><password></password><networks><ip>::/0</ip></networks><profile>default</profile><quota>default</quota><access_management>1</access_management></default>", 1)
	const password = "console-pw-7d1e"
	t.Setenv("CONSOLE_CLICKHOUSE_PASSWORD", password)
	srv := testenv.StartClickHouseUsers(t, "<clickhouse>\n  <profiles><default></default></profiles>\n  <quotas><default></default></quotas>\n"+body+"</clickhouse>\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := config.ClickHouse{Addr: []string{srv.Addr()}, Database: "servescope", User: "default", DialTimeout: 5 * time.Second}
	if err := chstore.Migrate(ctx, admin); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	ro := admin
	ro.User, ro.Password = "servescope_console", password
	conn, err := chstore.Open(ctx, ro)
	if err != nil {
		t.Fatalf("log in as the console: %v", err)
	}
	defer conn.Close()
	for _, q := range []string{"SELECT count() FROM requests", "SELECT count() FROM request_facts", "SELECT count() FROM alerts", "SELECT count() FROM engine_logs"} {
		var n uint64
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Errorf("%s as the console: %v", q, err)
		}
	}
	for _, q := range []string{"SELECT prompt_text FROM requests", "SELECT output_text FROM requests"} {
		if err := conn.Exec(ctx, q); !accessDenied(err) {
			t.Errorf("%s as the console: %v, want ClickHouse's ACCESS_DENIED (497)", q, err)
		}
	}
	for _, q := range []string{"INSERT INTO alerts (rule) VALUES ('forged')", "DROP TABLE requests", "ALTER TABLE requests DELETE WHERE 1", "CREATE TABLE evil (x UInt8) ENGINE = Memory"} {
		if err := conn.Exec(ctx, q); !accessDenied(err) {
			t.Errorf("%s as the console: %v, want ClickHouse's ACCESS_DENIED (497)", q, err)
		}
	}
}

// TestGrafanaProvisioned checks the Grafana service and its provisioning files: the ClickHouse
// data source the dashboard names (uid and plugin), on the console's read-only account and the
// services' database, its password from .env; the dashboard provider reading the directory where
// the generated dashboard is mounted; loopback only; no anonymous access.
func TestGrafanaProvisioned(t *testing.T) {
	c, root := load(t)
	u, _ := readConsoleUsers(t, root)
	g, ok := c.Services["grafana"]
	if !ok {
		t.Fatal("no grafana service")
	}
	if !slices.Equal(g.Profiles, []string{"grafana"}) {
		t.Errorf("grafana profiles %v, want [grafana]", g.Profiles)
	}
	if !strings.Contains(g.Environment["GF_INSTALL_PLUGINS"], grafanagen.PluginType+" ") || g.Environment["GF_AUTH_ANONYMOUS_ENABLED"] != "false" {
		t.Errorf("grafana environment: %v", g.Environment)
	}
	mounts := map[string]string{}
	for _, v := range g.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 {
			mounts[parts[1]] = parts[0]
		}
	}
	if mounts["/etc/grafana/provisioning"] != "./deploy/grafana/provisioning" {
		t.Errorf("grafana does not mount deploy/grafana/provisioning: %v", g.Volumes)
	}
	for _, p := range g.Ports {
		if !strings.HasPrefix(p, "127.0.0.1:") {
			t.Errorf("grafana port %q is published beyond loopback", p)
		}
	}

	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			UID            string            `yaml:"uid"`
			Type           string            `yaml:"type"`
			JSONData       map[string]any    `yaml:"jsonData"`
			SecureJSONData map[string]string `yaml:"secureJsonData"`
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(root, "deploy/grafana/provisioning/datasources/servescope.yaml"), &ds)
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 {
		t.Fatalf("data sources file: %+v", ds)
	}
	d := ds.Datasources[0]
	db := c.Services["migrate"].Environment["SERVESCOPE_CLICKHOUSE_DATABASE"]
	pwEnv := u.Users.User.Password.FromEnv
	if d.UID != grafanagen.DatasourceUID || d.Type != grafanagen.PluginType {
		t.Errorf("data source uid %q type %q; the dashboard names %q %q", d.UID, d.Type, grafanagen.DatasourceUID, grafanagen.PluginType)
	}
	if d.JSONData["host"] != "clickhouse" || d.JSONData["port"] != 9000 || d.JSONData["protocol"] != "native" ||
		d.JSONData["username"] != u.Users.User.XMLName.Local || d.JSONData["defaultDatabase"] != db {
		t.Errorf("data source connection %v: want clickhouse:9000 native as %s on %s", d.JSONData, u.Users.User.XMLName.Local, db)
	}
	if d.SecureJSONData["password"] != "$"+pwEnv || !strings.HasPrefix(g.Environment[pwEnv], "${"+pwEnv+":?") {
		t.Errorf("data source password %q, grafana's %s %q: want it from .env", d.SecureJSONData["password"], pwEnv, g.Environment[pwEnv])
	}

	var prov struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(root, "deploy/grafana/provisioning/dashboards/servescope.yaml"), &prov)
	if len(prov.Providers) != 1 || prov.Providers[0].Type != "file" {
		t.Fatalf("dashboard providers: %+v", prov)
	}
	dir := prov.Providers[0].Options.Path
	if want := "./" + filepath.Dir(grafanagen.Path); mounts[dir] != want {
		t.Errorf("the provider reads %s, where grafana mounts %q, want %s", dir, mounts[dir], want)
	}
	if home := g.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != dir+"/"+filepath.Base(grafanagen.Path) {
		t.Errorf("home dashboard %q is not the generated dashboard", home)
	}
}

func accessDenied(err error) bool {
	var ex *clickhouse.Exception
	return errors.As(err, &ex) && ex.Code == 497
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
