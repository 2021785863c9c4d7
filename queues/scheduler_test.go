package queues

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/resources"
)

// checkTokensFree fails unless every token of every resource named is back in the
// pool. Call it only after Run has returned.
func checkTokensFree(t *testing.T, pool *resources.Pool, rs ...resources.Resource) {
	t.Helper()
	for _, r := range rs {
		if n := pool.InUse(r); n != 0 {
			t.Errorf("after Run: %d %s tokens still held", n, r)
		}
		if owners := pool.Interested(r); len(owners) > 0 {
			t.Errorf("after Run: exclusive interest in %s still registered by %v", r, owners)
		}
	}
}

// checkBuiltOnce fails unless the elements named, and only they, had exactly one job of
// action.
func checkBuiltOnce(t *testing.T, r *fakeRunner, action Action, names ...string) {
	t.Helper()
	starts := r.startsOf(action)
	for _, n := range names {
		if starts[n] != 1 {
			t.Errorf("%s %s: %d jobs, want 1", action, n, starts[n])
		}
		delete(starts, n)
	}
	for n, c := range starts {
		t.Errorf("%s %s: %d unexpected jobs", action, n, c)
	}
}

// checkDepsFirst fails unless every build job started after the jobs of its
// element's build dependencies had finished with success.
func checkDepsFirst(t *testing.T, r *fakeRunner, g *element.Graph) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	builds := map[string]*fakeJob{}
	for _, j := range r.jobs {
		if j.Spec.Action == string(Build) {
			builds[j.Spec.Element] = j
		}
	}
	for _, j := range r.jobs {
		for _, d := range g.Elements[j.Spec.Element].BuildDeps {
			dj := builds[d.Name]
			switch {
			case dj == nil:
				t.Errorf("%s started, but its dependency %s was never built", j, d.Name)
			case !dj.finished || !dj.outcome.Result.OK || dj.endSeq > j.startSeq:
				t.Errorf("%s started (at %d) before its dependency %s had been built (at %d)", j, j.startSeq, d.Name, dj.endSeq)
			}
		}
	}
}

func names(g *element.Graph) []string {
	var out []string
	for _, e := range g.Order {
		out = append(out, e.Name)
	}
	return out
}

func TestDiamondBuildsEachOnceDependenciesFirst(t *testing.T) {
	tests := []struct {
		name     string
		finishes []string // order in which left and right finish
	}{
		{"left first", []string{"left", "right"}},
		{"right first", []string{"right", "left"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGraph(t, "base", "left: base", "right: base", "top: left right")
			pool := buildPool(2)
			h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool})

			base := h.expect(Build, "base")
			h.sync(base)
			h.noStart() // left and right wait for base, though a token is free
			base.Succeed(t)

			mid := h.nextN(2)
			if mid["left"] == nil || mid["right"] == nil {
				t.Fatalf("after base, started %v; want left and right", mid)
			}
			first, second := mid[tc.finishes[0]], mid[tc.finishes[1]]
			first.Succeed(t)
			h.ended(first)
			h.sync(second)
			h.noStart() // top waits for both
			second.Succeed(t)

			h.expect(Build, "top").Succeed(t)
			sum := h.wait()
			if !sum.OK() {
				t.Errorf("summary not OK: %+v", sum)
			}
			if got := sum.Queues[0]; got.Processed != 4 || got.Skipped != 0 || got.Failed != 0 {
				t.Errorf("build queue stats %+v, want 4 processed", got)
			}
			checkBuiltOnce(t, h.runner, Build, names(g)...)
			checkDepsFirst(t, h.runner, g)
			checkTokensFree(t, pool, resources.Process, resources.Cache)
		})
	}
}

// TestRandomDAG builds 200 elements with 2 builders, finishing running jobs in a
// random order, and checks the invariants at every step.
func TestRandomDAG(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			const builders = 2
			g := randomGraph(t, 200, 3, seed)
			pool := buildPool(builders)
			h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool})
			rng := rand.New(rand.NewPCG(seed, 2))

			var running []*fakeJob
			var sum *Summary
			for sum == nil {
				if len(running) == 0 {
					select {
					case j := <-h.runner.started:
						running = append(running, j)
					case sum = <-h.summary:
						continue
					case <-time.After(timeout):
						t.Fatalf("nothing started and Run did not return within %v", timeout)
					}
				}
				// Let the loop fill capacity, then take everything it started.
				h.sync(running[0])
			drain:
				for {
					select {
					case j := <-h.runner.started:
						running = append(running, j)
					default:
						break drain
					}
				}
				if len(running) > builders {
					t.Fatalf("%d build jobs running with %d builders: %v", len(running), builders, running)
				}
				k := rng.IntN(len(running))
				j := running[k]
				running = slices.Delete(running, k, k+1)
				j.Succeed(t)
				h.ended(j)
			}

			if !sum.OK() {
				t.Errorf("summary not OK: %+v", sum)
			}
			if got := sum.Queues[0].Processed; got != len(g.Order) {
				t.Errorf("processed %d, want %d", got, len(g.Order))
			}
			if got := h.runner.maxRunning(Build); got != builders {
				t.Errorf("at most %d builds ran at once, want exactly %d", got, builders)
			}
			checkBuiltOnce(t, h.runner, Build, names(g)...)
			checkDepsFirst(t, h.runner, g)
			checkTokensFree(t, pool, resources.Process, resources.Cache)
		})
	}
}

