package queues

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-build/gantry/resources"
)

// fakeClaims is the Claimer seam: elements named busy are being built by another
// builder, whose end the test decides (answer); every other claim is taken.
type fakeClaims struct {
	events *recorder // to check what was published when a claim is released

	mu       sync.Mutex
	waits    map[string]chan Claim // the busy elements' answers
	asked    map[string]bool       // claimed once: busy only the first time
	released []string
	change   chan struct{} // closed and replaced on every release
	// endedFirst: every claim released after its job's JobEnd was published.
	endedFirst bool
}

func newFakeClaims(busy ...string) *fakeClaims {
	f := &fakeClaims{waits: map[string]chan Claim{}, asked: map[string]bool{}, endedFirst: true, change: make(chan struct{})}
	for _, name := range busy {
		f.waits[name] = make(chan Claim, 1)
	}
	return f
}

func (f *fakeClaims) claim(it *Item) Claim {
	f.mu.Lock()
	ch := f.waits[it.Name()]
	first := !f.asked[it.Name()]
	f.asked[it.Name()] = true
	f.mu.Unlock()
	if ch == nil || !first {
		return f.taken(it.Name())
	}
	return Claim{Outcome: Busy, Text: "waiting for another builder of " + it.Name(), Wait: func(stop <-chan struct{}) Claim {
		select {
		case c := <-ch:
			return c
		case <-stop:
			return Claim{Outcome: Busy}
		}
	}}
}

// taken is a claim of name held by this session.
func (f *fakeClaims) taken(name string) Claim {
	return Claim{Outcome: Claimed, Release: func() {
		ended := f.events == nil || slices.ContainsFunc(eventsOf[JobEnd](f.events), func(e JobEnd) bool { return e.Element == name })
		f.mu.Lock()
		defer f.mu.Unlock()
		f.released = append(f.released, name)
		f.endedFirst = f.endedFirst && ended
		close(f.change)
		f.change = make(chan struct{})
	}}
}

// waitReleased waits until name's claim has been released.
func (f *fakeClaims) waitReleased(t *testing.T, name string) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		f.mu.Lock()
		done, change := slices.Contains(f.released, name), f.change
		f.mu.Unlock()
		if done {
			return
		}
		select {
		case <-change:
		case <-deadline:
			t.Fatalf("the claim of %s was not released within %v", name, timeout)
		}
	}
}

func (f *fakeClaims) releasedClaims() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(slices.Values(f.released))
}

// claimSession runs a build of "a", "b" and "top: a" with one builder, where a is
// being built by another builder; it returns once a waits for it, and b, which
// got the only builder meanwhile, has started.
func claimSession(t *testing.T) (*session, *fakeClaims, *fakeJob) {
	t.Helper()
	claims := newFakeClaims("a")
	g := newGraph(t, "a", "b", "top: a")
	q := buildQueue()
	q.claim = claims.claim
	h := startSession(t, Config{Queues: []Queue{q}, Items: plan(t, g, PlanOptions{}), Pool: buildPool(1)})
	claims.events = h.events
	// a gave its builder back at once: b has it.
	b := h.expect(Build, "b")
	w := waitEvent(t, h.events, func(e ElementWaiting) bool { return e.Element == "a" })
	if w.Action != Build || !strings.Contains(w.Reason, "another builder of a") {
		t.Errorf("waiting event %+v, want the claimer's reason", w)
	}
	h.sync(b)
	h.noStart()
	return h, claims, b
}

