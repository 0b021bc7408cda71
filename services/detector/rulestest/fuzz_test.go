package rulestest_test

import (
	"io/fs"
	"path"
	"testing"
	"time"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/services/detector/rulestest"
)

// FuzzParse feeds test files to the parser: it refuses or accepts, never panics, and what it
// accepts is runnable as far as the file goes (a name, rows to insert, expectations at 0s or
// later with a known state).
func FuzzParse(f *testing.F) {
	entries, _ := fs.ReadDir(builtin.Tests, builtin.TestsDir)
	for _, e := range entries {
		data, _ := fs.ReadFile(builtin.Tests, path.Join(builtin.TestsDir, e.Name()))
		f.Add(data)
	}
	f.Add([]byte("tests:\n  - inputs: [{table: requests, count: 3, row: {request_id: 'r${i}'}}]\n    alerts: [{at: 0s, rule: r, expect: []}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := rulestest.Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		if len(file.Tests) == 0 || file.EvaluationInterval.D() < time.Second {
			t.Fatalf("accepted a file without tests or interval: %+v", file)
		}
		for _, c := range file.Tests {
			if c.Name == "" || len(c.Alerts) == 0 {
				t.Fatalf("accepted a test without a name or alerts: %+v", c)
			}
			for _, in := range c.Inputs {
				if in.Table == "" || in.Count < 1 || in.Every < 0 {
					t.Fatalf("accepted an input it cannot insert: %+v", in)
				}
			}
			for _, e := range c.Alerts {
				if e.Rule == "" || e.At < 0 {
					t.Fatalf("accepted an expectation it cannot check: %+v", e)
				}
				for _, a := range e.Expect {
					if a.State != "pending" && a.State != "firing" && a.State != "resolved" {
						t.Fatalf("accepted state %q", a.State)
					}
				}
			}
		}
	})
}