func TestCachedElementsSpawnNoJob(t *testing.T) {
	tests := []struct {
		name        string
		cached      []string
		wantBuilt   []string
		wantSkipped []string
	}{
		{"all cached", []string{"base", "left", "right", "top"}, nil, []string{"base", "left", "right", "top"}},
		{"base cached", []string{"base"}, []string{"left", "right", "top"}, []string{"base"}},
		// Below a cached element nothing is planned, so base is not even skipped.
		{"left cached", []string{"left"}, []string{"base", "right", "top"}, []string{"left"}},
		{"nothing cached", nil, []string{"base", "left", "right", "top"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGraph(t, "base", "left: base", "right: base", "top: left right")
			pool := buildPool(2)
			h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}, tc.cached...), Pool: pool})
			sum := h.succeedAll()

			checkBuiltOnce(t, h.runner, Build, tc.wantBuilt...)
			if !sum.OK() {
				t.Errorf("summary not OK: %+v", sum)
			}
			want := QueueStats{Action: Build, Processed: len(tc.wantBuilt), Skipped: len(tc.wantSkipped)}
			if sum.Queues[0] != want {
				t.Errorf("build queue stats %+v, want %+v", sum.Queues[0], want)
			}
			var skipped []string
			for _, e := range eventsOf[ElementSkipped](h.events) {
				if e.Reason != "cached" {
					t.Errorf("%s skipped with reason %q, want cached", e.Element, e.Reason)
				}
				skipped = append(skipped, e.Element)
			}
			slices.Sort(skipped)
			if !slices.Equal(skipped, tc.wantSkipped) {
				t.Errorf("skipped %v, want %v", skipped, tc.wantSkipped)
			}
			checkTokensFree(t, pool, resources.Process, resources.Cache)
		})
	}
}

func TestCachedFailureIsReportedNotBuilt(t *testing.T) {
	g := newGraph(t, "base", "left: base", "right: base", "top: left right")
	pool := buildPool(2)
	items := plan(t, g, PlanOptions{Artifact: func(e *element.Element) element.ArtifactStatus {
		if e.Name == "left" {
			return element.ArtifactFailure
		}
		return element.ArtifactMissing
	}})
	h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: items, Pool: pool, OnError: element.OnErrorContinue})
	sum := h.succeedAll()

	checkBuiltOnce(t, h.runner, Build, "base", "right")
	if len(sum.Failed) != 1 || sum.Failed[0].Element != "left" || !sum.Failed[0].Cached {
		t.Errorf("failed %+v, want left (cached)", sum.Failed)
	}
	if len(sum.NotStarted) != 1 || sum.NotStarted[0].Element != "top" || !strings.Contains(sum.NotStarted[0].Reason, "dependency left failed") {
		t.Errorf("not started %+v, want top because of left", sum.NotStarted)
	}
	if sum.OK() {
		t.Error("summary OK despite a cached failure")
	}
}

// TestReverseHarvest: when an element leaves queue A and another waits there, the one
// token goes to the later queue first, so elements get as far as they can.
func TestReverseHarvest(t *testing.T) {
	one := resources.PoolResource("one")
	tests := []struct {
		name    string
		actions []Action
		want    []string // "action element" in start order
	}{
		{"two queues", []Action{"a", "b"}, []string{"a x", "b x", "a y", "b y"}},
		{"three queues", []Action{"a", "b", "c"}, []string{"a x", "b x", "c x", "a y", "b y", "c y"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var queues []Queue
			for _, a := range tc.actions {
				queues = append(queues, &testQueue{action: a, resources: needs([]resources.Resource{one})})
			}
			pool := resources.NewPool(map[resources.Resource]int{one: 1})
			g := newGraph(t, "x", "y")
			items := plan(t, g, PlanOptions{})
			h := startSession(t, Config{Queues: queues, Items: items, Pool: pool})
			var got []string
			for range tc.want {
				j := h.next()
				got = append(got, j.String())
				j.Succeed(t)
			}
			sum := h.wait()
			if !slices.Equal(got, tc.want) {
				t.Errorf("start order %v, want %v", got, tc.want)
			}
			if !sum.OK() {
				t.Errorf("summary not OK: %+v", sum)
			}
			checkTokensFree(t, pool, one)
		})
	}
}

