package queues

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/internal/backoff"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/resources"
)

// Command is an instruction to a running scheduler from outside (signals, keys).
type Command int

const (
	CmdSuspend   Command = iota // SIGSTOP every job; start nothing until resumed
	CmdResume                   // SIGCONT every job
	CmdQuit                     // start nothing new (pushes of what was built go on)
	CmdTerminate                // stop running jobs now, start nothing
	CmdKill                     // SIGKILL every job at once
	// Answers to a Held failure (on-error "ask"); CmdQuit and CmdTerminate answer too.
	CmdContinue // leave the failure booked, go on with everything else
	CmdRetry    // run the failed job again
)

func (c Command) String() string {
	return [...]string{"suspend", "resume", "quit", "terminate", "kill", "continue", "retry"}[c]
}

// Config is everything a scheduler session needs.
type Config struct {
	Project string
	Queues  []Queue // in pipeline order
	Items   []*Item // the plan, dependencies first
	Pool    *resources.Pool
	Runner  Runner
	OnError element.OnError
	// LogDir receives one log file per job attempt.
	LogDir string
	// Publish receives events; it must not block (use a Publisher).
	Publish func(Event)
	// Backoff is the wait before retry number attempt (1-based); nil =
	// backoff.Jittered (exponential from 1s with jitter, capped at 30s).
	Backoff func(attempt int) time.Duration
	// OnJobEnd, if set, is called on the scheduler goroutine when a job has ended,
	// before its JobEnd is published. Side effects of a job's end that change the
	// cache (dropping a terminated build's failed artifact, recording durations)
	// belong here, never in a display. An error is published as a warning Notice
	// naming the element.
	OnJobEnd func(JobEnd) error
	// Cleanup keeps the local cache under a quota; nil: no quota.
	Cleanup *CleanupConfig
	// Needs, if set, is told on the scheduler goroutine what the session still
	// needs from the cache (what a cleanup must keep): when the session starts
	// with work to do, when its plan changes (a dependency taken back to heal)
	// and when its own cleanup starts, never per job. It publishes them for
	// cleanups in other processes.
	Needs func([]ArtifactKey) error
}

// Scheduler runs one session. Create it with New, run it with Run, and steer it from
// other goroutines with Send.
type Scheduler struct {
	cfg    Config
	inbox  chan any
	queues []*queueState
	active map[string]*activeJob
	seq    int

	quitting    bool // start no new work except pushes
	terminating bool // start nothing; running jobs are being stopped
	interrupted bool // the user or a signal stopped the session

	suspended      bool
	suspendedAt    time.Time
	suspendedTotal time.Duration
	start          time.Time

	retries int // retry timers pending
	failed  []FailedElement
	ended   chan struct{} // closed when Run returns

	// held are failures waiting for the user's decision (on-error "ask"), first one
	// asked; holdSuspended says the hold, not the user, suspended the jobs.
	held          []held
	holdSuspended bool

	done       int      // elements out of the pipeline: through every queue, or failed
	lastCounts Counts   // last published, to publish only changes
	eta        etaState // the last ETA (eta.go)

	clean     cleanupState       // quota keeping (cleanup.go)
	interests map[*Item]interest // exclusive interests registered for items (interest.go)

	waiters map[*Item][]entry // parked items, under the item each waits on (ready.go)
	turn    uint64            // harvests so far
	entered uint64            // items entered into queues so far: their order among equals

	// claims are the claims held, by item, and claimWaits the items parked while
	// another builder has theirs, claimWG their waiting goroutines (claim.go).
	claims     map[*Item]func()
	claimWaits int
	claimWG    sync.WaitGroup
}

type held struct {
	qs  *queueState
	it  *Item
	ask Held
}

type queueState struct {
	q     Queue
	wait  []*Item // asked every turn (ready.go); in order unless unsorted
	spare []*Item // the other buffer harvest rebuilds the wait list in
	done  []*Item
	// groups are the ready heaps, one per request shape; ready and parked count the
	// items in them and parked on other items.
	groups        []*readyGroup
	ready, parked int
	tails         int          // jobs that gave their tokens back at job.MessageAvailable
	gated         []*activeJob // jobs waiting at their gate (Gater), first started first
	unsorted      bool
	processed     int
	skipped       int
	failed        int
	running       int
}

type activeJob struct {
	id      string
	item    *Item
	qs      *queueState
	tokens  heldTokens // released by finish, or earlier in part (available, slotDone)
	running Running
	logPath string
	started time.Time
	// startedAt is the session's elapsed time (s.elapsed) when it started.
	startedAt time.Duration
	// available: the job said its element is available (job.MessageAvailable),
	// availableAfter into the job; tail: it then gave its builder back (see available).
	available, tail bool
	availableAfter  time.Duration
	// committing: its worker is done and the session makes its output durable
	// (MessageCommitting): it no longer counts among its queue's tails.
	committing bool
	// gated: it was started gated and waits at its gate without its queue's GateOn
	// token (see Gater); gateWait is how long it waited there until it was opened.
	gated    bool
	gateWait time.Duration
	atGate   bool      // it said it has got to its gate (job.MessageGate)
	prepared time.Time // a job started gated: when it was (its start); zero for another
	// begun: its worker began it (job.MessageStart). announced: its JobStart is
	// published (see announce), and held are its log lines from before (a gated
	// job's, while it prepared at its gate). ended: its JobEnd is published, which
	// for a job whose element was available comes before the job ends (see
	// available).
	begun, announced, ended bool
	held                    []JobMessage
	// counted: it is counted in its queue's running jobs (Counts): from when it
	// holds its tokens (its spawn, or its gate's opening) to its JobEnd.
	counted bool
}

