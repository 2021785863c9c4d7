package queues

import (
	"fmt"
	"testing"

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
