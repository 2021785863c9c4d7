// Package cli holds gantry's cobra commands. Main is the only entry point; errors become
// exit codes in one place (exitCode).
package cli

import (
	"context"
	"os"
)

// Main runs gantry with os.Args and returns the exit code.
func Main() int {
	if len(os.Args) > 1 && os.Args[1] == jobCommand {
		return runJob()
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