// Inbox messages.
type jobMessage struct {
	id  string
	msg job.Message
}
type jobDone struct {
	id  string
	out job.Outcome
}
type retryDue struct{}

// New prepares a session.
func New(cfg Config) *Scheduler {
	s := &Scheduler{cfg: cfg, inbox: make(chan any, 1024), active: map[string]*activeJob{}, ended: make(chan struct{})}
	for _, q := range cfg.Queues {
		s.queues = append(s.queues, &queueState{q: q})
	}
	if s.cfg.Backoff == nil {
		s.cfg.Backoff = backoff.Jittered
	}
	if s.cfg.Publish == nil {
		s.cfg.Publish = func(Event) {}
	}
	return s
}

// Send delivers a command to the loop. Safe from any goroutine; never blocks the caller
// for long (the loop always drains its inbox until the session ends).
func (s *Scheduler) Send(c Command) {
	select {
	case s.inbox <- c:
	case <-s.ended:
	}
}

// Do delivers a command and waits until the loop has carried it out (for example, until
// every job is stopped before gantry stops itself on Ctrl-Z).
func (s *Scheduler) Do(c Command) {
	done := make(chan struct{})
	select {
	case s.inbox <- commandRequest{c, done}:
	case <-s.ended:
		return
	}
	select {
	case <-done:
	case <-s.ended:
	}
}

type commandRequest struct {
	c    Command
	done chan struct{}
}

// Elapsed is the session's run time without suspended time. Loop goroutine only.
func (s *Scheduler) elapsed(now time.Time) time.Duration {
	d := now.Sub(s.start) - s.suspendedTotal
	if s.suspended {
		d -= now.Sub(s.suspendedAt)
	}
	return d
}

// Run drives the session to its end and returns the summary. The calling goroutine
// becomes the scheduler goroutine.
func (s *Scheduler) Run() *Summary {
	s.start = time.Now()
	s.initCleanup()
	actions := make([]Action, len(s.queues))
	for i, qs := range s.queues {
		actions[i] = qs.q.Action()
	}
	nameLen := 0
	for _, it := range s.cfg.Items {
		nameLen = max(nameLen, len(it.Name()))
	}
	s.cfg.Publish(SessionStart{Base: Base{s.start}, Project: s.cfg.Project, Queues: actions, Elements: len(s.cfg.Items), NameLen: nameLen})
	if len(s.queues) > 0 {
		for _, it := range s.cfg.Items {
			if it.Failed { // a cached failure: counted and reported, never queued
				s.done++
				s.cachedFailureQueue().failed++
				it.state = stateFailed
				continue
			}
			it.queue = 0
			s.add(s.queues[0], it)
		}
	}
	if s.hasWork() {
		s.publishNeeds(s.keep())
	}
	s.startETA()
	for changed := true; ; {
		// Only what can change readiness starts a harvest: a job's log, status and
		// progress messages do not.
		for changed && (s.promote() || s.harvest()) {
		}
		s.publishCounts()
		// Done when nothing runs and nothing can start. Pending retries and waits for
		// another builder keep the session alive unless it is quitting (they would
		// never be harvested); so does a failure waiting for the user's decision.
		if len(s.active) == 0 && !s.suspended && len(s.held) == 0 && (s.retries == 0 && s.claimWaits == 0 || s.quitting) {
			break
		}
		changed = s.handle(<-s.inbox)
	}
	if c, ok := s.cfg.Runner.(io.Closer); ok {
		if err := c.Close(); err != nil {
			s.cfg.Publish(Notice{Base: Base{time.Now()}, Level: "warning", Text: fmt.Sprintf("ending the job workers: %v", err)})
		}
	}
	close(s.ended)
	s.endClaims()
	sum := s.summarize()
	s.cfg.Publish(SessionEnd{Base: Base{time.Now()}, Summary: sum})
	return sum
}

// cachedFailureQueue is the queue a failed build cached by an earlier session counts
// against: Build, or the last queue of a session without one. Counts, the summary's
// queue stats and its failure list then agree.
func (s *Scheduler) cachedFailureQueue() *queueState {
	if qs := s.queueOf(Build); qs != nil {
		return qs
	}
	return s.queues[len(s.queues)-1]
}

// queueOf is the session's queue of action, or nil if it has none.
func (s *Scheduler) queueOf(action Action) *queueState {
	for _, qs := range s.queues {
		if qs.q.Action() == action {
			return qs
		}
	}
	return nil
}

// add enters it, in no list of a queue, into qs's wait list, highest priority
// first, first come first among equals.
func (s *Scheduler) add(qs *queueState, it *Item) {
	s.entered++
	it.state, it.slot = stateWaiting, slot{gen: it.slot.gen + 1, seq: s.entered}
	qs.requeue(it)
}

// pass books that qs is done with it (skipped, or its job succeeded): the next
// promote moves it on.
func (qs *queueState) pass(it *Item) {
	qs.move(it, statePassed)
	qs.done = append(qs.done, it)
}

