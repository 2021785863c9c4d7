package job

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gantry-build/gantry/internal/proctree"
	"github.com/gantry-build/gantry/internal/units"
)

// Workers starts jobs in long-lived worker processes, one job at a time per
// worker, many jobs over a worker's life: a job goes to an idle worker, or to a
// new one when none is idle, so a session with B builders starts about B
// workers, not one process per job. A worker whose job was terminated or
// killed, that crashed, or that reports its state could not be made as fresh
// as a new process's (see RunChild) is not used again. Its methods are safe
// for concurrent use. Close ends the idle workers.
type Workers struct {
	opts    Options
	oneShot bool // every worker runs one job and exits (the tests' startOneShot)

	mu      sync.Mutex
	idle    []*worker // most recently used last
	live    []*worker // every worker not known to have exited
	started int
	closed  bool
}

// NewWorkers returns an empty pool that starts workers with opts.
func NewWorkers(opts Options) *Workers { return &Workers{opts: opts} }

// Started returns how many worker processes the pool has started.
func (p *Workers) Started() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// Start runs spec in an idle worker, or in a new one. It creates the log
// file's directory and the log file (truncating it); the job's log, and
// whatever the worker writes to its stdout and stderr during the job (a
// crash's trace), go to it. onMessage, if set, receives every message of the
// job in order, from a goroutine of the worker's own; it must not block for
// long.
func (p *Workers) Start(spec Spec, onMessage func(Message)) (*Job, error) {
	if len(p.opts.Command) == 0 {
		return nil, fmt.Errorf("starting job %s: no command given", spec.ID)
	}
	if spec.LogPath == "" {
		return nil, fmt.Errorf("starting job %s: no log path given", spec.ID)
	}
	if err := checkSpecSize(spec); err != nil {
		return nil, fmt.Errorf("starting job %s (%s of %s): %w", spec.ID, spec.Action, spec.Element, err)
	}
	if err := os.MkdirAll(filepath.Dir(spec.LogPath), 0o755); err != nil {
		return nil, fmt.Errorf("starting job %s: creating log directory: %w", spec.ID, err)
	}
	logFile, err := os.OpenFile(spec.LogPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("starting job %s: creating log file: %w", spec.ID, err)
	}
	defer logFile.Close()

	j := &Job{spec: spec, grace: p.opts.Grace, onMessage: onMessage, done: make(chan struct{})}
	if j.grace <= 0 {
		j.grace = DefaultGrace
	}
	w := p.takeIdle(j)
	if w == nil {
		if w, err = p.startWorker(logFile, j); err != nil {
			return nil, fmt.Errorf("starting job %s (%s of %s): %w", spec.ID, spec.Action, spec.Element, err)
		}
	}
	w.send(spec)
	return j, nil
}

// checkSpecSize says whether spec's frames would be over maxFrame, before a
// worker is given the job.
func checkSpecSize(spec Spec) error {
	n := len(spec.ID) + len(spec.Action) + len(spec.Element) + len(spec.LogPath) + len(spec.Payload)
	if n+10*(len(spec.Shared)+6) > maxFrame {
		return fmt.Errorf("its spec holds %d bytes, over the limit of a frame, %s (%d bytes)", n, units.Bytes(maxFrame), maxFrame)
	}
	for _, part := range spec.Shared {
		if len(part)+21 > maxFrame {
			return fmt.Errorf("a shared part of its spec holds %d bytes, over the limit of a frame, %s (%d bytes)", len(part), units.Bytes(maxFrame), maxFrame)
		}
	}
	return nil
}

