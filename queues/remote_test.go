package queues

import (
	"slices"
	"testing"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues/queuestest"
	"github.com/gantry-build/gantry/resources"
)

// pullQueue is a test queue with the rules of a build's Pull queue
// (actions.PullQueue): it pulls what the plan found on a remote, and spare items
// once needed; leasing says which other items ask for their build-once lease, once
// their build dependencies are cached. A skipped pull always recovers (the element
// is built instead), a failed one when recover says so.
func pullQueue(recover func(*Item, job.Result) (string, bool), leasing func(*Item) bool) *testQueue {
	asksLease := func(it *Item) bool { return leasing != nil && !it.Remote && leasing(it) }
	return &testQueue{action: Pull, resources: needs([]resources.Resource{resources.Download, resources.Cache}),
		status: func(it *Item) (Status, string) {
			switch {
			case it.Cached:
				return Skip, "cached"
			case !it.Remote && !it.Spare() && !asksLease(it):
				return Skip, "not on a remote"
			case asksLease(it) && uncachedStage(it) != nil:
				return Wait, "waiting for dependencies before asking for the build-once lease"
			}
			return Ready, ""
		},
		waitsOn: func(it *Item) *Item {
			if !asksLease(it) {
				return nil
			}
			return uncachedStage(it)
		},
		done: func(it *Item, _ job.Result) { it.Cached, it.Pulled = true, true },
		recover: func(it *Item, res job.Result) (string, bool) {
			warning, ok := "", res.OK
			if recover != nil {
				w, rok := recover(it, res)
				warning, ok = w, ok || rok
			}
			return warning, ok
		}}
}

