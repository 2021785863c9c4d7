package proctree

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Tree returns root and all its descendants, from /proc.
func Tree(root int) []Proc {
	children := map[int][]Proc{}
	var self Proc
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
			self = Proc{pid, start}
		}
		children[ppid] = append(children[ppid], Proc{pid, start})
	}
	if self.Pid == 0 {
		return nil
	}
	tree := []Proc{self}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i].Pid]...)
	}
	return tree
}

// alive reports whether p still runs: it exists, is the same process and is
// not a zombie.
func (p Proc) alive() bool {
	_, start, state, ok := readStatState(p.Pid)
	return ok && start == p.start && state != "Z" && state != "X"
}

// startTime returns a process's start time, which tells it apart from a
// later process with the same pid.
func startTime(pid int) (string, bool) {
	_, start, ok := readStat(pid)
	return start, ok
}

// readStat returns a process's parent pid and start time from /proc/PID/stat.
func readStat(pid int) (ppid int, start string, ok bool) {
	ppid, start, _, ok = readStatState(pid)
	return ppid, start, ok
}

// readStatState is readStat with the process's state (R, S, D, T, Z, ...).
func readStatState(pid int) (ppid int, start, state string, ok bool) {
	// Read with plain system calls: os.ReadFile's poller set-up costs twice as
	// many, and a worker walks the process table after every job.
	fd, err := syscall.Open("/proc/"+strconv.Itoa(pid)+"/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, "", "", false
	}
	var buf [1024]byte
	n, err := syscall.Read(fd, buf[:])
	syscall.Close(fd)
	if err != nil || n <= 0 {
		return 0, "", "", false
	}
	b := buf[:n]
	// The command name (field 2) may contain anything; fields resume after
	// the last ')': state ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime priority nice
	// num_threads itrealvalue starttime ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, "", "", false
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, "", "", false
	}
	return ppid, f[19], f[0], true
}

// kcmpVM is kcmp(2)'s KCMP_VM: do two processes share one address space?
const kcmpVM = 1

// sharesOurMemory reports whether pid shares the calling process's address space:
// a child of ours between vfork and exec (Go starts commands with
// clone(CLONE_VM|CLONE_VFORK)). Where kcmp(2) is not available, a process
// running our own executable counts.
func sharesOurMemory(pid int) bool {
	self := os.Getpid()
	if pid == self {
		return true
	}
	r, _, errno := syscall.Syscall6(unix.SYS_KCMP, uintptr(self), uintptr(pid), kcmpVM, 0, 0, 0)
	if errno == 0 {
		return r == 0
	}
	ours, err1 := os.Readlink("/proc/self/exe")
	theirs, err2 := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return err1 == nil && err2 == nil && ours == theirs
}

// AdoptOrphans makes the calling process (gantry, for the length of a session)
// a child subreaper: the processes of a job killed outright (SIGKILL cannot be
// caught, so the job cannot kill them itself), which left the job's process
// group, become its children instead of init's, for KillDescendants to find.
func AdoptOrphans() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("becoming a child subreaper: %w", err)
	}
	return nil
}

// WaitExitedNoReap blocks until pid has exited but leaves it a zombie, so its
// pid, and so its process group id, cannot be reused until it is reaped.
func WaitExitedNoReap(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return err
		}
	}
}

// childless reports that the calling process has no child, alive or not.
func childless() bool { return !HasChildren() }

// HasChildren reports whether the calling process has a child, alive or not.
func HasChildren() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != unix.ECHILD
}

// ReapChildren reaps every child that has exited: in a job worker, the
// processes of its last job, killed and adopted (it is a child subreaper),
// which would otherwise stay zombies for the worker's life.
func ReapChildren() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