// TestOnError: a, d and e are independent; b needs a, c needs b. Two builders start a
// and d; a fails.
func TestOnError(t *testing.T) {
	tests := []struct {
		onError        element.OnError
		eStarts        bool // e still starts after the failure
		dTerminated    bool // the running d is terminated
		wantNotStarted map[string]string
		wantQuit       bool
		wantProcessed  int
	}{
		{
			onError: element.OnErrorContinue, eStarts: true,
			wantNotStarted: map[string]string{"b": "dependency a failed", "c": "dependency a failed"},
			wantProcessed:  2,
		},
		{
			onError: element.OnErrorQuit,
			wantNotStarted: map[string]string{"b": "dependency a failed", "c": "dependency a failed",
				"e": "session quit"},
			wantQuit: true, wantProcessed: 1,
		},
		{
			onError: "", // the default is quit
			wantNotStarted: map[string]string{"b": "dependency a failed", "c": "dependency a failed",
				"e": "session quit"},
			wantQuit: true, wantProcessed: 1,
		},
		{
			onError: element.OnErrorTerminate, dTerminated: true,
			wantNotStarted: map[string]string{"b": "dependency a failed", "c": "dependency a failed",
				"d": "terminated", "e": "session terminated"},
			wantQuit: true, wantProcessed: 0,
		},
	}
	for _, tc := range tests {
		t.Run(string(tc.onError), func(t *testing.T) {
			g := newGraph(t, "a", "d", "e", "b: a", "c: b")
			pool := buildPool(2)
			h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool, OnError: tc.onError})
			jobs := h.nextN(2)
			a, d := jobs["a"], jobs["d"]
			if a == nil || d == nil {
				t.Fatalf("started %v, want a and d", jobs)
			}
			a.Fail(t, "exit status 1")
			if end := h.ended(a); end.Result != ResultFailure || end.Error != "exit status 1" || end.WillRetry {
				t.Errorf("end of a: %+v", end)
			}
			if tc.dTerminated {
				if end := h.ended(d); end.Result != ResultTerminated {
					t.Errorf("end of d: %+v, want terminated", end)
				}
			} else {
				h.sync(d)
				if tc.eStarts {
					h.expect(Build, "e").Succeed(t)
				} else {
					h.noStart()
				}
				if calls := d.Calls(); len(calls) != 0 {
					t.Errorf("d got %v; a running job must be let finish", calls)
				}
				d.Succeed(t)
			}
			sum := h.wait()

			if tc.dTerminated && !slices.Equal(d.Calls(), []string{"terminate"}) {
				t.Errorf("d got %v, want terminate", d.Calls())
			}
			if sum.OK() {
				t.Error("summary OK after a failure")
			}
			if len(sum.Failed) != 1 || sum.Failed[0].Element != "a" || sum.Failed[0].Error != "exit status 1" ||
				sum.Failed[0].LogPath != a.Spec.LogPath {
				t.Errorf("failed %+v, want a with its error and log", sum.Failed)
			}
			if sum.Quit != tc.wantQuit {
				t.Errorf("Quit = %v, want %v", sum.Quit, tc.wantQuit)
			}
			if sum.Interrupted {
				t.Error("Interrupted set, but no user or signal stopped the session")
			}
			if got := sum.Queues[0].Processed; got != tc.wantProcessed {
				t.Errorf("processed %d, want %d", got, tc.wantProcessed)
			}
			got := map[string]string{}
			for _, ns := range sum.NotStarted {
				if _, dup := got[ns.Element]; dup {
					t.Errorf("%s listed twice in NotStarted", ns.Element)
				}
				got[ns.Element] = ns.Reason
			}
			for el, want := range tc.wantNotStarted {
				if !strings.Contains(got[el], want) {
					t.Errorf("not started %s: reason %q, want it to mention %q", el, got[el], want)
				}
				delete(got, el)
			}
			for el, reason := range got {
				t.Errorf("%s unexpectedly not started: %s", el, reason)
			}
			starts := h.runner.startsOf(Build)
			if starts["b"]+starts["c"] != 0 {
				t.Errorf("dependants of the failed a were started: %v", starts)
			}
			checkTokensFree(t, pool, resources.Process, resources.Cache)
		})
	}
}

func TestStartErrorFailsElement(t *testing.T) {
	g := newGraph(t, "a", "b: a", "c")
	pool := buildPool(1)
	h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool, OnError: element.OnErrorContinue},
		func(r *fakeRunner) {
			r.startErr = func(spec job.Spec) error {
				if spec.Element == "a" {
					return errors.New("no such executable")
				}
				return nil
			}
		})
	sum := h.succeedAll()
	checkBuiltOnce(t, h.runner, Build, "c")
	if len(sum.Failed) != 1 || sum.Failed[0].Element != "a" || !strings.Contains(sum.Failed[0].Error, "no such executable") {
		t.Errorf("failed %+v, want a with the start error", sum.Failed)
	}
	checkTokensFree(t, pool, resources.Process, resources.Cache)
}

// TestStuck: when nothing runs and nothing can start, Run returns and says why.
func TestStuck(t *testing.T) {
	tests := []struct {
		name       string
		queue      Queue
		items      func(t *testing.T) []*Item
		wantReason string
	}{
		{
			name: "queue always waits",
			queue: &testQueue{action: "track", resources: needs(nil),
				status: func(*Item) (Status, string) { return Wait, "waiting for a ref that never comes" }},
			items:      func(t *testing.T) []*Item { return plan(t, newGraph(t, "x"), PlanOptions{}) },
			wantReason: "waiting for a ref that never comes",
		},
		{
			name:  "dependency outside the session",
			queue: buildQueue(),
			items: func(t *testing.T) []*Item {
				items := plan(t, newGraph(t, "dep", "x: dep"), PlanOptions{})
				return items[1:] // x without dep: nothing will ever build dep
			},
			wantReason: "waiting for dep",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := startSession(t, Config{Queues: []Queue{tc.queue}, Items: tc.items(t), Pool: buildPool(2)})
			sum := h.wait()
			if len(sum.NotStarted) != 1 || sum.NotStarted[0].Element != "x" {
				t.Fatalf("not started %+v, want x", sum.NotStarted)
			}
			reason := sum.NotStarted[0].Reason
			if !strings.Contains(reason, "stuck") || !strings.Contains(reason, tc.wantReason) {
				t.Errorf("reason %q, want it to say stuck and %q", reason, tc.wantReason)
			}
			if sum.OK() {
				t.Error("summary OK with a stuck element")
			}
			notice := waitEvent(t, h.events, func(e Notice) bool { return e.Level == "error" })
			if notice.Element != "x" || !strings.Contains(notice.Text, tc.wantReason) {
				t.Errorf("error notice %+v, want one about x", notice)
			}
			// The notice comes before the session's end, so displays can show it.
			evs := h.events.all()
			if _, ok := evs[len(evs)-1].(SessionEnd); !ok {
				t.Errorf("last event %T, want SessionEnd", evs[len(evs)-1])
			}
			if n := len(h.runner.startsOf(tc.queue.Action())); n != 0 {
				t.Errorf("%d jobs started", n)
			}
		})
	}
}

