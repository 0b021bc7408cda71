// Package detector holds the detector's built-in rules (rules/*.yaml: SQL plus metadata) and
// service level objectives (slos/*.yaml, from which services/detector/slo generates burn-rate
// rules), embedded so the binary needs no files on disk, and their unit tests (tests/*.yaml, run
// by `servescope rules test`). services/detector loads the rules and then DETECTOR_RULES_DIR, the
// SLOs and then DETECTOR_SLOS_DIR.
package detector

import "embed"

// Rules holds the built-in rule files under "rules/".
//
//go:embed rules/*.yaml
var Rules embed.FS

// RulesDir is the directory of the rule files inside [Rules].
const RulesDir = "rules"

// SLOs holds the built-in SLO files under "slos/".
//
//go:embed slos/*.yaml
var SLOs embed.FS

// SLOsDir is the directory of the SLO files inside [SLOs].
const SLOsDir = "slos"

// Tests holds the built-in rules' unit tests under "tests/", one file per rule, named as it.
//
//go:embed tests/*.yaml
var Tests embed.FS

// TestsDir is the directory of the test files inside [Tests].
const TestsDir = "tests"

// RepoDir is where the files of [Rules] and [Tests] are in the repository, to name them in messages.
const RepoDir = "deploy/detector"
