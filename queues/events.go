package queues

import (
	"sync"
	"time"
)

// Event is one immutable value the scheduler publishes for displays. Displays receive
// events in order through a Publisher and never block the loop.
type Event interface{ eventTime() time.Time }

// Base carries the time of an event.
type Base struct{ Time time.Time }

func (b Base) eventTime() time.Time { return b.Time }

// TimeOf is when e happened.
func TimeOf(e Event) time.Time { return e.eventTime() }

// SessionStart opens a session.
type SessionStart struct {
	Base
	Project  string
	Queues   []Action
	Elements int // elements in the plan
	NameLen  int // the longest element name in the plan, for displays that align columns
}

// JobStart: a job holds every token it works with and starts its work. A job
// started gated (see Gater) prepared at its gate before: its JobStart comes when
// the gate opens, with Gated and Prepared set. A job withdrawn at its gate never
// started: it has neither JobStart nor JobEnd.
type JobStart struct {
	Base
	JobID   string
	Action  Action
	Element string
	Key     string
	LogPath string
	Attempt int // 1 for the first try
	// Gated: it prepared at its gate, from Prepared, until it got its slot now.
	Gated    bool
	Prepared time.Time
	// Workspace: a build from the element's open workspace, this directory. Set by the
	// command that runs the session (the scheduler does not know about workspaces).
	Workspace string
}

// JobMessage: a job reported a status line, a log line or progress.
type JobMessage struct {
	Base
	JobID   string
	Action  Action
	Element string
	Key     string
	Kind    string // "status", "log", "progress"
	Text    string
	Done    int64
	Total   int64
}

// JobResult says how a job ended.
type JobResult string

const (
	ResultSuccess    JobResult = "success"
	ResultFailure    JobResult = "failure"
	ResultTerminated JobResult = "terminated"
	ResultSkipped    JobResult = "skipped"
	// ResultWaiting: someone else does the work (a build-once lease held by another
	// session); the job runs again later. Error says what it waits for.
	ResultWaiting JobResult = "waiting"
)

// JobEnd: a job finished, as far as the session is concerned: one per JobStart,
// after it. A build whose artifact is available before the job is over (see
// Availer) has its JobEnd then, before the builds that stage it start; a
// JobDurable follows when the job is over.
type JobEnd struct {
	Base
	JobID     string
	Action    Action
	Element   string
	Key       string
	Result    JobResult
	Error     string
	Duration  time.Duration // excluding suspended time
	LogPath   string
	WillRetry bool
}

// JobDurable: a job whose JobEnd came when its element was available has made
// it durable (its ref is written and synced) and is over: the last event of such a
// job (JSON shows it; the trace ends the job there). If that failed, a Notice
// says so instead and the element fails.
type JobDurable struct {
	Base
	JobID   string
	Action  Action
	Element string
	Key     string
}

// ElementSkipped: a queue had nothing to do for an element (cached, no push remote, ...).
type ElementSkipped struct {
	Base
	Action  Action
	Element string
	Key     string
	Reason  string
	// Waited: it waited for another builder (ElementWaiting), which made it:
	// displays show the end of a wait they showed.
	Waited bool
}

// ElementWaiting: another builder has the element (its build-once claim, see
// Claimer): it waits, holding no token, and then reuses what that builder made.
// Reason says what it waits for. (A build-once lease held on a server shows as a
// JobEnd of result ResultWaiting instead: the pull job asked.)
type ElementWaiting struct {
	Base
	Action  Action
	Element string
	Key     string
	Reason  string
}

// Notice is a message for the user that is not about one job.
type Notice struct {
	Base
	Level   string // "info", "warning", "error"
	Element string // may be empty
	Text    string
	// RemoteDown is the push remote (its URL without userinfo) a warning marked down
	// for the session: nothing is pushed to it. Empty for other notices.
	RemoteDown string
}

// Suspended and Resumed bracket a pause of all jobs.
type Suspended struct{ Base }
type Resumed struct{ Base }

