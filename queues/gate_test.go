package queues

import (
	"slices"
	"testing"
	"time"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/resources"
)

// workStarts lists the jobs among events that began their work, in order: their
// JobStarts, which for a gated job come when its gate opens.
func workStarts(events []Event) []string {
	var ids []string
	for _, e := range events {
		if e, ok := e.(JobStart); ok {
			ids = append(ids, e.JobID)
		}
	}
	return ids
}

// maxStarted is the most jobs among events that were between their JobStart and
// their JobEnd at once.
func maxStarted(events []Event) int {
	running, most := 0, 0
	for _, e := range events {
		switch e.(type) {
		case JobStart:
			running++
			most = max(most, running)
		case JobEnd:
			running--
		}
	}
	return most
}

// nthWorkStart waits until n jobs began their work and returns the nth (1-based).
func (h *session) nthWorkStart(n int) *fakeJob {
	h.t.Helper()
	deadline := time.After(timeout)
	for {
		r := h.events
		r.mu.Lock()
		ids := workStarts(r.events)
		change := r.change
		r.mu.Unlock()
		if len(ids) >= n {
			h.runner.mu.Lock()
			defer h.runner.mu.Unlock()
			i := slices.IndexFunc(h.runner.jobs, func(j *fakeJob) bool { return j.Spec.ID == ids[n-1] })
			return h.runner.jobs[i]
		}
		select {
		case <-change:
		case <-deadline:
			h.t.Fatalf("%d jobs began their work within %v, want %d", len(ids), timeout, n)
		}
	}
}

// takeStarts takes every job started so far from the runner's channel.
func (h *session) takeStarts() []*fakeJob {
	var js []*fakeJob
	for {
		select {
		case j := <-h.runner.started:
			js = append(js, j)
		default:
			return js
		}
	}
}