// promote moves the done items of each queue into the next one. It reports whether
// anything moved.
func (s *Scheduler) promote() bool {
	moved := false
	for i := len(s.queues) - 1; i >= 0; i-- {
		qs := s.queues[i]
		for _, it := range qs.done {
			moved = true
			it.attempt = 0
			if i == s.eta.build {
				s.leaving(it)
			}
			if i+1 < len(s.queues) {
				it.queue = i + 1
				s.add(s.queues[i+1], it)
			} else {
				qs.move(it, stateDone)
				s.done++
			}
		}
		qs.done = qs.done[:0]
	}
	return moved
}

// harvest walks the queues in reverse (Push first, Track last) and starts every READY
// element the tokens allow. It reports whether any element was skipped (moved to done).
func (s *Scheduler) harvest() bool {
	s.withdrawStaleInterest()
	if s.suspended || s.terminating || len(s.held) > 0 {
		return false
	}
	s.harvestCleanup()
	s.turn++
	now := time.Now()
	var refused []resources.Request
	skipped := false
	for i := len(s.queues) - 1; i >= 0; i-- {
		qs := s.queues[i]
		if s.quitting && qs.q.Action() != Push {
			continue
		}
		// The wait list is rebuilt in the other buffer: a skip may wake items into it
		// while this one is walked.
		qs.sortWait()
		waiting := qs.wait
		qs.wait = qs.spare[:0]
		for _, it := range waiting {
			if now.Before(it.retryAt) {
				qs.requeue(it)
				continue
			}
			if st, reason := s.status(qs, it); !s.place(qs, it, st, reason) {
				qs.requeue(it)
			}
		}
		clear(waiting)
		qs.spare = waiting[:0]
		s.startReady(qs, &refused)
		skipped = skipped || len(qs.done) > 0
	}
	return skipped
}

// status is what qs says about it, the plan's gate first: every queue after Track
// sees an item only once the plan lets it through (Item.planGate), so a queue's
// Status says only what the queue itself knows.
func (s *Scheduler) status(qs *queueState, it *Item) (Status, string) {
	if qs.q.Action() != Track {
		if st, reason, ok := it.planGate(); ok {
			return st, reason
		}
	}
	return qs.q.Status(it)
}

// skip moves it to done: its queue has nothing to do for it. What was parked on it
// is asked again.
func (s *Scheduler) skip(qs *queueState, it *Item, reason string) {
	s.skipWaited(qs, it, reason, false)
}

// skipWaited is skip, for an item that waited for another builder when waited.
func (s *Scheduler) skipWaited(qs *queueState, it *Item, reason string, waited bool) {
	s.wake(it)
	if it.Failed && qs == s.cachedFailureQueue() {
		qs.failed++ // a cached failure found once tracking decided the plan
	} else {
		qs.skipped++
	}
	qs.pass(it)
	s.cfg.Publish(ElementSkipped{Base: Base{time.Now()}, Action: qs.q.Action(), Element: it.Name(), Key: it.Element.Key, Reason: reason, Waited: waited})
}

// spawn reserves the job's resources and starts it. It returns false, leaving the item
// waiting, when the tokens are not there. A job that cannot even start fails the item.
func (s *Scheduler) spawn(qs *queueState, it *Item, refused *[]resources.Request) bool {
	req := s.request(qs, it)
	// Tokens are only freed between turns: a request shape refused once this turn is
	// refused again, so do not ask (this keeps a turn O(waiting) with no allocation).
	for _, r := range *refused {
		if slices.Equal(r.Shared, req.Shared) && slices.Equal(r.Exclusive, req.Exclusive) {
			return false
		}
	}
	var tokens heldTokens
	ok := false
	if !s.mustGate(qs, req) {
		tokens, ok = reserveTokens(s.cfg.Pool, req)
	}
	gated := false
	if !ok {
		// Without its gate's token, it may still start and wait at its gate.
		if g, ok := s.gatedRequest(qs, req); ok {
			tokens, gated = reserveTokens(s.cfg.Pool, g)
		}
		if !gated {
			*refused = append(*refused, req)
			if len(req.Exclusive) > 0 {
				s.registerInterest(it, req.Exclusive)
			}
			return false
		}
	}
	if !s.claim(qs, it) {
		tokens.releaseAll()
		return true // another builder has it (claim.go)
	}
	s.withdrawInterest(it)
	qs.move(it, stateRunning)
	it.attempt++
	action := qs.q.Action()
	a := &activeJob{id: s.nextJobID(action), item: it, qs: qs, tokens: tokens, logPath: s.logPath(it, action), gated: gated}
	payload, err := qs.q.Payload(it)
	if err == nil {
		if err = s.startJob(a, action, it.Name(), payload); err == nil {
			if gated {
				a.prepared = a.started
				qs.gated = append(qs.gated, a)
			} else {
				s.count(a)
			}
			return true // announced once it has begun, and its gate opened
		}
	}
	// Could not start: the item fails like a job would.
	tokens.releaseAll()
	s.unclaim(it)
	s.fail(qs, it, fmt.Sprintf("cannot start %s job: %v", action, err), "")
	return true
}

