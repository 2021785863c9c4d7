package queues

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues/queuestest"
	"github.com/gantry-build/gantry/resources"
)

// timeout bounds every wait for something the scheduler should do. Tests wait on
// events, never sleep; reaching it means the scheduler hung or never did the thing.
const timeout = 5 * time.Second

// fakeRunner is the scheduler's seam for tests, after ninja's FakeCommandRunner: Start
// records the job and returns a fakeJob that runs until the test finishes it, in any
// order, with any outcome.
type fakeRunner struct {
	started chan *fakeJob // every started job, in start order

	mu        sync.Mutex
	seq       int // orders starts and ends
	jobs      []*fakeJob
	active    map[string]int // running jobs per action, not counting those waiting at their gate
	maxActive map[string]int // the most ever running at once, per action
	maxGated  map[string]int // the most ever waiting at their gates at once, per action
	gated     map[string]int // jobs waiting at their gates, per action
	startErr  func(spec job.Spec) error
	signalErr error // returned by every Suspend, Resume, Terminate and Kill when set
	// unbegun: the jobs' workers do not begin them (job.MessageStart) until the
	// test says so (fakeJob.begin); else they do at once.
	unbegun bool
}

func newFakeRunner() *fakeRunner {
	return &fakeRunner{
		started:   make(chan *fakeJob, 10000),
		active:    map[string]int{},
		maxActive: map[string]int{},
		gated:     map[string]int{},
		maxGated:  map[string]int{},
	}
}

// Start is called on the scheduler goroutine; it never blocks.
func (r *fakeRunner) Start(spec job.Spec, onMessage func(job.Message)) (Running, error) {
	r.mu.Lock()
	if r.startErr != nil {
		if err := r.startErr(spec); err != nil {
			r.mu.Unlock()
			return nil, err
		}
	}
	r.seq++
	j := &fakeJob{Spec: spec, r: r, onMessage: onMessage, startSeq: r.seq, out: make(chan job.Outcome, 1), gated: spec.Gated}
	r.jobs = append(r.jobs, j)
	if j.gated {
		r.gated[spec.Action]++
		r.maxGated[spec.Action] = max(r.maxGated[spec.Action], r.gated[spec.Action])
	} else {
		r.activate(spec.Action)
	}
	unbegun := r.unbegun
	r.mu.Unlock()
	if !unbegun {
		j.begin() // queued: the loop reads it after Start returns
	}
	r.started <- j
	return j, nil
}

// begin sends what a job's worker sends as it begins the job.
func (j *fakeJob) begin() {
	j.onMessage(job.Message{Type: job.MessageStart, Time: time.Now(), Text: j.Spec.Action + " " + j.Spec.Element})
}

// activate counts a job of action that does its work now. r.mu must be held.
func (r *fakeRunner) activate(action string) {
	r.active[action]++
	r.maxActive[action] = max(r.maxActive[action], r.active[action])
}

// maxWaitingAtGate is the most jobs of action that ever waited at their gates at once.
func (r *fakeRunner) maxWaitingAtGate(action Action) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxGated[string(action)]
}

// maxRunning is the most jobs of action that ever ran at once (waiting at a gate is
// not running).
func (r *fakeRunner) maxRunning(action Action) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxActive[string(action)]
}

// startsOf counts the jobs started per element for action.
func (r *fakeRunner) startsOf(action Action) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := map[string]int{}
	for _, j := range r.jobs {
		if j.Spec.Action == string(action) {
			n[j.Spec.Element]++
		}
	}
	return n
}

// fakeJob is one started job. Wait blocks until the test (or Terminate, or Kill)
// finishes it.
type fakeJob struct {
	Spec      job.Spec
	r         *fakeRunner
	onMessage func(job.Message)
	startSeq  int
	out       chan job.Outcome // receives the outcome once

	// Guarded by r.mu.
	calls    []string // "open", "suspend", "resume", "terminate", "kill"
	gated    bool     // started gated and not opened yet
	finished bool
	endSeq   int
	outcome  job.Outcome
}

