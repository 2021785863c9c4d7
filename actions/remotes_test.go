package actions

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/queues"
	"github.com/gantry-build/gantry/queues/queuestest"
)

func testRemotes(t *testing.T, specs ...remote.Spec) *Remotes {
	t.Helper()
	rs, err := NewRemotes("p", specs, 2, func() func(int) time.Duration { return nil }, func(w string) { t.Errorf("warning before the session: %s", w) })
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func pullData(t *testing.T, pr pullResult) json.RawMessage {
	t.Helper()
	data, err := json.Marshal(pr)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A pull that found a remote down marks it down once, with one warning, and the element
// is built instead; the next pull and push leave it out.
func TestRecoverPullMarksARemoteDownOnce(t *testing.T) {
	pull, push := remote.Spec{URL: "http://pull.example"}, remote.Spec{URL: "http://push.example", Push: true}
	rs := testRemotes(t, pull, push)
	it := &queues.Item{Element: &element.Element{Name: "x.toml", Key: "k1"}}
	res := job.Result{Temporary: true, Data: pullData(t, pullResult{Down: []string{pull.Display()}, Reasons: []string{"connection refused"}})}
	msg, ok := rs.recoverPull(it, res)
	if !ok || msg != downWarning("connection refused") {
		t.Errorf("recoverPull = %q, %v; want the down warning, true", msg, ok)
	}
	if msg, ok := rs.recoverPull(it, res); !ok || msg != "" {
		t.Errorf("recoverPull again = %q, %v; want no second warning, true", msg, ok)
	}
	if up := rs.up(false); len(up) != 1 || up[0].Display() != push.Display() {
		t.Errorf("up = %v, want only the push remote", up)
	}
	if msg, ok := rs.recoverPull(it, job.Result{Data: pullData(t, pullResult{})}); ok || msg != "" {
		t.Errorf("recoverPull of a failure no remote caused = %q, %v; want the element to fail", msg, ok)
	}
}

// A push remote that served wrong bytes for an artifact gets it again in full: the push's
// payload names the remote and the blob for repair; a pull-only remote is not repaired.
func TestWrongBytesRepairedByThePush(t *testing.T) {
	pull, push := remote.Spec{URL: "http://pull.example"}, remote.Spec{URL: "http://push.example", Push: true}
	rs := testRemotes(t, pull, push)
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	it := &queues.Item{Element: &element.Element{Name: "x.toml", Key: "k1"}}
	blob := cache.DigestOf([]byte("wrong"))
	pr := pullResult{Warning: "remote served wrong bytes", Wrong: []wrongBytes{{Remote: push.Display(), Blob: blob}, {Remote: pull.Display()}}}
	msg, ok := rs.recoverPull(it, job.Result{Data: pullData(t, pr)})
	if !ok || !strings.Contains(msg, "uploaded again to the push remote") {
		t.Errorf("recoverPull = %q, %v; want the warning with the repair, true", msg, ok)
	}
	data, err := rs.payload(c, it, true)
	if err != nil {
		t.Fatal(err)
	}
	var ps pullSpec
	if err := json.Unmarshal(data, &ps); err != nil {
		t.Fatal(err)
	}
	if len(ps.Remotes) != 1 || ps.Remotes[0].Display() != push.Display() {
		t.Errorf("push remotes = %v, want the push remote", ps.Remotes)
	}
	if got := ps.Repair[push.Display()]; len(ps.Repair) != 1 || len(got) != 1 || got[0] != blob {
		t.Errorf("repair = %v, want %s on the push remote only", ps.Repair, blob)
	}
	if data, err = rs.payload(c, it, false); err != nil {
		t.Fatal(err)
	}
	if ps = (pullSpec{}); json.Unmarshal(data, &ps) != nil || ps.Repair != nil || len(ps.Remotes) != 2 || ps.Project != "p" || ps.Key != "k1" {
		t.Errorf("pull payload = %+v, want both remotes, no repair", ps)
	}
}

// The Pull queue of a build pulls what the plan found on a remote and the spare
// items once needed; an item no remote had asks for its build-once lease once its
// build dependencies are cached (parked on the first that is not). The pull command's
// queue tries every uncached item.
func TestPullQueueStatus(t *testing.T) {
	g := queuestest.Graph(t, "sdk", "app: sdk", "tool")
	items, err := queues.Plan(g, []*element.Element{g.Elements["app"], g.Elements["tool"]}, queues.PlanOptions{
		Artifact: func(*element.Element) element.ArtifactStatus { return element.ArtifactMissing },
		OnRemote: queuestest.OnRemote("app"),
	})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*queues.Item{}
	for _, it := range items {
		byName[it.Name()] = it
	}
	sdk, app, tool := byName["sdk"], byName["app"], byName["tool"]
	lease := remote.Spec{URL: "http://lease.example", Push: true}
	rs := testRemotes(t, lease)
	build, command := rs.PullQueue(nil, true), rs.PullQueue(nil, false)
	check := func(q *PullQueue, it *queues.Item, want queues.Status, wantReason string) {
		t.Helper()
		if st, why := q.Status(it); st != want || why != wantReason {
			t.Errorf("%s (found %v): %v (%q), want %v (%q)", it.Name(), q.found, st, why, want, wantReason)
		}
	}
	check(build, app, queues.Ready, "")
	check(build, sdk, queues.Ready, "") // spare: the loop's gate lets it through only once needed
	check(build, tool, queues.Skip, "not on a remote")
	check(command, tool, queues.Ready, "")

	rs.lease, rs.slots = &lease, 1 // the lease remote grants leases (ProbeLeases), one builder
	check(build, tool, queues.Ready, "")
	tool.Stage = []*queues.Item{sdk}
	check(build, tool, queues.Wait, "waiting for dependencies before asking for the build-once lease")
	if dep := build.WaitsOn(tool); dep != sdk {
		t.Errorf("tool waits on %v, want sdk", dep)
	}
	if dep := build.WaitsOn(app); dep != nil {
		t.Errorf("app, found on a remote, waits on %v; want nothing", dep)
	}
	build.Done(sdk, job.Result{OK: true})
	if !sdk.Cached || !sdk.Pulled {
		t.Errorf("after its pull sdk is cached %v, pulled %v; want both", sdk.Cached, sdk.Pulled)
	}
	check(build, tool, queues.Ready, "")
	check(build, sdk, queues.Skip, "cached")

	// One builder: while a lease is held, or a pull is asking for one, no other
	// pull asks; the ask's end frees the slot.
	const free, busy = "", "waiting for a free builder before asking for the build-once lease"
	rs.leases["other"] = &heldLease{key: "other", stop: make(chan struct{})}
	check(build, tool, queues.Wait, busy)
	if dep := build.WaitsOn(tool); dep != nil {
		t.Errorf("tool, waiting for a builder, waits on %v; want nothing (asked every turn)", dep)
	}
	rs.release("other")
	check(build, tool, queues.Ready, free)
	if _, err := rs.PullQueue(&cache.Cache{Root: t.TempDir()}, true).Payload(tool); err != nil {
		t.Fatal(err)
	}
	check(build, tool, queues.Wait, busy) // its own ask is in flight
	rs.LeaseJobEnded(queues.JobEnd{Action: queues.Pull, Key: tool.Element.Key, Result: queues.ResultWaiting})
	check(build, tool, queues.Ready, free)
}

// A pull that skips (the remotes lack it) always recovers; a failure recovers only in
// a build, and only when a remote was at fault.
func TestPullQueueRecover(t *testing.T) {
	pull := remote.Spec{URL: "http://pull.example"}
	rs := testRemotes(t, pull)
	it := &queues.Item{Element: &element.Element{Name: "x.toml", Key: "k1"}}
	down := job.Result{Temporary: true, Data: pullData(t, pullResult{Down: []string{pull.Display()}})}
	if _, ok := rs.PullQueue(nil, false).Recover(it, job.Result{OK: true, Skipped: true}); !ok {
		t.Errorf("a skipped pull did not recover")
	}
	if _, ok := rs.PullQueue(nil, false).Recover(it, down); ok {
		t.Errorf("the pull command recovered a failed pull")
	}
	if w, ok := rs.PullQueue(nil, true).Recover(it, down); !ok || w == "" {
		t.Errorf("a build's pull with its remote down = %q, %v; want a warning, recovered", w, ok)
	}
}

// The Push queue pushes what this session built or pulled (the push command: every
// cached element), except what it pulled from the push remote itself, and nothing
// once every push remote is down.
func TestPushQueueStatus(t *testing.T) {
	push := remote.Spec{URL: "http://push.example", Push: true}
	rs := testRemotes(t, push)
	item := func(cached, built, pulled bool) *queues.Item {
		return &queues.Item{Element: &element.Element{Name: "x.toml", Key: "k1"}, Cached: cached, Built: built, Pulled: pulled}
	}
	pulled := item(true, false, true)
	rs.from[pulled] = push.Display()
	for _, tc := range []struct {
		name string
		all  bool
		it   *queues.Item
		want string // "": ready
	}{
		{"not cached", false, item(false, false, false), "not cached"},
		{"cached before", false, item(true, false, false), "cached before this session"},
		{"cached before, push command", true, item(true, false, false), ""},
		{"built", false, item(true, true, false), ""},
		{"pulled from the push remote", false, pulled, "pulled from the push remote"},
	} {
		st, why := rs.PushQueue(nil, tc.all).Status(tc.it)
		if (tc.want == "") != (st == queues.Ready) || why != tc.want {
			t.Errorf("%s: %v (%q), want %q", tc.name, st, why, tc.want)
		}
	}
	rs.down[push.Display()] = true
	if _, why := rs.PushQueue(nil, false).Status(item(true, true, false)); why != "every push remote is down for this session" {
		t.Errorf("every push remote down: skipped with %q", why)
	}
}
