//go:build !linux

package job

import (
	"context"
	"os"
	"syscall"

	"github.com/gantry-build/gantry/internal/proctree"
)

// sysProcAttr puts the child in its own process group. Without Pdeathsig the
// child outlives a gantry that is killed outright.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// watchParent does nothing here: there is no subreaper and no Pdeathsig.
func watchParent(context.CancelCauseFunc) (stop func()) { return func() {} }

// redirectOutput leaves stdout and stderr alone here: a crash's trace goes
// where the worker's output went when it started.
func redirectOutput(*os.File) (restore func()) { return func() {} }

// endJobProcesses kills what the job left among the worker's descendants (its
// direct children, without /proc).
func endJobProcesses() { proctree.KillDescendants() }
