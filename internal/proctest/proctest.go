//go:build linux

// Package proctest reads what /proc says about processes, for tests that check
// what signals did to a job's processes: which are in a process group, which are
// stopped, which are gone; and Eventually, which polls for such states (the
// kernel changes them with no event to wait on). It is imported only by tests.
package proctest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Proc is what /proc/PID/stat says about a process.
type Proc struct {
	PID, PPID, PGrp int
	State           byte // R, S, D, T, t, Z, X, ...
	Comm            string
}

// Read reads /proc/PID/stat; ok is false if the process does not exist.
func Read(pid int) (p Proc, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Proc{}, false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return Proc{}, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 3 || f[0] == "" {
		return Proc{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	return Proc{PID: pid, PPID: ppid, PGrp: pgrp, State: f[0][0], Comm: s[open+1 : end]}, true
}

// Gone reports whether pid no longer runs: it does not exist or is a zombie.
func (p Proc) Gone() bool { return p.State == 'Z' || p.State == 'X' }

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	p, ok := Read(pid)
	return ok && !p.Gone()
}

// All lists every process whose process group is pgid, zombies included.
func All(pgid int) []Proc {
	var out []Proc
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := Read(pid); ok && p.PGrp == pgid {
			out = append(out, p)
		}
	}
	return out
}

// Group lists the live (not zombie) processes of process group pgid. PID 1 in
// a container may never reap the orphans it inherits, so zombies are left out.
func Group(pgid int) []Proc {
	var out []Proc
	for _, p := range All(pgid) {
		if !p.Gone() {
			out = append(out, p)
		}
	}
	return out
}

// sigstopBit is SIGSTOP (19) in the pending-signal masks of /proc/PID/status.
const sigstopBit = 1 << (19 - 1)

// Stopped reports whether p is stopped, or will stop the moment it leaves the
// kernel: it is in an uninterruptible wait with SIGSTOP pending. That is how a
// shell that vforked a child shows when the child was stopped before its exec
// (dash runs simple commands with vfork): the parent's vfork wait cannot be
// stopped, and it cannot go on before its child does.
func (p Proc) Stopped() bool {
	switch p.State {
	case 'T', 't':
		return true
	case 'D':
		return stopPending(p.PID)
	}
	return false
}

// stopPending reports whether SIGSTOP is pending for pid, for the process
// (ShdPnd) or for its main thread (SigPnd).
func stopPending(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, mask, ok := strings.Cut(line, ":")
		if !ok || (name != "ShdPnd" && name != "SigPnd") {
			continue
		}
		if m, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64); err == nil && m&sigstopBit != 0 {
			return true
		}
	}
	return false
}

// AllStopped reports whether procs is not empty and every one of them is Stopped.
func AllStopped(procs []Proc) bool {
	for _, p := range procs {
		if !p.Stopped() {
			return false
		}
	}
	return len(procs) > 0
}

// NoneStopped reports whether no process in procs is in the stopped state.
func NoneStopped(procs []Proc) bool {
	for _, p := range procs {
		if p.State == 'T' || p.State == 't' {
			return false
		}
	}
	return true
}

// Describe lists procs one per line, "pid N ppid N state S: command line", for
// a test's failure message.
func Describe(procs []Proc) string {
	var b strings.Builder
	for _, p := range procs {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
		cmd := string(bytes.TrimRight(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}), " "))
		if cmd == "" {
			cmd = "(" + p.Comm + ")"
		}
		fmt.Fprintf(&b, "  pid %d ppid %d state %c: %s\n", p.PID, p.PPID, p.State, cmd)
	}
	return b.String()
}

// DescribeGroup is Describe of every process of group pgid, zombies included.
func DescribeGroup(pgid int) string { return Describe(All(pgid)) }
