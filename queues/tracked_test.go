package queues

import (
	"slices"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/resources"
	"github.com/gantry-build/gantry/source"
)

// trackedSession starts build --track's pipeline (Track, Fetch, Build) over g for
// targets. The named elements get a git source with no ref, which their track job
// supplies; cached names the elements whose artifact exists for the keys after tracking.
func trackedSession(t *testing.T, g *element.Graph, targets []string, trackable []string, cached []string, onError element.OnError) (*session, map[string]bool) {
	t.Helper()
	for _, name := range trackable {
		e := g.Elements[name]
		e.Sources = []source.Spec{{Kind: source.Git, URL: "https://example.com/" + name, Track: "main"}}
		e.NoRef = true
	}
	for _, e := range g.Order { // as loaded: no key for them and what depends on them
		g.ComputeKey(e)
	}
	if g.Elements[trackable[0]].Key != "" {
		t.Fatal("an element without a ref has a key")
	}
	tracked := map[string]bool{}
	var ts []*element.Element
	for _, name := range targets {
		ts = append(ts, g.Elements[name])
	}
	items := PlanTracked(g, ts, PlanOptions{Artifact: func(e *element.Element) element.ArtifactStatus {
		if e.Key == "" {
			t.Errorf("artifact of %s looked up without a key", e.Name)
		}
		if slices.Contains(cached, e.Name) {
			return element.ArtifactSuccess
		}
		return element.ArtifactMissing
	}})
	track := trackQueue(func(it *Item, _ job.Result) {
		tracked[it.Name()] = true
		it.Element.NoRef = false // what Graph.SetRefs does with the refs found
	})
	pool := resources.NewPool(map[resources.Resource]int{resources.Download: 2, resources.Process: 2, resources.Cache: 0})
	h := startSession(t, Config{Queues: []Queue{track, fetchQueue(0), buildQueue()}, Items: items, Pool: pool, OnError: onError})
	return h, tracked
}

// TestTrackedPlanDecidesAfterTracking: nothing is fetched or built until every ref is
// tracked; then only what the targets need is built: b's artifact exists for its new
// key, so a, below it, is not needed.
func TestTrackedPlanDecidesAfterTracking(t *testing.T) {
	g := newGraph(t, "a", "b: a", "c", "t: b c")
	h, tracked := trackedSession(t, g, []string{"t"}, []string{"a", "c"}, []string{"b"}, element.OnErrorQuit)
	jobs := h.nextN(2)
	if jobs["a"] == nil || jobs["c"] == nil || jobs["a"].Spec.Action != "track" {
		t.Fatalf("started %v, want track jobs for a and c", jobs)
	}
	jobs["a"].Succeed(t)
	h.ended(jobs["a"])
	h.sync(jobs["c"])
	h.noStart() // c's ref is not known yet, so neither is any key above it
	jobs["c"].Succeed(t)
	fetches := h.nextN(2)
	if fetches["c"] == nil || fetches["t"] == nil || fetches["c"].Spec.Action != "fetch" || fetches["t"].Spec.Action != "fetch" {
		t.Fatalf("started %v, want fetches of c and t", fetches)
	}
	fetches["c"].Succeed(t)
	fetches["t"].Succeed(t)
	h.expect(Build, "c").Succeed(t)
	h.expect(Build, "t").Succeed(t)
	sum := h.wait()
	if !sum.OK() {
		t.Fatalf("session not OK: %+v", sum)
	}
	if !tracked["a"] || !tracked["c"] {
		t.Errorf("tracked %v, want a and c", tracked)
	}
	for _, action := range []Action{Fetch, Build} {
		if n := h.runner.startsOf(action)["a"]; n != 0 {
			t.Errorf("a: %d %s jobs, want none: it is below the cached b", n, action)
		}
	}
	skipped := eventsOf[ElementSkipped](h.events)
	if !slices.ContainsFunc(skipped, func(e ElementSkipped) bool {
		return e.Element == "a" && e.Action == Fetch && strings.Contains(e.Reason, "not needed")
	}) {
		t.Errorf("no 'not needed' skip of a in %+v", skipped)
	}
	for _, e := range g.Order {
		if e.Key == "" {
			t.Errorf("%s has no key after tracking", e.Name)
		}
	}
}

// TestTrackedPlanTrackFailure: when tracking a fails, nothing that needs a's key starts,
// and the summary says which dependency is to blame. Nothing is built for t, which
// cannot be built, so b and c are not needed.
func TestTrackedPlanTrackFailure(t *testing.T) {
	g := newGraph(t, "a", "b: a", "c", "t: b c")
	h, _ := trackedSession(t, g, []string{"t"}, []string{"a", "c"}, nil, element.OnErrorContinue)
	jobs := h.nextN(2)
	jobs["a"].Fail(t, "git ls-remote: repository not found")
	jobs["c"].Succeed(t)
	sum := h.wait()
	if len(sum.Failed) != 1 || sum.Failed[0].Element != "a" || sum.Failed[0].Action != Track {
		t.Errorf("failed %+v, want a's track", sum.Failed)
	}
	reasons := map[string]string{}
	for _, ns := range sum.NotStarted {
		reasons[ns.Element] = ns.Reason
	}
	if !strings.Contains(reasons["t"], "dependency a failed") {
		t.Errorf("t not started because %q, want it to name a", reasons["t"])
	}
	if n := len(h.runner.startsOf(Build)); n != 0 {
		t.Errorf("builds started: %v", h.runner.startsOf(Build))
	}
}
