package job

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr puts the child in a new session and process group (so the terminal's ^C
// and ^Z reach only gantry, and the job can be signalled as a whole) and kills
// it if gantry dies.
//
// Pdeathsig fires when the OS thread that started the child exits; Go keeps
// its threads unless a goroutine locked to one exits, so Start must not be
// called from a goroutine that calls runtime.LockOSThread.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
}

// waitExitedNoReap blocks until pid has exited but leaves it a zombie, so its
// pid, and so its process group id, cannot be reused until it is reaped.
func waitExitedNoReap(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return err
		}
	}
}
