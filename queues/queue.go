// Package queues holds the scheduler loop that moves elements through the queues
// (Track, Pull, Fetch, Build, Push), the Queue interface they implement, Item,
// readiness and planning. The queues themselves, one per job kind, are in actions;
// this package imports neither actions nor the cache.
//
// The scheduler is an actor: one goroutine (the one running Scheduler.Run) owns every
// queue, every Item, the token pool and the table of active jobs. Nothing else touches
// them; jobs, signals and user input reach the loop only as messages on its channel. No
// mutex guards scheduler state.
package queues

import (
	"encoding/json"
	"time"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/resources"
)

// Action names a queue and the jobs it runs.
type Action string

const (
	Track Action = "track"
	Pull  Action = "pull"
	Fetch Action = "fetch"
	Build Action = "build"
	Push  Action = "push"
)

// Status is what a queue says about an element right now.
type Status int

const (
	Wait  Status = iota // not yet possible (dependencies unbuilt, no ref)
	Ready               // a job can run for it
	Skip                // nothing to do (already cached, fetched, no remote)
)

func (s Status) String() string {
	switch s {
	case Wait:
		return "wait"
	case Ready:
		return "ready"
	case Skip:
		return "skip"
	}
	return "unknown"
}

// Item is the scheduler's record of one element in the session. Called only from the
// scheduler goroutine.
type Item struct {
	Element *element.Element
	// Cached: a successful artifact for Element.Key is in the local cache.
	Cached bool
	// Failed: a job for it failed in this session, or a failed build is cached.
	Failed bool
	// Retried: its job failed in this session and the user asked to run it again
	// (CmdRetry): the failure it cached is not a result to reuse (see Claimer).
	Retried bool
	// Priority orders READY items in the build queue: the longest remaining critical
	// path (estimated seconds) through this element to a target.
	Priority time.Duration
	// Estimate is its own expected build time (learned durations): 0 for an element
	// cached or failed at planning. The session's ETA adds these up.
	Estimate time.Duration
	// Depth is the longest chain of estimated builds before it in the plan (what
	// its own build waits for at the least): among items of equal Priority the
	// deeper one starts first, depth-first, continuing the chains already begun.
	Depth time.Duration
	// Unlearned: no build time was learned for it: Estimate is a guess, good for
	// ordering the builds, not for telling the user how long they take (eta.go).
	Unlearned bool
	// Stage lists the items its build stages (build dependencies and their runtime
	// dependencies).
	Stage []*Item
	// Remote: the plan found its artifact on a remote; it is pulled, not built.
	Remote bool
	// Pulled and Built: this session pulled or built its artifact.
	Pulled, Built bool

	// The loop's bookkeeping.
	state   state // where it is in the session (state.go)
	queue   int   // index of the queue it is in (see state)
	attempt int   // attempts of the current queue's job
	// req caches what the current queue's job needs: harvest asks on every turn, and
	// the answer only changes with the queue.
	req     resources.Request
	reqKey  string      // req's shape (ready.go)
	reqOf   *queueState // the queue req was computed for; nil: none yet
	slot    slot        // its turn and order in its queue (ready.go)
	retryAt time.Time   // a retry waits in the wait list until then
	// plan is what planning decided about it, or left to the loop.
	plan itemPlan
	// healedAt: its artifact was found damaged (or gone) and it went back into
	// the pipeline (see heal), last at that time (zero: never), when the cache
	// had seen healRemovals cleanups that removed something.
	healedAt     time.Time
	healRemovals uint64
}

// itemPlan is the plan's share of an item. Its gate (see Scheduler.status) decides
// before any queue after Track does.
type itemPlan struct {
	// later is set when the plan is decided in the loop (PlanTracked).
	later *deferred
	// pulls is the plan's record of the pull it is (when Remote); spare is set on the
	// items needed only if a pull falls back to building.
	pulls, spare *pullPlan
	runDeps      []*Item // items of its runtime dependencies (plans with remotes)
	expand       bool    // the plan would build it: its build dependencies are needed
}

// planGate is what the plan says about it before its queue does: an item of a
// tracked plan waits for the plan's decision, a spare item for the pulls it may be
// needed for. When the gate does not decide (ok false), the queue's own rule applies.
func (it *Item) planGate() (st Status, reason string, ok bool) {
	if st, reason, ok := deferredStatus(it); ok {
		return st, reason, true
	}
	return spareStatus(it)
}

