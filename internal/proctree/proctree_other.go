//go:build !linux

package proctree

import (
	"errors"
	"os"
	"syscall"
)

// Tree returns only root: without /proc, descendants are not found.
func Tree(root int) []Proc {
	return []Proc{{Pid: root}}
}

// startTime cannot tell processes apart here.
func startTime(pid int) (string, bool) {
	return "", syscall.Kill(pid, 0) == nil
}

// alive reports whether p still exists.
func (p Proc) alive() bool { return syscall.Kill(p.Pid, 0) == nil }

// sharesOurMemory cannot be told here: no process counts but the caller.
func sharesOurMemory(pid int) bool { return pid == os.Getpid() }

// childless is not known here: KillDescendants walks the process table.
func childless() bool { return false }

// AdoptOrphans is not available here.
func AdoptOrphans() error { return errors.ErrUnsupported }

// WaitExitedNoReap is not available: a child is reaped as it exits, and what
// it left in its process group is not killed.
func WaitExitedNoReap(int) error {
	return errors.ErrUnsupported
}
