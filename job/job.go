package job

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

// DefaultGrace is how long Terminate waits after SIGTERM before SIGKILL.
const DefaultGrace = 5 * time.Second

// Options says how to start worker processes.
type Options struct {
	// Command is the argv that starts a worker, e.g. {exe, "__job"}; the worker
	// must call RunChild. Job specs are written to its stdin as frames (frame.go).
	Command []string
	// Env is the worker's environment; nil means the parent's.
	Env []string
	// Dir is the worker's working directory; "" means the parent's.
	Dir string
	// Grace is how long Terminate waits between SIGTERM and SIGKILL;
	// 0 means DefaultGrace.
	Grace time.Duration
}

// Job is one job attempt running in a worker process. Its methods are safe for
// concurrent use.
//
// While the job runs, its worker's process group holds exactly the worker and
// the processes of this job: a signal to the group reaches all of the job and
// nothing else. Once the job has ended (its result arrived, or its worker
// died), the job signals nothing any more.
type Job struct {
	spec      Spec
	grace     time.Duration
	onMessage func(Message)
	done      chan struct{}
	outcome   Outcome // set before done is closed

	mu           sync.Mutex // guards the fields below
	w            *worker    // the worker it is given to (another after a hand-over)
	acked        bool       // the worker sent start: the job's handler may have run
	handedOver   bool       // the job went to a second worker (see handOver)
	exited       bool       // the job has ended; its worker's group must not be signalled for it any more
	completed    bool       // outcome is being or has been published
	started      time.Time
	ended        time.Time
	suspended    bool
	suspendedAt  time.Time
	suspendedFor time.Duration // completed suspensions
	terminated   bool
	killTimer    *time.Timer // SIGKILL after grace, armed by Terminate
	opened       bool        // Open opened the gate of this gated job
}

// Spec returns the job's spec.
func (j *Job) Spec() Spec { return j.spec }

// Pid returns the process id of the job's worker, which is also its process
// group id.
func (j *Job) Pid() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.w.pid
}

// Done is closed when Wait would return without blocking.
func (j *Job) Done() <-chan struct{} { return j.done }

// Wait blocks until the job has ended (its worker sent the result, having
// killed everything the job started, or the worker died) and all its messages
// have been delivered, and returns the outcome. It may be called any number
// of times.
func (j *Job) Wait() Outcome {
	<-j.done
	return j.outcome
}

// Elapsed returns the wall time since the job started (until it ended, once
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

// Suspend stops the job with SIGSTOP to its worker's process group: the
// worker and every process of the job. Its elapsed time stops counting.
// Suspending a suspended or ended job does nothing.
func (j *Job) Suspend() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.exited || j.suspended {
		return nil
	}
	if err := j.signalLocked(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("suspending job %s (pid %d): %w", j.spec.ID, j.w.pid, err)
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
		return fmt.Errorf("resuming job %s (pid %d): %w", j.spec.ID, j.w.pid, err)
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

// Terminate asks the job to stop: SIGCONT if it is suspended, so that it can
// handle what follows, then SIGTERM to its worker's process group, then
// SIGKILL if the job has not ended after the grace period. It does not wait;
// use Wait. A terminated job's worker takes no further job, unless it had not
// started the job. Terminating an ended job does nothing.
//
// A job its worker has not started (no start message yet) is not signalled:
// a worker between jobs ignores SIGTERM, and one that has not read the job
// yet would run it all the same. Its worker is told instead (worker.control)
// and, on reading the job, runs nothing of it and reports it terminated; it
// stays in the pool. If the worker had already started the job, its start
// message is answered with SIGTERM (see deliver). A job waiting at its gate
// (Reporter.Gate) has started: SIGTERM ends the wait.
func (j *Job) Terminate() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.exited {
		return nil
	}
	j.terminated = true
	if j.suspended {
		if err := j.resumeLocked(); err != nil {
			return fmt.Errorf("terminating job %s (pid %d): resuming: %w", j.spec.ID, j.w.pid, err)
		}
	}
	if j.killTimer == nil {
		j.killTimer = time.AfterFunc(j.grace, j.killAfterGrace)
	}
	if !j.acked && j.w.control(controlTerminate, j.spec.ID) == nil {
		return nil
	}
	if err := j.signalLocked(syscall.SIGTERM); err != nil {
		return fmt.Errorf("terminating job %s (pid %d): %w", j.spec.ID, j.w.pid, err)
	}
	return nil
}

