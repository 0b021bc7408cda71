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
