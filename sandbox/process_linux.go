package sandbox

import (
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr kills the command if gantry dies and, for newGroup, starts it
// in a new session (and so a new process group, without a controlling
// terminal).
//
// Pdeathsig fires when the OS thread that started the child exits; Go keeps
// its threads unless a goroutine locked to one exits, so Runner.Run and Shell must
// not be called from a goroutine that calls runtime.LockOSThread.
func sysProcAttr(newGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: newGroup, Pdeathsig: syscall.SIGKILL}
}

// keepForeground records the terminal's foreground process group if stdin
// is the caller's terminal, and returns a function that makes it the
// foreground group again. An interactive shell with job control takes the
// terminal for a process group of its own and, inside bwrap's PID namespace,
// cannot give it back when it exits.
func keepForeground(stdin io.Reader) (restore func()) {
	f, ok := stdin.(*os.File)
	if !ok {
		return func() {}
	}
	fd := int(f.Fd())
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || pgrp != unix.Getpgrp() {
		return func() {} // not a terminal, or not ours
	}
	return func() {
		if cur, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err != nil || cur == pgrp {
			return
		}
		// Setting the foreground group from the background raises SIGTTOU,
		// unless it is ignored.
		if !signal.Ignored(syscall.SIGTTOU) {
			signal.Ignore(syscall.SIGTTOU)
			defer signal.Reset(syscall.SIGTTOU)
		}
		_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, pgrp)
	}
}