// open reports whether only the queue's own rule decides about it: the plan has no
// gate for it. A gated item is asked every turn, never parked: what ends its wait
// (the plan's decision, a pull's end) is no job of an item it could wait on.
func (p *itemPlan) open() bool { return p.later == nil && p.spare == nil }

// Name is the element's name.
func (it *Item) Name() string { return it.Element.Name }

// stopped reports whether its job was stopped by a terminate: it goes no further.
func (it *Item) stopped() bool { return it.state == stateStopped }

// Spare reports whether the plan kept it only in case a pull falls back to
// building (see planWithRemotes): no remote was asked about it. A queue sees a
// spare item only once it is needed.
func (it *Item) Spare() bool { return it.plan.spare != nil }

// Queue is one stage of the pipeline. Its methods are called only from the scheduler
// goroutine, so implementations may read Items freely.
type Queue interface {
	Action() Action
	// Status says whether the element can be processed now, must wait, or needs nothing.
	// It says only what the queue knows: in every queue after Track, the loop asks
	// about an item only once the plan's gate lets it through (a tracked plan
	// decided, a spare item needed).
	Status(it *Item) (Status, string)
	// Resources are what one job of this queue needs for it.
	Resources(it *Item) resources.Request
	// Payload is the job's action-specific input (job.Spec's Payload and Shared).
	Payload(it *Item) (job.Input, error)
	// Done records a job's success (for example the element is now cached).
	Done(it *Item, res job.Result)
	// Retries is how often a temporary failure is retried (network queues).
	Retries() int
}

// Availer is a queue whose jobs may make their element available to the jobs that
// wait for it before they end (job.MessageAvailable: a build whose artifact is in
// the cache, while its job makes it durable). Available records that, with the
// message's data (what the job made); it is called at most once per job, and Done
// follows when the job ends well.
type Availer interface {
	Available(it *Item, data json.RawMessage)
}

// Gater is a queue whose jobs may start before the token that bounds their work
// (GateOn: the builders, for builds) is free. Such a job is started gated
// (job.Spec.Gated): it prepares what needs no slot (a build stages its
// dependencies and sources) and waits at its gate (job.Reporter.Gate) until the
// loop opens it (Running.Open) with the token in hand. Of the items ready for the
// token, the loop keeps up to the token's limit waiting at their gates, and gives a
// token that frees to whichever of them and the other ready items comes first in
// the queue's order: a job that waits at its gate never overtakes a more urgent one.
// Its work thus starts a preparation's time sooner than if it began when the token
// freed, which shortens the makespan.
type Gater interface {
	GateOn() resources.Resource // "": the queue's jobs start only with every token
}

// Volatile is implemented by a queue in which starting one item's job can change
// another item's Status within the same turn (a pull that asks for a build-once
// lease takes one of the session's slots): while Volatile says so, the loop asks an
// item's Status again right before starting it, not once per turn.
type Volatile interface {
	Volatile() bool
}

// Runner starts jobs. The real one runs them in gantry's worker processes; the
// scheduler's unit tests use a fake that finishes jobs when the test says so. A Runner
// that is also an io.Closer is closed when the session ends (Run returns).
type Runner interface {
	Start(spec job.Spec, onMessage func(job.Message)) (Running, error)
}

// Running is one started job.
type Running interface {
	// Open opens a gated job's gate (see Gater); it does nothing for another job.
	Open() error
	Suspend() error
	Resume() error
	Terminate() error
	Kill() error
	Wait() job.Outcome
}

// ProcessRunner runs jobs in worker processes (gantry re-executing itself) that it keeps
// for the session: about one per job slot, each running one job at a time (job.Workers).
type ProcessRunner struct {
	workers *job.Workers
}

// NewProcessRunner returns a runner whose workers run command (e.g. {"/usr/bin/gantry",
// "__job"}) with env (nil: gantry's), and get grace between SIGTERM and SIGKILL.
func NewProcessRunner(command, env []string, grace time.Duration) *ProcessRunner {
	return &ProcessRunner{workers: job.NewWorkers(job.Options{Command: command, Env: env, Grace: grace})}
}

// Start runs spec in an idle worker, or a new one.
func (r *ProcessRunner) Start(spec job.Spec, onMessage func(job.Message)) (Running, error) {
	return r.workers.Start(spec, onMessage)
}

// Close ends the workers; the scheduler calls it when the session ends.
func (r *ProcessRunner) Close() error { return r.workers.Close() }
