package queues

import (
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/resources"
)

// quotaSession runs a build of independent elements with a cache quota of 100 bytes,
// low water 80, and builders process tokens. delivered are the session's targets.
func quotaSession(t *testing.T, builders int, names []string, delivered ...string) (*session, []*Item) {
	t.Helper()
	var lines []string
	for _, n := range names {
		lines = append(lines, n+":")
	}
	g := newGraph(t, lines...)
	items := plan(t, g, PlanOptions{})
	cfg := Config{Queues: []Queue{buildQueue()}, Items: items, Pool: buildPool(builders), OnError: element.OnErrorContinue,
		Cleanup: &CleanupConfig{Quota: 100, LowWater: 80,
			Deliver: func(it *Item) bool { return slices.Contains(delivered, it.Name()) },
			Payload: func(keep []ArtifactKey) (json.RawMessage, error) { return json.Marshal(keep) },
		}}
	return startSession(t, cfg), items
}

// addBytes succeeds a build job that added n bytes to the cache.
func addBytes(t *testing.T, h *session, j *fakeJob, n int64) {
	t.Helper()
	j.Finish(t, job.Outcome{Result: job.Result{OK: true, CacheBytes: n}})
	h.ended(j)
}

// cleaned succeeds a cleanup job that left the cache at after bytes.
func cleaned(t *testing.T, j *fakeJob, after int64) {
	t.Helper()
	data, _ := json.Marshal(CleanupResult{Before: 150, After: after, Freed: 150 - after, Artifacts: 1, Duration: time.Millisecond})
	j.Finish(t, job.Outcome{Result: job.Result{OK: true, Data: data}})
}

func keptBy(t *testing.T, j *fakeJob) []string {
	t.Helper()
	var keep []ArtifactKey
	if err := json.Unmarshal(j.Spec.Payload, &keep); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range keep {
		names = append(names, k.Element)
	}
	slices.Sort(names)
	return names
}

// A build that takes the cache over its quota asks for a cleanup: it waits for the
// builds that hold CACHE, no new build starts meanwhile (though a builder is free),
// and builds go on when it has ended.
func TestCleanupWaitsForHoldersAndBlocksNewOnes(t *testing.T) {
	h, _ := quotaSession(t, 2, []string{"a", "b", "c", "d"}, "d")
	jobs := h.nextN(2)
	addBytes(t, h, jobs["a"], 150) // over the quota: a cleanup is wanted
	h.sync(jobs["b"])
	h.noStart() // b holds CACHE: the cleanup waits, and c may not start either
	jobs["b"].Succeed(t)
	cj := h.expect(Cleanup, cleanupElement)
	// The cleanup keeps what is still to be built (c, d) and what is delivered (d);
	// a and b are built and not targets.
	if got := keptBy(t, cj); !slices.Equal(got, []string{"c", "d"}) {
		t.Fatalf("cleanup keeps %v, want [c d]", got)
	}
	h.sync(cj)
	h.noStart() // nothing builds while the cleanup holds CACHE exclusively
	cleaned(t, cj, 60)
	rest := h.nextN(2)
	rest["c"].Succeed(t)
	rest["d"].Succeed(t)
	sum := h.wait()
	if !sum.OK() {
		t.Fatalf("session failed: %+v", sum)
	}
	ev := eventsOf[CacheCleanup](h.events)
	if len(ev) != 1 || ev[0].Freed != 90 || ev[0].After != 60 || ev[0].Quota != 100 {
		t.Fatalf("cleanup events = %+v, want one freeing 90 bytes down to 60", ev)
	}
	if n := h.pool.InUse(resources.Cache); n != 0 {
		t.Fatalf("CACHE still held %d times after the session", n)
	}
}

// Under a steady stream of builds the cleanup is not starved: once it waits, no build
// starts until it has run, however many builders are free.
func TestCleanupCannotStarve(t *testing.T) {
	names := []string{"e00", "e01", "e02", "e03", "e04", "e05", "e06", "e07", "e08", "e09"}
	h, _ := quotaSession(t, 3, names)
	running := h.nextN(3)
	// Keep the builders busy: each end starts the next build, until one goes over.
	first := running["e00"]
	delete(running, "e00")
	first.Succeed(t)
	j := h.next()
	running[j.Spec.Element] = j
	var over *fakeJob
	for name, j := range running {
		over = j
		delete(running, name)
		break
	}
	addBytes(t, h, over, 500)
	for _, j := range running {
		h.sync(j)
		h.noStart()
		j.Succeed(t)
	}
	cj := h.expect(Cleanup, cleanupElement)
	cleaned(t, cj, 10)
	h.succeedAll()
	if n := h.runner.maxRunning(Cleanup); n != 1 {
		t.Fatalf("cleanup ran %d at once", n)
	}
}

// A failed cleanup releases CACHE and the builds go on; the session does not fail
// because of the quota, and the cleanup is not tried again.
func TestCleanupFailureReleases(t *testing.T) {
	h, _ := quotaSession(t, 1, []string{"a", "b", "c"})
	addBytes(t, h, h.expect(Build, "a"), 150)
	cj := h.expect(Cleanup, cleanupElement)
	cj.Fail(t, "disk on fire")
	addBytes(t, h, h.expect(Build, "b"), 150) // over again: no second cleanup
	h.expect(Build, "c").Succeed(t)
	sum := h.wait()
	if !sum.OK() {
		t.Fatalf("a failed cleanup failed the session: %+v", sum)
	}
	warned := waitEvent(t, h.events, func(n Notice) bool { return n.Level == "warning" })
	if want := "the cache cleanup failed: disk on fire"; len(warned.Text) < len(want) || warned.Text[:len(want)] != want {
		t.Fatalf("warning = %q", warned.Text)
	}
	if h.pool.InUse(resources.Cache) != 0 || len(h.pool.Interested(resources.Cache)) != 0 {
		t.Fatal("CACHE still held or wanted after a failed cleanup")
	}
}

