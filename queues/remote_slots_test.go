package queues

import (
	"fmt"
	"testing"
	"time"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/resources"
)

// remoteBuildQueue is the build queue of a session with remote execution: its builds
// hold a remote slot, not a builder, and wait at their gates for one.
func remoteBuildQueue() *testQueue {
	q := buildQueue()
	q.resources = func(*Item) resources.Request {
		return resources.Request{Shared: []resources.Resource{resources.Remote, resources.Cache}}
	}
	q.gate = resources.Remote
	return q
}

// remotePreparingQueue is remoteBuildQueue whose builds prepare on the builders
// (a Preparer): they stage and cache on this machine's builders, and hold a
// remote slot only for their action.
func remotePreparingQueue() *testQueue {
	q := remoteBuildQueue()
	q.prepare = resources.Process
	return q
}

// TestRemoteBuildsPrepareOnTheBuilders: with one builder and four remote slots, one
// build stages at a time (on the builder, which it gives back at its gate), four
// have their action on the cluster at once, each only until its action is done
// (SlotDone), and one caches at a time (its tail, counted against the builders):
// a second build done meanwhile keeps its slot.
func TestRemoteBuildsPrepareOnTheBuilders(t *testing.T) {
	const slots = 4
	g := newGraph(t, "a", "b", "c", "d", "e", "f")
	pool := resources.NewPool(map[resources.Resource]int{resources.Process: 1, resources.Remote: slots, resources.Cache: 0})
	h := startSession(t, Config{Queues: []Queue{remotePreparingQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool})
	var acting []*fakeJob
	for n := 1; n <= slots; n++ {
		j := h.next()
		h.sync(j)
		h.noStart() // one builder: nothing else stages meanwhile
		if !j.Spec.Gated || j.Opened() {
			t.Fatalf("%s started ungated (%v) or was opened before it staged", j, !j.Spec.Gated)
		}
		j.AtGate()
		if w := h.nthWorkStart(n); w != j {
			t.Fatalf("work start %d is %s, want %s, at its gate with a slot free", n, w, j)
		}
		acting = append(acting, j)
	}
	// The fifth build stages (the fourth gave the builder back at its gate) and
	// waits at its gate: the four slots are taken. The sixth stages meanwhile.
	e := h.next()
	h.sync(e)
	h.noStart()
	e.AtGate()
	f := h.next()
	h.sync(f)
	if e.Opened() {
		t.Fatalf("%s was opened with the %d remote slots taken", e, slots)
	}
	if got := h.runner.maxRunning(Build); got != slots {
		t.Errorf("%d builds had their action on the cluster at once, want %d", got, slots)
	}
	// a's action is done: its slot goes to e at once, and a caches in its tail.
	acting[0].slotDone()
	if w := h.nthWorkStart(slots + 1); w != e {
		t.Fatalf("work start %d is %s, want %s", slots+1, w, e)
	}
	// b's action is done while a still caches: one tail at a time, so b keeps its
	// slot, and f, at its gate, waits for one.
	f.AtGate()
	acting[1].slotDone()
	h.sync(acting[1])
	if f.Opened() {
		t.Fatalf("%s was opened while b, done, waited to cache behind a", f)
	}
	acting[0].Succeed(t)
	h.ended(acting[0])
	for _, j := range append(acting[1:], e) {
		j.Succeed(t)
	}
	if w := h.nthWorkStart(slots + 2); w != f {
		t.Fatalf("work start %d is %s, want %s", slots+2, w, f)
	}
	f.Succeed(t)
	if sum := h.wait(); !sum.OK() || sum.Queues[0].Processed != len(g.Order) {
		t.Errorf("summary %+v, want all %d built", sum, len(g.Order))
	}
	if got := h.runner.maxWaitingAtGate(Build); got > slots {
		t.Errorf("%d builds were gated at once, want at most %d", got, slots)
	}
	checkTokensFree(t, pool, resources.Process, resources.Remote, resources.Cache)
}

// TestRemoteSlotsBoundBuildsWhateverTheBuilders: with remote execution, as many
// builds work at once as there are remote slots (remote-jobs), be the builders fewer
// or more; as many more wait at their gates.
func TestRemoteSlotsBoundBuildsWhateverTheBuilders(t *testing.T) {
	const slots = 3
	for _, builders := range []int{1, 8} {
		t.Run(fmt.Sprintf("builders=%d", builders), func(t *testing.T) {
			g := newGraph(t, "a", "b", "c", "d", "e", "f", "g", "h")
			pool := resources.NewPool(map[resources.Resource]int{resources.Process: builders, resources.Remote: slots, resources.Cache: 0})
			h := startSession(t, Config{Queues: []Queue{remoteBuildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool})
			first := h.nextN(2 * slots)
			h.sync(first["a"])
			h.noStart()
			working := 0
			for _, j := range first {
				if !j.Spec.Gated {
					working++
				}
			}
			if working != slots {
				t.Fatalf("%d builds started with a slot, want %d", working, slots)
			}
			for n := 1; n <= len(g.Order); n++ {
				j := h.nthWorkStart(n)
				if n > slots {
					h.takeStarts()
				}
				j.Succeed(t)
				h.ended(j)
			}
			if sum := h.wait(); !sum.OK() {
				t.Errorf("summary %+v", sum)
			}
			if got := h.runner.maxRunning(Build); got != slots {
				t.Errorf("%d builds worked at once, want %d (the remote slots)", got, slots)
			}
			if got := h.runner.maxWaitingAtGate(Build); got > slots {
				t.Errorf("%d builds waited at their gates at once, want at most %d", got, slots)
			}
		})
	}
}

// TestSuspendWithRemoteExecutionSaysSo: a suspend in a session with remote execution
// says that no new remote action starts and that those on the cluster run on; none
// starts until resumed. Without remote execution it says nothing of the kind.
func TestSuspendWithRemoteExecutionSaysSo(t *testing.T) {
	g := newGraph(t, "a", "b", "c")
	pool := resources.NewPool(map[resources.Resource]int{resources.Process: 1, resources.Remote: 2, resources.Cache: 0})
	h := startSession(t, Config{Queues: []Queue{remoteBuildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool})
	jobs := h.nextN(3)
	h.sync(jobs["a"])
	h.s.Send(CmdSuspend)
	waitEvent(t, h.events, func(Suspended) bool { return true })
	notices := eventsOf[Notice](h.events)
	want := "suspending: no new remote action starts; the 2 on the cluster run on there (a cluster cannot pause them)"
	if len(notices) != 1 || notices[0].Text != want {
		t.Errorf("notices %v, want one: %s", notices, want)
	}
	jobs["a"].Succeed(t) // a slot frees while suspended: c stays at its gate
	h.ended(jobs["a"])
	h.sync(jobs["b"])
	if jobs["c"].Opened() {
		t.Errorf("c's gate opened while suspended")
	}
	h.s.Send(CmdResume)
	for _, n := range []string{"b", "c"} {
		h.nthWorkStart(3)
		jobs[n].Succeed(t)
		h.ended(jobs[n])
	}
	if sum := h.wait(); !sum.OK() {
		t.Errorf("summary %+v", sum)
	}

	// Builders only: a suspend says nothing of remote actions.
	h = startSession(t, Config{Queues: []Queue{gatedBuildQueue()}, Items: plan(t, newGraph(t, "a"), PlanOptions{}), Pool: buildPool(1)})
	j := h.next()
	h.sync(j)
	h.s.Send(CmdSuspend)
	waitEvent(t, h.events, func(Suspended) bool { return true })
	if n := eventsOf[Notice](h.events); len(n) != 0 {
		t.Errorf("notices without remote execution: %v", n)
	}
	h.s.Send(CmdResume)
	j.Succeed(t)
	h.wait()
}

// TestETAWithRemoteSlots: with remote execution the work left is shared among the
// remote slots, not the builders: three independent 60 s builds on three slots and one
// builder take 60 s, not 180 s.
func TestETAWithRemoteSlots(t *testing.T) {
	g := newGraph(t, "a", "b", "c")
	items := plan(t, g, PlanOptions{Estimate: func(*element.Element) (time.Duration, bool) { return time.Minute, true }})
	pool := resources.NewPool(map[resources.Resource]int{resources.Process: 1, resources.Remote: 3, resources.Cache: 0})
	h := startSession(t, Config{Queues: []Queue{remoteBuildQueue()}, Items: items, Pool: pool})
	jobs := h.nextN(3)
	for _, j := range jobs {
		h.sync(j)
	}
	counts := eventsOf[Counts](h.events)
	if got := counts[len(counts)-1].Remaining; got > time.Minute || got < time.Minute-timeout {
		t.Errorf("ETA %v, want 1m0s", got)
	}
	for _, j := range jobs {
		j.Succeed(t)
	}
	h.wait()
}
