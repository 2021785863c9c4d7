package job

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// DefaultGrace is how long Terminate waits after SIGTERM before SIGKILL.
const DefaultGrace = 5 * time.Second

// Options says how to start a child.
type Options struct {
	// Command is the argv that starts the child, e.g. {exe, "job"}; the child
	// must call RunChild. The Spec is written to its stdin as JSON.
	Command []string
	// Env is the child's environment; nil means the parent's.
	Env []string
	// Dir is the child's working directory; "" means the parent's.
	Dir string
	// Grace is how long Terminate waits between SIGTERM and SIGKILL;
	// 0 means DefaultGrace.
	Grace time.Duration
	// OnMessage, if set, receives every message in the order the child sent
	// it, from a goroutine of the job's own. It must not block for long: the
	// child waits while it does.
	OnMessage func(Message)
}

// Job is a running child process. Its methods are safe for concurrent use.
type Job struct {
	spec    Spec
	grace   time.Duration
	cmd     *exec.Cmd
	pid     int // also the process group id
	done    chan struct{}
	outcome Outcome // set before done is closed

	readDone chan struct{}
	result   *Result // the child's result; written by the reader before readDone closes

	mu           sync.Mutex // guards the fields below
	exited       bool       // the child has exited; its pgid must not be signalled any more
	started      time.Time
	ended        time.Time
	suspended    bool
	suspendedAt  time.Time
	suspendedFor time.Duration // completed suspensions
	terminated   bool
	killTimer    *time.Timer // SIGKILL after grace, armed by Terminate
}

// Start starts the child for spec. It creates the log file's directory and the
// log file (truncating it), which receives the child's stdout and stderr; the
// child appends its log to it.
func Start(spec Spec, opts Options) (*Job, error) {
	if len(opts.Command) == 0 {
		return nil, fmt.Errorf("starting job %s: no command given", spec.ID)
	}
	if spec.LogPath == "" {
		return nil, fmt.Errorf("starting job %s: no log path given", spec.ID)
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("starting job %s: encoding spec: %w", spec.ID, err)
	}
	if err := os.MkdirAll(filepath.Dir(spec.LogPath), 0o755); err != nil {
		return nil, fmt.Errorf("starting job %s: creating log directory: %w", spec.ID, err)
	}
	logFile, err := os.OpenFile(spec.LogPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("starting job %s: creating log file: %w", spec.ID, err)
	}
	defer logFile.Close()
	msgR, msgW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("starting job %s: creating message pipe: %w", spec.ID, err)
	}
	defer msgW.Close() // the child has its own copy
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		msgR.Close()
		return nil, fmt.Errorf("starting job %s: creating stdin pipe: %w", spec.ID, err)
	}
	defer stdinR.Close()

	cmd := exec.Command(opts.Command[0], opts.Command[1:]...)
	cmd.Env = opts.Env
	cmd.Dir = opts.Dir
	cmd.Stdin = stdinR
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.ExtraFiles = []*os.File{msgW} // fd 3
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		msgR.Close()
		stdinW.Close()
		return nil, fmt.Errorf("starting job %s (%s of %s): %w", spec.ID, spec.Action, spec.Element, err)
	}

	j := &Job{
		spec:     spec,
		grace:    opts.Grace,
		cmd:      cmd,
		pid:      cmd.Process.Pid,
		done:     make(chan struct{}),
		readDone: make(chan struct{}),
		started:  time.Now(),
	}
	if j.grace <= 0 {
		j.grace = DefaultGrace
	}
	go func() {
		// An error means the child exited before reading its spec; its
		// missing result says so.
		_, _ = stdinW.Write(append(specJSON, '\n'))
		stdinW.Close()
	}()
	go j.read(msgR, opts.OnMessage)
	go j.wait(msgR)
	return j, nil
}

// Spec returns the job's spec.
func (j *Job) Spec() Spec { return j.spec }

// Pid returns the child's process id, which is also its process group id.
func (j *Job) Pid() int { return j.pid }

// Done is closed when Wait would return without blocking.
func (j *Job) Done() <-chan struct{} { return j.done }

// Wait blocks until the child has exited and all its messages have been
// delivered, and returns the outcome. It may be called any number of times.
func (j *Job) Wait() Outcome {
	<-j.done
	return j.outcome
}

// Elapsed returns the wall time since the job started (until it exited, once
// it has), minus the time it spent suspended.
func (j *Job) Elapsed() time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.elapsedLocked(time.Now())
}

func (j *Job) elapsedLocked(now time.Time) time.Duration {
	switch {
	case j.exited:
		now = j.ended
	case j.suspended:
		now = j.suspendedAt
	}
	return now.Sub(j.started) - j.suspendedFor
}

// Suspend stops the job's process group with SIGSTOP. Its elapsed time stops
// counting. Suspending a suspended or exited job does nothing.
func (j *Job) Suspend() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.exited || j.suspended {
		return nil
	}
	if err := j.signalLocked(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("suspending job %s (pid %d): %w", j.spec.ID, j.pid, err)
	}
	j.suspended = true
	j.suspendedAt = time.Now()
	return nil
}

