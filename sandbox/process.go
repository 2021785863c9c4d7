package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// killGrace is how long a cancelled command has between SIGTERM and SIGKILL.
const killGrace = 2 * time.Second

// execute starts cmd and waits for it. If ctx is cancelled first, it signals
// the command (see terminate) and returns context.Cause(ctx).
//
// Invariant: signals go to a pid or process group only while the command's
// process is unreaped (running or a zombie), so its pid, which is also the
// group's id in NewGroup mode, cannot have been reused.
func execute(ctx context.Context, cmd *exec.Cmd, group ProcessGroup, onStart func(int)) (*os.ProcessState, error) {
	// Output a leftover background process keeps writing after the
	// command exited is not waited for beyond this.
	cmd.WaitDelay = killGrace
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	pid := cmd.Process.Pid
	if onStart != nil {
		onStart(pid)
	}
	exited := make(chan struct{})
	go func() {
		waitExited(pid)
		close(exited)
	}()

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
	if group == NewGroup {
		// Nothing the command started outlives it.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	err := cmd.Wait()
	if cancelled {
		return nil, context.Cause(ctx)
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) && !errors.Is(err, exec.ErrWaitDelay) {
		return nil, err
	}
	return cmd.ProcessState, nil
}

// terminate sends SIGTERM and SIGCONT to the command, waits up to killGrace
// for its process to exit, then SIGKILLs it. In NewGroup mode the signals go
// to the command's process group. Otherwise they go to the command's process
// and its descendants as found in /proc when terminate starts (under bwrap,
// killing the outer bwrap process takes down the whole sandbox anyway);
// descendants still alive when the command's process has exited get SIGKILL.
func terminate(pid int, group ProcessGroup, exited <-chan struct{}) {
	var signal func(syscall.Signal)
	if group == NewGroup {
		signal = func(sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }
	} else {
		tree := processTree(pid)
		signal = func(sig syscall.Signal) {
			for _, p := range tree {
				p.kill(sig)
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

// waitExited blocks until process pid has exited, without reaping it
// (waitid with WNOWAIT), so that its pid stays reserved until cmd.Wait.
func waitExited(pid int) {
	const (
		pPID    = 1          // P_PID
		wNoWait = 0x01000000 // WNOWAIT
	)
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|wNoWait, 0, 0)
		if errno != syscall.EINTR {
			return
		}
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

// procRef identifies a process across pid reuse by its start time.
type procRef struct {
	pid   int
	start string
}

// kill signals p if it is still the same process.
func (p procRef) kill(sig syscall.Signal) {
	if _, start, ok := readStat(p.pid); ok && start == p.start {
		_ = syscall.Kill(p.pid, sig)
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