// announce publishes a's JobStart, once: when the job holds every token it works
// with and runs — its worker began it (job.MessageStart) and, for a job started
// gated, its gate opened (see open) — so that a START is never shown for a job
// that only waits for a builder, or for a worker. A job that ends or is available
// before that (a failure while it prepared, a stack) is announced just before. The
// log lines it sent before (held) follow its JobStart; its status lines from then
// ("staged, waiting for a builder") are not shown. A job terminated before it ran
// (withdrawn at its gate, or before its worker began it) is never announced.
func (s *Scheduler) announce(a *activeJob, at time.Time) {
	if a.announced {
		return
	}
	a.announced = true
	it := a.item
	start := JobStart{Base: Base{at}, JobID: a.id, Action: a.qs.q.Action(), Element: it.Name(),
		Key: it.Element.Key, LogPath: a.logPath, Attempt: it.attempt}
	if !a.prepared.IsZero() {
		start.Gated, start.Prepared = true, a.prepared
	}
	s.cfg.Publish(start)
	for _, m := range a.held {
		s.cfg.Publish(m)
	}
	a.held = nil
}

// nextJobID names a new job of action: "build-12".
func (s *Scheduler) nextJobID(action Action) string {
	s.seq++
	return fmt.Sprintf("%s-%d", action, s.seq)
}

// startJob starts the job a describes and books it as active: the one place a job
// process is started. Its messages and its end reach the loop through the inbox.
func (s *Scheduler) startJob(a *activeJob, action Action, element string, in job.Input) error {
	spec := job.Spec{ID: a.id, Action: string(action), Element: element, LogPath: a.logPath, Payload: in.Payload, Shared: in.Shared, Gated: a.gated}
	running, err := s.cfg.Runner.Start(spec, func(m job.Message) { s.inbox <- jobMessage{a.id, m} })
	if err != nil {
		return err
	}
	a.running, a.started = running, time.Now()
	a.startedAt = s.elapsed(a.started)
	s.active[a.id] = a
	go func() { s.inbox <- jobDone{a.id, running.Wait()} }()
	return nil
}

// logPath is where the job of action on it logs. The logs of a project share its
// directory, ELEMENT.KEY-ACTION.log each (an element in
// a subdirectory of elements/ keeps that subdirectory): one directory per element was
// one more new inode per job, the costliest thing a job does on some filesystems.
func (s *Scheduler) logPath(it *Item, action Action) string {
	name := strings.TrimSuffix(it.Name(), ".toml")
	// ELEMENT.KEY-ACTION.log; an element with no key yet (tracking one without a ref)
	// has ELEMENT.ACTION-TIME.log instead, the time in UTC, beside its other logs.
	stem := fmt.Sprintf("%s-%s", it.Element.ShortKey(), action)
	if it.Element.Key == "" {
		stem = fmt.Sprintf("%s-%s", action, time.Now().UTC().Format("20060102-150405"))
	}
	file := stem + ".log"
	if it.attempt > 1 {
		file = fmt.Sprintf("%s.%d.log", stem, it.attempt)
	}
	return filepath.Join(s.cfg.LogDir, s.cfg.Project, filepath.FromSlash(name)+"."+file)
}

// handle processes one inbox message. It reports whether the message may have
// changed what can start.
func (s *Scheduler) handle(m any) bool {
	switch m := m.(type) {
	case jobMessage:
		a := s.active[m.id]
		if a == nil {
			return false
		}
		if a.item == nil {
			s.cleanupMessage(a, m.msg)
			return false
		}
		switch m.msg.Type {
		case job.MessageStart:
			a.begun = true
			if !a.gated {
				s.announce(a, time.Now())
			}
		case job.MessageAvailable:
			return s.available(a, m.msg)
		case job.MessageSlotDone:
			return s.slotDone(a, m.msg)
		case MessageCommitting:
			return s.committing(a)
		case job.MessageGate:
			return s.atGate(a)
		case job.MessageNotice:
			s.jobNotice(a.item.Name(), m.msg)
		case job.MessageStatus, job.MessageLog, job.MessageProgress:
			msg := JobMessage{Base: Base{m.msg.Time}, JobID: a.id, Action: a.qs.q.Action(), Element: a.item.Name(),
				Key: a.item.Element.Key, Kind: string(m.msg.Type), Text: m.msg.Text, Done: m.msg.Done, Total: m.msg.Total}
			switch {
			case a.ended: // after its JobEnd (its tail): only its log has it
			case a.announced:
				s.cfg.Publish(msg)
			case m.msg.Type == job.MessageLog:
				a.held = append(a.held, msg)
			}
		}
		return false
	case jobDone:
		if a := s.active[m.id]; a != nil {
			s.finish(a, m.out)
		}
	case retryDue:
		s.retries--
	case claimDone:
		s.endClaimWait(m)
	case Command:
		s.command(m)
	case commandRequest:
		s.command(m.c)
		close(m.done)
	}
	return true
}