// TestGatedBuildsWaitAtTheirGates: with two builders busy, two more builds start
// gated, and a builder that frees opens the first of them (in the queue's order)
// while a new build takes its place at the gate; never more than two builds work,
// and never more than two wait.
func TestGatedBuildsWaitAtTheirGates(t *testing.T) {
	const builders = 2
	g := newGraph(t, "a", "b", "c", "d", "e", "f")
	pool := buildPool(builders)
	h := startSession(t, Config{Queues: []Queue{gatedBuildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool})
	first := h.nextN(4)
	h.sync(first["a"])
	h.noStart()
	for name, j := range first {
		if want := name == "c" || name == "d"; j.Spec.Gated != want {
			t.Errorf("%s started gated %v, want %v (a and b work, c and d wait)", name, j.Spec.Gated, want)
		}
	}
	if slices.Contains(first["c"].Calls(), "open") {
		t.Fatalf("c was opened with both builders busy: %v", first["c"].Calls())
	}

	// The work goes in plan order, each build once, whatever waited at a gate.
	for n := 1; n <= len(g.Order); n++ {
		j := h.nthWorkStart(n)
		if want := g.Order[n-1].Name; j.Spec.Element != want {
			t.Fatalf("work start %d is %s, want %s", n, j.Spec.Element, want)
		}
		if j.Spec.Gated && !j.Opened() {
			t.Fatalf("%s works without its gate opened", j)
		}
		if n > 2 {
			// Room for one more: the jobs after it start gated.
			h.takeStarts()
		}
		j.Succeed(t)
		h.ended(j)
	}
	sum := h.wait()
	if !sum.OK() || sum.Queues[0].Processed != len(g.Order) {
		t.Errorf("summary %+v, want all %d built", sum, len(g.Order))
	}
	if got := h.runner.maxRunning(Build); got != builders {
		t.Errorf("%d builds worked at once, want %d", got, builders)
	}
	if got := h.runner.maxWaitingAtGate(Build); got != builders {
		t.Errorf("%d builds waited at their gates at once, want %d", got, builders)
	}
	// The events tell the same: a JobStart when a build has its builder, so never
	// more builds between their JobStart and their JobEnd than the builders.
	if got := maxStarted(h.events.all()); got != builders {
		t.Errorf("%d builds between their JobStart and JobEnd at once, want %d", got, builders)
	}
	for _, c := range eventsOf[Counts](h.events) {
		if q := c.Queues[0]; q.Running > builders || q.Running+q.Waiting+q.Processed != len(g.Order) {
			t.Errorf("counts %+v: want at most %d running, and every build running, waiting or done", q, builders)
		}
	}
	checkBuiltOnce(t, h.runner, Build, names(g)...)
	checkTokensFree(t, pool, resources.Process, resources.Cache)

	// The trace shows the slots as the builders: a gated build takes one when its
	// gate opens, and says how long it waited at it.
	rec := NewRecorder(plan(t, g, PlanOptions{}))
	for _, e := range h.events.all() {
		rec.Observe(e)
	}
	gated := 0
	for _, sp := range rec.Spans() {
		if sp.Slot < 0 || sp.Slot >= builders {
			t.Errorf("%s in slot %d of %d builders", sp.Element, sp.Slot, builders)
		}
		if !sp.Prepared.IsZero() {
			gated++
			if sp.Start.Before(sp.Prepared) {
				t.Errorf("%s began its work at %v, before it started preparing at %v", sp.Element, sp.Start, sp.Prepared)
			}
		}
	}
	if gated != len(g.Order)-builders {
		t.Errorf("%d spans of gated builds, want %d", gated, len(g.Order)-builders)
	}
}

// TestGateGivesWayToAMoreUrgentBuild: a build waiting at its gate does not take the
// builder from one that became ready later but comes first (a longer critical path).
func TestGateGivesWayToAMoreUrgentBuild(t *testing.T) {
	h, pool, a, x := startUrgentBuilds(t)
	a.Succeed(t)
	urgentFirst(t, h, pool, x)
}

// startUrgentBuilds starts a session of a (1 s), x (1 s) and c (100 s, after a) on one
// builder: a works, x waits at its gate, c comes first once a is built.
func startUrgentBuilds(t *testing.T) (h *session, pool *resources.Pool, a, x *fakeJob) {
	t.Helper()
	g := newGraph(t, "a", "x", "c: a")
	est := map[string]time.Duration{"a": time.Second, "x": time.Second, "c": 100 * time.Second}
	items := plan(t, g, PlanOptions{Estimate: func(e *element.Element) (time.Duration, bool) { return est[e.Name], true }})
	pool = buildPool(1)
	h = startSession(t, Config{Queues: []Queue{gatedBuildQueue()}, Items: items, Pool: pool})
	a = h.expect(Build, "a")
	x = h.expect(Build, "x")
	if a.Spec.Gated || !x.Spec.Gated {
		t.Fatalf("a gated %v, x gated %v; want a working and x at its gate", a.Spec.Gated, x.Spec.Gated)
	}
	return h, pool, a, x
}

// urgentFirst checks, once a is built, that c takes the builder before x's gate
// opens, and finishes the session.
func urgentFirst(t *testing.T, h *session, pool *resources.Pool, x *fakeJob) {
	t.Helper()
	c := h.expect(Build, "c")
	h.sync(c)
	if c.Spec.Gated || slices.Contains(x.Calls(), "open") {
		t.Fatalf("after a: c gated %v, x's calls %v; want c to take the builder and x to wait", c.Spec.Gated, x.Calls())
	}
	c.Succeed(t)
	waitEvent(t, h.events, func(e JobStart) bool { return e.JobID == x.Spec.ID && e.Gated })
	x.Succeed(t)
	if sum := h.wait(); !sum.OK() {
		t.Errorf("summary not OK: %+v", sum)
	}
	checkTokensFree(t, pool, resources.Process, resources.Cache)
}

// TestStopWithdrawsGatedBuilds: quitting (by the user, or on a failure with on-error
// quit) and terminating stop the builds waiting at their gates, which did none of
// their work: the summary counts them as not started, not as terminated, and the
// build that works finishes (quit) or is terminated.
func TestStopWithdrawsGatedBuilds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stop   func(h *session, a *fakeJob)
		reason string
	}{
		{"quit", func(h *session, a *fakeJob) { h.s.Send(CmdQuit); h.sync(a); a.Succeed(h.t) }, "session quit before it started"},
		{"failure with on-error quit", func(h *session, a *fakeJob) { a.Fail(h.t, "boom") }, "session quit before it started"},
		{"terminate", func(h *session, a *fakeJob) { h.s.Send(CmdTerminate) }, "session terminated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGraph(t, "a", "b", "c")
			pool := buildPool(1)
			h := startSession(t, Config{Queues: []Queue{gatedBuildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool})
			a := h.expect(Build, "a")
			b := h.expect(Build, "b")
			h.sync(a)
			h.noStart()
			if !b.Spec.Gated {
				t.Fatal("b did not start gated")
			}
			tc.stop(h, a)
			sum := h.wait()
			if !slices.Contains(b.Calls(), "terminate") || slices.Contains(b.Calls(), "open") {
				t.Errorf("b's calls %v, want terminate and no open", b.Calls())
			}
			var notStarted []string
			for _, ns := range sum.NotStarted {
				notStarted = append(notStarted, ns.Element+": "+ns.Reason)
			}
			for _, want := range []string{"b: " + tc.reason, "c: " + tc.reason} {
				if !slices.Contains(notStarted, want) {
					t.Errorf("not started %q, want %q among them", notStarted, want)
				}
			}
			for _, f := range sum.Failed {
				if f.Element == "b" {
					t.Errorf("b counted as failed: %+v", f)
				}
			}
			// It never started: no START, and no TERMINATED, for it.
			for _, e := range h.events.all() {
				switch e := e.(type) {
				case JobStart:
					if e.JobID == b.Spec.ID {
						t.Errorf("b, withdrawn at its gate, has a JobStart: %+v", e)
					}
				case JobEnd:
					if e.JobID == b.Spec.ID {
						t.Errorf("b, withdrawn at its gate, has a JobEnd: %+v", e)
					}
				}
			}
			checkTokensFree(t, pool, resources.Process, resources.Cache)
		})
	}
}