// Terminating the session stops a running cleanup and withdraws a waiting one's
// interest.
func TestCleanupTerminated(t *testing.T) {
	t.Run("running", func(t *testing.T) {
		h, _ := quotaSession(t, 1, []string{"a", "b"})
		addBytes(t, h, h.expect(Build, "a"), 150)
		cj := h.expect(Cleanup, cleanupElement)
		h.s.Send(CmdTerminate)
		sum := h.wait()
		if !slices.Contains(cj.Calls(), "terminate") {
			t.Fatalf("cleanup calls %v, want terminate", cj.Calls())
		}
		if !sum.Interrupted || h.pool.InUse(resources.Cache) != 0 {
			t.Fatalf("summary %+v, CACHE in use %d", sum, h.pool.InUse(resources.Cache))
		}
	})
	t.Run("waiting", func(t *testing.T) {
		h, _ := quotaSession(t, 2, []string{"a", "b", "c"})
		jobs := h.nextN(2)
		addBytes(t, h, jobs["a"], 150)
		h.sync(jobs["b"])
		h.s.Send(CmdTerminate)
		h.wait()
		if got := h.pool.Interested(resources.Cache); len(got) != 0 {
			t.Fatalf("exclusive interest %v left after terminate", got)
		}
		if n := h.runner.maxRunning(Cleanup); n != 0 {
			t.Fatal("a cleanup started after terminate")
		}
	})
}

// A cache too small for what the session keeps gives one warning, and the build goes
// on; the next cleanup waits until the cache has grown again.
func TestCleanupTooSmallWarnsOnce(t *testing.T) {
	h, _ := quotaSession(t, 1, []string{"a", "b", "c", "d"}, "a", "b", "c", "d")
	addBytes(t, h, h.expect(Build, "a"), 150)
	cleaned(t, h.expect(Cleanup, cleanupElement), 150) // all kept
	addBytes(t, h, h.expect(Build, "b"), 10)           // under the new threshold: no cleanup
	addBytes(t, h, h.expect(Build, "c"), 50)           // 210 > 150+20: another one
	cleaned(t, h.expect(Cleanup, cleanupElement), 210)
	h.expect(Build, "d").Succeed(t)
	if sum := h.wait(); !sum.OK() {
		t.Fatalf("session failed: %+v", sum)
	}
	var warnings int
	for _, n := range eventsOf[Notice](h.events) {
		if n.Level == "warning" {
			warnings++
			// sizes as every display writes them (units.Bytes)
			if want := "the cache quota (100 B) is too small for this session: 150 B is left after cleanup"; !strings.HasPrefix(n.Text, want) {
				t.Errorf("warning %q, want it to start %q", n.Text, want)
			}
		}
	}
	if warnings != 1 {
		t.Fatalf("%d warnings, want 1", warnings)
	}
}

// An exclusive interest whose item is never granted must be withdrawn: left behind, it
// keeps every shared holder out for the rest of the session (a regression: only a
// granted request withdrew it).
func TestStaleExclusiveInterestWithdrawn(t *testing.T) {
	for _, gone := range []Status{Skip, Wait} {
		t.Run(gone.String(), func(t *testing.T) {
			var xGone atomic.Bool
			q := &testQueue{action: Build,
				status: func(it *Item) (Status, string) {
					if it.Name() == "x" && xGone.Load() {
						return gone, "no longer wanted"
					}
					return Ready, ""
				},
				resources: func(it *Item) resources.Request {
					if it.Name() == "x" {
						return resources.Request{Shared: []resources.Resource{resources.Process}, Exclusive: []resources.Resource{resources.Cache}}
					}
					return resources.Request{Shared: []resources.Resource{resources.Process, resources.Cache}}
				}}
			g := newGraph(t, "y:", "x:", "z:")
			items := plan(t, g, PlanOptions{})
			h := startSession(t, Config{Queues: []Queue{q}, Items: items, Pool: buildPool(3), OnError: element.OnErrorContinue})
			y := h.expect(Build, "y")
			h.sync(y)
			h.noStart() // x wants CACHE exclusively: z waits behind its interest
			xGone.Store(true)
			y.Succeed(t)
			h.expect(Build, "z").Succeed(t)
			sum := h.wait()
			if len(sum.NotStarted) > 0 && gone == Skip {
				t.Fatalf("not started: %+v", sum.NotStarted)
			}
		})
	}
}

// A job's notice (waiting for another process's cache lock) reaches every display as a
// Notice naming the element.
func TestJobNoticePublished(t *testing.T) {
	h, _ := quotaSession(t, 1, []string{"a"})
	j := h.expect(Build, "a")
	j.onMessage(job.Message{Type: job.MessageNotice, Time: time.Now(), Text: "waiting for the cache lock"})
	n := waitEvent(t, h.events, func(n Notice) bool { return n.Text == "waiting for the cache lock" })
	if n.Element != "a" || n.Level != "info" {
		t.Fatalf("notice %+v", n)
	}
	j.Succeed(t)
	h.wait()
}