func (j *fakeJob) String() string { return j.Spec.Action + " " + j.Spec.Element }

func (j *fakeJob) record(call string) error {
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	j.calls = append(j.calls, call)
	return j.r.signalErr
}

// Calls lists the control calls the scheduler made, in order.
func (j *fakeJob) Calls() []string {
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	return append([]string(nil), j.calls...)
}

// Open opens a gated job's gate: from then on it counts as running.
func (j *fakeJob) Open() error {
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	j.calls = append(j.calls, "open")
	if j.gated && !j.finished {
		j.gated = false
		j.r.gated[j.Spec.Action]--
		j.r.activate(j.Spec.Action)
	}
	return j.r.signalErr
}

// Opened reports whether the job does its work: it was not started gated, or was
// opened since.
func (j *fakeJob) Opened() bool {
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	return !j.gated
}

func (j *fakeJob) Suspend() error { return j.record("suspend") }
func (j *fakeJob) Resume() error  { return j.record("resume") }

func (j *fakeJob) Terminate() error {
	if err := j.record("terminate"); err != nil {
		return err
	}
	j.end(job.Outcome{Terminated: true, ExitCode: -1, Result: job.Result{Error: "terminated"}})
	return nil
}

func (j *fakeJob) Kill() error {
	if err := j.record("kill"); err != nil {
		return err
	}
	j.end(job.Outcome{Terminated: true, ExitCode: -1, Result: job.Result{Error: "killed"}})
	return nil
}

func (j *fakeJob) Wait() job.Outcome { return <-j.out }

// end makes the job exit with out, unless it already has. It reports whether it did.
func (j *fakeJob) end(out job.Outcome) bool {
	j.r.mu.Lock()
	if j.finished {
		j.r.mu.Unlock()
		return false
	}
	j.finished = true
	j.r.seq++
	j.endSeq = j.r.seq
	j.outcome = out
	if j.gated {
		j.r.gated[j.Spec.Action]--
	} else {
		j.r.active[j.Spec.Action]--
	}
	j.r.mu.Unlock()
	j.out <- out
	return true
}

// Finish ends the job with out; finishing a job twice is a mistake in the test.
func (j *fakeJob) Finish(t testing.TB, out job.Outcome) {
	t.Helper()
	if !j.end(out) {
		t.Fatalf("%s: finished twice", j)
	}
}

func (j *fakeJob) Succeed(t testing.TB) {
	t.Helper()
	j.Finish(t, job.Outcome{Result: job.Result{OK: true}, Elapsed: time.Millisecond})
}

func (j *fakeJob) Fail(t testing.TB, msg string) {
	t.Helper()
	j.Finish(t, job.Outcome{Result: job.Result{Error: msg}, ExitCode: 1})
}

func (j *fakeJob) FailTemporarily(t testing.TB, msg string) {
	t.Helper()
	j.Finish(t, job.Outcome{Result: job.Result{Error: msg, Temporary: true}, ExitCode: 1})
}

// AtGate says the job has prepared and waits at its gate, as Reporter.Gate does.
func (j *fakeJob) AtGate() {
	j.onMessage(job.Message{Type: job.MessageGate, Time: time.Now()})
}

// Say sends a status message as the child would.
func (j *fakeJob) Say(text string) {
	j.onMessage(job.Message{Type: job.MessageStatus, Time: time.Now(), Text: text})
}

// recorder collects published events; Publish never blocks for long.
type recorder struct {
	mu     sync.Mutex
	events []Event
	change chan struct{} // closed and replaced on every event
}

func newRecorder() *recorder { return &recorder{change: make(chan struct{})} }

func (r *recorder) Publish(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	close(r.change)
	r.change = make(chan struct{})
	r.mu.Unlock()
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// eventsOf returns the recorded events of type E.
func eventsOf[E Event](r *recorder) []E {
	var out []E
	for _, e := range r.all() {
		if e, ok := e.(E); ok {
			out = append(out, e)
		}
	}
	return out
}

// waitEvent waits until an event of type E matching match has been published.
func waitEvent[E Event](t testing.TB, r *recorder, match func(E) bool) E {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		for _, e := range r.events {
			if e, ok := e.(E); ok && match(e) {
				r.mu.Unlock()
				return e
			}
		}
		change := r.change
		r.mu.Unlock()
		select {
		case <-change:
		case <-deadline:
			var zero E
			t.Fatalf("no %T event came within %v", zero, timeout)
		}
	}
}

