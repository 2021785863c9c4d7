package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/gantry-build/gantry/internal/proctree"
)

// killGrace is how long a cancelled command has between SIGTERM and SIGKILL.
const killGrace = 2 * time.Second

// execute starts cmd and waits for it. If ctx is cancelled first, it signals
// the command (see terminate) and returns context.Cause(ctx). With out, the
// pipe cmd writes to, it passes on the command's output meanwhile, and all of
// it before returning.
//
// Invariant: on Linux, signals go to a pid or process group only while the
// command's process is unreaped (running or a zombie), so its pid, which is
// also the group's id in NewGroup mode, cannot have been reused. Elsewhere the
// process is reaped as it exits, and what it left in its group is not killed.
func execute(ctx context.Context, cmd *exec.Cmd, group ProcessGroup, onStart func(int), out *outputPipe) (*os.ProcessState, error) {
	// Output a leftover background process keeps writing after the
	// command exited is not waited for beyond this.
	cmd.WaitDelay = killGrace
	if cause := context.Cause(ctx); cause != nil {
		return nil, cause
	}
	if err := cmd.Start(); err != nil {
		return nil, &startError{path: cmd.Path, err: err}
	}
	pid := cmd.Process.Pid
	if onStart != nil {
		onStart(pid)
	}
	exited := make(chan struct{})
	done := make(chan struct{}) // exited is closed, and out woken
	var reaped bool             // set before exited is closed
	var waitErr error
	go func() {
		defer close(done)
		if proctree.WaitExitedNoReap(pid) != nil {
			waitErr, reaped = cmd.Wait(), true
		}
		close(exited)
		if out != nil {
			out.wake()
		}
	}()
	if out != nil {
		out.copyUntil(ctx, exited)
		defer func() {
			<-done
			out.drain()
		}()
	}

	cancelled := false
	select {
	case <-exited:
	case <-ctx.Done():
		select {
		case <-exited: // finished anyway: report how
		default:
			cancelled = true
			terminate(pid, group, exited)
		}
	}
	if group == NewGroup && !reaped {
		// Nothing the command started outlives it.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	if !reaped {
		waitErr = cmd.Wait()
	}
	if cancelled {
		return nil, context.Cause(ctx)
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		return nil, waitErr
	}
	return cmd.ProcessState, nil
}

// startError says a command could not be started: nothing of it ran.
type startError struct {
	path string
	err  error
}

func (e *startError) Error() string { return fmt.Sprintf("starting %s: %v", e.path, e.err) }
func (e *startError) Unwrap() error { return e.err }

// terminate sends SIGTERM and SIGCONT to the command, waits up to killGrace
// for its process to exit, then SIGKILLs it. In NewGroup mode the signals go
// to the command's process group. Otherwise they go to the command's process
// and, on Linux, its descendants as found in /proc, stopped first so the set
// is complete (under bwrap, killing the outer bwrap process takes down the
// whole sandbox anyway); descendants still alive when the command's process
// has exited get SIGKILL.
func terminate(pid int, group ProcessGroup, exited <-chan struct{}) {
	var signal func(syscall.Signal)
	if group == NewGroup {
		signal = func(sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }
	} else {
		// Freeze the tree before each signal, so that no process forks a
		// child the signal would miss. Remember every process found: its
		// parent may exit and orphan it.
		known := map[proctree.Proc]bool{}
		signal = func(sig syscall.Signal) {
			proctree.FreezeTree(pid, known)
			for p := range known {
				p.Signal(sig)
			}
		}
		defer signal(syscall.SIGKILL)
	}
	signal(syscall.SIGTERM)
	signal(syscall.SIGCONT) // a stopped process acts on SIGTERM only once continued
	timer := time.NewTimer(killGrace)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		signal(syscall.SIGKILL)
		<-exited
	}
}

// exitStatus returns the shell-style exit code of a finished process:
// the exit status, or 128+signal when a signal killed it.
func exitStatus(state *os.ProcessState) (int, syscall.Signal) {
	ws, ok := state.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal()
	}
	return state.ExitCode(), 0
}
