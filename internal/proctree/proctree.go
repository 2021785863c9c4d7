// Package proctree finds, freezes, signals and waits for the processes a
// process started: the process hygiene shared by job (a job child kills what
// its job left behind) and sandbox (a cancelled command's descendants get its
// signals), and gantry itself (it adopts and kills what a job killed outright
// left behind). It walks /proc on Linux; elsewhere a tree is its root alone.
package proctree

import (
	"os"
	"syscall"
	"time"
)

// Proc identifies a process across pid reuse by its start time.
type Proc struct {
	Pid   int
	start string
}

// Signal sends sig to p if it is still the same process.
func (p Proc) Signal(sig syscall.Signal) {
	if start, ok := startTime(p.Pid); ok && start == p.start {
		_ = syscall.Kill(p.Pid, sig)
	}
}

// FreezeTree stops (SIGSTOP) root and its descendants, adding them to known,
// until a walk of the process table finds no new process. A process that has
// been sent SIGSTOP cannot complete a fork (the kernel restarts it after the
// stop), so the walks reach a fixed point. The calling process is recorded
// but never stopped, and a child of it that still shares its memory (between
// vfork and exec) is killed instead: stopped, it would hold the thread that
// forked it in the kernel, and that thread would hold the Go runtime at its
// next stop-the-world, until someone continued the child — nobody, once gantry
// is dead. Such a child has run nothing of a command yet.
func FreezeTree(root int, known map[Proc]bool) {
	self := os.Getpid()
	for {
		stopped := false
		for _, p := range Tree(root) {
			if !known[p] {
				known[p] = true
				switch {
				case p.Pid == self:
				case sharesOurMemory(p.Pid):
					p.Signal(syscall.SIGKILL)
				default:
					p.Signal(syscall.SIGSTOP)
					stopped = true
				}
			}
		}
		// Only a process stopped in this walk may have forked during it. (A worker
		// ending a job that left nothing behind walks the table once.)
		if !stopped {
			return
		}
	}
}

// KillDescendants walks the tree at most killRounds times, killPause apart: after
// a second or more it stops waiting for processes the kernel has not taken yet.
const (
	killRounds = 1000
	killPause  = time.Millisecond // for the kernel to deliver the kills
)

// KillDescendants kills (SIGKILL) every descendant of the calling process,
// frozen first so that none forks a child the kill would miss, and waits until
// none is left alive: a process caught between fork and exec can outlive the
// first SIGKILL, and one the walk missed shows up in the next. In a child
// subreaper (see AdoptOrphans) that is every process it started that is still
// alive, whatever session or group they moved to. A process without a child has no
// descendant (an orphaned one would be its child, or init's): then it walks nothing
// (a session that started no job, a null build, walked the whole process table).
func KillDescendants() {
	if childless() {
		return
	}
	self := os.Getpid()
	for range killRounds {
		known := map[Proc]bool{}
		FreezeTree(self, known)
		alive := false
		for p := range known {
			if p.Pid != self && p.alive() {
				p.Signal(syscall.SIGKILL)
				alive = true
			}
		}
		if !alive {
			return
		}
		time.Sleep(killPause)
	}
}