// session is one scheduler run in the background, steered by a test.
type session struct {
	t       testing.TB
	s       *Scheduler
	runner  *fakeRunner
	pool    *resources.Pool
	events  *recorder
	summary chan *Summary
	barrier int
}

// startSession runs a scheduler for cfg in its own goroutine. It fills in the fake
// runner, the event recorder and a log directory; cfg must have Queues, Items and Pool.
func startSession(t testing.TB, cfg Config, setup ...func(*fakeRunner)) *session {
	t.Helper()
	h := &session{t: t, runner: newFakeRunner(), pool: cfg.Pool, events: newRecorder(), summary: make(chan *Summary, 1)}
	for _, f := range setup {
		f(h.runner)
	}
	cfg.Runner = h.runner
	cfg.Publish = h.events.Publish
	if cfg.LogDir == "" {
		cfg.LogDir = "/logs"
	}
	if cfg.Project == "" {
		cfg.Project = "test"
	}
	h.s = New(cfg)
	go func() { h.summary <- h.s.Run() }()
	t.Cleanup(func() {
		// A failed test may leave the loop running: stop it and its jobs.
		h.s.Send(CmdKill)
	})
	return h
}

// next waits for the next job to start.
func (h *session) next() *fakeJob {
	h.t.Helper()
	select {
	case j := <-h.runner.started:
		return j
	case sum := <-h.summary:
		h.summary <- sum
		h.t.Fatalf("session ended while a job start was expected: %+v", sum)
	case <-time.After(timeout):
		h.t.Fatalf("no job started within %v", timeout)
	}
	return nil
}

// expect waits for the next job to start and checks its action and element.
func (h *session) expect(action Action, element string) *fakeJob {
	h.t.Helper()
	j := h.next()
	if j.Spec.Action != string(action) || j.Spec.Element != element {
		h.t.Fatalf("started %s, want %s %s", j, action, element)
	}
	return j
}

// nextN waits for n job starts and returns them by element name.
func (h *session) nextN(n int) map[string]*fakeJob {
	h.t.Helper()
	jobs := map[string]*fakeJob{}
	for range n {
		j := h.next()
		jobs[j.Spec.Element] = j
	}
	return jobs
}

// noStart fails if a job started that the test has not taken. Call it after sync, so
// the loop has done everything the events so far led to.
func (h *session) noStart() {
	h.t.Helper()
	select {
	case j := <-h.runner.started:
		h.t.Fatalf("%s started; no job should have", j)
	default:
	}
}

// sync waits until the loop has handled a message sent through running job j. The
// inbox is FIFO and the loop fills capacity before taking a message, so afterwards
// every earlier event (for example a job end that was waited for) has been followed
// by a harvest.
func (h *session) sync(j *fakeJob) {
	h.t.Helper()
	h.barrier++
	text := fmt.Sprintf("sync %d", h.barrier)
	if slices.ContainsFunc(eventsOf[JobEnd](h.events), func(e JobEnd) bool { return e.JobID == j.Spec.ID }) ||
		!slices.ContainsFunc(eventsOf[JobStart](h.events), func(e JobStart) bool { return e.JobID == j.Spec.ID }) {
		// Past its JobEnd (its tail), or before its JobStart (at its gate), a job's
		// status lines are not published: a notice is.
		j.onMessage(job.Message{Type: job.MessageNotice, Time: time.Now(), Text: text})
		waitEvent(h.t, h.events, func(e Notice) bool { return e.Text == text })
		return
	}
	j.Say(text)
	waitEvent(h.t, h.events, func(e JobMessage) bool { return e.JobID == j.Spec.ID && e.Text == text })
}

