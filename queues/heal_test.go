package queues

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
)

// failDamaged ends a build job as one whose staging found dep's artifact damaged.
func failDamaged(t *testing.T, j *fakeJob, dep string) {
	t.Helper()
	failDamagedAfter(t, j, dep, 0)
}

// failDamagedAfter is failDamaged when the cache has seen removals cleanups that
// removed something (DamagedDependency.Removals).
func failDamagedAfter(t *testing.T, j *fakeJob, dep string, removals uint64) {
	t.Helper()
	data, err := json.Marshal(DamagedDependency{Element: dep, Key: "k", Blob: "h/1", Problem: "blob h/1 is missing", Removals: removals})
	if err != nil {
		t.Fatal(err)
	}
	j.Finish(t, job.Outcome{Result: job.Result{Error: "staging dependency " + dep + ": damaged", Data: data}, ExitCode: 1})
}

// healSession builds app.toml, which needs lib.toml, which needs base.toml;
// lib.toml is cached, so base.toml is not even planned.
func healSession(t *testing.T) *session { return healSessionNeeding(t, nil) }

// healSessionNeeding is healSession publishing its needs to needs.
func healSessionNeeding(t *testing.T, needs func([]ArtifactKey) error) *session {
	g := newGraph(t, "base.toml:", "lib.toml: base.toml", "app.toml: lib.toml")
	items, err := Plan(g, []*element.Element{g.Elements["app.toml"]}, PlanOptions{
		Artifact: func(e *element.Element) element.ArtifactStatus {
			if e.Name == "app.toml" {
				return element.ArtifactMissing
			}
			return element.ArtifactSuccess
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 {
		t.Fatalf("planned %d items, want lib.toml and app.toml", len(items))
	}
	return startSession(t, Config{Queues: []Queue{buildQueue()}, Items: items, Pool: buildPool(2), Needs: needs})
}

// A build that finds a staged dependency damaged sends the dependency back to
// be built, also one the plan never reached, and then builds again itself;
// the session succeeds, and each heal is announced once.
func TestHealDamagedDependency(t *testing.T) {
	h := healSession(t)
	failDamaged(t, h.expect(Build, "app.toml"), "lib.toml")
	failDamaged(t, h.expect(Build, "lib.toml"), "base.toml") // below the plan
	h.expect(Build, "base.toml").Succeed(t)
	h.expect(Build, "lib.toml").Succeed(t)
	h.expect(Build, "app.toml").Succeed(t)
	sum := h.wait()
	if !sum.OK() || len(sum.Failed) != 0 {
		t.Errorf("summary = %+v, want success", sum)
	}
	starts := h.runner.startsOf(Build)
	if starts["base.toml"] != 1 || starts["lib.toml"] != 2 || starts["app.toml"] != 2 {
		t.Errorf("build starts = %v, want base 1, lib 2, app 2", starts)
	}
	warned := map[string]int{}
	for _, n := range eventsOf[Notice](h.events) {
		if n.Level == "warning" {
			warned[n.Element]++
		}
	}
	if warned["lib.toml"] != 1 || warned["base.toml"] != 1 || len(warned) != 2 {
		t.Errorf("warnings per element = %v, want one for lib.toml and one for base.toml", warned)
	}
	for _, end := range eventsOf[JobEnd](h.events) {
		if end.Result == ResultFailure && !end.WillRetry {
			t.Errorf("%s's job ended as a failure that stands: %+v", end.Element, end)
		}
	}
}

// A dependency found damaged again with no cleanup between is a fault that would
// repeat: the dependant's failure stands and nothing loops.
func TestHealOnlyOnce(t *testing.T) {
	h := healSession(t)
	failDamaged(t, h.expect(Build, "app.toml"), "lib.toml")
	h.expect(Build, "lib.toml").Succeed(t)
	failDamaged(t, h.expect(Build, "app.toml"), "lib.toml")
	sum := h.wait()
	if sum.OK() || len(sum.Failed) != 1 || sum.Failed[0].Element != "app.toml" {
		t.Errorf("summary = %+v, want app.toml failed", sum)
	}
	if starts := h.runner.startsOf(Build); starts["lib.toml"] != 1 || starts["app.toml"] != 2 {
		t.Errorf("build starts = %v, want lib 1, app 2", starts)
	}
}

// sharedDependencySession builds one.toml and two.toml, which both need lib.toml,
// cached, with builders builders.
func sharedDependencySession(t *testing.T, builders int) *session {
	g := newGraph(t, "lib.toml:", "one.toml: lib.toml", "two.toml: lib.toml")
	targets := []*element.Element{g.Elements["one.toml"], g.Elements["two.toml"]}
	items, err := Plan(g, targets, PlanOptions{Artifact: func(e *element.Element) element.ArtifactStatus {
		if e.Name == "lib.toml" {
			return element.ArtifactSuccess
		}
		return element.ArtifactMissing
	}})
	if err != nil {
		t.Fatal(err)
	}
	return startSession(t, Config{Queues: []Queue{buildQueue()}, Items: items, Pool: buildPool(builders)})
}

// Two dependants staging the same damaged dependency at once: the first
// sends it back to be built, the second (which then finds the blob gone)
// waits for that build instead of failing; the dependency is built once.
func TestHealSharedDependency(t *testing.T) {
	h := sharedDependencySession(t, 2)
	jobs := h.nextN(2)
	failDamaged(t, jobs["one.toml"], "lib.toml")
	lib := h.expect(Build, "lib.toml")
	failDamaged(t, jobs["two.toml"], "lib.toml")
	h.ended(jobs["two.toml"])
	lib.Succeed(t)
	for _, j := range h.nextN(2) {
		j.Succeed(t)
	}
	if sum := h.wait(); !sum.OK() {
		t.Errorf("summary = %+v, want success", sum)
	}
	if starts := h.runner.startsOf(Build); starts["lib.toml"] != 1 || starts["one.toml"] != 2 || starts["two.toml"] != 2 {
		t.Errorf("build starts = %v, want lib 1, one 2, two 2", starts)
	}
	if n := len(eventsOf[Notice](h.events)); n != 1 {
		t.Errorf("%d notices, want one warning", n)
	}
}

// In a build --track session the dependency to heal may be one the plan did
// not need (what depends on it was cached, so it is not even known to be
// cached): it becomes needed and goes through Fetch and Build.
func TestHealInTrackedPlan(t *testing.T) {
	g := newGraph(t, "a", "b: a", "c", "t: b c")
	h, _ := trackedSession(t, g, []string{"t"}, []string{"a", "c"}, []string{"b"}, element.OnErrorQuit)
	for _, j := range h.nextN(2) { // track a and c
		j.Succeed(t)
	}
	for _, j := range h.nextN(2) { // fetch c and t
		j.Succeed(t)
	}
	h.expect(Build, "c").Succeed(t)
	failDamaged(t, h.expect(Build, "t"), "b")
	h.expect(Fetch, "b").Succeed(t)
	failDamaged(t, h.expect(Build, "b"), "a") // a: not needed by the plan
	h.expect(Fetch, "a").Succeed(t)
	h.expect(Build, "a").Succeed(t)
	h.expect(Build, "b").Succeed(t)
	h.expect(Build, "t").Succeed(t)
	if sum := h.wait(); !sum.OK() {
		t.Errorf("summary = %+v, want success", sum)
	}
	if starts := h.runner.startsOf(Build); starts["a"] != 1 || starts["b"] != 2 || starts["t"] != 2 {
		t.Errorf("build starts = %v, want a 1, b 2, t 2", starts)
	}
}

// A dependency that cleanups in another process keep taking is healed as often as
// they do: a cache race is never the element's failure.
func TestHealAgainAfterEachCleanup(t *testing.T) {
	h := healSession(t)
	for removals := range uint64(5) {
		failDamagedAfter(t, h.expect(Build, "app.toml"), "lib.toml", removals+1)
		h.expect(Build, "lib.toml").Succeed(t)
	}
	h.expect(Build, "app.toml").Succeed(t)
	if sum := h.wait(); !sum.OK() {
		t.Errorf("summary = %+v, want success", sum)
	}
	if starts := h.runner.startsOf(Build); starts["lib.toml"] != 5 || starts["app.toml"] != 6 {
		t.Errorf("build starts = %v, want lib 5, app 6", starts)
	}
}

// A dependant that began staging before a heal and reports the dependency
// damaged after it was built again staged what the heal replaced: it builds
// again with the new artifact, which is not built a third time.
func TestHealStaleReportAfterTheRebuild(t *testing.T) {
	h := sharedDependencySession(t, 3)
	jobs := h.nextN(2)
	failDamagedAfter(t, jobs["one.toml"], "lib.toml", 1)
	h.expect(Build, "lib.toml").Succeed(t)
	one := h.expect(Build, "one.toml")
	failDamagedAfter(t, jobs["two.toml"], "lib.toml", 1)
	one.Succeed(t)
	h.expect(Build, "two.toml").Succeed(t)
	if sum := h.wait(); !sum.OK() {
		t.Errorf("summary = %+v, want success", sum)
	}
	if starts := h.runner.startsOf(Build); starts["lib.toml"] != 1 || starts["one.toml"] != 2 || starts["two.toml"] != 2 {
		t.Errorf("build starts = %v, want lib 1, one 2, two 2", starts)
	}
}

// The session publishes what it needs when it starts and when a heal changes its
// plan, not per job: for cleanups in other processes.
func TestNeedsPublishedAtStartAndOnHeal(t *testing.T) {
	var published [][]string
	h := healSessionNeeding(t, func(keep []ArtifactKey) error {
		var names []string
		for _, k := range keep {
			names = append(names, k.Element)
		}
		slices.Sort(names)
		published = append(published, names)
		return nil
	})
	failDamaged(t, h.expect(Build, "app.toml"), "lib.toml")
	failDamaged(t, h.expect(Build, "lib.toml"), "base.toml")
	h.expect(Build, "base.toml").Succeed(t)
	h.expect(Build, "lib.toml").Succeed(t)
	h.expect(Build, "app.toml").Succeed(t)
	if sum := h.wait(); !sum.OK() {
		t.Errorf("summary = %+v, want success", sum)
	}
	want := [][]string{{"app.toml", "lib.toml"}, {"app.toml", "lib.toml"}, {"app.toml", "base.toml", "lib.toml"}}
	if !slices.EqualFunc(published, want, slices.Equal) {
		t.Errorf("published needs %v, want %v (at the start, then at each heal)", published, want)
	}
}