// An element another builder has waits holding no token, then reuses what that
// builder made: no job of its own, and its dependants go on.
func TestClaimBusyWaitsThenReuses(t *testing.T) {
	h, claims, b := claimSession(t)
	claims.answer("a", Claim{Outcome: Built})
	waitEvent(t, h.events, func(e ElementSkipped) bool {
		return e.Element == "a" && e.Waited && strings.Contains(e.Reason, "another gantry process")
	})
	b.Succeed(t)
	h.expect(Build, "top").Succeed(t)
	sum := h.wait()
	if !sum.OK() {
		t.Errorf("summary not OK: %+v", sum)
	}
	if got := sum.Queues[0]; got.Processed != 2 || got.Skipped != 1 {
		t.Errorf("build queue %+v, want 2 processed (b, top) and 1 skipped (a)", got)
	}
	checkBuiltOnce(t, h.runner, Build, "b", "top")
	checkTokensFree(t, h.pool, resources.Process, resources.Cache)
	if got := claims.releasedClaims(); !slices.Equal(got, []string{"b", "top"}) || !claims.endedFirst {
		t.Errorf("claims released %v (after their jobs ended: %v), want b and top, after", got, claims.endedFirst)
	}
}

// The other builder died without committing anything: the wait ends with the
// claim taken, and the element is built here, its claim released when its job ends.
func TestClaimTakenOverWhenTheHolderDies(t *testing.T) {
	h, claims, b := claimSession(t)
	// Nothing runs while a waits: the session waits with it, and is not stuck.
	b.Succeed(t)
	h.ended(b)
	claims.answer("a", claims.taken("a"))
	h.expect(Build, "a").Succeed(t)
	h.expect(Build, "top").Succeed(t)
	if sum := h.wait(); !sum.OK() {
		t.Errorf("summary not OK: %+v", sum)
	}
	checkBuiltOnce(t, h.runner, Build, "a", "b", "top")
	checkTokensFree(t, h.pool, resources.Process, resources.Cache)
	if got := claims.releasedClaims(); !slices.Equal(got, []string{"a", "b", "top"}) || !claims.endedFirst {
		t.Errorf("claims released %v (after their jobs ended: %v), want a, b and top, after", got, claims.endedFirst)
	}
}

// The other builder's build failed and its failure is cached: it is this
// session's failure too, and what depends on it is not built.
func TestClaimReusesACachedFailure(t *testing.T) {
	h, claims, b := claimSession(t)
	claims.answer("a", Claim{Outcome: BuiltFailed, Text: "the build failed in another gantry process"})
	b.Succeed(t)
	sum := h.wait()
	if len(sum.Failed) != 1 || sum.Failed[0].Element != "a" || !strings.Contains(sum.Failed[0].Error, "another gantry process") {
		t.Errorf("failed %+v, want a with the other builder's failure", sum.Failed)
	}
	checkBuiltOnce(t, h.runner, Build, "b")
	checkTokensFree(t, h.pool, resources.Process, resources.Cache)
}

// A session stopped while an element waits for another builder ends at once: the
// wait is given up, and the element was not started.
func TestClaimWaitEndsWithTheSession(t *testing.T) {
	h, _, b := claimSession(t)
	b.Succeed(t)
	h.ended(b)
	h.s.Send(CmdTerminate)
	sum := h.wait()
	if !slices.ContainsFunc(sum.NotStarted, func(n NotStarted) bool { return n.Element == "a" }) {
		t.Errorf("not started %+v, want a among them", sum.NotStarted)
	}
	checkTokensFree(t, h.pool, resources.Process, resources.Cache)
}

// answer ends the other builder's work on name: its waiter gets c.
func (f *fakeClaims) answer(name string, c Claim) {
	f.mu.Lock()
	ch := f.waits[name]
	f.mu.Unlock()
	ch <- c
}

// A claim that comes once the session quits is given up at once: the element will
// not be built here, and another session may build it.
func TestClaimAfterQuitIsReleased(t *testing.T) {
	h, claims, b := claimSession(t)
	h.s.Send(CmdQuit)
	waitEvent(t, h.events, func(e Notice) bool { return strings.Contains(e.Text, "quitting") })
	claims.answer("a", claims.taken("a"))
	claims.waitReleased(t, "a") // while b runs
	b.Succeed(t)
	sum := h.wait()
	if !slices.ContainsFunc(sum.NotStarted, func(n NotStarted) bool { return n.Element == "a" }) {
		t.Errorf("not started %+v, want a among them", sum.NotStarted)
	}
	checkBuiltOnce(t, h.runner, Build, "b")
	checkTokensFree(t, h.pool, resources.Process, resources.Cache)
}
