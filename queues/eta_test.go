package queues

import (
	"testing"
	"time"

	"github.com/gantry-build/gantry/element"
)

// TestETA runs sessions with known build times through the fake runner: a 60 s
// element a feeding a 30 s element b, and a 20 s element c. The ETA is the longer of
// the critical path (a then b: 90 s) and the work left shared among the builders
// (110 s in all), counted down as builds finish. Each step finishes the named build
// and checks the ETA once the next builds have started.
func TestETA(t *testing.T) {
	estimates := map[string]time.Duration{"a": 60 * time.Second, "b": 30 * time.Second, "c": 20 * time.Second}
	for _, tc := range []struct {
		name     string
		builders int
		start    time.Duration // with the first builds running
		steps    []string      // builds finished, in order
		starts   []bool        // whether a build starts after each
		want     []time.Duration
	}{
		// Two builders: a and c run; the critical path a → b decides.
		{"two builders", 2, 90 * time.Second, []string{"c", "a", "b"}, []bool{false, true, false}, []time.Duration{90 * time.Second, 30 * time.Second, 0}},
		// One builder: the work decides: 110 s, then b and c (50 s), then c.
		{"one builder", 1, 110 * time.Second, []string{"a", "b", "c"}, []bool{true, true, false}, []time.Duration{50 * time.Second, 20 * time.Second, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGraph(t, "a", "b: a", "c")
			items := plan(t, g, PlanOptions{Estimate: func(e *element.Element) (time.Duration, bool) {
				d, ok := estimates[e.Name]
				return d, ok
			}})
			h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: items, Pool: buildPool(tc.builders)})
			// The running builds have run for no longer than the test: allow that much.
			check := func(when string, want time.Duration) {
				t.Helper()
				counts := eventsOf[Counts](h.events)
				if got := counts[len(counts)-1].Remaining; got > want || got < want-timeout {
					t.Errorf("%s: ETA %v, want %v", when, got, want)
				}
			}
			running := h.nextN(tc.builders)
			for _, j := range running {
				h.sync(j)
			}
			check("at the start", tc.start)
			for i, name := range tc.steps {
				j := running[name]
				if j == nil {
					t.Fatalf("%s is not running; running: %v", name, running)
				}
				j.Succeed(t)
				delete(running, name)
				if i == len(tc.steps)-1 {
					h.wait()
				} else {
					if tc.starts[i] {
						n := h.next()
						running[n.Spec.Element] = n
					}
					for _, r := range running {
						h.sync(r)
					}
				}
				check(name+" done", tc.want[i])
			}
		})
	}
}

// TestETAUnknownWithoutLearnedTimes: an element never built before has no learned
// build time, and the ETA says nothing (Remaining 0) rather than guess while it is
// left to build; once it is built, the learned times of the others give it again.
func TestETAUnknownWithoutLearnedTimes(t *testing.T) {
	estimates := map[string]time.Duration{"a": 60 * time.Second, "b": 30 * time.Second}
	g := newGraph(t, "a", "b: a", "c")
	items := plan(t, g, PlanOptions{Estimate: func(e *element.Element) (time.Duration, bool) {
		d, ok := estimates[e.Name]
		return d, ok
	}})
	for _, it := range items {
		if want := it.Name() == "c"; it.Unlearned != want {
			t.Errorf("%s unlearned %v, want %v", it.Name(), it.Unlearned, want)
		}
	}
	h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: items, Pool: buildPool(2)})
	running := h.nextN(2)
	for _, j := range running {
		h.sync(j)
	}
	for _, c := range eventsOf[Counts](h.events) {
		if c.Remaining != 0 {
			t.Fatalf("ETA %v while c, never built before, is left to build; want none (0)", c.Remaining)
		}
	}
	running["c"].Succeed(t)
	done := waitEvent(t, h.events, func(c Counts) bool { return c.Done == 1 })
	// a (60 s, running) then b (30 s): 90 s along the critical path.
	if got, want := done.Remaining, 90*time.Second; got > want || got < want-timeout {
		t.Errorf("ETA %v once c is built, want %v from the learned times", got, want)
	}
	running["a"].Succeed(t)
	h.next().Succeed(t)
	h.wait()
}