// backoffLog records the Backoff calls (made on the scheduler goroutine).
type backoffLog struct {
	mu       sync.Mutex
	attempts []int
	wait     time.Duration
}

func (b *backoffLog) backoff(attempt int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.attempts = append(b.attempts, attempt)
	return b.wait
}

func (b *backoffLog) calls() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.attempts)
}

func fetchPool() *resources.Pool {
	return resources.NewPool(map[resources.Resource]int{resources.Download: 1})
}

func TestTemporaryFailuresAreRetried(t *testing.T) {
	tests := []struct {
		name      string
		retries   int
		failures  int // temporary failures before success
		wantStart int
		wantOK    bool
	}{
		{"no retries", 0, 1, 1, false},
		{"one retry, used up", 1, 5, 2, false},
		{"three retries, used up", 3, 5, 4, false},
		{"succeeds on the last retry", 2, 2, 3, true},
		{"succeeds at once", 2, 0, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			backoff := &backoffLog{wait: time.Microsecond}
			pool := fetchPool()
			h := startSession(t, Config{Queues: []Queue{fetchQueue(tc.retries)}, Items: plan(t, newGraph(t, "x"), PlanOptions{}),
				Pool: pool, Backoff: backoff.backoff})
			var logs []string
			for n := range tc.wantStart {
				j := h.expect(Fetch, "x")
				logs = append(logs, j.Spec.LogPath)
				if n < tc.failures {
					j.FailTemporarily(t, "connection reset")
				} else {
					j.Succeed(t)
				}
			}
			sum := h.wait()
			h.noStart()

			if sum.OK() != tc.wantOK {
				t.Errorf("OK() = %v, want %v: %+v", sum.OK(), tc.wantOK, sum)
			}
			if !tc.wantOK && (len(sum.Failed) != 1 || sum.Failed[0].Error != "connection reset") {
				t.Errorf("failed %+v, want x: connection reset", sum.Failed)
			}
			wantBackoff := []int{}
			for a := 1; a < tc.wantStart; a++ {
				wantBackoff = append(wantBackoff, a)
			}
			if got := backoff.calls(); !slices.Equal(got, wantBackoff) {
				t.Errorf("Backoff called for attempts %v, want %v", got, wantBackoff)
			}
			for i, s := range eventsOf[JobStart](h.events) {
				if s.Attempt != i+1 {
					t.Errorf("start %d has attempt %d", i+1, s.Attempt)
				}
			}
			for i, e := range eventsOf[JobEnd](h.events) {
				wantRetry := i < tc.wantStart-1
				if e.WillRetry != wantRetry {
					t.Errorf("end %d: WillRetry = %v, want %v", i+1, e.WillRetry, wantRetry)
				}
			}
			if len(slices.Compact(slices.Clone(logs))) != len(logs) {
				t.Errorf("attempts share a log file: %v", logs)
			}
			checkTokensFree(t, pool, resources.Download)
		})
	}
}

// TestBackoffHoldsNoToken: a job waiting out its backoff gives its token to the next
// element, is not restarted early even when the token is free, and does not keep a
// stopped session alive.
func TestBackoffHoldsNoToken(t *testing.T) {
	tests := []struct {
		name string
		stop Command // sent after b ends (quit) or while b runs (terminate)
	}{
		{"quit", CmdQuit},
		{"terminate", CmdTerminate},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			backoff := &backoffLog{wait: time.Hour}
			pool := fetchPool()
			h := startSession(t, Config{Queues: []Queue{fetchQueue(2)}, Items: plan(t, newGraph(t, "a", "b"), PlanOptions{}),
				Pool: pool, Backoff: backoff.backoff})
			a := h.expect(Fetch, "a")
			a.FailTemporarily(t, "connection reset")
			if end := h.ended(a); !end.WillRetry {
				t.Fatalf("end of a: %+v, want a retry", end)
			}
			// The only download token went to b while a waits.
			b := h.expect(Fetch, "b")
			if n := pool.InUse(resources.Download); n != 1 {
				t.Errorf("%d download tokens in use while a waits out its backoff and b runs, want 1", n)
			}
			h.sync(b)
			h.noStart()

			if tc.stop == CmdQuit {
				b.Succeed(t)
				h.ended(b)
				h.s.Send(CmdQuit)
				// The notice comes from the turn after the one that ended b.
				waitEvent(t, h.events, func(e Notice) bool { return strings.Contains(e.Text, "quitting") })
				h.noStart() // the token is free, but a's hour is not up
			} else {
				h.s.Send(CmdTerminate)
				if end := h.ended(b); end.Result != ResultTerminated {
					t.Errorf("end of b: %+v, want terminated", end)
				}
			}
			sum := h.wait() // must not wait out a's hour
			h.noStart()

			if sum.OK() {
				t.Error("summary OK although a never finished")
			}
			if len(sum.NotStarted) == 0 || sum.NotStarted[0].Element != "a" {
				t.Errorf("not started %+v, want a first", sum.NotStarted)
			}
			if tc.stop == CmdTerminate && !sum.Interrupted {
				t.Error("Interrupted not set after terminate")
			}
			if got := backoff.calls(); !slices.Equal(got, []int{1}) {
				t.Errorf("Backoff calls %v, want [1]", got)
			}
			checkTokensFree(t, pool, resources.Download)
		})
	}
}