// Open opens the gate of a gated job (Spec.Gated): the job's worker, waiting at
// the gate (Reporter.Gate) or on its way to it, goes on to the work that needs
// the job's slot. It may be called at any time: a
// worker that has not read the job yet, or is suspended, reads it when it gets
// there. Opening an ungated or ended job, or a gate already open, does nothing.
//
// It never waits (the scheduler calls it): the line for the worker is written
// without waiting for room, as Terminate's is (see worker.control). A worker
// that died meanwhile (the write fails with EPIPE) is no error: its job goes to
// a new worker with its gate open (see handOver), or ends.
func (j *Job) Open() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.spec.Gated || j.exited || j.opened {
		return nil
	}
	if err := j.w.control(controlOpen, j.spec.ID); err != nil && !errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("opening the gate of job %s (pid %d): %w", j.spec.ID, j.w.pid, err)
	}
	j.opened = true
	return nil
}

func (j *Job) killAfterGrace() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.exited {
		_ = j.signalLocked(syscall.SIGKILL) // nothing better to do on failure
	}
}

// Kill kills the job at once: SIGKILL to its worker's process group, which
// ends the worker too. Killing an ended job does nothing.
func (j *Job) Kill() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.exited {
		return nil
	}
	j.terminated = true
	if err := j.signalLocked(syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing job %s (pid %d): %w", j.spec.ID, j.w.pid, err)
	}
	return nil
}

// signalLocked sends sig to the worker's process group. j.mu must be held and
// the job must not have ended: then the worker is busy with this job and not
// reaped (its watcher marks the job ended before reaping it), so its pgid
// cannot have been reused.
func (j *Job) signalLocked(sig syscall.Signal) error {
	err := syscall.Kill(-j.w.pid, sig)
	if err == syscall.ESRCH {
		return nil // the group is already gone
	}
	return err
}

// deliver hands the worker's message m to the job. A result ends the job.
func (j *Job) deliver(m Message) {
	switch {
	case m.Type == MessageStart:
		j.mu.Lock()
		j.acked = true
		if j.terminated && !j.exited {
			// Terminated before this message came: the worker started the job
			// before it read that it was cancelled, and was not signalled.
			_ = j.signalLocked(syscall.SIGTERM) // as in killAfterGrace; SIGKILL follows the grace
		}
		j.mu.Unlock()
	case m.Type == MessageResult && m.Result != nil:
		defer j.complete(m.Result, m.Retire, nil, nil)
	}
	if j.onMessage != nil {
		j.onMessage(m)
	}
}

// handOver gives the job to a new worker, once, when its worker old died
// before it sent start for the job (an idle worker killed by the OOM killer,
// say, as the job was handed to it): the worker had not even opened the job's
// log, so nothing of the element's ran and running it elsewhere is safe. Not
// for a job that was terminated or killed, nor once the pool is closed (Close
// kills the workers it waited for in vain). A suspended job's new worker is
// stopped before it reads the spec; an opened job's is told its gate is open
// before it is given the spec. old must have exited and not been reaped:
// until j.w is the new worker, a signal for the job reaches old's zombie. It
// reports whether the job went to a new worker; the job's log says so.
func (j *Job) handOver(old *worker) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	p := old.pool
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if j.acked || j.handedOver || j.terminated || j.exited || closed {
		return false
	}
	j.handedOver = true
	log, err := os.OpenFile(j.spec.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return false
	}
	defer log.Close()
	note := func(s string) { _, _ = io.WriteString(log, logStamp(time.Now())+"[worker] "+s+"\n") }
	note(fmt.Sprintf("pid %d exited before it started job %s; the job goes to a new worker", old.pid, j.spec.ID))
	w, err := p.startWorker(log, j)
	if err != nil {
		note(fmt.Sprintf("starting a new worker: %v", err))
		return false
	}
	if j.suspended {
		_ = syscall.Kill(-w.pid, syscall.SIGSTOP)
	}
	if j.opened {
		// A new pipe has room; if the worker died already, its watcher ends the job.
		_ = w.control(controlOpen, j.spec.ID)
	}
	w.send(j.spec)
	return true
}

