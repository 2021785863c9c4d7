package job

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gantry-build/gantry/internal/proctree"
)

// messageFD is the child's end of the message pipe; controlFD, of the control
// pipe, on which the parent names the jobs it terminated before the worker
// started them and the jobs whose gate it opened (see controlTerminate).
const (
	messageFD = 3
	controlFD = 4
)

// ErrTerminated is the cause of a handler's context when the job is
// terminated (SIGTERM).
var ErrTerminated = errors.New("terminated")

// ErrParentDied is the cause of a handler's context when gantry died: the job
// kills everything it started, then itself.
var ErrParentDied = errors.New("gantry exited")

// Handler does one action in the worker. Its context is cancelled with cause
// ErrTerminated when the job is terminated, or ErrParentDied when gantry died
// (kill -9). A non-nil error makes the result a failure with the error's text;
// the rest of the returned Result (Temporary, Skipped, Data) is kept.
//
// A handler runs in a process that runs other jobs before and after it: it
// must leave no goroutine running, no file open and no process-wide setting
// changed when it returns (RunChild puts back what it can and retires the
// worker otherwise), but for what it keeps for the worker's later jobs
// through Reporter.Keep.
type Handler func(ctx context.Context, spec Spec, r *Reporter) (Result, error)

// RunChild is the whole of a worker process: it reads job specs from stdin,
// as frames (frame.go), and runs them one at a time until stdin is closed, then
// returns the exit code for the caller to exit with (0; 1 if the specs could
// not be read). For each job it opens the job's log file; if the parent named
// the job on fd 4 (it was terminated before the worker started it), it reports
// the job terminated and runs nothing of it. Otherwise it points its own
// stdout and stderr at the log (so a crash's trace lands in the log of the job
// that crashed), sends start on fd 3, runs the handler for spec.Action with a
// context cancelled on SIGTERM, kills every process the job left behind, puts
// the process back as it was before the job (see workerState), and sends the
// result.
//
// Every process a job started dies with the job: whatever is still running
// when the handler returns is killed before the result is sent, and if gantry
// dies first the worker kills them all and itself (see watchParent).
func RunChild(handlers map[string]Handler) int {
	life, die := context.WithCancelCause(context.Background())
	defer die(nil)
	stopWatching := watchParent(die)
	defer func() {
		// Leftovers are killed while gantry's death is still watched for.
		proctree.KillDescendants()
		stopWatching()
	}()
	for _, fd := range []int{messageFD, controlFD} {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			fmt.Fprintf(os.Stderr, "gantry job: fd %d is not open (%v); this command is run by gantry itself\n", fd, err)
			return 1
		}
		syscall.CloseOnExec(fd) // commands a handler runs must not hold the pipes open
	}
	if err := syscall.SetNonblock(controlFD, true); err != nil {
		fmt.Fprintf(os.Stderr, "gantry job: making fd %d non-blocking: %v\n", controlFD, err)
		return 1
	}
	ctl, err := newControls(controlFD, func() { die(ErrParentDied) })
	if err != nil {
		fmt.Fprintf(os.Stderr, "gantry job: %v\n", err)
		return 1
	}
	msgs := os.NewFile(messageFD, "job-messages")
	defer msgs.Close()
	term := watchTerm()
	defer term.stop()
	return serve(life, os.Stdin, msgs, ctl, handlers, term)
}

// serve runs the jobs whose specs arrive on stdin until it is closed.
func serve(life context.Context, stdin io.Reader, msgs io.Writer, ctl *controls, handlers map[string]Handler, term *termSignal) int {
	base, err := captureState()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gantry job: warning: %v: this worker runs one job\n", err)
	}
	kept := &residents{}
	defer kept.closeAll()
	specs := bufio.NewReaderSize(stdin, 64<<10)
	var held heldParts
	for {
		spec, readErr := held.readJob(specs)
		if readErr == io.EOF {
			return 0
		}
		if readErr != nil {
			// The stream cannot be followed past a frame it could not read: the
			// result goes to the job the parent gave it, and the worker exits.
			r := &Reporter{msgs: msgs, log: io.Discard}
			r.finish(Result{Error: fmt.Sprintf("reading a job spec from gantry: %v", readErr)}, "its last spec could not be read")
			return 1
		}
		if retire := runOne(life, spec, msgs, ctl, handlers, term, base, kept); retire != "" {
			// Told so with the result, the parent closes stdin: exit then.
			if _, err := io.Copy(io.Discard, specs); err != nil {
				return 1
			}
			return 0
		}
	}
}

