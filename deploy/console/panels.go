// Package console holds the console's panel definitions (panels/*.yaml: the SQL of each panel of
// the minimal dashboard of docs/measurements.md with its baseline, threshold, "alert when" rule, the detector rule that watches it
// and the action it calls for), embedded so that the console binary and the Grafana dashboard
// generator read the same files. internal/panels parses and renders them.
package console

import "embed"

// Panels holds the panel files under "panels/".
//
//go:embed panels/*.yaml
var Panels embed.FS

// PanelsDir is the directory of the panel files inside [Panels].
const PanelsDir = "panels"
