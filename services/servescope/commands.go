package main

import "github.com/spf13/cobra"

// extraCommands lists the investigation commands (diagnose, postmortem, request, slo) registered in
// their own files; it is a fixed list built at compile time, never modified at run time.
var extraCommands = []func() *cobra.Command{newDiagnoseCmd, newPostmortemCmd, newRequestCmd, newSLOCmd}