// finish books a job's outcome. Every token the job still holds goes back here.
func (s *Scheduler) finish(a *activeJob, out job.Outcome) {
	delete(s.active, a.id)
	a.tokens.releaseAll()
	s.noteCacheBytes(out.Result)
	if a.item == nil {
		s.finishCleanup(a, out)
		return
	}
	it, qs := a.item, a.qs
	// Released once its end is booked and the hook ran: what a waiting session
	// finds is what this job committed.
	defer s.unclaim(it)
	atGate := s.ungate(a)
	s.wake(it)
	// Its duration is the time it held its slot: not what it waited at its gate.
	end := JobEnd{Base: Base{time.Now()}, JobID: a.id, Action: qs.q.Action(), Element: it.Name(), Key: it.Element.Key,
		Duration: max(out.Elapsed-a.gateWait, 0), LogPath: a.logPath, Error: out.Result.Error}
	if out.Terminated && !a.announced {
		// Stopped at its gate or before its worker began it (quit, terminate):
		// nothing of its work ran, and it did not start as far as the session is
		// concerned: no JobStart, so no JobEnd either; the summary lists it as not
		// started. The hook still sees its end (a lease goes back).
		end.Result = ResultTerminated
		if atGate {
			end.Error = "withdrawn at its gate, before its work began: the session is stopping"
		}
		s.uncount(a)
		s.jobEndHook(end)
		s.add(qs, it)
		return
	}
	if a.tail && !a.committing {
		qs.tails--
	}
	if a.ended {
		s.endTail(a, out, end)
		return
	}
	switch {
	case out.Terminated:
		qs.move(it, stateStopped)
		end.Result = ResultTerminated
		s.jobEnded(a, end)
	case out.Result.OK && out.Result.Skipped:
		warning := ""
		if r, ok := qs.q.(Recoverer); ok {
			warning, ok = r.Recover(it, out.Result)
			s.pullEnded(qs, it, ok)
		}
		qs.skipped++
		qs.pass(it)
		end.Result = ResultSkipped
		s.jobEnded(a, end)
		s.warn(it, warning)
	case out.Result.OK:
		s.succeeded(a, out.Result)
		end.Result = ResultSuccess
		s.jobEnded(a, end)
		s.doneWarning(a, out.Result)
	case !out.Result.OK && out.Result.WaitMs > 0 && !s.quitting:
		it.attempt = 0 // a wait is not a failed attempt: the network retries stay whole
		s.retryAfter(qs, it, time.Duration(out.Result.WaitMs)*time.Millisecond)
		end.Result = ResultWaiting
		s.jobEnded(a, end)
	case out.Result.Temporary && it.attempt <= qs.q.Retries() && !s.quitting:
		s.retryAfter(qs, it, s.cfg.Backoff(it.attempt))
		end.Result, end.WillRetry = ResultFailure, true
		s.jobEnded(a, end)
	case s.heal(a, out.Result, end):
	case s.healPush(a, out.Result, end):
	case s.recover(a, out.Result, &end):
	default:
		end.Result = ResultFailure
		s.jobEnded(a, end)
		s.fail(qs, it, out.Result.Error, a.logPath)
		if s.cfg.OnError == element.OnErrorAsk && !s.terminating {
			s.hold(held{qs, it, Held{Base: Base{end.Time}, JobID: a.id, Action: end.Action, Element: it.Name(),
				Key: it.Element.Key, Error: out.Result.Error, LogPath: a.logPath}})
		}
	}
}

// available books a job's word that its element is available before the job ends
// (job.MessageAvailable, from a queue that is an Availer): the items waiting for it
// are asked again, and a JobMessage of kind "available" says so. The job's tail,
// what it has left to do (making its artifact durable), writes to the cache but
// needs no builder: the job gives back every token but the cache's, unless as many
// jobs of its queue as there are builders are in their tails already. That bounds
// the worker processes in their tails at the builders (a job in its tail keeps its
// worker busy; with the jobs at their gates, see Gater, three times the builders). The job ends as any other (finish): its JobEnd comes then, its Duration
// lasting until it was available, when the builds after it could start, which is
// what its next estimate should be; the item goes on to the next queue then, or
// fails if the job does. It reports whether anything changed.
func (s *Scheduler) available(a *activeJob, m job.Message) bool {
	q, ok := a.qs.q.(Availer)
	if !ok || a.available {
		return false
	}
	a.available = true
	it, qs := a.item, a.qs
	s.ungate(a) // available without passing its gate (a stack): nothing left to open
	q.Available(it, m.Data)
	if s.beginTail(a, nil) {
		giveBackAllButCache(a)
	}
	s.wake(it)
	now := time.Now()
	s.announce(a, now) // available without passing its gate: a stack
	a.availableAfter = s.elapsed(now) - a.startedAt - a.gateWait
	s.cfg.Publish(JobMessage{Base: Base{now}, JobID: a.id, Action: qs.q.Action(), Element: it.Name(), Key: it.Element.Key,
		Kind: string(job.MessageAvailable), Text: "available; making it durable"})
	// Its end as far as the session is concerned: its dependants start after it.
	s.jobEnded(a, JobEnd{Base: Base{now}, JobID: a.id, Action: qs.q.Action(), Element: it.Name(), Key: it.Element.Key,
		Result: ResultSuccess, Duration: a.availableAfter, LogPath: a.logPath})
	return true
}

// succeeded books the success of a's job: its queue is done with its item.
func (s *Scheduler) succeeded(a *activeJob, res job.Result) {
	it, qs := a.item, a.qs
	qs.processed++
	qs.q.Done(it, res)
	s.pullEnded(qs, it, false)
	qs.pass(it)
}

// doneWarning publishes the warning a Warner queue has about a's success, if any.
func (s *Scheduler) doneWarning(a *activeJob, res job.Result) {
	if w, ok := a.qs.q.(Warner); ok {
		s.warn(a.item, w.Warning(a.item, res))
	}
}