// send writes the frames of spec (its shared parts the worker lacks, then the
// job) to the worker's stdin from a goroutine of its own: a stopped worker
// reads nothing. An error means the worker died before reading the spec; its
// watcher hands the job over or ends it. Only the goroutine that gave the
// worker its job calls send, once per job.
func (w *worker) send(spec Spec) {
	frames, err := w.sent.encodeJob(spec)
	if err != nil { // checkSpecSize let it through: cannot happen
		w.mu.Lock()
		w.sendErr = fmt.Errorf("encoding its spec: %w", err)
		w.mu.Unlock()
		w.kill()
		return
	}
	go func() {
		_, _ = w.specs.Write(frames)
		if w.pool.oneShot {
			w.retire()
		}
	}()
}

// takeIdle gives j the most recently used idle worker that is still alive, or
// returns nil.
func (p *Workers) takeIdle(j *Job) *worker {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.idle) > 0 {
		w := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if w.take(j) {
			return w
		}
	}
	return nil
}

// take makes j the worker's job, unless the worker has exited or retired.
func (w *worker) take(j *Job) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.exited || w.retired || w.current != nil {
		return false
	}
	w.assign(j)
	return true
}

// assign makes j the worker's job and starts j's clock. w.mu must be held, or
// the worker not yet be watched.
func (w *worker) assign(j *Job) {
	w.current = j
	j.w = w
	if j.started.IsZero() { // a job handed over keeps its clock
		j.started = time.Now()
	}
}

// Close ends the pool: every worker is told to exit (its stdin is closed),
// which an idle one does at once and a busy one after its job, and is waited
// for; one still there after the grace period is killed (with its job). Jobs
// started afterwards get a worker of their own that exits when they end.
func (p *Workers) Close() error {
	p.mu.Lock()
	p.closed = true
	live := slices.Clone(p.live)
	p.idle = nil
	p.mu.Unlock()
	grace := p.opts.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	for _, w := range live {
		w.retire()
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	expired := false
	for _, w := range live {
		if !expired {
			select {
			case <-w.dead:
				continue
			case <-deadline.C:
				expired = true
			}
		}
		w.kill()
		<-w.dead
	}
	return nil
}

// worker is one worker process and the pipes to it.
type worker struct {
	pool     *Workers
	cmd      *exec.Cmd
	pid      int           // also its process group id
	specs    *os.File      // its stdin: spec frames (frame.go)
	msgs     *os.File      // its fd 3: message frames
	controls *os.File      // its fd 4: the control pipe (see controlTerminate)
	readDone chan struct{} // closed when msgs reached EOF (or was closed)
	dead     chan struct{} // closed once the process has exited and been reaped
	sent     sentParts     // the shared parts it was sent (send)
	// readErr is why read stopped before the end of msgs (a frame cut off, or
	// corrupt), or nil; set before readDone is closed.
	readErr error

	mu      sync.Mutex // guards the fields below
	current *Job       // the job it runs, or nil when idle
	exited  bool       // the process has exited (maybe not reaped yet)
	retired bool       // takes no further job; its stdin is closed
	sendErr error      // why send killed it, or nil
}

// startWorker starts a worker process for job j, its stdout and stderr going to
// out (j's log) until the worker redirects them itself.
func (p *Workers) startWorker(out *os.File, j *Job) (*worker, error) {
	msgR, msgW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating message pipe: %w", err)
	}
	defer msgW.Close() // the worker has its own copy
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		msgR.Close()
		return nil, fmt.Errorf("creating stdin pipe: %w", err)
	}
	defer stdinR.Close()
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		msgR.Close()
		stdinW.Close()
		return nil, fmt.Errorf("creating control pipe: %w", err)
	}
	defer ctlR.Close()

	cmd := exec.Command(p.opts.Command[0], p.opts.Command[1:]...)
	cmd.Env = p.opts.Env
	cmd.Dir = p.opts.Dir
	cmd.Stdin = stdinR
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.ExtraFiles = []*os.File{msgW, ctlR} // fd 3, fd 4
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		msgR.Close()
		stdinW.Close()
		ctlW.Close()
		return nil, err
	}
	w := &worker{pool: p, cmd: cmd, pid: cmd.Process.Pid, specs: stdinW, msgs: msgR, controls: ctlW,
		readDone: make(chan struct{}), dead: make(chan struct{})}
	w.assign(j)
	p.mu.Lock()
	p.started++
	p.live = append(p.live, w)
	p.mu.Unlock()
	go w.read()
	go w.watch()
	return w, nil
}

