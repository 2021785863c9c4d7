package queues

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/resources"
)

// Available sends what a build job says once its artifact is in the cache, before it
// ends.
func (j *fakeJob) Available(data string) {
	j.onMessage(job.Message{Type: job.MessageAvailable, Time: time.Now(), Data: json.RawMessage(data)})
}

// availableSeen waits until the loop has published that j's element is available,
// and j's JobEnd, which comes with it.
func (h *session) availableSeen(j *fakeJob) {
	h.t.Helper()
	waitEvent(h.t, h.events, func(e JobMessage) bool { return e.JobID == j.Spec.ID && e.Kind == string(job.MessageAvailable) })
	h.ended(j)
}

// A build job that says its artifact is available gives its builder to the next
// build and lets its dependants start while it goes on (making the artifact
// durable). Its JobEnd comes then, before any dependant's JobStart, its Duration
// lasting until it was available; a JobDurable says when the job ended; the
// element goes on to the next queue, and the session ends, only then.
func TestAvailableFreesTheBuilderAndStartsDependants(t *testing.T) {
	g := newGraph(t, "a", "b: a", "c")
	pool := buildPool(1)
	var told []string
	build := buildQueue()
	build.available = func(it *Item, data json.RawMessage) {
		built(it)
		told = append(told, it.Name()+" "+string(data))
	}
	next := &testQueue{action: Push, resources: needs(nil)}
	h := startSession(t, Config{Queues: []Queue{build, next}, Items: plan(t, g, PlanOptions{}), Pool: pool})

	a := h.expect(Build, "a") // the longer path first
	h.sync(a)
	h.noStart() // one builder, held by a
	a.Available(`{"files":"x"}`)
	h.availableSeen(a)
	end := h.ended(a)
	if end.Result != ResultSuccess {
		t.Errorf("a's JobEnd at available = %+v, want a success", end)
	}
	started := h.nextN(1)
	for _, e := range h.events.all() {
		if s, ok := e.(JobStart); ok && s.Element != "a" {
			t.Errorf("%s's JobStart came before a's JobEnd", s.Element)
		}
		if e, ok := e.(JobEnd); ok && e.JobID == a.Spec.ID {
			break
		}
	}
	if started["b"] == nil && started["c"] == nil {
		t.Fatalf("after a said it was available, started %v; want b or c on the freed builder", started)
	}
	h.sync(a)
	h.noStart() // one builder: the other waits
	if pool.InUse(resources.Process) != 1 || pool.InUse(resources.Cache) != 2 {
		t.Errorf("while a makes its artifact durable: %d builders and %d cache tokens in use, want 1 and 2 (a keeps its cache token)",
			pool.InUse(resources.Process), pool.InUse(resources.Cache))
	}
	if len(told) != 1 || told[0] != `a {"files":"x"}` {
		t.Errorf("AvailableFunc was told %q, want a's data once", told)
	}
	for _, j := range started {
		j.Succeed(t)
	}
	// The other build, and the pushes of b and c, not of a while its job runs.
	for range 3 {
		j := h.next()
		if j.Spec.Action == string(Push) && j.Spec.Element == "a" {
			t.Errorf("started %s while a's build job runs", j)
		}
		j.Succeed(t)
	}
	h.sync(a)
	select {
	case sum := <-h.summary:
		t.Fatalf("session ended while a's build job was running: %+v", sum)
	default:
	}
	if ds := eventsOf[JobDurable](h.events); len(ds) != 0 {
		t.Errorf("JobDurable %+v published before a's job ended", ds)
	}
	a.Finish(t, job.Outcome{Result: job.Result{OK: true}, Elapsed: time.Hour})
	waitEvent(t, h.events, func(e JobDurable) bool { return e.JobID == a.Spec.ID })
	if ends := eventsOf[JobEnd](h.events); slices.ContainsFunc(ends, func(e JobEnd) bool { return e.JobID == a.Spec.ID && e != end }) {
		t.Errorf("a has a second JobEnd after its job ended")
	}
	if end.Duration >= time.Hour {
		t.Errorf("a's JobEnd = %+v, want a success lasting until it was available, not the job's hour", end)
	}
	h.expect(Push, "a").Succeed(t)
	sum := h.wait()
	if !sum.OK() {
		t.Errorf("summary not OK: %+v", sum)
	}
	if got := sum.Queues[0]; got.Processed != 3 || got.Failed != 0 {
		t.Errorf("build queue stats %+v, want 3 processed", got)
	}
	checkBuiltOnce(t, h.runner, Build, names(g)...)
	checkTokensFree(t, pool, resources.Process, resources.Cache)
}