// endTail books the end of a job whose JobEnd came when its element was available
// (see available): its tail, making its output durable, is over. On success its
// element goes on (even if a terminate came during the tail: its artifact is in the
// cache), and JobDurable says so; a tail that failed or was stopped leaves the
// element uncached, failed or stopped, which a Notice says, since its JobEnd said
// success.
func (s *Scheduler) endTail(a *activeJob, out job.Outcome, end JobEnd) {
	it, qs := a.item, a.qs
	if out.Result.OK {
		s.cfg.Publish(JobDurable{Base: end.Base, JobID: a.id, Action: end.Action, Element: end.Element, Key: end.Key})
		s.succeeded(a, out.Result)
		s.doneWarning(a, out.Result)
		return
	}
	it.Cached, it.Built = false, false // not in the cache after all
	if out.Terminated {
		end.Result = ResultTerminated
		s.jobEndHook(end)
		qs.move(it, stateStopped)
		s.cfg.Publish(Notice{Base: end.Base, Level: "warning", Element: it.Name(),
			Text: fmt.Sprintf("the %s job %s was terminated while it made its artifact durable: it is not cached", end.Action, a.id)})
		return
	}
	end.Result = ResultFailure
	s.jobEndHook(end)
	msg := fmt.Sprintf("making the artifact durable after the %s job succeeded: %s", end.Action, out.Result.Error)
	s.cfg.Publish(Notice{Base: end.Base, Level: "error", Element: it.Name(), Text: msg})
	s.fail(qs, it, msg, a.logPath)
}

// MessageCommitting is a message a Runner makes, not a job: the job's worker is done
// and the session makes what it made durable (actions.GroupCommits), holding no
// worker; its result follows when that is done.
const MessageCommitting job.MessageType = "committing"

// committing books that a's worker is done while its output is made durable: a job
// in its tail no longer counts among its queue's tails (they bound the workers), and
// one that kept its builder for want of a tail gives it back now.
func (s *Scheduler) committing(a *activeJob) bool {
	if !a.available || a.committing {
		return false
	}
	a.committing = true
	if a.tail {
		a.qs.tails--
		return true
	}
	a.tail = true
	giveBackAllButCache(a)
	return true
}

// giveBackAllButCache gives back a's tokens but the cache's: a job in its tail
// still writes to the cache.
func giveBackAllButCache(a *activeJob) {
	var give []resources.Resource
	for _, r := range a.tokens.shared() {
		if r != resources.Cache {
			give = append(give, r)
		}
	}
	a.tokens.giveBack(give...)
}

// beginTail starts a's tail, the part of it that needs no builder (see available
// and slotDone), unless as many jobs of its queue as there are builders are in
// theirs and there is no room at the gates to borrow (see tailRoom): that bounds
// the worker processes. opens is the job at its gate that a's builder goes to at
// once, or nil. It reports whether a is in its tail.
func (s *Scheduler) beginTail(a *activeJob, opens *activeJob) bool {
	if a.tail {
		return true
	}
	if limit := s.cfg.Pool.Limit(tailToken(a.qs)); limit != 0 && a.qs.tails >= limit && !tailRoom(a.qs, limit, opens) {
		return false
	}
	a.tail = true
	a.qs.tails++
	return true
}

// tailRoom says whether one more job of qs may begin its tail past limit, the
// builders: a local build queue's tails beyond the builders take the room of the
// jobs waiting at its gates (gatedRequest), so that its workers stay bounded at
// three times the builders. opens, the job at its gate the tail's builder goes to
// at once, is counted out: it keeps its worker, opened. Without such room a job
// keeps its builder to its end, through its syncfs, which on a busy machine takes
// tens of milliseconds while the builder idles.
func tailRoom(qs *queueState, limit int, opens *activeJob) bool {
	if prepareToken(qs) != "" || gateToken(qs) == "" {
		return false
	}
	gated := len(qs.gated)
	if opens != nil {
		gated--
	}
	return qs.tails-limit+1+gated <= limit
}

// pastTails is how many of qs's jobs are in their tails beyond limit, the builders:
// each takes the room of a job at its gate (see tailRoom).
func (qs *queueState) pastTails(limit int) int {
	if prepareToken(qs) != "" {
		return 0
	}
	return max(qs.tails-limit, 0)
}

// tailToken is the token whose limit bounds the jobs of qs in their tails: the one
// they prepare on (a Preparer's), else its gate token (the builders, or the remote
// execution slots), else the builders.
func tailToken(qs *queueState) resources.Resource {
	if t := prepareToken(qs); t != "" {
		return t
	}
	if t := gateToken(qs); t != "" {
		return t
	}
	return resources.Process
}

// retryAfter puts it back in its queue, to run again once wait has passed.
func (s *Scheduler) retryAfter(qs *queueState, it *Item, wait time.Duration) {
	it.retryAt = time.Now().Add(wait)
	s.add(qs, it)
	s.retries++
	time.AfterFunc(wait, func() {
		select {
		case s.inbox <- retryDue{}:
		case <-s.ended:
		}
	})
}

// jobEnded runs the OnJobEnd hook, then publishes end: whoever sees the event sees
// the hook's effects.
// A job is announced first (see announce) if it was not: every JobEnd follows its
// job's JobStart. Called once per job.
func (s *Scheduler) jobEnded(a *activeJob, end JobEnd) {
	s.announce(a, end.Time)
	a.ended = true
	s.uncount(a)
	s.jobEndHook(end)
	s.cfg.Publish(end)
}

// count counts a among its queue's running jobs: it holds its tokens.
func (s *Scheduler) count(a *activeJob) {
	if !a.counted {
		a.counted = true
		a.qs.running++
	}
}

// uncount takes a off its queue's running jobs, if it was counted.
func (s *Scheduler) uncount(a *activeJob) {
	if a.counted {
		a.counted = false
		a.qs.running--
	}
}

