// Package access defines servescope's least-privilege ClickHouse accounts — the detector's
// (read-only, plus its alert tables), the consumer's (insert-only) and the console's (read-only,
// without captured text) — as roles and users, in the two forms ClickHouse takes them: SQL for
// servers with SQL-driven access control, and a users.d XML file. `servescope access` prints and
// applies them; dev/security tests them against a real server.
package access

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Role names. Roles are server-wide in ClickHouse; the grants they hold name one database. The
// accounts' conventional names are servescope_detector and servescope_consumer.
const (
	// DetectorRole may read every table and view of the database and insert alert state,
	// delivery records and diagnose's baseline hours.
	DetectorRole = "servescope_detector_role"
	// ConsumerRole may only insert into the landing tables and ingest_errors (and, on a sharded
	// schema, flush their Distributed tables' queues: SYSTEM FLUSH DISTRIBUTED).
	ConsumerRole = "servescope_consumer_role"
	// ConsoleRole may read every table and view of the database except the captured prompt and
	// output text ([ContentColumns]), and write nothing.
	ConsoleRole = "servescope_console_role"
)

// ContentColumns are the columns holding captured prompt and output text (migrations/000001):
// the console's account may not read them unless [Access.ConsoleContent] is set.
var ContentColumns = map[string][]string{"requests": {"prompt_text", "output_text"}}

// DetectorInsertTables are the tables the detector writes: alert state (migrations/000001),
// webhook delivery attempts (migrations/000004), diagnose's baseline hours, which it keeps
// computed (migrations/000017), and the SLOs and engines file it loaded (migrations/000040 and
// 000041). Every other table is read-only to it.
var DetectorInsertTables = []string{"alerts", "alert_deliveries", "diagnose_hourly", "slo_objectives", "engine_config"}

// ConsumerInsertTables are the tables the consumer writes: one landing table per event kind and
// ingest_errors (migrations/000001). The consumer reads nothing but system.columns (its start-up
// schema check), which ClickHouse shows to every user for the tables it holds a privilege on.
var ConsumerInsertTables = []string{
	"requests_started", "requests", "app_records", "engine_samples", "engine_spans", "engine_logs",
	"ingest_errors",
}

// Account is one ClickHouse login.
type Account struct {
	// User is the login name: letters, digits and '_', starting with a letter or '_'.
	User string
	// Password is the clear-text password; only its SHA-256 leaves this package.
	Password string
}

