package sandbox

import (
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr kills the command if gantry dies and, for newGroup, starts it
// in a new session (and so a new process group, without a controlling
// terminal).
//
// Pdeathsig fires when the OS thread that started the child exits; Go keeps
// its threads unless a goroutine locked to one exits, so Run and Shell must
// not be called from a goroutine that calls runtime.LockOSThread.
func sysProcAttr(newGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: newGroup, Pdeathsig: syscall.SIGKILL}
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

// processTree returns root and all its descendants, from /proc.
func processTree(root int) []procRef {
	children := map[int][]procRef{}
	var self procRef
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, start, ok := readStat(pid)
		if !ok {
			continue
		}
		if pid == root {
			self = procRef{pid, start}
		}
		children[ppid] = append(children[ppid], procRef{pid, start})
	}
	if self.pid == 0 {
		return nil
	}
	tree := []procRef{self}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i].pid]...)
	}
	return tree
}

// startTime returns a process's start time, which tells it apart from a
// later process with the same pid.
func startTime(pid int) (string, bool) {
	_, start, ok := readStat(pid)
	return start, ok
}

// readStat returns a process's parent pid and start time from /proc/PID/stat.
func readStat(pid int) (ppid int, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	// The command name (field 2) may contain anything; fields resume after
	// the last ')': state ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime priority nice
	// num_threads itrealvalue starttime ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, "", false
	}
	return ppid, f[19], true
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
