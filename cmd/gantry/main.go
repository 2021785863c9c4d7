// Command gantry is a build orchestrator: see the README.
package main

import (
	"os"

	"github.com/gantry-build/gantry/cmd/gantry/cli"
)

func main() { os.Exit(cli.Main()) }