// Access describes the least-privilege accounts for one servescope database: the detector's, the
// consumer's and, optionally, the console's.
type Access struct {
	// Database holds servescope's tables (SERVESCOPE_CLICKHOUSE_DATABASE).
	Database string
	// LocalDatabase, set on a sharded schema (SERVESCOPE_CLICKHOUSE_CLUSTER), is each node's
	// database of local tables under Database's Distributed ones (internal/chstore.LocalDatabase).
	// Every role gets the same privileges on it: a query through a Distributed table runs on the
	// shards as the user who asked when the cluster has a secret, and is refused there otherwise.
	LocalDatabase string
	// Detector gets [DetectorRole], Consumer gets [ConsumerRole].
	Detector Account
	Consumer Account
	// Console, when its User is set, gets [ConsoleRole]: the web console's read-only account.
	Console Account
	// ConsoleContent lets the console's account read [ContentColumns] too (content capture is on
	// and the console shows it to viewers holding its content token).
	ConsoleContent bool
	// Networks are the client addresses or CIDRs the accounts may log in from (users.xml <ip>);
	// empty means any address (::/0). Only [Access.UsersXML] uses it.
	Networks []string
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// Validate checks that every name is a plain identifier (so it is safe as an XML element name and
// as a SQL identifier) and that every password is set and the users differ.
func (a Access) Validate() error {
	var errs []error
	if !identRE.MatchString(a.Database) {
		errs = append(errs, fmt.Errorf("database %q is not a plain identifier", a.Database))
	}
	if a.LocalDatabase != "" && (!identRE.MatchString(a.LocalDatabase) || a.LocalDatabase == a.Database) {
		errs = append(errs, fmt.Errorf("local database %q is not a plain identifier apart from the database", a.LocalDatabase))
	}
	for _, acc := range []struct {
		role string
		a    Account
	}{{"detector", a.Detector}, {"consumer", a.Consumer}, {"console", a.Console}} {
		if acc.role == "console" && acc.a.User == "" {
			continue
		}
		if !identRE.MatchString(acc.a.User) {
			errs = append(errs, fmt.Errorf("%s user %q is not a plain identifier", acc.role, acc.a.User))
		}
		if acc.a.User == "default" {
			errs = append(errs, fmt.Errorf("%s user must not be the default user", acc.role))
		}
		if acc.a.User == DetectorRole || acc.a.User == ConsumerRole || acc.a.User == ConsoleRole {
			errs = append(errs, fmt.Errorf("%s user must not be named like a role (%s)", acc.role, acc.a.User))
		}
		if acc.a.Password == "" {
			errs = append(errs, fmt.Errorf("%s user %s has no password", acc.role, acc.a.User))
		}
	}
	if a.Detector.User == a.Consumer.User {
		errs = append(errs, fmt.Errorf("detector and consumer must be different users, both are %q", a.Detector.User))
	}
	if a.Console.User != "" && (a.Console.User == a.Detector.User || a.Console.User == a.Consumer.User) {
		errs = append(errs, fmt.Errorf("the console's user %q must differ from the detector's and the consumer's", a.Console.User))
	}
	for _, n := range a.Networks {
		if n == "" || strings.ContainsAny(n, "<>&'\"") {
			errs = append(errs, fmt.Errorf("network %q is not an address or CIDR", n))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("ClickHouse access: %w", errors.Join(errs...))
	}
	return nil
}

// RoleGrants returns each role's privileges as GRANT (and REVOKE) statements without the TO or
// FROM clause, in order: on Database, then the same on LocalDatabase when it is set.
func (a Access) RoleGrants() map[string][]string {
	out := a.roleGrants(a.Database)
	if a.LocalDatabase != "" {
		for role, gs := range a.roleGrants(a.LocalDatabase) {
			out[role] = append(out[role], gs...)
		}
	}
	return out
}

func (a Access) roleGrants(database string) map[string][]string {
	db := "`" + database + "`"
	detector := []string{"GRANT SELECT ON " + db + ".*"}
	for _, t := range DetectorInsertTables {
		detector = append(detector, "GRANT INSERT ON "+db+".`"+t+"`")
	}
	var consumer []string
	for _, t := range ConsumerInsertTables {
		consumer = append(consumer, "GRANT INSERT ON "+db+".`"+t+"`")
	}
	if a.LocalDatabase != "" && database == a.Database {
		// On a cluster the consumer sends the rows it queued for a shard that did not answer
		// once it answers again (services/consumer/sink's Sharded).
		for _, t := range ConsumerInsertTables {
			consumer = append(consumer, "GRANT SYSTEM FLUSH DISTRIBUTED ON "+db+".`"+t+"`")
		}
	}
	out := map[string][]string{DetectorRole: detector, ConsumerRole: consumer}
	if a.Console.User != "" {
		console := []string{"GRANT SELECT ON " + db + ".*"}
		if !a.ConsoleContent {
			for _, t := range sortedKeys(ContentColumns) {
				console = append(console, "REVOKE SELECT("+strings.Join(ContentColumns[t], ", ")+") ON "+db+".`"+t+"`")
			}
		}
		out[ConsoleRole] = console
	}
	return out
}

// roles are the roles a defines, in order.
func (a Access) roles() []string {
	if a.Console.User != "" {
		return []string{DetectorRole, ConsumerRole, ConsoleRole}
	}
	return []string{DetectorRole, ConsumerRole}
}

// accounts are a's accounts with their roles, in order.
func (a Access) accounts() []struct {
	acc  Account
	role string
} {
	out := []struct {
		acc  Account
		role string
	}{{a.Detector, DetectorRole}, {a.Consumer, ConsumerRole}}
	if a.Console.User != "" {
		out = append(out, struct {
			acc  Account
			role string
		}{a.Console, ConsoleRole})
	}
	return out
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// SQL returns the statements that create or update the roles and accounts on a ClickHouse server
// with SQL-driven access control (a writable user directory, e.g. local_directory, and a user with
// access_management). Running them again rotates the passwords and re-applies the grants. The
// passwords appear only as SHA-256 hex, never in clear. ClickHouse's `clickhouse-local` engine
// (libchdb, the dev launcher) cannot run them: use [Access.UsersXML] there.
func (a Access) SQL() ([]string, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	grants := a.RoleGrants()
	var out []string
	for _, role := range a.roles() {
		out = append(out, "CREATE ROLE IF NOT EXISTS "+role)
		if role == ConsoleRole {
			// Start from nothing, so that turning ConsoleContent off takes the content back.
			out = append(out, "REVOKE ALL ON *.* FROM "+role)
		}
		for _, g := range grants[role] {
			if strings.HasPrefix(g, "REVOKE ") {
				out = append(out, g+" FROM "+role)
			} else {
				out = append(out, g+" TO "+role)
			}
		}
	}
	for _, u := range a.accounts() {
		ident := "IDENTIFIED WITH sha256_hash BY '" + passwordSHA256(u.acc.Password) + "'"
		out = append(out,
			"CREATE USER IF NOT EXISTS "+u.acc.User+" "+ident+" DEFAULT DATABASE `"+a.Database+"`",
			"ALTER USER "+u.acc.User+" "+ident,
			"GRANT "+u.role+" TO "+u.acc.User,
			"ALTER USER "+u.acc.User+" DEFAULT ROLE "+u.role,
		)
	}
	return out, nil
}

// UsersXML returns a ClickHouse users configuration file defining the roles and accounts, for
// servers whose users come from files: drop it into /etc/clickhouse-server/users.d/ (mode 0600,
// owned by the server's user). Passwords are stored as password_sha256_hex.
func (a Access) UsersXML() ([]byte, error) {
	body, err := a.usersXMLBody("")
	if err != nil {
		return nil, err
	}
	return []byte("<clickhouse>\n" + body + "</clickhouse>\n"), nil
}

// usersXMLBody is the <roles> and <users> sections of [Access.UsersXML]; extraUsers is XML put
// first inside <users> (tests add the admin user there).
func (a Access) usersXMLBody(extraUsers string) (string, error) {
	if err := a.Validate(); err != nil {
		return "", err
	}
	grants := a.RoleGrants()
	var b strings.Builder
	b.WriteString("  <roles>\n")
	for _, role := range a.roles() {
		fmt.Fprintf(&b, "    <%s>\n      <grants>\n", role)
		for _, g := range grants[role] {
			fmt.Fprintf(&b, "        <query>%s</query>\n", xmlText(g))
		}
		fmt.Fprintf(&b, "      </grants>\n    </%s>\n", role)
	}
	b.WriteString("  </roles>\n  <users>\n")
	b.WriteString(extraUsers)
	networks := a.Networks
	if len(networks) == 0 {
		networks = []string{"::/0"}
	}
	for _, u := range a.accounts() {
		fmt.Fprintf(&b, "    <%s>\n", u.acc.User)
		fmt.Fprintf(&b, "      <password_sha256_hex>%s</password_sha256_hex>\n", passwordSHA256(u.acc.Password))
		b.WriteString("      <networks>\n")
		for _, n := range networks {
			fmt.Fprintf(&b, "        <ip>%s</ip>\n", xmlText(n))
		}
		b.WriteString("      </networks>\n")
		b.WriteString("      <profile>default</profile>\n      <quota>default</quota>\n")
		fmt.Fprintf(&b, "      <default_database>%s</default_database>\n", a.Database)
		fmt.Fprintf(&b, "      <grants>\n        <query>GRANT %s</query>\n      </grants>\n", u.role)
		fmt.Fprintf(&b, "    </%s>\n", u.acc.User)
	}
	b.WriteString("  </users>\n")
	return b.String(), nil
}

func passwordSHA256(password string) string {
	sum := sha256.Sum256([]byte(password))
	return hex.EncodeToString(sum[:])
}

func xmlText(s string) string {
	var b strings.Builder
	// EscapeText only fails when the writer does; a strings.Builder never does.
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