// runOne runs the job of spec and reports its result. It returns why the
// worker must take no further job, or "".
func runOne(life context.Context, spec Spec, msgs io.Writer, ctl *controls, handlers map[string]Handler, term *termSignal, base *workerState, kept *residents) (retire string) {
	r := &Reporter{msgs: msgs, log: io.Discard, residents: kept}
	r.ctl, r.gated = ctl, spec.Gated
	logFile, err := os.OpenFile(spec.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		r.finish(Result{Error: fmt.Sprintf("opening job log: %v", err)}, "")
		return ""
	}
	defer logFile.Close()
	r.log = logFile
	if ctl.begin(spec.ID) {
		r.logOnly(fmt.Sprintf("[worker] job %s was terminated before pid %d started it: nothing of it ran", spec.ID, os.Getpid()))
		r.finish(Result{Error: fmt.Sprintf("%s of %s: %v before it started", spec.Action, spec.Element, ErrTerminated)}, "")
		return ""
	}
	restoreOutput := redirectOutput(logFile)

	ctx, cancel := context.WithCancelCause(life)
	defer cancel(nil)
	term.begin(cancel)
	r.start(spec)
	var res Result
	if h := handlers[spec.Action]; h == nil {
		res = Result{Error: fmt.Sprintf("unknown job action %q", spec.Action)}
	} else {
		var panicked bool
		res, panicked = runHandler(ctx, h, spec, r)
		if panicked {
			retire = "its job panicked"
		}
	}
	r.flush()
	endJobProcesses()
	if term.end() && retire == "" {
		retire = "its job was terminated"
	}
	restoreOutput()
	switch {
	case retire != "":
	case base == nil:
		retire = "its state before the first job was not recorded"
	default:
		retire = base.restore(logFile, kept)
	}
	if retire != "" {
		r.logOnly("[worker] pid " + strconv.Itoa(os.Getpid()) + " takes no further job: " + retire)
	}
	r.finish(res, retire)
	return retire
}

// runHandler runs h, turning a panic into a failed result (and panicked true).
func runHandler(ctx context.Context, h Handler, spec Spec, r *Reporter) (res Result, panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			r.Log(fmt.Sprintf("panic: %v\n\n%s", v, debug.Stack()))
			res, panicked = Result{Error: fmt.Sprintf("%s of %s: internal error: %v", spec.Action, spec.Element, v)}, true
		}
	}()
	res, err := h(ctx, spec, r)
	if err != nil {
		res.OK = false
		res.Error = errorText(ctx, err)
	}
	return res, false
}

// termSignal turns SIGTERM into the cancellation of the job running, if any:
// a SIGTERM that arrives between jobs has nothing to stop.
type termSignal struct {
	sigs chan os.Signal
	done chan struct{}

	mu     sync.Mutex
	cancel context.CancelCauseFunc // the running job's, or nil
	seen   bool                    // a SIGTERM arrived during the running job
}

func watchTerm() *termSignal {
	t := &termSignal{sigs: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(t.sigs, syscall.SIGTERM)
	go func() {
		for {
			select {
			case <-t.sigs:
				t.mu.Lock()
				if t.cancel != nil {
					t.seen = true
					t.cancel(ErrTerminated)
				}
				t.mu.Unlock()
			case <-t.done:
				return
			}
		}
	}()
	return t
}

// begin makes cancel the running job's.
func (t *termSignal) begin(cancel context.CancelCauseFunc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cancel, t.seen = cancel, false
}

// end says that no job runs, and whether the one that ran was terminated.
func (t *termSignal) end() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cancel = nil
	return t.seen
}

func (t *termSignal) stop() {
	signal.Stop(t.sigs)
	close(t.done)
}

// errorText is err's text, naming the cancellation cause if err is only
// "context canceled".
func errorText(ctx context.Context, err error) string {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(err, cause) || !errors.Is(err, context.Canceled) {
		return err.Error()
	}
	return fmt.Sprintf("%v: %v", cause, err)
}

