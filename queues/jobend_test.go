package queues

import (
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/resources"
	"github.com/gantry-build/gantry/source"
)

// OnJobEnd runs on the scheduler goroutine for every job end, before the JobEnd is
// published: a display that sees the event sees the hook's side effects. Its error
// becomes a warning Notice naming the element.
func TestOnJobEndRunsBeforeTheEvent(t *testing.T) {
	g := newGraph(t, "a", "b")
	var mu sync.Mutex
	var h *session      // set once the session starts, before any job can end
	var hooked []string // written by the hook; read after Run returned
	cfg := Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: buildPool(1),
		OnError: element.OnErrorContinue,
		OnJobEnd: func(end JobEnd) error {
			mu.Lock()
			events := h.events
			mu.Unlock()
			for _, e := range eventsOf[JobEnd](events) {
				if e.JobID == end.JobID {
					t.Errorf("the JobEnd of %s was published before OnJobEnd ran", end.JobID)
				}
			}
			hooked = append(hooked, end.Element+" "+string(end.Result))
			if end.Result == ResultFailure {
				return errors.New("dropping the failed artifact: disk on fire")
			}
			return nil
		}}
	mu.Lock()
	h = startSession(t, cfg)
	mu.Unlock()
	a := h.expect(Build, "a")
	a.Succeed(t)
	b := h.expect(Build, "b")
	b.Fail(t, "exit 1")
	h.wait()
	if want := []string{"a success", "b failure"}; !slices.Equal(hooked, want) {
		t.Errorf("OnJobEnd saw %v, want %v", hooked, want)
	}
	var notices []string
	for _, n := range eventsOf[Notice](h.events) {
		if n.Element == "b" && n.Level == "warning" && strings.Contains(n.Text, "disk on fire") {
			notices = append(notices, n.Text)
		}
	}
	if len(notices) != 1 {
		t.Errorf("want one warning naming b with the hook's error, got %q", notices)
	}
}

// A job that cannot be suspended, resumed, terminated or killed is reported: it may
// go on running.
func TestSignalErrorsAreReported(t *testing.T) {
	g := newGraph(t, "a")
	h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: buildPool(1)})
	a := h.expect(Build, "a")
	h.runner.mu.Lock()
	h.runner.signalErr = errors.New("operation not permitted")
	h.runner.mu.Unlock()
	for _, c := range []Command{CmdSuspend, CmdResume, CmdTerminate} {
		h.s.Do(c)
	}
	h.runner.mu.Lock()
	h.runner.signalErr = nil
	h.runner.mu.Unlock()
	a.Succeed(t)
	h.wait()
	var got []string
	for _, n := range eventsOf[Notice](h.events) {
		if n.Element == "a" && n.Level == "warning" && strings.Contains(n.Text, "operation not permitted") {
			got = append(got, n.Text)
		}
	}
	if len(got) != 3 {
		t.Errorf("want 3 warnings about job a (suspend, resume, terminate), got %q", got)
	}
}

// A failed build cached by an earlier session counts as a build failure in Counts and
// in the summary's queue stats, in agreement with the summary's failure list.
func TestCachedFailureIsCounted(t *testing.T) {
	g := newGraph(t, "base", "left: base")
	items := plan(t, g, PlanOptions{Artifact: func(e *element.Element) element.ArtifactStatus {
		if e.Name == "left" {
			return element.ArtifactFailure
		}
		return element.ArtifactSuccess
	}})
	h := startSession(t, Config{Queues: []Queue{&testQueue{action: Fetch, status: skipAll}, buildQueue()}, Items: items, Pool: buildPool(1)})
	sum := h.succeedAll()
	if len(sum.Failed) != 1 || !sum.Failed[0].Cached {
		t.Fatalf("failed %+v, want left (cached)", sum.Failed)
	}
	if got := sum.Queues[1]; got.Action != Build || got.Failed != 1 {
		t.Errorf("summary build queue %+v, want failed 1", got)
	}
	counts := eventsOf[Counts](h.events)
	if len(counts) == 0 {
		t.Fatal("no Counts event")
	}
	for _, c := range counts {
		if c.Queues[1].Failed != 1 || c.Queues[0].Failed != 0 {
			t.Errorf("Counts %+v: want the build queue's failed = 1, fetch's 0", c.Queues)
		}
	}
}

func skipAll(*Item) (Status, string) { return Skip, "nothing to do" }

// Under build --track the plan, and so which failures are cached, is decided in the
// loop: a cached failure counts as a build failure there too.
func TestCachedFailureIsCountedInATrackedPlan(t *testing.T) {
	g := newGraph(t, "a", "b: a")
	a := g.Elements["a"]
	a.Sources = []source.Spec{{Kind: source.Git, URL: "https://example.com/a", Track: "main"}}
	a.NoRef = true
	for _, e := range g.Order {
		g.ComputeKey(e)
	}
	items := PlanTracked(g, []*element.Element{g.Elements["b"]}, PlanOptions{Artifact: func(e *element.Element) element.ArtifactStatus {
		if e.Name == "b" {
			return element.ArtifactFailure
		}
		return element.ArtifactSuccess
	}})
	track := trackQueue(func(it *Item, _ job.Result) { it.Element.NoRef = false })
	pool := resources.NewPool(map[resources.Resource]int{resources.Download: 2, resources.Process: 2, resources.Cache: 0})
	h := startSession(t, Config{Queues: []Queue{track, fetchQueue(0), buildQueue()}, Items: items, Pool: pool})
	sum := h.succeedAll()
	if len(sum.Failed) != 1 || sum.Failed[0].Element != "b" || !sum.Failed[0].Cached {
		t.Fatalf("failed %+v, want b (cached)", sum.Failed)
	}
	if got := sum.Queues[2]; got.Action != Build || got.Failed != 1 {
		t.Errorf("summary build queue %+v, want failed 1", got)
	}
}