// A job that fails after its element was available fails the element: the session
// does not succeed, and the element goes no further.
func TestAvailableThenFailed(t *testing.T) {
	g := newGraph(t, "a", "b: a")
	pool := buildPool(2)
	next := &testQueue{action: Push, resources: needs(nil)}
	h := startSession(t, Config{Queues: []Queue{buildQueue(), next}, Items: plan(t, g, PlanOptions{}), Pool: pool,
		OnError: "continue"})

	a := h.expect(Build, "a")
	a.Available(`{}`)
	b := h.expect(Build, "b")
	a.Fail(t, "making the artifact durable: no space left on device")
	b.Succeed(t)
	h.expect(Push, "b").Succeed(t)
	sum := h.wait()
	if sum.OK() || len(sum.Failed) != 1 || sum.Failed[0].Element != "a" ||
		!strings.Contains(sum.Failed[0].Error, "no space left on device") {
		t.Fatalf("summary = %+v, want a failed with its job's error", sum)
	}
	if got := sum.Queues[0]; got.Processed != 1 || got.Failed != 1 {
		t.Errorf("build queue stats %+v, want 1 processed (b) and 1 failed (a)", got)
	}
	if starts := h.runner.startsOf(Push); starts["a"] != 0 {
		t.Errorf("a was pushed though its build job failed")
	}
	// Its JobEnd said success when it was available: a Notice says what came after.
	notices := eventsOf[Notice](h.events)
	if !slices.ContainsFunc(notices, func(n Notice) bool {
		return n.Level == "error" && n.Element == "a" && strings.Contains(n.Text, "making the artifact durable after the build job succeeded")
	}) {
		t.Errorf("no error notice about a's failed tail; notices: %+v", notices)
	}
	checkTokensFree(t, pool, resources.Process, resources.Cache)
}

// No more jobs give their builder back at Available than there are builders: each
// keeps its worker busy until it ends, and the workers stay at most twice the
// builders. A job past that cap holds its builder until it ends.
func TestAvailableTailsAtMostTheBuilders(t *testing.T) {
	g := newGraph(t, "a", "b", "c")
	pool := buildPool(1)
	h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool})

	first, second := h.tailThenKept()
	if pool.InUse(resources.Process) != 1 {
		t.Errorf("%d builders in use, want 1 (second's)", pool.InUse(resources.Process))
	}
	first.Succeed(t)
	h.sync(second)
	h.noStart() // second still holds it
	second.Succeed(t)
	h.next().Succeed(t)
	if sum := h.wait(); !sum.OK() || sum.Queues[0].Processed != 3 {
		t.Errorf("summary = %+v, want 3 built", sum)
	}
	checkTokensFree(t, pool, resources.Process, resources.Cache)
}

// tailThenKept starts two builds on one builder: the first gives it back at
// Available (its tail), the second, available too, keeps it (one tail per builder).
func (h *session) tailThenKept() (first, second *fakeJob) {
	h.t.Helper()
	first = h.next()
	first.Available(`{}`)
	second = h.next() // on the builder first gave back
	second.Available(`{}`)
	h.availableSeen(second)
	h.sync(second)
	h.noStart() // first is in its tail: second keeps the builder
	return first, second
}

// committing sends what a Runner that makes a job's output durable in the session
// sends once the job's worker is done (MessageCommitting).
func (j *fakeJob) committing() {
	j.onMessage(job.Message{Type: MessageCommitting, Time: time.Now()})
}

// A job whose worker is done while the session makes its artifact durable
// (MessageCommitting) no longer counts among the tails: the next job gives its
// builder back at Available; and one that kept its builder past the cap gives it
// back then. Each still ends (JobDurable, its CACHE token) only with its result.
func TestCommittingLeavesTheTails(t *testing.T) {
	g := newGraph(t, "a", "b", "c", "d")
	pool := buildPool(1)
	h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool})

	first, second := h.tailThenKept()
	second.committing()
	third := h.next() // its worker done, second gives its builder back
	first.committing()
	third.Available(`{}`)
	fourth := h.next() // no tail left: third gives its builder back at once
	if pool.InUse(resources.Cache) != 4 {
		t.Errorf("%d cache tokens in use, want 4: a job keeps its own until its result", pool.InUse(resources.Cache))
	}
	if ds := eventsOf[JobDurable](h.events); len(ds) != 0 {
		t.Errorf("JobDurable %+v published before the jobs' results", ds)
	}
	for _, j := range []*fakeJob{first, second, third, fourth} {
		j.Succeed(t)
	}
	if sum := h.wait(); !sum.OK() || sum.Queues[0].Processed != 4 {
		t.Errorf("summary = %+v, want 4 built", sum)
	}
	checkTokensFree(t, pool, resources.Process, resources.Cache)
}