// Reporter is how a handler reports to the parent. Its methods are safe for
// concurrent use. Sending never fails visibly: if the parent is gone the
// child is about to be killed anyway.
type Reporter struct {
	mu      sync.Mutex
	msgs    io.Writer
	log     io.Writer
	sendErr error // first failure to send; later messages are dropped
	writers []*lineWriter
	// available: Available was called; slotDone: SlotDone was; atGate: Gate was.
	available, slotDone, atGate bool
	ctl                         *controls  // the worker's control pipe; nil before the spec is read
	gated                       bool       // the job's spec is Gated
	residents                   *residents // the worker's (Keep)
}

// Status sends a short description of what the job is doing now, e.g.
// "Staging 3 dependencies". It is also written to the log.
func (r *Reporter) Status(text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.statusLocked("[status] ", text)
}

// statusLocked writes text to the log after tag and sends it as a status.
func (r *Reporter) statusLocked(tag, text string) {
	r.writeLog(tag + text)
	r.send(Message{Type: MessageStatus, Text: text})
}

// Notice tells the user something every display shows, such as waiting for
// another process: a status line alone is shown only in verbose output. It is
// also written to the log.
func (r *Reporter) Notice(text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writeLog("[notice] " + text)
	r.send(Message{Type: MessageNotice, Text: text})
}

// Warn tells the user of a problem that does not fail the job (a build's
// overlapping dependencies): a notice of level "warning", also written to the log.
func (r *Reporter) Warn(text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writeLog("[warning] " + text)
	r.send(Message{Type: MessageNotice, Level: "warning", Text: text})
}

// SlotDone tells the parent that the job's work that needs its slot is over
// (a build's commands have ended): the scheduler may give the slot to another
// job while this one goes on with what is gantry's own work, not the
// element's (a build moves its install root into the cache, then makes it
// durable). So that nothing the job started outlives that point, SlotDone
// first kills every process the job left, as Available does. Only the first
// call sends anything.
func (r *Reporter) SlotDone() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.slotDone {
		return
	}
	r.slotDone = true
	endJobProcesses()
	r.writeLog("[slot done]")
	r.send(Message{Type: MessageSlotDone})
}

// Available tells the parent that what the job makes is usable by later jobs
// before the job ends: data says what it is, in the form the queue's
// Available reads (opaque to this package: a build's is binary). What the
// job still does after it, such as making its output durable, must need no job
// slot (no CPU to speak of) and start no process: the scheduler may give the
// slot to another job, and starts the jobs that wait for this one's output,
// while this one goes on. So that nothing the job started outlives that point,
// Available first kills every process the job left, as the job's end does. The
// job still ends with its result, and a failure then is still its failure.
// Only the first call sends anything.
func (r *Reporter) Available(data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.available {
		return
	}
	r.available = true
	endJobProcesses()
	r.writeLog("[available]")
	r.send(Message{Type: MessageAvailable, Data: data})
}

// Gate is where a job's preparation ends and the work that needs its slot
// begins. For a job whose spec is not Gated it returns nil at once and says
// nothing. A gated job sends MessageGate on its first call (the parent may take
// back what the job held to prepare); then, if the parent
// has opened its gate already (Job.Open), it returns nil. Otherwise it writes
// "[gate] status" to the log, sends status as a status message (so that
// displays show why the job waits), and waits until the parent opens the gate
// (nil) or ctx is done (context.Cause(ctx): the job was terminated, or gantry
// died); the log says how long it waited. The wait costs nothing: the worker
// sleeps on its control pipe until a line comes.
func (r *Reporter) Gate(ctx context.Context, status string) error {
	if !r.gated {
		return nil
	}
	r.mu.Lock()
	if !r.atGate {
		r.atGate = true
		r.send(Message{Type: MessageGate})
	}
	r.mu.Unlock()
	if r.ctl.isOpen() {
		return nil
	}
	r.mu.Lock()
	r.statusLocked("[gate] ", status)
	r.mu.Unlock()
	waited := time.Now()
	err := r.ctl.waitOpen(ctx)
	d := time.Since(waited).Round(time.Microsecond)
	if err != nil {
		r.logOnly(fmt.Sprintf("[gate] still closed after %s: %v", d, err))
		return err
	}
	r.logOnly(fmt.Sprintf("[gate] opened after %s", d))
	return nil
}

// Log writes line to the log file and sends it as a log message.
func (r *Reporter) Log(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logLocked(line)
}

// Progress sends how far the job has got: done of total bytes or steps
// (total 0 if unknown). It is not written to the log.
func (r *Reporter) Progress(done, total int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.send(Message{Type: MessageProgress, Done: done, Total: total})
}