// markDead records that the job's worker has exited before the job reported
// its result.
func (j *Job) markDead() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.exited {
		j.endLocked(time.Now())
	}
}

// endLocked stops the clock and the kill timer: from now on the job signals
// nothing.
func (j *Job) endLocked(now time.Time) {
	if j.suspended {
		j.suspendedFor += now.Sub(j.suspendedAt)
		j.suspended = false
	}
	j.ended = now
	if j.killTimer != nil {
		j.killTimer.Stop()
	}
	j.exited = true
}

// complete publishes the job's outcome, once: from the worker's result (res
// not nil; retire says why the worker takes no further job, if it does not),
// or from how the worker process ended. The worker goes back to its pool
// first, so that the next job can have it as soon as this one is seen done.
func (j *Job) complete(res *Result, retire string, ps *os.ProcessState, waitErr error) {
	j.mu.Lock()
	if j.completed {
		j.mu.Unlock()
		return
	}
	j.completed = true
	if !j.exited {
		if j.suspended {
			// The worker is idle now and must not stay stopped.
			_ = j.signalLocked(syscall.SIGCONT)
		}
		j.endLocked(time.Now())
	}
	out := Outcome{Terminated: j.terminated, ExitCode: -1, Elapsed: j.elapsedLocked(j.ended)}
	w, acked := j.w, j.acked // a job never started ran nothing that could spoil its worker
	j.mu.Unlock()

	switch {
	case res != nil:
		out.Result = *res
		out.ExitCode = 1
		if res.OK {
			out.ExitCode = 0
		}
		if out.Terminated && retire == "" && acked {
			retire = "its job was terminated"
		}
	default:
		if ps != nil {
			out.ExitCode = ps.ExitCode()
		}
		out.Result = Result{Error: j.deathError(w, ps, waitErr)}
		retire = "it exited"
	}
	w.release(retire)
	j.outcome = out
	close(j.done)
}

// deathError is the error of a job whose worker w exited without its result:
// how the process ended and where the log is; and, when its messages could not
// be read to the end (a frame cut off by its death, or a corrupt one, for
// which the worker was killed), which job of which element that was and why,
// as a fault of gantry or the machine: the job caches nothing, so the next
// session tries the element again.
func (j *Job) deathError(w *worker, ps *os.ProcessState, waitErr error) string {
	exit := fmt.Sprintf("job process %s without reporting a result (see log %s)", describeExit(ps, waitErr), j.spec.LogPath)
	w.mu.Lock()
	sendErr := w.sendErr
	w.mu.Unlock()
	var why error
	switch {
	case sendErr != nil:
		why = sendErr
	case w.readErr == nil: // read ended before watch looked: see worker.read
		return exit
	case errors.Is(w.readErr, errCutOff):
		why = fmt.Errorf("reading its worker's messages: %w", w.readErr)
	default:
		why = fmt.Errorf("a corrupt message from its worker (pid %d, killed): %w", w.pid, w.readErr)
	}
	return fmt.Sprintf("job %s (%s of %s): %v; %s: a fault of gantry or the machine, not of %s",
		j.spec.ID, j.spec.Action, j.spec.Element, why, exit, j.spec.Element)
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
