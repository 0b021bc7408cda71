package chstore

import "testing"

// A bare call of a parameterized view is qualified with the database; a qualified one, a name
// that only ends like a view's, and a view without calls are left alone.
func TestQualifiedQuery(t *testing.T) {
	cases := []struct {
		in, want string
		changed  bool
	}{
		{"CREATE VIEW db.request_facts AS SELECT * FROM request_facts_window(`from` = '2000-01-01 00:00:00', to = '2200-01-01 00:00:00')",
			"CREATE OR REPLACE VIEW db.request_facts AS SELECT * FROM `db`.request_facts_window(`from` = '2000-01-01 00:00:00', to = '2200-01-01 00:00:00')", true},
		{"CREATE VIEW db.x AS SELECT a FROM db.t AS t LEFT JOIN app_requests(`from` = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')}) AS a ON 1 LEFT JOIN engine_requests(`from` = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')}) AS e ON 1",
			"CREATE OR REPLACE VIEW db.x AS SELECT a FROM db.t AS t LEFT JOIN `db`.app_requests(`from` = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')}) AS a ON 1 LEFT JOIN `db`.engine_requests(`from` = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')}) AS e ON 1", true},
		{"CREATE VIEW db.y AS SELECT * FROM `db`.request_facts_window(`from` = '2000-01-01 00:00:00', to = '2200-01-01 00:00:00')", "", false},
		{"CREATE VIEW db.y AS SELECT * FROM other.request_facts_window(`from` = '2000-01-01 00:00:00', to = '2200-01-01 00:00:00')", "", false},
		{"CREATE VIEW db.y AS SELECT my_app_requests(1) FROM db.t", "", false},
		{"CREATE VIEW db.engine_timeline AS SELECT ts FROM db.engine_samples FINAL", "", false},
		{"CREATE TABLE db.t (x UInt8) ENGINE = Memory", "", false},
	}
	for _, c := range cases {
		got, changed := qualifiedQuery(c.in, "db")
		if got != c.want || changed != c.changed {
			t.Errorf("qualifiedQuery(%q)\n= %q, %v\nwant %q, %v", c.in, got, changed, c.want, c.changed)
		}
	}
}

// A main view's copy in the main database reads the main database's Distributed tables, node
// tables and cluster wrappers wherever the local definition read the local database's, quoted or
// not, and in a call stored as one quoted name (`s_local.slo_requests_window`(...)); a database whose name merely ends like the local one, and a column of an alias, are left.
func TestMainDefinition(t *testing.T) {
	in := "CREATE VIEW s_local.slo_goodput (`slo` String) AS SELECT slo FROM `s_local.slo_requests_window`(`from` = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')}) AS w " +
		"LEFT JOIN s_local.engine_config AS c ON c.name = w.slo LEFT JOIN xs_local.t AS x ON 1 LEFT JOIN `xs_local.f`(a = 1) AS f ON 1 WHERE w.slo IN (SELECT slo FROM `s_local`.requests FINAL)"
	want := "CREATE OR REPLACE VIEW `s`.`slo_goodput` (`slo` String) AS SELECT slo FROM `s.slo_requests_window`(`from` = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')}) AS w " +
		"LEFT JOIN `s`.engine_config AS c ON c.name = w.slo LEFT JOIN xs_local.t AS x ON 1 LEFT JOIN `xs_local.f`(a = 1) AS f ON 1 WHERE w.slo IN (SELECT slo FROM `s`.requests FINAL)"
	got, err := mainDefinition(in, "s_local", "s", "slo_goodput")
	if err != nil || got != want {
		t.Errorf("mainDefinition\n= %q, %v\nwant %q", got, err, want)
	}
	if _, err := mainDefinition("CREATE VIEW other.slo_goodput AS SELECT 1", "s_local", "s", "slo_goodput"); err == nil {
		t.Error("mainDefinition of another database's view: no error")
	}
}