// jobEndHook runs the OnJobEnd hook; an error is published as a warning.
func (s *Scheduler) jobEndHook(end JobEnd) {
	if s.cfg.OnJobEnd != nil {
		if err := s.cfg.OnJobEnd(end); err != nil {
			s.cfg.Publish(Notice{Base: Base{time.Now()}, Level: "warning", Element: end.Element,
				Text: fmt.Sprintf("after the %s job %s ended: %v", end.Action, end.JobID, err)})
		}
	}
}

// recover lets a Recoverer queue turn a failure into a skip: the element goes on to
// the next queue, with a warning when the queue gives one.
func (s *Scheduler) recover(a *activeJob, res job.Result, end *JobEnd) bool {
	qs, it := a.qs, a.item
	r, ok := qs.q.(Recoverer)
	if !ok || s.terminating {
		return false
	}
	warning, ok := r.Recover(it, res)
	s.pullEnded(qs, it, ok)
	if !ok {
		return false
	}
	qs.skipped++
	qs.pass(it)
	end.Result = ResultSkipped
	s.jobEnded(a, *end)
	s.warn(it, warning)
	return true
}

// warn publishes a warning about it, if there is one.
func (s *Scheduler) warn(it *Item, warning string) {
	if warning != "" {
		s.cfg.Publish(Notice{Base: Base{time.Now()}, Level: "warning", Element: it.Name(), Text: warning})
	}
}

// fail records a failed element and applies the on-error policy.
func (s *Scheduler) fail(qs *queueState, it *Item, msg, logPath string) {
	s.leaving(it)
	qs.failed++
	it.Failed = true
	qs.move(it, stateFailed)
	s.done++
	s.failed = append(s.failed, FailedElement{Element: it.Name(), Action: qs.q.Action(), Error: msg, LogPath: logPath})
	switch s.cfg.OnError {
	case element.OnErrorContinue, element.OnErrorAsk:
	case element.OnErrorTerminate:
		s.terminate()
	default:
		s.quitting = true
		s.withdrawGated()
	}
}

// remoteSuspendText is what a suspend says in a session with remote execution (a
// queue's jobs wait at their gates for resources.Remote): no new remote action starts,
// and those on the cluster go on, as a cluster cannot pause them. "" without remote
// execution.
func (s *Scheduler) remoteSuspendText() string {
	if !slices.ContainsFunc(s.queues, func(qs *queueState) bool { return gateToken(qs) == resources.Remote }) {
		return ""
	}
	running := 0
	for _, a := range s.active {
		if a.tokens.holds(resources.Remote) {
			running++
		}
	}
	text := "suspending: no new remote action starts"
	switch running {
	case 0:
	case 1:
		text += "; the one on the cluster runs on there (a cluster cannot pause it)"
	default:
		text += fmt.Sprintf("; the %d on the cluster run on there (a cluster cannot pause them)", running)
	}
	return text
}

func (s *Scheduler) command(c Command) {
	now := time.Now()
	switch c {
	case CmdSuspend:
		if s.suspended {
			return
		}
		if text := s.remoteSuspendText(); text != "" {
			s.cfg.Publish(Notice{Base: Base{now}, Level: "info", Text: text})
		}
		s.signalJobs((Running).Suspend)
		s.suspended, s.suspendedAt = true, now
		s.cfg.Publish(Suspended{Base{now}})
	case CmdResume:
		if !s.suspended {
			return
		}
		s.signalJobs((Running).Resume)
		s.suspended = false
		s.suspendedTotal += now.Sub(s.suspendedAt)
		s.cfg.Publish(Resumed{Base{now}})
	case CmdQuit:
		s.quitting = true
		s.withdrawGated()
		s.cfg.Publish(Notice{Base: Base{now}, Level: "info", Text: "quitting: no new jobs start; running jobs finish"})
		s.held = nil
		s.unhold()
	case CmdTerminate:
		s.interrupted = true
		s.held = nil
		s.holdSuspended = false
		s.terminate()
	case CmdContinue:
		if len(s.held) > 0 {
			s.held = s.held[1:]
			s.unhold()
		}
	case CmdRetry:
		if len(s.held) > 0 {
			h := s.held[0]
			s.held = s.held[1:]
			s.unfail(h.qs, h.it)
			s.unhold()
		}
	case CmdKill:
		s.interrupted = true
		s.terminating, s.quitting = true, true
		if s.suspended { // SIGKILL ends stopped jobs too; nothing is left to resume
			s.suspended = false
			s.suspendedTotal += now.Sub(s.suspendedAt)
		}
		s.signalJobs((Running).Kill)
	}
}

// hold books a failure that waits for the user's decision. The first one suspends every
// job and is asked at once; later ones are asked when the earlier are answered.
func (s *Scheduler) hold(h held) {
	s.held = append(s.held, h)
	if len(s.held) > 1 {
		return
	}
	if !s.suspended && len(s.active) > 0 {
		s.command(CmdSuspend)
		s.holdSuspended = true
	}
	s.cfg.Publish(h.ask)
}

// unhold moves on after a decision: it asks about the next held failure, or resumes the
// jobs the hold suspended.
func (s *Scheduler) unhold() {
	if len(s.held) > 0 {
		next := s.held[0].ask
		next.Time = time.Now()
		s.cfg.Publish(next)
		return
	}
	if s.holdSuspended {
		s.holdSuspended = false
		s.command(CmdResume)
	}
}