func TestSuspendResume(t *testing.T) {
	g := newGraph(t, "a", "b", "c")
	pool := buildPool(2)
	h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool})
	jobs := h.nextN(2)
	a, b := jobs["a"], jobs["b"]
	if a == nil || b == nil {
		t.Fatalf("started %v, want a and b", jobs)
	}

	h.s.Send(CmdSuspend)
	waitEvent(t, h.events, func(Suspended) bool { return true })
	for _, j := range []*fakeJob{a, b} {
		if got := j.Calls(); !slices.Equal(got, []string{"suspend"}) {
			t.Errorf("%s got %v, want suspend", j, got)
		}
	}
	h.s.Send(CmdSuspend) // a second suspend changes nothing
	a.Succeed(t)         // a job may still end while suspended, freeing a token
	h.ended(a)
	h.sync(b)
	h.noStart() // but c does not start while suspended
	if n := len(eventsOf[Suspended](h.events)); n != 1 {
		t.Errorf("%d Suspended events, want 1", n)
	}

	h.s.Send(CmdResume)
	waitEvent(t, h.events, func(Resumed) bool { return true })
	c := h.expect(Build, "c")
	if got := b.Calls(); !slices.Equal(got, []string{"suspend", "resume"}) {
		t.Errorf("b got %v, want suspend, resume", got)
	}
	if got := a.Calls(); !slices.Equal(got, []string{"suspend"}) {
		t.Errorf("a (ended) got %v, want only suspend", got)
	}
	b.Succeed(t)
	c.Succeed(t)
	sum := h.wait()
	if !sum.OK() {
		t.Errorf("summary not OK: %+v", sum)
	}
	checkBuiltOnce(t, h.runner, Build, "a", "b", "c")
	checkTokensFree(t, pool, resources.Process, resources.Cache)
}

func TestStopCommands(t *testing.T) {
	tests := []struct {
		name           string
		suspendFirst   bool
		stop           Command
		wantCall       string // what running jobs get; "" = nothing, they finish
		wantNotStarted map[string]string
		wantQuit       bool
	}{
		{name: "terminate", stop: CmdTerminate, wantCall: "terminate",
			wantNotStarted: map[string]string{"a": "terminated", "b": "terminated", "c": "session terminated"}},
		{name: "terminate while suspended", suspendFirst: true, stop: CmdTerminate, wantCall: "terminate",
			wantNotStarted: map[string]string{"a": "terminated", "b": "terminated", "c": "session terminated"}},
		{name: "kill", stop: CmdKill, wantCall: "kill",
			wantNotStarted: map[string]string{"a": "terminated", "b": "terminated", "c": "session terminated"}},
		{name: "kill while suspended", suspendFirst: true, stop: CmdKill, wantCall: "kill",
			wantNotStarted: map[string]string{"a": "terminated", "b": "terminated", "c": "session terminated"}},
		{name: "quit", stop: CmdQuit, wantQuit: true,
			wantNotStarted: map[string]string{"c": "session quit"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGraph(t, "a", "b", "c")
			pool := buildPool(2)
			h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool})
			jobs := h.nextN(2)
			a, b := jobs["a"], jobs["b"]
			if a == nil || b == nil {
				t.Fatalf("started %v, want a and b", jobs)
			}
			want := []string{}
			if tc.suspendFirst {
				h.s.Send(CmdSuspend)
				waitEvent(t, h.events, func(Suspended) bool { return true })
				want = append(want, "suspend")
			}
			h.s.Send(tc.stop)
			if tc.wantCall != "" {
				want = append(want, tc.wantCall)
			} else {
				waitEvent(t, h.events, func(e Notice) bool { return strings.Contains(e.Text, "quitting") })
				a.Succeed(t)
				h.ended(a)
				h.sync(b)
				h.noStart() // c does not start in a's place
				b.Succeed(t)
			}
			sum := h.wait()
			h.noStart()
			for _, j := range []*fakeJob{a, b} {
				if got := j.Calls(); !slices.Equal(got, want) {
					t.Errorf("%s got %v, want %v", j, got, want)
				}
			}
			if sum.OK() {
				t.Error("summary OK after a stop")
			}
			if wantInterrupted := tc.wantCall != ""; sum.Interrupted != wantInterrupted {
				t.Errorf("Interrupted = %v, want %v", sum.Interrupted, wantInterrupted)
			}
			if tc.wantQuit && !sum.Quit {
				t.Error("Quit not set after quit")
			}
			got := map[string]string{}
			for _, ns := range sum.NotStarted {
				got[ns.Element] = ns.Reason
			}
			for el, want := range tc.wantNotStarted {
				if !strings.Contains(got[el], want) {
					t.Errorf("not started %s: reason %q, want it to mention %q", el, got[el], want)
				}
				delete(got, el)
			}
			for el, reason := range got {
				t.Errorf("%s unexpectedly not started: %s", el, reason)
			}
			if n := h.runner.startsOf(Build)["c"]; n != 0 {
				t.Errorf("c started %d times after the stop", n)
			}
			checkTokensFree(t, pool, resources.Process, resources.Cache)
		})
	}
}