// Held: under on-error "ask" a job failed, every other job is suspended and nothing
// starts until a decision arrives: CmdContinue, CmdQuit, CmdTerminate or CmdRetry.
// Failures that happen meanwhile are held too and asked about one after the other.
type Held struct {
	Base
	JobID   string
	Action  Action
	Element string
	Key     string
	Error   string
	LogPath string
}

// Counts is published after every loop turn that changed a counter: what each queue
// has done and holds now, and how far the session is.
type Counts struct {
	Base
	Queues []QueueStats
	Done   int // elements through the whole pipeline, failed or skipped
	Total  int // elements in the session
	// Remaining is the estimated build time left at Time (see Scheduler.remaining);
	// displays count it down from Time until the next Counts. 0: not known (an
	// element left to build has no learned build time), nothing left to build, or
	// no Build queue.
	Remaining time.Duration
}

// SessionEnd closes a session with its summary.
type SessionEnd struct {
	Base
	Summary *Summary
}

// QueueStats counts what one queue did and, while the session runs, holds.
type QueueStats struct {
	Action    Action
	Processed int
	Skipped   int
	Failed    int
	Running   int // jobs holding their tokens, up to their JobEnd (0 in a summary)
	// Waiting: elements waiting in the queue, retries and builds waiting at their
	// gates for a builder included (0 in a summary).
	Waiting int
}

// FailedElement is an element whose job failed, with the log to read.
type FailedElement struct {
	Element string `json:"element"`
	Action  Action `json:"action"`
	Error   string `json:"error"`
	LogPath string `json:"log,omitempty"`
	Cached  bool   `json:"cached,omitempty"` // the failure was cached by an earlier session
}

// Summary ends every session.
type Summary struct {
	Project     string
	Queues      []QueueStats
	Failed      []FailedElement
	NotStarted  []NotStarted  // elements never reached because of a failure or a stop
	Elapsed     time.Duration // the session's run time, its suspended time left out
	Suspended   time.Duration // how long it was suspended (Ctrl-Z, the s key, a held failure)
	Interrupted bool          // terminated by the user or a signal
	Quit        bool          // stopped starting new work after a failure or the user's quit
	// CriticalPath is the chain of jobs that set the wall time (see Recorder), on the
	// clock of Elapsed: suspended time left out.
	CriticalPath []PathLink
}

// NotStarted names an element the session did not get to, and why.
type NotStarted struct {
	Element string `json:"element"`
	Reason  string `json:"reason"`
}

// OK reports whether the session built everything it was asked to.
func (s *Summary) OK() bool {
	return len(s.Failed) == 0 && len(s.NotStarted) == 0 && !s.Interrupted
}

// Publisher hands events from the scheduler to a display without ever blocking the
// scheduler: events queue up in an unbounded buffer that one goroutine drains.
type Publisher struct {
	mu      sync.Mutex
	buf     []Event
	wake    chan struct{}
	closed  bool
	drained chan struct{}
}

// NewPublisher starts delivering events to deliver, in order, from its own goroutine.
func NewPublisher(deliver func(Event)) *Publisher {
	p := &Publisher{wake: make(chan struct{}, 1), drained: make(chan struct{})}
	go p.pump(deliver)
	return p
}

// Publish queues an event; it never blocks on the display.
func (p *Publisher) Publish(e Event) {
	p.mu.Lock()
	p.buf = append(p.buf, e)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Close delivers what is queued and waits until the display has seen it all.
func (p *Publisher) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	<-p.drained
}

func (p *Publisher) pump(deliver func(Event)) {
	defer close(p.drained)
	for {
		<-p.wake
		for {
			p.mu.Lock()
			batch, closed := p.buf, p.closed
			p.buf = nil
			p.mu.Unlock()
			if len(batch) == 0 {
				if closed {
					return
				}
				break
			}
			for _, e := range batch {
				deliver(e)
			}
		}
	}
}
