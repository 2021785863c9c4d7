package queues

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/resources"
)

// countingQueue counts the Status calls of the queue it wraps.
type countingQueue struct {
	*testQueue
	calls atomic.Int64
}

func (q *countingQueue) Status(it *Item) (Status, string) {
	q.calls.Add(1)
	return q.testQueue.Status(it)
}

// TestReadinessIsIncremental: the loop asks a waiting element's Status when something
// it waits on ends, not on every turn. A job's status, log and progress messages ask
// nothing; the end of the one dependency n elements wait for asks about each a
// bounded number of times (rescanning the wait list on every message was quadratic).
func TestReadinessIsIncremental(t *testing.T) {
	const n = 100
	lines := []string{"a"}
	for i := range n {
		lines = append(lines, fmt.Sprintf("b%03d: a", i))
	}
	g := newGraph(t, lines...)
	q := &countingQueue{testQueue: buildQueue()}
	h := startSession(t, Config{Queues: []Queue{q}, Items: plan(t, g, PlanOptions{}), Pool: buildPool(1)})
	a := h.expect(Build, "a")
	h.sync(a)
	before := q.calls.Load()
	for range 50 {
		a.Say("compiling")
	}
	h.sync(a)
	if asked := q.calls.Load() - before; asked != 0 {
		t.Errorf("51 messages of a running job asked Status %d times, want 0", asked)
	}
	a.Succeed(t)
	for range n {
		h.next().Succeed(t)
	}
	h.wait()
	// Each b: once on entering, once when a ended, and once for each of the (at most
	// two) turns it spends at the head of the ready heap. Rescanning asked each b once
	// per turn: n²/2 in all.
	if total := q.calls.Load(); total > 4*(n+1) {
		t.Errorf("Status asked %d times for %d elements, want at most %d", total, n+1, 4*(n+1))
	}
}

// TestSkipWakesParked: an item parked on another is asked again when that one is
// skipped, not only when a job of it ends (a spare item that turns out not to be
// needed is skipped, and what waits on it must not stay parked for good).
func TestSkipWakesParked(t *testing.T) {
	g := newGraph(t, "y", "z", "x: y")
	asked := map[string]int{}
	ySkipped := false
	q := &testQueue{action: Build, resources: needs([]resources.Resource{resources.Process}),
		status: func(it *Item) (Status, string) {
			asked[it.Name()]++
			switch it.Name() {
			case "y": // waits on nothing the loop can follow, then has nothing to do
				if asked["y"] == 1 {
					return Wait, "not yet"
				}
				ySkipped = true
				return Skip, "nothing to do"
			case "x":
				if !ySkipped {
					return Wait, "waiting for y"
				}
			}
			return Ready, ""
		}}
	q.waitsOn = func(it *Item) *Item {
		if it.Name() == "x" {
			return it.Stage[0]
		}
		return nil
	}
	h := startSession(t, Config{Queues: []Queue{q}, Items: plan(t, g, PlanOptions{}), Pool: buildPool(1)})
	h.expect(Build, "z").Succeed(t)
	h.expect(Build, "x").Succeed(t)
	if sum := h.wait(); !sum.OK() || len(sum.NotStarted) > 0 {
		t.Errorf("summary %+v, not started %+v", sum, sum.NotStarted)
	}
}

// volatileQueue is a queue of which one job may run at a time, whatever the tokens:
// each start takes the one slot (as a pull asking for a build-once lease takes one
// of the session's), so Status changes within a turn.
type volatileQueue struct {
	*testQueue
	volatile bool
	running  int
}

func (q *volatileQueue) Volatile() bool { return q.volatile }

func (q *volatileQueue) Status(it *Item) (Status, string) {
	if q.running > 0 {
		return Wait, "the slot is taken"
	}
	return Ready, ""
}

func (q *volatileQueue) Payload(*Item) (job.Input, error) {
	q.running++
	return job.Input{}, nil
}

func (q *volatileQueue) Done(*Item, job.Result) { q.running-- }

// TestVolatileStatusAskedBeforeEachStart: three items ready in the same turn with
// tokens for all three; a Volatile queue's Status is asked again before each start,
// so the second waits while the first runs. Asked once per turn, all three started.
func TestVolatileStatusAskedBeforeEachStart(t *testing.T) {
	g := newGraph(t, "a", "b", "c")
	q := &volatileQueue{testQueue: &testQueue{action: Build, resources: needs([]resources.Resource{resources.Process})}, volatile: true}
	h := startSession(t, Config{Queues: []Queue{q}, Items: plan(t, g, PlanOptions{}), Pool: buildPool(3)})
	for range 3 {
		j := h.next()
		h.sync(j)
		h.noStart()
		j.Succeed(t)
	}
	if sum := h.wait(); !sum.OK() {
		t.Errorf("summary %+v", sum)
	}
}