// ended waits until the loop has booked the end of j.
func (h *session) ended(j *fakeJob) JobEnd {
	h.t.Helper()
	return waitEvent(h.t, h.events, func(e JobEnd) bool { return e.JobID == j.Spec.ID })
}

// wait waits for Run to return.
func (h *session) wait() *Summary {
	h.t.Helper()
	select {
	case sum := <-h.summary:
		h.summary <- sum
		return sum
	case <-time.After(timeout):
		h.t.Fatalf("Run did not return within %v", timeout)
	}
	return nil
}

// succeedAll finishes every job with success as it starts, until Run returns.
func (h *session) succeedAll() *Summary {
	h.t.Helper()
	for {
		select {
		case j := <-h.runner.started:
			j.Succeed(h.t)
		case sum := <-h.summary:
			h.summary <- sum
			return sum
		case <-time.After(timeout):
			h.t.Fatalf("neither a job start nor the end of Run within %v", timeout)
		}
	}
}

// testQueue is a queue whose behaviour the test chooses, after ninja's
// FakeCommandRunner: the loop's tests need no real job kind (those are in
// actions). It is every kind of queue the loop knows (Waiter, Gater, Claimer,
// Availer, Recoverer, Warner); a rule left nil answers as a queue without it
// would.
type testQueue struct {
	action    Action
	status    func(it *Item) (Status, string) // nil: always Ready
	resources func(it *Item) resources.Request
	retries   int
	done      func(it *Item, res job.Result)                // nil: nothing to record
	waitsOn   func(it *Item) *Item                          // nil: waits on no item (never parked)
	gate      resources.Resource                            // "": its jobs start with every token
	prepare   resources.Resource                            // "": its gated jobs prepare with no token of their own
	claim     func(it *Item) Claim                          // nil: claimed
	available func(it *Item, data json.RawMessage)          // nil: nothing to record
	recover   func(it *Item, res job.Result) (string, bool) // nil: nothing recovers
	warning   func(it *Item, res job.Result) string         // nil: no warning
}

func (q *testQueue) Action() Action { return q.action }

func (q *testQueue) Status(it *Item) (Status, string) {
	if q.status == nil {
		return Ready, ""
	}
	return q.status(it)
}

func (q *testQueue) Resources(it *Item) resources.Request { return q.resources(it) }

func (q *testQueue) Payload(*Item) (job.Input, error) { return job.Input{}, nil }

func (q *testQueue) Done(it *Item, res job.Result) {
	if q.done != nil {
		q.done(it, res)
	}
}

func (q *testQueue) Retries() int { return q.retries }

func (q *testQueue) WaitsOn(it *Item) *Item {
	if q.waitsOn == nil {
		return nil
	}
	return q.waitsOn(it)
}

func (q *testQueue) GateOn() resources.Resource { return q.gate }

func (q *testQueue) PrepareOn() resources.Resource { return q.prepare }

func (q *testQueue) Claim(it *Item) Claim {
	if q.claim == nil {
		return Claim{Outcome: Claimed}
	}
	return q.claim(it)
}

func (q *testQueue) Available(it *Item, data json.RawMessage) {
	if q.available != nil {
		q.available(it, data)
	}
}

func (q *testQueue) Recover(it *Item, res job.Result) (string, bool) {
	if q.recover == nil {
		return "", false
	}
	return q.recover(it, res)
}

func (q *testQueue) Warning(it *Item, res job.Result) string {
	if q.warning == nil {
		return ""
	}
	return q.warning(it, res)
}

// needs returns a Resources func asking for the same request for every item.
func needs(shared []resources.Resource, exclusive ...resources.Resource) func(*Item) resources.Request {
	return func(*Item) resources.Request { return resources.Request{Shared: shared, Exclusive: exclusive} }
}

// buildQueue is a test queue with the rules of the session's Build queue
// (actions.Build), ungated and claiming nothing: an element is built once its
// staged dependencies are cached (parked on the first that is not), with a builder
// and the cache (and its pool); its job's success, or its artifact said available,
// makes it cached.
func buildQueue() *testQueue {
	return &testQueue{action: Build, status: waitForStage, waitsOn: uncachedStage, done: func(it *Item, _ job.Result) { built(it) },
		available: func(it *Item, _ json.RawMessage) { built(it) },
		resources: func(it *Item) resources.Request {
			req := resources.Request{Shared: []resources.Resource{resources.Process, resources.Cache}}
			if p := it.Element.Pool; p != "" {
				req.Shared = append(req.Shared, resources.PoolResource(p))
			}
			return req
		}}
}

