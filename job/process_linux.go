package job

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gantry-build/gantry/internal/proctree"
)

// parentDeathSignal is what the kernel sends a job child when gantry dies
// (Pdeathsig). It is caught, not fatal: the child must first kill what it
// started (see watchParent).
const parentDeathSignal = syscall.SIGHUP

// sysProcAttr puts the child in a new session and process group (so the terminal's ^C
// and ^Z reach only gantry, and the job can be signalled as a whole) and tells
// it, with parentDeathSignal, when gantry dies.
//
// Pdeathsig fires when the OS thread that started the child exits; Go keeps
// its threads unless a goroutine locked to one exits, so Workers.Start must not
// be called from a goroutine that calls runtime.LockOSThread.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Pdeathsig: parentDeathSignal}
}

// watchParent makes the job child a child subreaper, so that every process it
// starts stays its descendant even after leaving its process group (setsid,
// double fork), and, when gantry dies (kill -9, the OOM killer), kills all of
// them and then itself: no build process outlives gantry. It returns a
// function that stops watching. cancel is called first, with ErrParentDied, so
// that a handler that sees its commands die of the kill knows why and caches
// nothing.
//
// If gantry dies before the handler is installed, parentDeathSignal's default
// action ends the child, which has started nothing yet.
func watchParent(cancel context.CancelCauseFunc) (stop func()) {
	parent := os.Getppid()
	if err := proctree.AdoptOrphans(); err != nil {
		fmt.Fprintf(os.Stderr, "gantry job: warning: %v: daemonised build processes may outlive gantry\n", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, parentDeathSignal)
	done := make(chan struct{})
	check := func() {
		if os.Getppid() != parent { // a stray SIGHUP from the build is not gantry's death
			fmt.Fprintln(os.Stderr, "gantry job: gantry exited; killing every process of this job")
			cancel(ErrParentDied)
			proctree.KillDescendants()
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	check() // gantry may have died between exec and Notify
	go func() {
		for {
			select {
			case <-sigs:
				check()
			case <-done:
				return
			}
		}
	}()
	return func() {
		// Ignored from now on, not reset to the default (death): killing a stopped
		// member of the job's process group, which is orphaned (its parent is in
		// another session), makes the kernel send the group SIGHUP.
		signal.Ignore(parentDeathSignal)
		close(done)
	}
}

// redirectOutput points the process's stdout and stderr at f, and returns a
// function that points them at /dev/null.
func redirectOutput(f *os.File) (restore func()) {
	to := func(fd int) {
		_ = unix.Dup3(fd, 1, 0)
		_ = unix.Dup3(fd, 2, 0)
	}
	to(int(f.Fd()))
	return func() {
		if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
			to(int(null.Fd()))
			null.Close()
		}
	}
}

// endJobProcesses kills every process the worker's job left behind and reaps
// them all, so that none is left, not even a zombie, when the next job starts.
// The worker is a child subreaper: every descendant whose parent exited became
// its child, so a worker with no children has no descendants left, and one
// waitid(2) says so without walking the process table.
func endJobProcesses() {
	proctree.ReapChildren()
	if proctree.HasChildren() {
		proctree.KillDescendants()
		proctree.ReapChildren()
	}
}
