//go:build !linux

package sandbox

import (
	"io"
	"syscall"
)

// sysProcAttr starts the command, for newGroup, in a new session (and so a
// new process group, without a controlling terminal). Without Pdeathsig the
// command outlives a gantry that is killed outright.
func sysProcAttr(newGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: newGroup}
}

// keepForeground does nothing here.
func keepForeground(io.Reader) (restore func()) {
	return func() {}
}
