// Package detector holds the detector's built-in rules (rules/*.yaml: SQL plus metadata), embedded so
// the binary needs no files on disk. services/detector loads them and then DETECTOR_RULES_DIR.
package detector

import "embed"

// Rules holds the built-in rule files under "rules/".
//
//go:embed rules/*.yaml
var Rules embed.FS

// RulesDir is the directory of the rule files inside [Rules].
const RulesDir = "rules"
