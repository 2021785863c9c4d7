package queues

import (
	"testing"
	"time"

	"github.com/gantry-build/gantry/element"
)

// TestETA runs a session with known build times through the fake runner: two builders,
// a 60 s element a feeding a 30 s element b, and a 20 s element c. The ETA is the
// longer of the critical path (a then b: 90 s) and the work shared by the builders
// (110 s / 2), counted down as builds run and finish.
func TestETA(t *testing.T) {
	estimates := map[string]time.Duration{"a": 60 * time.Second, "b": 30 * time.Second, "c": 20 * time.Second}
	g := newGraph(t, "a", "b: a", "c")
	items := plan(t, g, PlanOptions{Estimate: func(e *element.Element) (time.Duration, bool) {
		d, ok := estimates[e.Name]
		return d, ok
	}})
	h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: items, Pool: buildPool(2)})
	// The jobs have run for no more than the test's own run time: allow that much.
	check := func(when string, want time.Duration) {
		t.Helper()
		counts := eventsOf[Counts](h.events)
		got := counts[len(counts)-1].Remaining
		if got > want || got < want-timeout {
			t.Errorf("%s: ETA %v, want %v", when, got, want)
		}
	}
	jobs := h.nextN(2)
	h.sync(jobs["a"])
	check("a and c running", 90*time.Second)
	jobs["c"].Succeed(t)
	h.sync(jobs["a"])
	check("c done", 90*time.Second)
	jobs["a"].Succeed(t)
	b := h.expect(Build, "b")
	h.sync(b)
	check("a done, b running", 30*time.Second)
	b.Succeed(t)
	h.wait()
	check("all done", 0)
}

func TestEstimateRemaining(t *testing.T) {
	item := func(queue int, estimate, priority time.Duration) *Item {
		return &Item{queue: queue, Estimate: estimate, Priority: priority}
	}
	long := item(0, 50*time.Second, 80*time.Second)
	tail := item(0, 30*time.Second, 30*time.Second)
	small := item(0, 10*time.Second, 10*time.Second)
	done := item(1, 40*time.Second, 40*time.Second) // past the Build queue
	cached := item(0, 0, 0)
	cached.Cached = true
	items := []*Item{long, tail, small, done, cached}
	for _, tt := range []struct {
		name     string
		ran      map[*Item]time.Duration
		builders int
		want     time.Duration
	}{
		{"one builder: the work", nil, 1, 90 * time.Second},
		{"many builders: the critical path", nil, 8, 80 * time.Second},
		{"a running build counts what is left", map[*Item]time.Duration{long: 20 * time.Second}, 8, 60 * time.Second},
		{"a build over its estimate counts nothing more", map[*Item]time.Duration{small: time.Minute}, 1, 80 * time.Second},
	} {
		if got := estimateRemaining(items, 0, tt.ran, tt.builders); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
