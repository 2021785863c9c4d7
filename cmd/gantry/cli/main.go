// Package cli holds gantry's cobra commands. Main is the only entry point; errors become
// exit codes in one place (exitCode).
package cli

import (
	"context"
	"os"
	"runtime/debug"
)

// The garbage collector's settings of the session's process, unless GOGC or GOMEMLIMIT
// set them. The process holds the graph, which lives until it exits: collecting at 5×
// the live heap instead of 2× takes a quarter of the CPU off loading and planning large
// graphs (docs/performance.md), and the soft limit collects more often as the heap
// nears it (a 100,000-element show stays under 750 MB). Jobs keep Go's defaults.
const (
	sessionGCPercent   = 400
	sessionMemoryLimit = 700 << 20 // bytes
)

// Main runs gantry with os.Args and returns the exit code.
func Main() int {
	if len(os.Args) > 1 && os.Args[1] == jobCommand {
		return runJob()
	}
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetGCPercent(sessionGCPercent)
		debug.SetMemoryLimit(sessionMemoryLimit)
	}
	ios := System()
	root := newRootCmd(ios)
	root.SetArgs(os.Args[1:])
	err := root.ExecuteContext(context.Background())
	if err != nil && !ios.jsonErr {
		// A flag error ends the command before the display mode is settled.
		ios.jsonErr = earlyUIMode(root.PersistentFlags().Lookup("ui")) == "json"
	}
	return exitCode(err, ios)
}
