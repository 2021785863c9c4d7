// Package job runs one piece of scheduler work (track, pull, fetch, build,
// push of one element) in a worker process, and is also the worker's side of
// that arrangement (DESIGN.md §5).
//
// DESIGN.md §5 has each job be a child process in its own process group;
// workers refine that. A Workers pool keeps long-lived worker processes, each
// a re-execution of gantry (the caller supplies the argv, e.g. {exe, "__job"})
// in its own session and process group, each running one job at a time and
// many over its life, so that Go's start-up is paid per worker, not per job.
// A job's Spec goes to an idle worker's stdin as a binary frame, with the
// parts it shares with earlier jobs sent to that worker only once (frame.go);
// the worker, RunChild, runs the handler for the spec's action and sends
// Messages back over fd 3, a frame each (start, status, log, progress and
// finally result), while writing the full log to Spec.LogPath. During the job the worker's
// stdout and stderr go to the same log file, so a crash's panic trace is kept.
//
// A job is still a unit of its own. While it runs, its worker's process group
// holds the worker and that job's processes only, so the parent can suspend
// (SIGSTOP), resume (SIGCONT), terminate (SIGTERM, then SIGKILL after a grace
// period) or kill exactly that job; an idle worker is never signalled (a job
// terminated before its worker started it is named on the worker's control
// pipe, fd 4, instead, and the worker runs nothing of it: see Job.Terminate
// and controlTerminate). The worker
// is a child subreaper: processes that leave its group (setsid, double
// fork) stay its descendants, and it kills and reaps them all before it sends
// the job's result, and kills them when gantry dies, even by kill -9 (see
// watchParent). Between jobs it puts back what a job may change in the
// process, or retires when it cannot (see workerState). A worker that dies
// fails only the job it was running, unless it died before it started that
// job: then the job goes to a new worker, once (see Job.handOver).
//
// A gated job (Spec.Gated) does what needs no job slot first (a build stages
// its dependencies and sources), then waits at its gate (Reporter.Gate), saying
// so, until the parent opens it (Job.Open, a line on fd 4; a gate opened before
// the job gets there lets it through at once). So a scheduler can give a job to
// a worker while the job's slot is still busy, and only open its gate when the
// slot frees: the hand-over (log file, spec, start message) and the preparation
// are then done beside the slot's last job, not after it. The wait costs the
// worker nothing: it sleeps on the pipe.
package job

import (
	"encoding/json"
	"time"
)

// Spec is what one job attempt must do. It travels to the worker as a frame
// (frame.go).
type Spec struct {
	ID      string // unique per job attempt
	Action  string // "track", "pull", "fetch", "build", "push"
	Element string // the element's name, e.g. "base/gcc.toml"
	LogPath string
	Payload []byte // action-specific, opaque to this package (JSON, or the build's binary spec)
	// Shared are parts of the job's input that recur from job to job (a build's
	// staged dependencies, its project's configuration), opaque to this package
	// as Payload is: a worker is sent each part once, and later jobs name it (see
	// frame.go). The handler gets them back, in this order.
	Shared []string
	// Gated: the job prepares (stages its inputs) but does the work that needs its
	// slot only once the parent opens its gate (Job.Open): see Reporter.Gate.
	Gated bool
}

// Input is a job's action-specific input, as its queue makes it: the Spec's
// Payload and Shared.
type Input struct {
	Payload []byte
	Shared  []string
}

// MessageType says what a Message carries.
type MessageType string

// The message types, in the order a child sends them: one start, any number
// of status, log and progress messages, and one result.
const (
	MessageStart    MessageType = "start"
	MessageStatus   MessageType = "status"
	MessageLog      MessageType = "log"
	MessageProgress MessageType = "progress"
	MessageNotice   MessageType = "notice" // for the user whatever the display's verbosity
	// MessageAvailable, at most once and before the result: what the job makes is
	// usable by later jobs (Data says what it is), and the rest of the job (making
	// it durable) needs no job slot; see Reporter.Available.
	MessageAvailable MessageType = "available"
	// MessageSlotDone, at most once and before the result: the work of the job
	// that needs its slot is over; see Reporter.SlotDone.
	MessageSlotDone MessageType = "slot-done"
	// MessageGate, from a gated job (Spec.Gated), at most once and before the
	// result: the job has prepared and is at its gate; see Reporter.Gate.
	MessageGate   MessageType = "gate"
	MessageResult MessageType = "result"
)

// String returns the type's name.
func (t MessageType) String() string { return string(t) }

// Message is one report from a child. Messages are values; the parent hands
// each one to the onMessage given to Workers.Start, in the order the child
// sent them.
type Message struct {
	Type   MessageType `json:"type"`
	Time   time.Time   `json:"time"`
	Text   string      `json:"text,omitempty"`  // status text or log line (no trailing newline)
	Level  string      `json:"level,omitempty"` // with MessageNotice: "warning" (Reporter.Warn), else info
	Done   int64       `json:"done,omitempty"`  // progress, in bytes or steps
	Total  int64       `json:"total,omitempty"` // 0 when unknown
	Data   []byte      `json:"data,omitempty"`  // with MessageAvailable: what is available, opaque to this package
	Result *Result     `json:"result,omitempty"`
	// Retire, with a result: the worker that ran the job takes no further job,
	// and why (its state could not be made fresh again, see RunChild).
	Retire string `json:"retire,omitempty"`
}

// Result is how a job ended, as the child reports it.
type Result struct {
	OK        bool            `json:"ok"`
	Error     string          `json:"error,omitempty"`
	Temporary bool            `json:"temporary,omitempty"` // a network error worth retrying
	Skipped   bool            `json:"skipped,omitempty"`   // nothing to do, e.g. the remote lacks the artifact
	Data      json.RawMessage `json:"data,omitempty"`      // action-specific
	// WaitMs, when not OK: not a failure, someone else is doing the work (another
	// session holds the build-once lease); the job is asked again after this many
	// milliseconds, holding no token meanwhile. Error says what it waits for.
	WaitMs int64 `json:"wait-ms,omitempty"`
	// CacheBytes is about how much the job added to the local cache (an upper
	// bound: blobs the cache already had are counted too); the scheduler
	// starts a cleanup when the session takes the cache over its quota.
	CacheBytes int64 `json:"cache-bytes,omitempty"`
}

// Outcome is what Wait returns once the child has exited and every message
// has been delivered.
type Outcome struct {
	// Result is the child's result. If the child exited without sending one,
	// it is a failure saying how the process ended and where the log is.
	Result Result
	// Terminated is true if Terminate or Kill was called before the child exited.
	Terminated bool
	// ExitCode is the child's exit status, or -1 if a signal killed it.
	ExitCode int
	// Elapsed is the wall time the job ran, not counting time suspended.
	Elapsed time.Duration
}