// gatedBuildQueue is buildQueue whose builds wait at their gates for a builder, as
// the session's do.
func gatedBuildQueue() *testQueue {
	q := buildQueue()
	q.gate = resources.Process
	return q
}

func built(it *Item) { it.Cached, it.Built = true, true }

// waitForStage is the build's Status: skip what is cached, wait for the staged
// dependencies.
func waitForStage(it *Item) (Status, string) {
	if it.Cached {
		return Skip, "cached"
	}
	if uncachedStage(it) != nil {
		return Wait, "waiting for dependencies to build"
	}
	return Ready, ""
}

// uncachedStage is the first staged dependency of it not yet cached, or nil.
func uncachedStage(it *Item) *Item {
	for _, d := range it.Stage {
		if !d.Cached {
			return d
		}
	}
	return nil
}

// fetchQueue is a test queue with the Fetch queue's rules (actions.FetchQueue) where
// no sources are cached: every uncached element is fetched, with a download slot.
func fetchQueue(retries int) *testQueue {
	return &testQueue{action: Fetch, retries: retries, resources: needs([]resources.Resource{resources.Download}),
		status: func(it *Item) (Status, string) {
			if it.Cached {
				return Skip, "cached"
			}
			return Ready, ""
		}}
}

// trackQueue is a test queue with the Track queue's rules (actions.Tracker): an
// element with a trackable source is tracked, with a download slot; done books the
// refs found.
func trackQueue(done func(it *Item, res job.Result)) *testQueue {
	return &testQueue{action: Track, done: done, resources: needs([]resources.Resource{resources.Download}),
		status: func(it *Item) (Status, string) {
			for i := range it.Element.Sources {
				if it.Element.Sources[i].Trackable() {
					return Ready, ""
				}
			}
			return Skip, "nothing to track"
		}}
}

func buildPool(process int) *resources.Pool {
	return resources.NewPool(map[resources.Resource]int{resources.Process: process, resources.Cache: 0})
}

// newGraph makes a graph by hand from lines "name: dep dep ..." (dependencies listed
// before their dependants). Dependencies are build dependencies.
var newGraph = queuestest.Graph

// randomGraph makes a random DAG of n elements, each depending on up to fanin earlier
// ones.
var randomGraph = queuestest.RandomGraph

// plan plans a build of every element of g; the named elements are cached.
func plan(t testing.TB, g *element.Graph, opts PlanOptions, cached ...string) []*Item {
	t.Helper()
	if opts.Artifact == nil {
		opts.Artifact = func(e *element.Element) element.ArtifactStatus {
			for _, c := range cached {
				if e.Name == c {
					return element.ArtifactSuccess
				}
			}
			return element.ArtifactMissing
		}
	}
	items, err := Plan(g, g.Order, opts)
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// instantJob is a job that has ended with success (for benchmarks).
type instantJob struct{}

func (instantJob) Open() error      { return nil }
func (instantJob) Suspend() error   { return nil }
func (instantJob) Resume() error    { return nil }
func (instantJob) Terminate() error { return nil }
func (instantJob) Kill() error      { return nil }
func (instantJob) Wait() job.Outcome {
	return job.Outcome{Result: job.Result{OK: true}}
}

// chattyRunner finishes every job with success at once (for benchmarks), its jobs
// sending a status, a log line and a progress message before they end, as real jobs do.
type chattyRunner struct{}

func (chattyRunner) Start(_ job.Spec, onMessage func(job.Message)) (Running, error) {
	for _, t := range []job.MessageType{job.MessageStatus, job.MessageLog, job.MessageProgress} {
		onMessage(job.Message{Type: t, Text: "working"})
	}
	return instantJob{}, nil
}