// unfail takes back a failure the user wants retried: the element waits in its queue
// again and its next job is a new attempt (with its own log).
func (s *Scheduler) unfail(qs *queueState, it *Item) {
	qs.failed--
	s.done--
	it.Failed, it.Retried = false, true
	if i := slices.IndexFunc(s.failed, func(f FailedElement) bool { return f.Element == it.Name() && f.Action == qs.q.Action() }); i >= 0 {
		s.failed = slices.Delete(s.failed, i, i+1)
	}
	it.queue = slices.Index(s.queues, qs)
	it.retryAt = time.Time{}
	s.add(qs, it)
}

// publishCounts publishes the counters if they changed since the last time.
// It runs every loop turn, so it allocates only when it publishes.
func (s *Scheduler) publishCounts() {
	stats := func(qs *queueState) QueueStats {
		return QueueStats{Action: qs.q.Action(), Processed: qs.processed, Skipped: qs.skipped,
			Failed: qs.failed, Running: qs.running, Waiting: len(qs.wait) + qs.ready + qs.parked + len(qs.gated)}
	}
	changed := s.done != s.lastCounts.Done || len(s.lastCounts.Queues) != len(s.queues)
	for i := 0; !changed && i < len(s.queues); i++ {
		changed = stats(s.queues[i]) != s.lastCounts.Queues[i]
	}
	if !changed {
		return
	}
	// A new slice each time: published events are immutable.
	now := time.Now()
	c := Counts{Base: Base{now}, Done: s.done, Total: len(s.cfg.Items), Queues: make([]QueueStats, len(s.queues)),
		Remaining: s.remaining(now)}
	for i, qs := range s.queues {
		c.Queues[i] = stats(qs)
	}
	s.lastCounts = c
	s.cfg.Publish(c)
}

// terminate stops every running job (SIGTERM, then SIGKILL after the grace period) and
// starts nothing more.
func (s *Scheduler) terminate() {
	if s.terminating {
		return
	}
	s.terminating, s.quitting = true, true
	if s.suspended {
		s.suspended = false
		s.suspendedTotal += time.Since(s.suspendedAt)
	}
	s.signalJobs((Running).Terminate)
}

// signalJobs applies f (suspend, resume, terminate or kill) to every running job.
// A job that could not be signalled is reported, not ignored: it may go on running.
func (s *Scheduler) signalJobs(f func(Running) error) {
	for _, a := range s.active {
		if err := f(a.running); err != nil {
			action, element := a.describe()
			s.cfg.Publish(Notice{Base: Base{time.Now()}, Level: "warning", Element: element,
				Text: fmt.Sprintf("%s job %s: %v", action, a.id, err)})
		}
	}
}

// summarize books what is left in the queues: elements held back by a failure or a stop,
// and any element stuck for no reason, which is a bug worth reporting loudly.
func (s *Scheduler) summarize() *Summary {
	now := time.Now()
	sum := &Summary{Project: s.cfg.Project, Failed: s.failed, Elapsed: s.elapsed(now), Suspended: now.Sub(s.start) - s.elapsed(now),
		Interrupted: s.interrupted, Quit: s.quitting}
	for _, it := range s.cfg.Items {
		if it.Failed && !slices.ContainsFunc(s.failed, func(f FailedElement) bool { return f.Element == it.Name() }) {
			sum.Failed = append(sum.Failed, FailedElement{Element: it.Name(), Action: Build, Cached: true,
				Error: "a failed build is cached (use --retry-failed to build again)"})
		}
	}
	for i, qs := range s.queues {
		sum.Queues = append(sum.Queues, QueueStats{Action: qs.q.Action(), Processed: qs.processed, Skipped: qs.skipped, Failed: qs.failed})
		for _, it := range s.waiting(i) {
			sum.NotStarted = append(sum.NotStarted, NotStarted{Element: it.Name(), Reason: s.whyNotStarted(qs, it)})
		}
	}
	for _, it := range s.cfg.Items {
		if it.stopped() {
			sum.NotStarted = append(sum.NotStarted, NotStarted{Element: it.Name(), Reason: "terminated"})
		}
	}
	return sum
}

func (s *Scheduler) whyNotStarted(qs *queueState, it *Item) string {
	if it.plan.later != nil && it.plan.later.blocked != "" {
		return it.plan.later.blocked
	}
	if dep := failedDependency(it, map[*Item]bool{}); dep != nil {
		if dep.stopped() {
			return fmt.Sprintf("dependency %s was terminated", dep.Name())
		}
		return fmt.Sprintf("dependency %s failed", dep.Name())
	}
	if s.terminating {
		return "session terminated"
	}
	if s.quitting {
		return "session quit before it started"
	}
	_, reason := s.status(qs, it)
	msg := fmt.Sprintf("stuck in the %s queue with nothing running: %s (this is a bug in gantry: please report it)", qs.q.Action(), reason)
	s.cfg.Publish(Notice{Base: Base{time.Now()}, Level: "error", Element: it.Name(), Text: msg})
	return msg
}

func failedDependency(it *Item, seen map[*Item]bool) *Item {
	for _, d := range it.Stage {
		if seen[d] {
			continue
		}
		seen[d] = true
		if d.Failed || d.stopped() {
			return d
		}
		if f := failedDependency(d, seen); f != nil {
			return f
		}
	}
	return nil
}
