//go:build !linux

package job

import (
	"context"
	"errors"
	"os"
	"syscall"
)

// sysProcAttr puts the child in its own process group. Without Pdeathsig the
// child outlives a gantry that is killed outright.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// watchParent does nothing here: there is no subreaper and no Pdeathsig.
func watchParent(context.CancelCauseFunc) (stop func()) { return func() {} }

// childless is not known here: KillDescendants walks the process table.
func childless() bool { return false }

// AdoptOrphans is not available here.
func AdoptOrphans() error { return errors.ErrUnsupported }

// waitExitedNoReap is not available: the child is reaped before it is marked
// exited, and whatever it left in its process group is not killed.
func waitExitedNoReap(int) error {
	return errors.ErrUnsupported
}

// redirectOutput leaves stdout and stderr alone here: a crash's trace goes
// where the worker's output went when it started.
func redirectOutput(*os.File) (restore func()) { return func() {} }

// endJobProcesses kills what the job left among the worker's descendants (its
// direct children, without /proc).
func endJobProcesses() { KillDescendants() }