// remoteSession plans a build of app (build dependencies sdk and tool, which needs
// sdk) with nothing cached locally and app on a remote, and runs Pull, Fetch, Build.
func remoteSession(t *testing.T, recover func(*Item, job.Result) (string, bool)) (*session, [][]string) {
	t.Helper()
	g := newGraph(t, "sdk", "tool: sdk", "app: sdk tool")
	var asked [][]string
	items, err := Plan(g, []*element.Element{g.Elements["app"]}, PlanOptions{
		Artifact: func(*element.Element) element.ArtifactStatus { return element.ArtifactMissing },
		OnRemote: func(es []*element.Element) []bool {
			var names []string
			hits := make([]bool, len(es))
			for i, e := range es {
				names = append(names, e.Name)
				hits[i] = e.Name == "app"
			}
			asked = append(asked, names)
			return hits
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	pull := pullQueue(recover, nil)
	pool := resources.NewPool(map[resources.Resource]int{resources.Download: 2, resources.Process: 2, resources.Cache: 0})
	return startSession(t, Config{Queues: []Queue{pull, fetchQueue(0), buildQueue()}, Items: items, Pool: pool, OnError: element.OnErrorQuit}), asked
}

// TestPlanPullsInsteadOfBuilding: what a remote has is pulled, and nothing below it
// is looked up, fetched or built.
func TestPlanPullsInsteadOfBuilding(t *testing.T) {
	h, asked := remoteSession(t, nil)
	if len(asked) != 1 || !slices.Equal(asked[0], []string{"app"}) {
		t.Fatalf("remotes asked about %v, want only [app]", asked)
	}
	h.expect(Pull, "app").Succeed(t)
	sum := h.wait()
	if !sum.OK() {
		t.Fatalf("session not OK: %+v", sum)
	}
	if got := h.runner.startsOf(Fetch); len(got) != 0 {
		t.Fatalf("fetched %v below a pulled element", got)
	}
	skipped := map[string]string{}
	for _, e := range eventsOf[ElementSkipped](h.events) {
		skipped[e.Element] = e.Reason
	}
	if skipped["sdk"] != "not needed: what depends on it was pulled" {
		t.Fatalf("sdk skipped with %q", skipped["sdk"])
	}
}

// TestPullFallsBackToBuilding: a pull that fails for good (the remote went down) is a
// warning; the element and its build dependencies are fetched and built.
func TestPullFallsBackToBuilding(t *testing.T) {
	warned := false // as the real one, it warns once
	h, _ := remoteSession(t, func(*Item, job.Result) (string, bool) {
		if warned {
			return "", true
		}
		warned = true
		return "remote is down", true
	})
	h.expect(Pull, "app").Fail(t, "remote unavailable")
	// sdk and tool, needed now, were never looked up: they are tried (the remote lacks
	// them here), then everything is fetched and built.
	var started []string
	for len(started) < 8 {
		j := h.next()
		started = append(started, j.Spec.Action+" "+j.Spec.Element)
		if j.Spec.Action == "pull" {
			j.Finish(t, job.Outcome{Result: job.Result{OK: true, Skipped: true}})
		} else {
			j.Succeed(t)
		}
	}
	if sum := h.wait(); !sum.OK() {
		t.Fatalf("session not OK: %+v", sum)
	}
	for _, want := range []string{"pull sdk", "pull tool", "fetch sdk", "fetch tool", "fetch app", "build sdk", "build tool", "build app"} {
		if !slices.Contains(started, want) {
			t.Fatalf("started %v, want %s among them", started, want)
		}
	}
	if slices.Index(started, "build app") != len(started)-1 {
		t.Fatalf("started %v, want app built last", started)
	}
	notices := eventsOf[Notice](h.events)
	if len(notices) != 1 || notices[0].Level != "warning" || notices[0].Text != "remote is down" {
		t.Fatalf("notices %+v, want one warning", notices)
	}
}

// TestPullFailsWithoutRecovery: a failed pull the queue does not recover fails.
func TestPullFailsWithoutRecovery(t *testing.T) {
	h, _ := remoteSession(t, func(*Item, job.Result) (string, bool) { return "", false })
	h.expect(Pull, "app").Fail(t, "credentials refused")
	if sum := h.wait(); sum.OK() {
		t.Fatalf("session OK after a failed pull: %+v", sum)
	}
}

// TestFailedPullReleasesSpareItems: with on-error continue, a pull that fails for good
// (not recovered) leaves the spare build dependencies below it skipped as not needed,
// not stuck waiting for it.
func TestFailedPullReleasesSpareItems(t *testing.T) {
	g := newGraph(t, "sdk", "app: sdk", "other")
	items, err := Plan(g, []*element.Element{g.Elements["app"], g.Elements["other"]}, PlanOptions{
		Artifact: func(*element.Element) element.ArtifactStatus { return element.ArtifactMissing },
		OnRemote: queuestest.OnRemote("app"),
	})
	if err != nil {
		t.Fatal(err)
	}
	pull := pullQueue(func(*Item, job.Result) (string, bool) { return "", false }, nil)
	pool := resources.NewPool(map[resources.Resource]int{resources.Download: 1, resources.Process: 1, resources.Cache: 0})
	h := startSession(t, Config{Queues: []Queue{pull, fetchQueue(0), buildQueue()}, Items: items, Pool: pool, OnError: element.OnErrorContinue})
	h.expect(Pull, "app").Fail(t, "local disk full")
	h.expect(Fetch, "other").Succeed(t)
	h.expect(Build, "other").Succeed(t)
	sum := h.wait()
	if len(sum.NotStarted) != 0 {
		t.Fatalf("not started: %+v; want sdk skipped as not needed", sum.NotStarted)
	}
	if len(sum.Failed) != 1 || sum.Failed[0].Element != "app" {
		t.Fatalf("failed %+v, want app's pull", sum.Failed)
	}
}

// TestLeaseAskedOnceDependenciesAreCached: with leases, an element no remote has is
// asked about (a pull job) only once its build dependencies are cached: a session
// holds the lease only of what it can build at once.
func TestLeaseAskedOnceDependenciesAreCached(t *testing.T) {
	g := newGraph(t, "sdk", "app: sdk")
	items, err := Plan(g, []*element.Element{g.Elements["app"]}, PlanOptions{
		Artifact: func(*element.Element) element.ArtifactStatus { return element.ArtifactMissing },
		OnRemote: func(es []*element.Element) []bool { return make([]bool, len(es)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	granted := job.Outcome{Result: job.Result{OK: true, Skipped: true}}
	pull := pullQueue(func(*Item, job.Result) (string, bool) { return "", true }, func(*Item) bool { return true })
	pool := resources.NewPool(map[resources.Resource]int{resources.Download: 2, resources.Process: 2, resources.Cache: 0})
	h := startSession(t, Config{Queues: []Queue{pull, fetchQueue(0), buildQueue()}, Items: items, Pool: pool})
	h.expect(Pull, "sdk").Finish(t, granted)
	h.expect(Fetch, "sdk").Succeed(t)
	h.expect(Build, "sdk").Succeed(t)
	h.expect(Pull, "app").Finish(t, granted)
	h.expect(Fetch, "app").Succeed(t)
	h.expect(Build, "app").Succeed(t)
	if sum := h.wait(); !sum.OK() {
		t.Fatalf("session not OK: %+v", sum)
	}
	for _, e := range eventsOf[ElementSkipped](h.events) {
		if e.Action == Pull {
			t.Errorf("%s skipped by the pull queue (%s): want its lease asked", e.Element, e.Reason)
		}
	}
}