// slotDone sends what a build job sends when its commands have ended.
func (j *fakeJob) slotDone() {
	j.onMessage(job.Message{Type: job.MessageSlotDone, Time: time.Now()})
}

// TestSlotDoneOpensTheNextGate: a build gives its builder back when its commands end,
// to the build waiting at its gate. A tail past the builders takes the room of a job
// at its gate (the workers stay at three times the builders): the build whose
// builder goes to a job already at its gate begins its tail, and no new job starts
// gated until a tail ends; without a job at its gate to open, a build keeps its
// builder to its end.
func TestSlotDoneOpensTheNextGate(t *testing.T) {
	g := newGraph(t, "a", "b", "c", "d")
	pool := buildPool(1)
	h := startSession(t, Config{Queues: []Queue{gatedBuildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool})
	a := h.expect(Build, "a")
	b := h.expect(Build, "b")
	a.slotDone()
	waitEvent(t, h.events, func(e JobStart) bool { return e.JobID == b.Spec.ID && e.Gated })
	c := h.expect(Build, "c") // b's place at the gate
	if !c.Spec.Gated {
		t.Fatal("c did not start gated")
	}
	// a is in the one tail of the builder's; b's builder goes to c, at its gate: b's
	// tail takes c's room there, and d does not start gated meanwhile.
	b.slotDone()
	waitEvent(t, h.events, func(e JobStart) bool { return e.JobID == c.Spec.ID && e.Gated })
	h.sync(b)
	h.noStart()
	// Nothing at the gate: c keeps its builder past its slot.
	c.slotDone()
	h.sync(c)
	if pool.InUse(resources.Process) != 1 {
		t.Errorf("%d builders in use, want 1 (c's)", pool.InUse(resources.Process))
	}
	a.Succeed(t) // a tail ends: room at the gate again
	d := h.expect(Build, "d")
	if !d.Spec.Gated {
		t.Fatal("d did not start gated")
	}
	h.sync(d)
	if slices.Contains(d.Calls(), "open") {
		t.Fatal("d was opened while c held the builder past its slot")
	}
	c.Succeed(t)
	waitEvent(t, h.events, func(e JobStart) bool { return e.JobID == d.Spec.ID && e.Gated })
	b.Succeed(t)
	d.Succeed(t)
	if sum := h.wait(); !sum.OK() {
		t.Errorf("summary not OK: %+v", sum)
	}
	if got := h.runner.maxRunning(Build); got != 3 {
		t.Errorf("%d builds ran at once (fake runner count), want 3: a and b in their tails, and c", got)
	}
	checkTokensFree(t, pool, resources.Process, resources.Cache)

	rec := NewRecorder(plan(t, g, PlanOptions{}))
	for _, e := range h.events.all() {
		rec.Observe(e)
	}
	for _, sp := range rec.Spans() {
		if sp.Slot != 0 {
			t.Errorf("%s in slot %d with one builder", sp.Element, sp.Slot)
		}
	}
}

// TestSlotDoneKeepsTheBuilderForACriticalPath: a build whose dependant is more
// urgent than every build waiting for a builder keeps its builder past its commands
// until its artifact is available, so that the dependant (the critical path) gets
// it instead of a short build it would then wait for.
func TestSlotDoneKeepsTheBuilderForACriticalPath(t *testing.T) {
	h, pool, a, x := startUrgentBuilds(t)
	a.slotDone()
	h.sync(a)
	if slices.Contains(x.Calls(), "open") {
		t.Fatal("x was opened at a's slot-done, ahead of c, a's dependant on the critical path")
	}
	a.Succeed(t)
	urgentFirst(t, h, pool, x)
}
