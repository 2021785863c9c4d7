package queues

import (
	"testing"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/resources"
)

// pushQueue is a test queue with the rules of the Push queue (actions.PushQueue):
// it pushes what this session built or pulled, or, all, every cached element.
func pushQueue(all bool) *testQueue {
	return &testQueue{action: Push, resources: needs([]resources.Resource{resources.Upload}),
		status: func(it *Item) (Status, string) {
			switch {
			case !it.Cached:
				return Skip, "not cached"
			case !all && !it.Built && !it.Pulled:
				return Skip, "cached before this session"
			}
			return Ready, ""
		}}
}

// pushSession runs lib.toml, in state st, through the queues given.
func pushSession(t *testing.T, st element.ArtifactStatus, qs ...Queue) *session {
	g := newGraph(t, "lib.toml:")
	items, err := Plan(g, []*element.Element{g.Elements["lib.toml"]}, PlanOptions{
		Artifact: func(*element.Element) element.ArtifactStatus { return st }})
	if err != nil {
		t.Fatal(err)
	}
	pool := resources.NewPool(map[resources.Resource]int{resources.Process: 1, resources.Upload: 1, resources.Cache: 0})
	return startSession(t, Config{Queues: qs, Items: items, Pool: pool})
}

// A push that finds the element's own artifact damaged (the job dropped it and
// uploaded nothing of it) sends the element back to be built; the rebuilt
// artifact is pushed and the session succeeds, with one warning.
func TestHealDamagedArtifactFoundByPush(t *testing.T) {
	h := pushSession(t, element.ArtifactMissing, buildQueue(), pushQueue(false))
	h.expect(Build, "lib.toml").Succeed(t)
	failDamaged(t, h.expect(Push, "lib.toml"), "lib.toml")
	h.expect(Build, "lib.toml").Succeed(t)
	h.expect(Push, "lib.toml").Succeed(t)
	sum := h.wait()
	if !sum.OK() || len(sum.Failed) != 0 {
		t.Errorf("summary = %+v, want success", sum)
	}
	if b, p := h.runner.startsOf(Build)["lib.toml"], h.runner.startsOf(Push)["lib.toml"]; b != 2 || p != 2 {
		t.Errorf("lib.toml built %d and pushed %d times, want 2 and 2", b, p)
	}
	warnings := 0
	for _, n := range eventsOf[Notice](h.events) {
		if n.Level == "warning" && n.Element == "lib.toml" {
			warnings++
		}
	}
	if warnings != 1 {
		t.Errorf("%d warnings for lib.toml, want 1", warnings)
	}
}

// Damaged again after its rebuild, the push's failure stands; and a session
// that builds nothing (the push command) cannot heal: the push fails.
func TestHealDamagedArtifactFoundByPushOnce(t *testing.T) {
	h := pushSession(t, element.ArtifactMissing, buildQueue(), pushQueue(false))
	h.expect(Build, "lib.toml").Succeed(t)
	failDamaged(t, h.expect(Push, "lib.toml"), "lib.toml")
	h.expect(Build, "lib.toml").Succeed(t)
	failDamaged(t, h.expect(Push, "lib.toml"), "lib.toml")
	if sum := h.wait(); sum.OK() || len(sum.Failed) != 1 || sum.Failed[0].Action != Push {
		t.Errorf("summary = %+v, want lib.toml's push failed", sum)
	}

	h = pushSession(t, element.ArtifactSuccess, pushQueue(true))
	failDamaged(t, h.expect(Push, "lib.toml"), "lib.toml")
	if sum := h.wait(); sum.OK() || len(sum.Failed) != 1 || sum.Failed[0].Action != Push {
		t.Errorf("push command: summary = %+v, want lib.toml's push failed", sum)
	}
}

// A dependant that staged the artifact a push then found damaged, and reports
// it only once the element was built again, builds again with the new
// artifact: its report is stale, not a fault that repeats.
func TestHealPushStaleReportAfterTheRebuild(t *testing.T) {
	g := newGraph(t, "lib.toml:", "app.toml: lib.toml")
	items, err := Plan(g, []*element.Element{g.Elements["app.toml"]}, PlanOptions{
		Artifact: func(*element.Element) element.ArtifactStatus { return element.ArtifactMissing }})
	if err != nil {
		t.Fatal(err)
	}
	pool := resources.NewPool(map[resources.Resource]int{resources.Process: 2, resources.Upload: 1, resources.Cache: 0})
	h := startSession(t, Config{Queues: []Queue{buildQueue(), pushQueue(false)}, Items: items, Pool: pool})
	h.expect(Build, "lib.toml").Succeed(t)
	jobs := h.nextN(2) // lib.toml's push, app.toml's build
	failDamaged(t, jobs["lib.toml"], "lib.toml")
	rebuild := h.expect(Build, "lib.toml")
	rebuild.Succeed(t)
	h.ended(rebuild)
	failDamaged(t, jobs["app.toml"], "lib.toml")
	for _, j := range h.nextN(2) {
		j.Succeed(t) // lib.toml's push, app.toml's build
	}
	h.expect(Push, "app.toml").Succeed(t)
	if sum := h.wait(); !sum.OK() {
		t.Errorf("summary = %+v, want success", sum)
	}
	if starts := h.runner.startsOf(Build); starts["lib.toml"] != 2 || starts["app.toml"] != 2 {
		t.Errorf("build starts = %v, want lib 2, app 2", starts)
	}
}