// TestPriority: with one builder, the READY element with the longest remaining
// critical path starts first.
func TestPriority(t *testing.T) {
	tests := []struct {
		name     string
		graph    []string
		estimate map[string]time.Duration // missing: defaultEstimate
		want     []string
	}{
		{
			name:     "longest chain first",
			graph:    []string{"short", "mid", "long1", "long2: long1"},
			estimate: map[string]time.Duration{"short": time.Second, "mid": 5 * time.Second, "long1": 10 * time.Second, "long2": 10 * time.Second},
			want:     []string{"long1", "long2", "mid", "short"},
		},
		{
			name:     "a quick element feeding a slow one beats a slow leaf",
			graph:    []string{"big", "tiny", "huge: tiny"},
			estimate: map[string]time.Duration{"big": 50 * time.Second, "tiny": time.Second, "huge": 100 * time.Second},
			want:     []string{"tiny", "huge", "big"},
		},
		{
			name:     "unknown elements get the default estimate",
			graph:    []string{"known", "unknown"},
			estimate: map[string]time.Duration{"known": defaultEstimate / 2},
			want:     []string{"unknown", "known"},
		},
		{
			name:     "the longest of several paths counts",
			graph:    []string{"root", "side", "a: root", "b: root", "c: b"},
			estimate: map[string]time.Duration{"root": time.Second, "side": 3 * time.Second, "a": 1 * time.Second, "b": time.Second, "c": 2 * time.Second},
			// Paths: root 1+1+2 = 4, side 3, b 3, c 2, a 1; side and b tie: b, a
			// second build of the chain root began, goes first (depth-first).
			want: []string{"root", "b", "side", "c", "a"},
		},
		{
			name:  "learned durations change the order hop counts give",
			graph: []string{"h1", "h2: h1", "h3: h2", "h4: h3", "long1", "long2: long1"},
			// Unlearned, the four hops are the longest chain (h1 first); learned, the
			// two long builds are (6 s): long1 first. Then h1 (4 s) before long2 (3 s),
			// and long2 ties with h2 (3 s) and goes first, being the deeper.
			estimate: map[string]time.Duration{"h1": time.Second, "h2": time.Second, "h3": time.Second, "h4": time.Second, "long1": 3 * time.Second, "long2": 3 * time.Second},
			want:     []string{"long1", "h1", "long2", "h2", "h3", "h4"},
		},
		{
			name:  "nothing learned: hop counts, ties depth-first",
			graph: []string{"long1", "long2: long1", "h1", "h2: h1", "h3: h2", "h4: h3"},
			// 2 s each: h1 8 s, h2 6 s; then long1 4 s ties with h3 and goes after it,
			// h3 continuing a chain begun (first come would take long1); then long2
			// 2 s ties with h4, the deeper.
			want: []string{"h1", "h2", "h3", "long1", "h4", "long2"},
		},
		{
			name:     "a tie goes to the deeper build, not the first declared",
			graph:    []string{"a1", "b", "a2: a1"},
			estimate: map[string]time.Duration{"a1": time.Second, "b": time.Second, "a2": time.Second},
			want:     []string{"a1", "a2", "b"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGraph(t, tc.graph...)
			items := plan(t, g, PlanOptions{Estimate: func(e *element.Element) (time.Duration, bool) {
				d, ok := tc.estimate[e.Name]
				return d, ok
			}})
			pool := buildPool(1)
			h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: items, Pool: pool})
			var got []string
			for range tc.want {
				j := h.next()
				got = append(got, j.Spec.Element)
				j.Succeed(t)
			}
			h.wait()
			if !slices.Equal(got, tc.want) {
				t.Errorf("build order %v, want %v", got, tc.want)
			}
		})
	}
}