// Writer returns a writer for a command's output: every line written to it
// goes to the log and is sent as a log message, as Log does. Each call
// returns a new writer with its own partial line; a partial line left when
// the handler returns is flushed then.
func (r *Reporter) Writer() io.Writer {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := &lineWriter{r: r}
	r.writers = append(r.writers, w)
	return w
}

func (r *Reporter) logLocked(line string) {
	line = strings.TrimRight(line, "\r\n")
	r.writeLog(line)
	r.send(Message{Type: MessageLog, Text: line})
}

func (r *Reporter) writeLog(line string) {
	_, _ = io.WriteString(r.log, logStamp(time.Now())+line+"\n") // a log that cannot be written must not fail the job
}

// internalMarkers begin the lines a job writes to its log for gantry's own
// bookkeeping (where its slot was given back, its output made available, its gate):
// the log file keeps them, the logs shown to users leave them out.
var internalMarkers = []string{"[slot done]", "[available]", "[gate]"}

// IsInternalLogLine says whether a job log's line (stamped or not) is one of gantry's
// internal markers, which displays of a log leave out.
func IsInternalLogLine(line string) bool {
	line = TrimLogStamp(line)
	for _, m := range internalMarkers {
		if strings.HasPrefix(line, m) {
			return true
		}
	}
	return false
}

// logStamp begins each line of a job log: the local time to the millisecond, so
// that a log shows where a job spent its time and lines from logs of jobs that
// ran together can be merged in order.
func logStamp(t time.Time) string { return t.Format("[15:04:05.000] ") }

// TrimLogStamp returns a job log's line without its timestamp, for displays that
// quote a log (a line without one is returned as it is).
func TrimLogStamp(line string) string {
	const n = len("[15:04:05.000] ")
	if len(line) >= n && line[0] == '[' && line[3] == ':' && line[9] == '.' && line[n-2:n] == "] " {
		return line[n:]
	}
	return line
}

func (r *Reporter) send(m Message) {
	if r.sendErr != nil {
		return
	}
	m.Time = time.Now()
	b, err := encodeMessage(m)
	if err != nil {
		// Too big (its data: a log line is cut at maxLine): say so instead.
		m.Data = nil
		if m.Result != nil {
			m.Result = &Result{Error: fmt.Sprintf("encoding job message: %v", err)}
		}
		if b, err = encodeMessage(m); err != nil {
			return
		}
	}
	_, r.sendErr = r.msgs.Write(b)
}

// logOnly writes line to the log only: it is not sent to the parent.
func (r *Reporter) logOnly(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writeLog(line)
}

func (r *Reporter) start(spec Spec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writeLog(fmt.Sprintf("[start] %s %s (job %s, pid %d)", spec.Action, spec.Element, spec.ID, os.Getpid()))
	r.send(Message{Type: MessageStart, Text: spec.Action + " " + spec.Element})
}

// finish sends the result, with why the worker takes no further job, if it
// does not. The job's control lines are forgotten first: the next job's may
// come once the result is sent.
func (r *Reporter) finish(res Result, retire string) {
	if r.ctl != nil {
		r.ctl.end()
	}
	if !res.OK && res.Error == "" {
		res.Error = "job failed without an error message"
	}
	if len(res.Data) > 0 && !json.Valid(res.Data) {
		res = Result{Error: "job returned invalid JSON as its result data"}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if res.OK {
		r.writeLog("[success]")
	} else {
		r.writeLog("[failure] " + res.Error)
	}
	r.send(Message{Type: MessageResult, Result: &res, Retire: retire})
}

// flush sends every writer's partial last line.
func (r *Reporter) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.writers {
		if len(w.buf) > 0 {
			r.logLocked(string(w.buf))
			w.buf = w.buf[:0]
		}
	}
}

// maxLine is where a line with no newline in sight is cut.
const maxLine = 64 << 10

// lineWriter splits output into lines for Reporter.Log. It is guarded by its
// Reporter's mutex.
type lineWriter struct {
	r   *Reporter
	buf []byte // the partial line so far
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.buf = append(w.buf, p...)
			if len(w.buf) >= maxLine {
				w.r.logLocked(string(w.buf))
				w.buf = w.buf[:0]
			}
			break
		}
		w.buf = append(w.buf, p[:i]...)
		w.r.logLocked(string(w.buf))
		w.buf = w.buf[:0]
		p = p[i+1:]
	}
	return n, nil
}