// Resume continues a suspended job with SIGCONT. Resuming a job that is not
// suspended does nothing.
func (j *Job) Resume() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.exited || !j.suspended {
		return nil
	}
	if err := j.resumeLocked(); err != nil {
		return fmt.Errorf("resuming job %s (pid %d): %w", j.spec.ID, j.pid, err)
	}
	return nil
}

func (j *Job) resumeLocked() error {
	if err := j.signalLocked(syscall.SIGCONT); err != nil {
		return err
	}
	j.suspendedFor += time.Since(j.suspendedAt)
	j.suspended = false
	return nil
}

// Terminate asks the job's process group to stop: SIGCONT if it is
// suspended, so that it can handle what follows, then SIGTERM, then SIGKILL
// if the child has not exited after the grace period. It does not wait; use
// Wait. Terminating an exited job does nothing.
func (j *Job) Terminate() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.exited {
		return nil
	}
	j.terminated = true
	if j.suspended {
		if err := j.resumeLocked(); err != nil {
			return fmt.Errorf("terminating job %s (pid %d): resuming: %w", j.spec.ID, j.pid, err)
		}
	}
	if j.killTimer == nil {
		j.killTimer = time.AfterFunc(j.grace, j.killAfterGrace)
	}
	if err := j.signalLocked(syscall.SIGTERM); err != nil {
		return fmt.Errorf("terminating job %s (pid %d): %w", j.spec.ID, j.pid, err)
	}
	return nil
}

func (j *Job) killAfterGrace() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.exited {
		_ = j.signalLocked(syscall.SIGKILL) // nothing better to do on failure
	}
}

// Kill kills the job's process group with SIGKILL at once. Killing an exited
// job does nothing.
func (j *Job) Kill() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.exited {
		return nil
	}
	j.terminated = true
	if err := j.signalLocked(syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing job %s (pid %d): %w", j.spec.ID, j.pid, err)
	}
	return nil
}

// signalLocked sends sig to the job's process group. j.mu must be held and
// the child must not have been reaped: a reaped child's pgid may be reused.
func (j *Job) signalLocked(sig syscall.Signal) error {
	err := syscall.Kill(-j.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil // the group is already gone
	}
	return err
}

// read delivers the child's messages until the pipe is closed.
func (j *Job) read(r *os.File, onMessage func(Message)) {
	defer close(j.readDone)
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if line = bytes.TrimSpace(line); len(line) > 0 {
			m := decodeMessage(line)
			if m.Type == MessageResult && m.Result != nil {
				res := *m.Result
				j.result = &res
			}
			if onMessage != nil {
				onMessage(m)
			}
		}
		if err != nil {
			return
		}
	}
}

// decodeMessage decodes one line; a line that is not a message is passed on
// as a log line, so that nothing the child said is lost.
func decodeMessage(line []byte) Message {
	var m Message
	if err := json.Unmarshal(line, &m); err != nil || m.Type == "" {
		return Message{Type: MessageLog, Time: time.Now(), Text: "malformed job message: " + string(line)}
	}
	return m
}

// wait waits for the child to exit, kills what it left in its process group,
// reaps it, waits for the last message and publishes the outcome.
func (j *Job) wait(msgR *os.File) {
	pinned := waitExitedNoReap(j.pid) == nil // the zombie still pins the pgid
	if pinned {
		j.markExited(true)
	}
	err := j.cmd.Wait()
	if !pinned {
		j.markExited(false)
	}

	// The child's copy of the pipe is closed and its process group is dead,
	// so EOF comes at once unless something escaped the group holding fd 3.
	select {
	case <-j.readDone:
	case <-time.After(j.grace):
		msgR.Close()
		<-j.readDone
	}
	msgR.Close()

	j.mu.Lock()
	j.outcome = Outcome{
		Terminated: j.terminated,
		ExitCode:   -1,
		Elapsed:    j.elapsedLocked(j.ended),
	}
	j.mu.Unlock()
	ps := j.cmd.ProcessState
	if ps != nil {
		j.outcome.ExitCode = ps.ExitCode()
	}
	if j.result != nil {
		j.outcome.Result = *j.result
	} else {
		j.outcome.Result = Result{Error: fmt.Sprintf("job process %s without reporting a result (see log %s)",
			describeExit(ps, err), j.spec.LogPath)}
	}
	close(j.done)
}

// markExited records that the child has exited; with killGroup it also kills
// whatever is left in the job's process group.
func (j *Job) markExited(killGroup bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	now := time.Now()
	if j.suspended {
		j.suspendedFor += now.Sub(j.suspendedAt)
		j.suspended = false
	}
	j.ended = now
	if j.killTimer != nil {
		j.killTimer.Stop()
	}
	if killGroup {
		_ = j.signalLocked(syscall.SIGKILL) // leftovers only; the leader is a zombie
	}
	j.exited = true
}

func describeExit(ps *os.ProcessState, waitErr error) string {
	if ps == nil {
		return fmt.Sprintf("ended (%v)", waitErr)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("was killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", ps.ExitCode())
}