// TestExclusiveNotStarved: a cleanup job that needs the cache exclusively registers
// interest, so the builds (which hold it shared) drain and the cleanup runs before any
// new build starts.
func TestExclusiveNotStarved(t *testing.T) {
	g := newGraph(t, "b1", "b2", "b3", "b4", "b5", "gc")
	items := plan(t, g, PlanOptions{})
	var b1 *Item
	for _, it := range items {
		if it.Name() == "b1" {
			b1 = it
		}
	}
	// Pipeline: build (gc skips it), then cleanup (only gc, once b1 is built).
	build := &testQueue{action: Build, resources: needs([]resources.Resource{resources.Process, resources.Cache}),
		status: func(it *Item) (Status, string) {
			if it.Name() == "gc" {
				return Skip, "not built"
			}
			return Ready, ""
		}}
	cleanup := &testQueue{action: "cleanup", resources: needs([]resources.Resource{resources.Process}, resources.Cache),
		status: func(it *Item) (Status, string) {
			switch {
			case it.Name() != "gc":
				return Skip, "no cleanup"
			case b1.Cached:
				return Ready, ""
			}
			return Wait, "waiting for b1"
		}}
	buildDone := &doneQueue{Queue: build}
	pool := resources.NewPool(map[resources.Resource]int{resources.Process: 3, resources.Cache: 0})
	h := startSession(t, Config{Queues: []Queue{buildDone, cleanup}, Items: items, Pool: pool})

	jobs := h.nextN(3)
	if jobs["b1"] == nil || jobs["b2"] == nil || jobs["b3"] == nil {
		t.Fatalf("started %v, want b1, b2, b3", jobs)
	}
	jobs["b1"].Succeed(t) // gc is now ready, but b2 and b3 hold the cache shared
	h.ended(jobs["b1"])
	h.sync(jobs["b2"])
	h.noStart() // b4 must not take the free builder: it would hold the cache too
	jobs["b2"].Succeed(t)
	h.ended(jobs["b2"])
	h.sync(jobs["b3"])
	h.noStart()
	jobs["b3"].Succeed(t)
	gc := h.expect("cleanup", "gc")
	h.sync(gc)
	h.noStart() // nothing shares the cache with the cleanup
	gc.Succeed(t)
	rest := h.nextN(2)
	if rest["b4"] == nil || rest["b5"] == nil {
		t.Fatalf("after the cleanup started %v, want b4 and b5", rest)
	}
	for _, j := range rest {
		j.Succeed(t)
	}
	sum := h.wait()
	if !sum.OK() {
		t.Errorf("summary not OK: %+v", sum)
	}
	checkTokensFree(t, pool, resources.Process, resources.Cache)
}

// doneQueue marks an item cached when its job succeeds, like the Build queue.
type doneQueue struct{ Queue }

func (q *doneQueue) Done(it *Item, res job.Result) { it.Cached = true; q.Queue.Done(it, res) }

// BenchmarkScheduler runs no-op builds of random DAGs (fan-in 3) through the fetch
// and build queues with jobs that finish at once, each saying three things on the
// way as a real job does: the loop's overhead per element, which must stay flat as
// the graph grows.
func BenchmarkScheduler(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			g := randomGraph(b, n, 3, 42)
			for b.Loop() {
				b.StopTimer()
				items := plan(b, g, PlanOptions{})
				fetch := &testQueue{action: Fetch, status: skipAll, resources: needs([]resources.Resource{resources.Download})}
				s := New(Config{Project: "bench", Queues: []Queue{fetch, buildQueue()}, Items: items, Pool: buildPool(8),
					Runner: chattyRunner{}, LogDir: "/logs"})
				b.StartTimer()
				sum := s.Run()
				if !sum.OK() || sum.Queues[1].Processed != n {
					b.Fatalf("summary: %+v", sum.Queues)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/element")
		})
	}
}

// TestOnErrorAsk: under on-error "ask" a failure suspends the other jobs, starts
// nothing, and waits for the user's answer. a and d run (b needs a); a fails.
func TestOnErrorAsk(t *testing.T) {
	for _, answer := range []Command{CmdContinue, CmdRetry, CmdQuit, CmdTerminate} {
		t.Run(answer.String(), func(t *testing.T) {
			g := newGraph(t, "a", "d", "e", "b: a")
			pool := buildPool(2)
			h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool, OnError: element.OnErrorAsk})
			jobs := h.nextN(2)
			a, d := jobs["a"], jobs["d"]
			if a == nil || d == nil {
				t.Fatalf("started %v, want a and d", jobs)
			}
			a.Fail(t, "exit status 1")
			ask := waitEvent(t, h.events, func(e Held) bool { return true })
			if ask.Element != "a" || ask.Error != "exit status 1" || ask.LogPath != a.Spec.LogPath || ask.Action != Build {
				t.Errorf("held %+v, want a's failure with its log", ask)
			}
			h.sync(d)
			h.noStart() // e waits while the question is open
			if !slices.Equal(d.Calls(), []string{"suspend"}) {
				t.Fatalf("d got %v while held, want suspend", d.Calls())
			}
			h.s.Send(answer)
			switch answer {
			case CmdTerminate:
				if end := h.ended(d); end.Result != ResultTerminated {
					t.Errorf("d ended %+v, want terminated", end)
				}
			case CmdQuit:
				h.sync(d)
				h.noStart()
				d.Succeed(t)
			case CmdContinue:
				h.expect(Build, "e").Succeed(t)
				d.Succeed(t)
			case CmdRetry:
				again := h.expect(Build, "a")
				if again.Spec.LogPath == a.Spec.LogPath {
					t.Errorf("the retry writes over the failed attempt's log %s", a.Spec.LogPath)
				}
				again.Succeed(t)
				d.Succeed(t)
				for range 2 {
					h.next().Succeed(t) // b and e
				}
			}
			sum := h.wait()
			if answer != CmdTerminate && !slices.Equal(d.Calls(), []string{"suspend", "resume"}) {
				t.Errorf("d got %v, want suspend then resume", d.Calls())
			}
			wantFailed := answer != CmdRetry
			if got := len(sum.Failed) == 1 && sum.Failed[0].Element == "a"; got != wantFailed || (!wantFailed && len(sum.Failed) != 0) {
				t.Errorf("failed %+v, want a failed: %v", sum.Failed, wantFailed)
			}
			if answer == CmdRetry && !sum.OK() {
				t.Errorf("after a successful retry the session is not OK: %+v", sum)
			}
			if sum.Interrupted != (answer == CmdTerminate) {
				t.Errorf("Interrupted = %v after %s", sum.Interrupted, answer)
			}
			last := eventsOf[Counts](h.events)
			if len(last) == 0 {
				t.Fatal("no Counts published")
			}
			c := last[len(last)-1]
			q := c.Queues[0]
			if c.Total != 4 || q.Running != 0 || q.Waiting != len(sum.NotStarted)-countReason(sum, "terminated") ||
				q.Processed != sum.Queues[0].Processed || q.Failed != sum.Queues[0].Failed {
				t.Errorf("last counts %+v do not match the summary %+v", c, sum)
			}
			if answer == CmdRetry && c.Done != 4 {
				t.Errorf("done %d of %d after everything built", c.Done, c.Total)
			}
			checkTokensFree(t, pool, resources.Process, resources.Cache)
		})
	}
}