// A job's JobStart comes when its worker has begun it (job.MessageStart), not when
// it is handed to one: a job terminated before its worker began it never ran, and
// has neither JobStart nor JobEnd; its element did not start. A job begun later is
// announced then, its log lines from before after its JobStart.
func TestJobStartWhenItsWorkerBeginsIt(t *testing.T) {
	g := newGraph(t, "a", "b")
	pool := buildPool(2)
	h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool},
		func(r *fakeRunner) { r.unbegun = true })
	jobs := h.nextN(2)
	a, b := jobs["a"], jobs["b"]
	b.onMessage(job.Message{Type: job.MessageLog, Time: time.Now(), Text: "reading the job"})
	a.begin()
	waitEvent(t, h.events, func(e JobStart) bool { return e.JobID == a.Spec.ID })
	b.begin()
	waitEvent(t, h.events, func(e JobStart) bool { return e.JobID == b.Spec.ID })
	if log := waitEvent(t, h.events, func(e JobMessage) bool { return e.JobID == b.Spec.ID }); log.Text != "reading the job" {
		t.Errorf("b's first message after its JobStart: %+v, want its held log line", log)
	}
	b.Succeed(t)
	h.ended(b)
	h.s.Send(CmdTerminate)
	sum := h.wait()
	// a had begun: it was terminated.
	if ends := eventsOf[JobEnd](h.events); !slices.ContainsFunc(ends, func(e JobEnd) bool { return e.JobID == a.Spec.ID && e.Result == ResultTerminated }) {
		t.Errorf("no terminated JobEnd for a, which had begun: %+v", ends)
	}
	if len(sum.NotStarted) != 1 || sum.NotStarted[0] != (NotStarted{Element: "a", Reason: "terminated"}) {
		t.Errorf("not started %+v, want a terminated", sum.NotStarted)
	}
	checkTokensFree(t, pool, resources.Process, resources.Cache)
}

// A job terminated before its worker began it never ran: no JobStart, no JobEnd,
// and its element is listed as not started because the session was terminated.
func TestJobTerminatedBeforeItsWorkerBeganItNeverStarted(t *testing.T) {
	g := newGraph(t, "a")
	pool := buildPool(1)
	h := startSession(t, Config{Queues: []Queue{buildQueue()}, Items: plan(t, g, PlanOptions{}), Pool: pool},
		func(r *fakeRunner) { r.unbegun = true })
	a := h.next()
	a.onMessage(job.Message{Type: job.MessageStatus, Time: time.Now(), Text: "not begun"})
	h.s.Send(CmdTerminate)
	sum := h.wait()
	for _, e := range h.events.all() {
		switch e := e.(type) {
		case JobStart, JobEnd, JobMessage:
			t.Errorf("an event of a job that never ran: %+v", e)
		}
	}
	if len(sum.NotStarted) != 1 || sum.NotStarted[0] != (NotStarted{Element: "a", Reason: "session terminated"}) {
		t.Errorf("not started %+v, want a: session terminated", sum.NotStarted)
	}
	if got := sum.Queues[0]; got.Processed != 0 || got.Failed != 0 {
		t.Errorf("build stats %+v, want nothing processed or failed", got)
	}
	checkTokensFree(t, pool, resources.Process, resources.Cache)
}

// The log of a job on an element with no key yet (tracking one with no ref) is named
// by the action and the time it started, beside the element's other logs: never by
// the key's placeholder.
func TestLogOfAnElementWithoutAKeyIsNamedByTime(t *testing.T) {
	g := newGraph(t, "a")
	a := g.Elements["a"]
	a.Sources = []source.Spec{{Kind: source.Git, URL: "https://example.com/a", Track: "main"}}
	a.NoRef = true
	g.ComputeKey(a)
	if a.Key != "" {
		t.Fatalf("a has key %q before tracking, want none", a.Key)
	}
	track := trackQueue(func(it *Item, _ job.Result) {})
	pool := resources.NewPool(map[resources.Resource]int{resources.Download: 1, resources.Cache: 0})
	h := startSession(t, Config{Queues: []Queue{track}, Items: PlanTracked(g, []*element.Element{a}, PlanOptions{}), Pool: pool})
	j := h.expect(Track, "a")
	if dir, file := filepath.Split(j.Spec.LogPath); dir != "/logs/test/" || !regexp.MustCompile(`^a\.track-\d{8}-\d{6}\.log$`).MatchString(file) {
		t.Errorf("track log %s, want /logs/test/a.track-YYYYMMDD-HHMMSS.log", j.Spec.LogPath)
	}
	j.Succeed(t)
	h.wait()
}