// release is called when the worker's job has ended: the worker goes back to
// its pool, or, with a reason to retire, or if the pool is closed or runs one
// job per worker, it is told to exit.
func (w *worker) release(retire string) {
	w.mu.Lock()
	w.current = nil
	reuse := retire == "" && !w.exited && !w.retired
	w.mu.Unlock()
	p := w.pool
	p.mu.Lock()
	reuse = reuse && !p.closed && !p.oneShot
	if reuse {
		p.idle = append(p.idle, w)
	}
	p.mu.Unlock()
	if !reuse {
		w.retire()
	}
}

// retire closes the worker's stdin: an idle worker exits at once, a busy one
// after its job.
func (w *worker) retire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.retired {
		w.retired = true
		w.specs.Close()
	}
}

// kill kills the worker's process group, if the worker has not exited.
func (w *worker) kill() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.exited {
		_ = syscall.Kill(-w.pid, syscall.SIGKILL)
	}
}

// read delivers the worker's messages to its current job until the pipe is
// closed. A job's messages end with its result, and the worker sends the next
// job's only once it has that job's spec, which it is given after the result
// was delivered here: so every message reaches the job it belongs to. A frame
// that cannot be read (cut off by the worker's death, or corrupt) ends the
// reading: the stream cannot be followed past it. A corrupt one kills the
// worker, and its job fails as a fault of gantry (see Job.complete).
func (w *worker) read() {
	defer close(w.readDone)
	br := bufio.NewReaderSize(w.msgs, 64<<10)
	for {
		body, err := readFrame(br)
		var m Message
		if err == nil {
			m, err = decodeMessage(body)
		}
		if err != nil {
			if err != io.EOF && !errors.Is(err, os.ErrClosed) {
				w.readErr = err
				if !errors.Is(err, errCutOff) {
					w.kill()
				}
			}
			return
		}
		w.mu.Lock()
		j := w.current
		w.mu.Unlock()
		if j != nil {
			j.deliver(m)
		}
	}
}

// watch waits for the worker to exit, kills what its job left in the worker's
// process group, waits for its last messages, hands its job to a new worker if
// the worker died before it started the job (see handOver) or else ends the
// job, and reaps the worker.
func (w *worker) watch() {
	pinned := proctree.WaitExitedNoReap(w.pid) == nil // the zombie still pins the pgid
	w.mu.Lock()
	w.exited = true
	j := w.current
	w.mu.Unlock()
	if pinned {
		_ = syscall.Kill(-w.pid, syscall.SIGKILL) // leftovers only; the leader is a zombie
	}

	// The worker's copy of the pipe is closed and its process group is dead,
	// so EOF comes at once unless something escaped the group holding fd 3.
	// Every message it sent is delivered before the job is looked at: whether
	// the job started is known only then.
	grace := w.pool.opts.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	select {
	case <-w.readDone:
	case <-time.After(grace):
		w.msgs.Close()
		<-w.readDone
	}
	if j != nil && j.handOver(w) {
		w.mu.Lock()
		w.current, j = nil, nil // no longer this worker's
		w.mu.Unlock()
	}
	if j != nil {
		j.markDead()
	}
	err := w.cmd.Wait() // only now: the pgid the job signalled stayed this worker's until it was not the job's
	w.msgs.Close()
	w.controls.Close()
	w.retire()
	if j != nil {
		j.complete(nil, "", w.cmd.ProcessState, err) // nothing if its result came first
	}
	p := w.pool
	p.mu.Lock()
	p.live = slices.DeleteFunc(p.live, func(x *worker) bool { return x == w })
	p.mu.Unlock()
	close(w.dead)
}
