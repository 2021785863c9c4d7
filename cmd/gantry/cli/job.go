package cli

import (
	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/job"
	rworker "github.com/gantry-build/gantry/remote/exec/worker"
)

// jobCommand is the hidden first argument with which gantry re-executes itself as a job
// worker (DESIGN.md §5, job.Workers): job specs arrive on stdin, one at a time.
const jobCommand = "__job"

func runJob() int {
	defer actions.DropSpareWorkDir()
	handlers := actions.Handlers()
	for kind, h := range rworker.Handlers() { // `gantry worker`'s actions
		handlers[kind] = h
	}
	return job.RunChild(handlers)
}