func countReason(s *Summary, reason string) int {
	n := 0
	for _, ns := range s.NotStarted {
		if ns.Reason == reason {
			n++
		}
	}
	return n
}

// TestOnErrorAskQueuesQuestions: failures while a question is open are asked in turn,
// and the jobs are resumed only when the last is answered.
func TestOnErrorAskQueuesQuestions(t *testing.T) {
	g := newGraph(t, "a", "d", "e")
	h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: buildPool(3), OnError: element.OnErrorAsk})
	jobs := h.nextN(3)
	jobs["a"].Fail(t, "a broke")
	waitEvent(t, h.events, func(e Held) bool { return e.Element == "a" })
	jobs["d"].Fail(t, "d broke") // it was on its way out when the jobs were suspended
	h.ended(jobs["d"])
	h.sync(jobs["e"])
	if n := len(eventsOf[Held](h.events)); n != 1 {
		t.Fatalf("%d questions open at once, want 1", n)
	}
	h.s.Send(CmdContinue)
	waitEvent(t, h.events, func(e Held) bool { return e.Element == "d" })
	h.sync(jobs["e"])
	if calls := jobs["e"].Calls(); !slices.Equal(calls, []string{"suspend"}) {
		t.Errorf("e got %v before the second answer, want only suspend", calls)
	}
	h.s.Send(CmdContinue)
	jobs["e"].Succeed(t)
	sum := h.wait()
	if len(sum.Failed) != 2 || !slices.Equal(jobs["e"].Calls(), []string{"suspend", "resume"}) {
		t.Errorf("failed %+v, e calls %v", sum.Failed, jobs["e"].Calls())
	}
}

// TestOnErrorAskWithNothingRunning: a question with no other job running suspends
// nothing, and the session waits for the answer instead of ending.
func TestOnErrorAskWithNothingRunning(t *testing.T) {
	g := newGraph(t, "a", "b: a")
	h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: buildPool(2), OnError: element.OnErrorAsk})
	h.expect(Build, "a").Fail(t, "broken")
	waitEvent(t, h.events, func(e Held) bool { return e.Element == "a" })
	select {
	case sum := <-h.summary:
		t.Fatalf("the session ended with a question open: %+v", sum)
	default:
	}
	h.s.Send(CmdRetry)
	h.expect(Build, "a").Succeed(t)
	h.expect(Build, "b").Succeed(t)
	if sum := h.wait(); !sum.OK() {
		t.Errorf("summary %+v, want OK after the retry", sum)
	}
	if n := len(eventsOf[Suspended](h.events)); n != 0 {
		t.Errorf("%d Suspended events with no job to suspend", n)
	}
}

// A job that ends waiting (job.Result.WaitMs: another session holds the build-once
// lease) runs again after the wait, as often as it takes: waits are no failed
// attempts, so a queue without network retries does not fail the element.
func TestWaitingJobRunsAgain(t *testing.T) {
	backoff := &backoffLog{wait: time.Microsecond}
	h := startSession(t, Config{Queues: []Queue{fetchQueue(0)}, Items: plan(t, newGraph(t, "x"), PlanOptions{}),
		Pool: fetchPool(), Backoff: backoff.backoff})
	for range 3 {
		h.expect(Fetch, "x").Finish(t, job.Outcome{Result: job.Result{Error: "waiting for another builder of x", WaitMs: 1}, ExitCode: 0})
	}
	h.expect(Fetch, "x").Succeed(t)
	sum := h.wait()
	h.noStart()
	if !sum.OK() {
		t.Fatalf("the session failed: %+v", sum)
	}
	var results []JobResult
	for _, e := range eventsOf[JobEnd](h.events) {
		results = append(results, e.Result)
		if e.Result == ResultWaiting && (e.WillRetry || e.Error != "waiting for another builder of x") {
			t.Errorf("waiting job end %+v: want the job's reason, no retry", e)
		}
	}
	want := []JobResult{ResultWaiting, ResultWaiting, ResultWaiting, ResultSuccess}
	if !slices.Equal(results, want) {
		t.Errorf("job ends %v, want %v", results, want)
	}
	if got := backoff.calls(); len(got) != 0 {
		t.Errorf("Backoff called for attempts %v: a wait is not a retry", got)
	}
	for i, s := range eventsOf[JobStart](h.events) {
		if s.Attempt != 1 {
			t.Errorf("start %d has attempt %d, want 1: waits do not count as attempts", i+1, s.Attempt)
		}
	}
}
